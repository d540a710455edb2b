"""GPU link scores (`hami.io/node-nvidia-score`), HAMi's calculate_score.go rules.

Covers: the per-level PCIe terms and 100 per NVLink; direct NVLinks win over NVSwitch, switch pairs
use the smaller link count; asymmetric pairs score 0 and are reported; scores are symmetric for
symmetric links (property); the fake backend's simulated 8-GPU NVSwitch node (every pair 1800 +
PCIe term) and PCIe-only node (50 under one switch, 10 across CPUs); the NVML reader against a
stand-in pynvml (common ancestor levels, NVLink remote bus ids, switch links, disabled links);
and the topology-aware policy, fed the scores the agent computes, places a 2-GPU pod on an NVLink
pair.
"""

from __future__ import annotations

import types

import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami.device import codec
from hami.gpu.fake import FakeBackend
from hami.gpu.nvml_extra import read_links
from hami.gpu.topology import (
    LEVELS,
    GpuLinks,
    PairLink,
    asymmetric_pairs,
    nvlink_count,
    pair_score,
    pair_scores,
)
from hami.scheduler.placement.fit import fit_devices, fit_options
from tests.scheduler._helpers import dev, req


def test_pcie_levels_and_nvlinks_add_up_as_in_hami():
    want = {"internal": 60, "single": 50, "multiple": 40, "hostbridge": 30, "node": 20, "system": 10}
    for name, score in want.items():
        link = PairLink(LEVELS[name])
        assert pair_score(link, link) == score
    four = PairLink(LEVELS["system"], 4)
    assert pair_score(four, four) == 410
    eighteen = PairLink(LEVELS["node"], 18)
    assert pair_score(eighteen, eighteen) == 1820
    beyond = PairLink(LEVELS["node"], 19)  # not a known NVLink count: no NVLink term
    assert pair_score(beyond, beyond) == 20
    assert pair_score(PairLink(None), PairLink(None)) == 0


def test_asymmetric_pair_scores_zero_and_is_reported():
    links = {("a", "b"): PairLink(10, 2), ("b", "a"): PairLink(10, 0), ("a", "c"): PairLink(50),
             ("c", "a"): PairLink(50), ("b", "c"): PairLink(50), ("c", "b"): PairLink(50)}
    scores = dict(pair_scores(["a", "b", "c"], links))
    assert scores["a"] == {"b": 0, "c": 10}
    assert scores["b"] == {"a": 0, "c": 10}
    assert asymmetric_pairs(["a", "b", "c"], links) == [("a", "b")]


def test_direct_nvlinks_win_over_switch_and_switch_uses_the_smaller_count():
    a = GpuLinks("a", "0000:01:00.0", ("0000:02:00.0", "0000:02:00.0", "0000:99:00.0"), switch_links=0)
    b = GpuLinks("b", "0000:02:00.0", ("0000:01:00.0", "0000:01:00.0"))
    assert nvlink_count(a, b) == 2
    s1 = GpuLinks("s1", "0000:03:00.0", ("0000:aa:00.0",) * 12, switch_links=12)
    s2 = GpuLinks("s2", "0000:04:00.0", ("0000:ab:00.0",) * 18, switch_links=18)
    assert nvlink_count(s1, s2) == 12 and nvlink_count(s2, s1) == 12
    assert nvlink_count(a, s1) == 0  # only one side on a switch


@given(st.lists(st.tuples(st.sampled_from(sorted(LEVELS.values())), st.integers(0, 18)), min_size=1, max_size=6))
def test_symmetric_links_give_symmetric_scores(pairs):
    uuids = [f"g{i}" for i in range(len(pairs) + 1)]
    links = {}
    for i, (level, n) in enumerate(pairs):
        for j in range(len(uuids)):
            if j != i:
                links[(uuids[i], uuids[j])] = links[(uuids[j], uuids[i])] = PairLink(level, n)
    scores = dict(pair_scores(uuids, links))
    for a in uuids:
        for b in uuids:
            if a != b:
                assert scores[a][b] == scores[b][a] >= 10


def nvswitch_node(n=8):
    return {
        "gpus": [{"uuid": f"GPU-{i:08d}-0000-4000-8000-000000000000", "model": "NVIDIA H100 80GB HBM3",
                  "memory_mib": 81559, "index": i, "numa": i // 4, "nvswitch_links": 18} for i in range(n)],
        "topology": {"default": "system",
                     "pairs": [{"gpus": [i, j], "level": "node"} for i in range(n) for j in range(n)
                               if i < j and i // 4 == j // 4]},
    }


def pcie_node():
    return {
        "gpus": [{"uuid": f"GPU-{i:08d}-0000-4000-8000-00000000000p", "model": "NVIDIA A100-PCIE-40GB",
                  "memory_mib": 40960, "index": i} for i in range(4)],
        "topology": {"default": "system", "pairs": [{"gpus": [0, 1], "level": "single"},
                                                   {"gpus": [2, 3], "level": "single"}]},
    }


def _scores(tmp_path, doc):
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(doc))
    backend = FakeBackend(str(path))
    uuids = [g.uuid for g in backend.list_gpus()]
    return uuids, dict(pair_scores(uuids, backend.links()))


def test_fake_nvswitch_node_scores_every_pair_by_its_18_links(tmp_path):
    uuids, scores = _scores(tmp_path, nvswitch_node())
    for i, a in enumerate(uuids):
        for j, b in enumerate(uuids):
            if i != j:
                assert scores[a][b] == 1800 + (20 if i // 4 == j // 4 else 10)


def test_fake_pcie_only_node_scores_switch_pairs_above_cross_cpu_pairs(tmp_path):
    uuids, scores = _scores(tmp_path, pcie_node())
    assert scores[uuids[0]] == {uuids[1]: 50, uuids[2]: 10, uuids[3]: 10}
    assert scores[uuids[3]] == {uuids[0]: 10, uuids[1]: 10, uuids[2]: 50}


def test_topology_policy_places_two_gpus_on_the_nvlink_pair(tmp_path):
    doc = pcie_node()
    doc["gpus"][1]["nvlinks"] = {3: 4}  # GPUs 1 and 3 bridged by 4 NVLinks, across CPUs
    uuids, scores = _scores(tmp_path, doc)
    assert scores[uuids[1]][uuids[3]] == 410 and scores[uuids[3]][uuids[1]] == 410
    text = codec.encode_pair_scores(codec.DevicePairScore(u, s) for u, s in scores.items())
    decoded = {e.uuid: dict(e.scores) for e in codec.decode_pair_scores(text)}
    devices = [dev(u, index=i) for i, u in enumerate(uuids)]
    ok, chosen, _ = fit_devices(devices, req(2, 10), fit_options({"hami.io/gpu-scheduler-policy": "topology-aware"}),
                                pair_scores=decoded)
    assert ok and sorted(c.uuid for c in chosen) == sorted([uuids[1], uuids[3]])


# --------------------------------------------------------------------------- NVML reader


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"nvml error {value}")
        self.value = value


def stand_in_nvml(gpus, levels):
    """gpus: [{uuid, bus, links: [(state, remote bus, remote type)]}]; levels: {(i, j): level}."""
    nv = types.SimpleNamespace(NVMLError=NVMLError, NVML_FEATURE_ENABLED=1, NVML_NVLINK_DEVICE_TYPE_SWITCH=2)
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetUUID = lambda h: gpus[h]["uuid"].encode()
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h]["bus"].encode())

    def link(h, i):
        links = gpus[h]["links"]
        if i >= len(links):
            raise NVMLError(2)  # INVALID_ARGUMENT: no such link
        return links[i]

    nv.nvmlDeviceGetNvLinkState = lambda h, i: link(h, i)[0]
    nv.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, i: types.SimpleNamespace(busId=link(h, i)[1].encode())
    nv.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, i: link(h, i)[2]
    nv.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: levels[(min(a, b), max(a, b))]
    return nv


def test_nvml_reader_counts_enabled_direct_links_and_reads_common_ancestors():
    gpus = [
        {"uuid": "GPU-a", "bus": "00000000:3B:00.0", "links": [(1, "00000000:5E:00.0", 0)] * 2 + [(0,
                "00000000:5E:00.0", 0)]},
        {"uuid": "GPU-b", "bus": "00000000:5E:00.0", "links": [(1, "00000000:3B:00.0", 0)] * 2},
        {"uuid": "GPU-c", "bus": "00000000:86:00.0", "links": []},
    ]
    levels = {(0, 1): 20, (0, 2): 50, (1, 2): 50}
    links = read_links(stand_in_nvml(gpus, levels))
    assert links[("GPU-a", "GPU-b")] == PairLink(20, 2) == links[("GPU-b", "GPU-a")]  # the disabled link is skipped
    assert links[("GPU-a", "GPU-c")] == PairLink(50, 0)
    scores = dict(pair_scores(["GPU-a", "GPU-b", "GPU-c"], links))
    assert scores["GPU-a"] == {"GPU-b": 240, "GPU-c": 10}


def test_nvml_reader_sees_nvswitch_pairs():
    switch = [(1, "00000000:C1:00.0", 2)] * 12
    gpus = [{"uuid": f"GPU-{i}", "bus": f"00000000:{0x10 + i:02X}:00.0", "links": switch} for i in range(3)]
    links = read_links(stand_in_nvml(gpus, {(0, 1): 40, (0, 2): 40, (1, 2): 40}))
    assert all(v == PairLink(40, 12) for v in links.values()) and len(links) == 6


def test_topology_policy_on_the_nvswitch_node_keeps_a_4_gpu_pod_inside_one_numa_half(tmp_path):
    uuids, scores = _scores(tmp_path, nvswitch_node())
    devices = [dev(u, index=i, numa=i // 4) for i, u in enumerate(uuids)]
    opts = fit_options({"hami.io/gpu-scheduler-policy": "topology-aware"})
    ok, chosen, _ = fit_devices(devices, req(4, 10), opts, pair_scores=scores)
    halves = {uuids.index(c.uuid) // 4 for c in chosen}
    assert ok and len(chosen) == 4 and len(halves) == 1
    ok, chosen, _ = fit_devices(devices[3:7], req(2, 10), opts, pair_scores=scores)
    assert ok and {uuids.index(c.uuid) for c in chosen} in ({4, 5}, {4, 6}, {5, 6})


def test_topology_policy_on_the_pcie_node_picks_a_pair_under_one_switch(tmp_path):
    uuids, scores = _scores(tmp_path, pcie_node())
    devices = [dev(u, index=i) for i, u in enumerate(uuids)]
    options = fit_options({"hami.io/gpu-scheduler-policy": "topology-aware"})
    ok, chosen, _ = fit_devices(devices[1:], req(2, 10), options, pair_scores=scores)
    assert ok and {uuids.index(c.uuid) for c in chosen} == {2, 3}
