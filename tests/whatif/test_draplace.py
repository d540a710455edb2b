"""Replaying pods with DRA claims (pure): the report's GPU figures from the slices and claims, a
removed node's claim pods placed again, a claim that pins its next pod, a claim the replay releases,
missing objects named."""

from __future__ import annotations

from hami.device.model import NvidiaConfig
from hami.dra.claims import DRIVER, claim_spec, device_class, translate_pod
from hami.dra.slices import build_slice, gpu_device
from hami.gpu.backend import GpuInfo
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import run_scenario
from hami.whatif.scenario import parse_plan

MIB = 1 << 20


def _node(name: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}}, "status": {"allocatable": {"pods": "110"}}}


def _slice(name: str) -> dict:
    return build_slice(name, [gpu_device(GpuInfo(f"G-{name}", 0, "NVIDIA A100-SXM4-40GB", 40960), 40960,
                                         split_count=4)], 1)


def _pod(name: str, mem: int, second: int) -> tuple[dict, list[dict]]:
    raw = {"kind": "Pod", "metadata": {"name": name, "namespace": "ml",
                                       "creationTimestamp": f"2026-01-01T00:00:{second:02d}Z"},
           "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "main", "image": "x", "resources": {
               "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}}}]}}
    t = translate_pod(raw, NvidiaConfig())
    return t.pod, [{**x, "metadata": {**x["metadata"], "namespace": "ml"}} for x in t.templates]


def _claim_pod(name: str, claim: str, second: int, node: str = "") -> dict:
    spec = {"schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                                        "creationTimestamp": f"2026-01-01T00:00:{second:02d}Z"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def _listing(*items) -> dict:
    return {"kind": "List", "items": [_node("n0"), _node("n1"), _slice("n0"), _slice("n1"), device_class(), *items]}


def _run(doc: dict, plan: dict | None = None, which: int = 0):
    p = parse_plan(plan or {}, "plan.yaml")
    return run_scenario(parse_snapshot(doc, "snap"), p.scenarios[which], p)


def test_gpu_figures_come_from_the_slices_and_the_allocated_claims():
    items = []
    for i, mem in enumerate((30000, 20000)):
        pod, templates = _pod(f"p{i}", mem, i)
        items += [pod, *[t for t in templates if t not in items]]
    result = _run(_listing(*items))
    assert [(o.pod, o.node) for o in result.outcomes] == [("ml/p0", "n0"), ("ml/p1", "n1")]  # 20000 > 10960 left
    totals = result.totals()
    assert (totals["gpus"], totals["gpus_used"], totals["mem_registered"], totals["mem_allocated"]) == \
        (2, 2, 2 * 40960, 50000)
    (card,) = [c for n in result.nodes if n.name == "n0" for c in n.cards]
    assert (card.uuid, card.type, card.slots, card.slots_used, card.mem_used) == \
        ("n0/hami-gpu-0", "NVIDIA A100-SXM4-40GB", 4, 1, 30000)


def test_a_removed_node_s_claim_pods_are_placed_again_and_a_shared_claim_pins_its_next_pod():
    held = {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ml"},
            "spec": claim_spec(1, 8000, None, []),
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "hami-gpu-0", "shareID": "x",
                 "consumedCapacity": {"memory": str(8000 * MIB), "cores": "0", "shares": "1"}}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": "run", "uid": "uid-run"}]}}
    doc = _listing(held, _claim_pod("run", "c", 0, node="n1"), _claim_pod("next", "c", 1))
    result = _run(doc)
    # The pending pod shares the allocated claim: only n1 can take it (binpack would also say n1).
    assert [(o.pod, o.node) for o in result.outcomes] == [("ml/next", "n1")]
    result = _run(doc, {"scenarios": [{"name": "spread", "changes": {"nodeSchedulerPolicy": "spread"}}]}, 1)
    assert [(o.pod, o.node) for o in result.outcomes] == [("ml/next", "n1")]
    # n1 goes: its pod is queued again and the claim, released, is allocated on n0 for both.
    result = _run(doc, {"scenarios": [{"name": "drop", "changes": {"removeNodes": ["n1"]}}]}, 1)
    assert [(o.pod, o.node) for o in result.outcomes] == [("ml/run", "n0"), ("ml/next", "n0")]
    assert result.outcomes[0].devices == result.outcomes[1].devices == \
        "gpu:gpu=n0/hami-gpu-0(cores=0,memory=8388608000,shares=1)"


def test_missing_claims_templates_and_slices_are_named():
    pod, _ = _pod("p0", 1000, 0)
    result = _run(_listing(pod))
    (o,) = result.outcomes
    assert o.reasons == ("DRAClaimMissing",) and o.message.startswith("ResourceClaimTemplate ml/hami-gpu-")
    result = _run(_listing(_claim_pod("lone", "ghost", 0)))
    assert [o.message for o in result.outcomes] == ["ResourceClaim ml/ghost is not in the snapshot"]
    # No slices in the snapshot: no node gives the pod devices, and the report says how to take one.
    pod, templates = _pod("p0", 1000, 0)
    cluster = parse_snapshot({"kind": "List", "items": [_node("n0"), pod, *templates]}, "s")
    assert any("snapshot has no ResourceSlices" in w for w in cluster.warnings)
    plan = parse_plan({}, "p")
    assert [o.reasons for o in run_scenario(cluster, plan.scenarios[0], plan).outcomes] == [("NoCandidateNode",)]


def test_added_nodes_publish_resource_slices_so_claim_pods_can_use_them():
    """Two DRA nodes of one 40 GB GPU; three 30000 MiB claim pods: the third fits nowhere. A scenario
    adding a node (in a snapshot of DRA nodes it is a DRA node unless it says `mode: device-plugin`)
    gives it the ResourceSlice hami's plugin publishes, with the scenario's split count: the third pod
    lands there; added as a device-plugin node it cannot take a claim pod."""
    items = []
    for i in range(3):
        pod, templates = _pod(f"p{i}", 30000, i)
        items += [pod, *[t for t in templates if t not in items]]
    add = {"name": "extra", "gpus": 2, "type": "NVIDIA H100 80GB HBM3", "memory": 81920,
           "labels": {"pool": "new"}}
    plan = {"scenarios": [{"name": "dra", "changes": {"addNodes": [add], "deviceSplitCount": 2}},
                          {"name": "plugin", "changes": {"addNodes": [{**add, "mode": "device-plugin"}]}}]}
    base = _run(_listing(*items), plan, 0)
    assert [o.node for o in base.outcomes] == ["n0", "n1", ""]
    grown = _run(_listing(*items), plan, 1)
    placed = [o.node for o in grown.outcomes]
    assert all(placed) and "extra-0" in placed, placed
    cards = [c for n in grown.nodes if n.name == "extra-0" for c in n.cards]
    assert [(c.type, c.slots) for c in cards] == [("NVIDIA H100 80GB HBM3", 2)] * 2
    assert sum(c.slots_used for c in cards) == placed.count("extra-0")
    plugin = _run(_listing(*items), plan, 2)
    assert [o.node for o in plugin.outcomes] == ["n0", "n1", ""]
