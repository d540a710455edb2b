"""hami.kubesched.drapools.Inventory reads a node's own slices and the cluster-wide ones (indexed by node
name), with GatherPools' answer unchanged: a pool split across nodes is complete with the other nodes'
devices `elsewhere`, a pool missing a slice is incomplete, allNodes / nodeSelector / counter-set slices
reach the nodes they target, and a node's answer is kept for as many nodes as the slices name."""

from __future__ import annotations

from hami.kubesched.drapools import Inventory
from tests.dra._objects import DRIVER, gpu_device, slice_for


def _slice(name: str, pool: str, *, count: int = 1, generation: int = 1, devices: list[dict] | None = None,
           **target) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": DRIVER, "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
                     "devices": devices if devices is not None else [gpu_device(0)], **target}}


def _node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def _ids(pools) -> list[tuple[str, bool, list[str], list[str]]]:
    return [(p.name, p.incomplete, [d.name for d in p.devices], [f"{d.node}/{d.name}" for d in p.elsewhere])
            for p in pools]


def test_each_node_gets_its_own_slices_and_the_cluster_wide_ones():
    slices = [
        slice_for("n1", [gpu_device(0)]),
        _slice("split-a", "split", count=2, nodeName="n1", devices=[gpu_device(1)]),
        _slice("split-b", "split", count=2, nodeName="n2", devices=[gpu_device(2)]),
        _slice("lonely", "half", count=2, nodeName="n2"),  # its second slice is not published
        _slice("everywhere", "shared", allNodes=True),
        _slice("fast", "labelled", nodeSelector={"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fast"]}]}]}),
        slice_for("n3", [gpu_device(0)]),
    ]
    inv = Inventory(slices)
    assert _ids(inv.pools_for(_node("n1", tier="fast"))) == [
        ("labelled", False, ["gpu-0"], []), ("n1", False, ["gpu-0"], []), ("shared", False, ["gpu-0"], []),
        ("split", False, ["gpu-1"], ["n2/gpu-2"])]
    assert _ids(inv.pools_for(_node("n2"))) == [
        ("half", True, [], []), ("shared", False, ["gpu-0"], []), ("split", False, ["gpu-2"], ["n1/gpu-1"])]
    assert _ids(inv.pools_for("n4")) == [("shared", False, ["gpu-0"], [])]  # a node no slice names
    assert inv.nodes == {"n1", "n2", "n3"}


def test_a_newer_generation_on_another_node_makes_a_pool_obsolete_here():
    inv = Inventory([_slice("old", "p", count=2, generation=1, nodeName="n1"),
                     _slice("new-a", "p", count=2, generation=2, nodeName="n2"),
                     _slice("new-b", "p", count=2, generation=2, nodeName="n3")])
    assert _ids(inv.pools_for("n1")) == []
    assert _ids(inv.pools_for("n2")) == [("p", False, ["gpu-0"], ["n3/gpu-0"])]


def test_answers_are_kept_for_every_node_past_4096():
    inv = Inventory([slice_for(f"node-{i:05d}", [gpu_device(0)]) for i in range(5000)])
    first = {n: inv.pools_for(n) for n in (f"node-{i:05d}" for i in range(5000))}
    # the second pass finds every node's pools kept (the same lists), none gathered again
    assert all(inv.pools_for(n) is pools for n, pools in first.items())
    assert [p.name for p in first["node-04999"]] == ["node-04999"]


def test_a_rebuild_reads_only_the_slices_that_changed():
    n1, n2, n3 = (slice_for(n, [gpu_device(0)]) for n in ("n1", "n2", "n3"))
    before = Inventory([n1, n2, n3])
    changed = slice_for("n2", [gpu_device(0), gpu_device(1)])  # the watch's new object for n2's slice
    after = Inventory([n1, changed], previous=before)  # n3's slice deleted
    # n1's slice is the same object: its read (the same Device objects) is kept
    assert after.pools_for("n1")[0].devices[0] is before.pools_for("n1")[0].devices[0]
    assert [d.name for d in after.pools_for("n2")[0].devices] == ["gpu-0", "gpu-1"]
    assert after.pools_for("n3") == [] and after.nodes == {"n1", "n2"}


def test_the_schedulers_watch_rebuilds_its_inventory_after_a_slice_event():
    from hami.scheduler.cache.drawatch import DraWatch

    watch = DraWatch(None)
    watch.slices.store["n1"] = slice_for("n1", [gpu_device(0)])
    assert [d.name for d in watch.devices().pools_for("n1")[0].devices] == ["gpu-0"]
    old, new = watch.slices.store["n1"], slice_for("n1", [gpu_device(0), gpu_device(1)])
    watch.slices.store["n1"] = new
    for handler in watch.slices.handlers:  # what the informer does with the watch's MODIFIED
        handler("MODIFIED", old, new)
    assert [d.name for d in watch.devices().pools_for("n1")[0].devices] == ["gpu-0", "gpu-1"]
