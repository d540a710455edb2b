"""The agent publishes `hami.io/node-nvidia-score` (HAMi: ENABLE_TOPOLOGY_SCORE=true) over the
embedded API server: HAMi's JSON format for the registered GPUs, patched once and again only when
the value changes (a new NVLink bridge), never when topology scoring is off; the scheduler's
state reads the published value back as the pair scores its topology-aware policy uses.
"""

from __future__ import annotations

import asyncio
import json

from hami.scheduler.cache.state import pair_scores_of
from tests.agent.harness import NODE, NodeHarness

SCORE = "hami.io/node-nvidia-score"


def pcie_doc(nvlinks=None):
    gpus = [{"uuid": f"GPU-{i:08d}-0000-4000-8000-000000000000", "model": "NVIDIA A100-PCIE-40GB",
             "memory_mib": 40960, "index": i} for i in range(3)]
    if nvlinks:
        gpus[0]["nvlinks"] = nvlinks
    return {"gpus": gpus, "topology": {"default": "system", "pairs": [{"gpus": [0, 1], "level": "single"}]}}


async def _annotations(h) -> dict:
    return (await h.node())["metadata"].get("annotations") or {}


async def _wait_score(h, pred, timeout=10.0):
    for _ in range(int(timeout / 0.05)):
        text = (await _annotations(h)).get(SCORE)
        if text is not None and pred(json.loads(text)):
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"score annotation never matched: {(await _annotations(h)).get(SCORE)!r}")


async def test_scores_published_in_hami_format_and_repatched_only_on_change():
    async with NodeHarness(gpus=pcie_doc(), topology_score=True) as h:
        u = [f"GPU-{i:08d}-0000-4000-8000-000000000000" for i in range(3)]
        text = await _wait_score(h, lambda doc: len(doc) == 3)
        assert json.loads(text)[0] == {"uuid": u[0], "score": {u[1]: 50, u[2]: 10}}
        assert pair_scores_of(text)[u[1]] == {u[0]: 50, u[2]: 10}
        patches = h.agent.register_patches
        await h.passes(10)  # ten device-loop passes with nothing changed
        assert h.agent.register_patches == patches
        h.write_gpus(pcie_doc(nvlinks={2: 2}))
        text = await _wait_score(h, lambda doc: doc[0]["score"][u[2]] == 210)
        assert json.loads(text)[2]["score"] == {u[0]: 210, u[1]: 10}
        assert h.agent.register_patches == patches + 1


async def test_no_score_annotation_when_topology_scoring_is_off():
    async with NodeHarness(gpus=pcie_doc()) as h:
        await h.agent.nodes.wait_for(
            lambda: "hami.io/node-nvidia-register" in (h.agent.nodes.store[NODE]["metadata"].get("annotations") or {}),
            10)
        assert SCORE not in await _annotations(h)


async def _node_events(h, reason: str) -> list[dict]:
    items = (await h.client.list("events", "default")).get("items") or []
    return [e for e in items if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == NODE]


async def test_asymmetric_nvlink_data_raises_one_node_warning_event_as_hami_does():
    doc = pcie_doc(nvlinks={2: 2})
    doc["gpus"][2]["nvlinks"] = {0: 0}  # GPU 0 sees 2 links to GPU 2, GPU 2 sees none back
    async with NodeHarness(gpus=doc, topology_score=True) as h:
        u = [f"GPU-{i:08d}-0000-4000-8000-000000000000" for i in range(3)]
        await _wait_score(h, lambda d: len(d) == 3 and d[0]["score"][u[2]] == 0)
        for _ in range(200):
            events = await _node_events(h, "AsymmetricGPUP2PLink")
            if events:
                break
            await asyncio.sleep(0.05)
        assert len(events) == 1
        ev = events[0]
        assert ev["type"] == "Warning" and ev["count"] == 1
        assert ev["involvedObject"]["kind"] == "Node"
        assert ev["source"]["component"] == "hami-device-plugin"
        assert u[0] in ev["message"] and u[2] in ev["message"]
        await h.passes(10)  # ten more passes: the same pair is not reported again
        again = await _node_events(h, "AsymmetricGPUP2PLink")
        assert len(again) == 1 and again[0]["count"] == 1
