"""Every vendor row keeps its own annotation keys when /bind places a pod on the node kube-scheduler
chose under --extender-prioritize, through the real extender over HTTP against the embedded API
server.

With --extender-prioritize /filter answers every fitting node and holds its own best; kube-scheduler
may weigh in other scores and bind the pod to another of them. For each row of config/vendors.yaml:
two idle nodes registered the way that vendor's device plugin registers them, a pod asking one of
its devices, /filter over both, then /bind to the node /filter did NOT hold. The pod must come out
bound there with that vendor's own allocation keys (NVIDIA's `hami.io/vgpu-devices-*` only for the
NVIDIA row), devices registered on that node, byte for byte what the Placer's one commit writes for
them, and for MetaX sGPU the QoS policy its card switches to expected in the usage index. Before the
Placer, this path wrote every vendor's devices under NVIDIA's keys and expected no QoS.

Also: a placement HAMi's flow wrote on the pod for the other node leaves no key the new one lacks
(a Binding cannot remove keys: one patch does first), and a stale placement of a non-NVIDIA vendor
on a pod that fits nowhere is cleared with all of that vendor's keys.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.allocation import allocation_annotations
from hami.device.model import NVIDIA
from hami.device.vendors import Vendor
from hami.scheduler.extender.hamiflow import patch_at_filter
from hami.scheduler.placement.vendorrules import METAX_QOS
from hami.sim.kubelet.vendornodes import vendor_registration
from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env

TABLE = default_vendor_table()
ROWS = [v.name for v in TABLE.vendors]
_serial = itertools.count(1)


def _node(v: Vendor, name: str) -> dict:
    if v.hook == "nvidia":
        return node_obj(name, 2, handshake=requesting_now())
    cards = 4 if v.hook == "kunlunxin" else 2  # Kunlunxin boards come in groups of 4 (NUMA)
    annos, capacity = vendor_registration(name, next(_serial), [(v, cards, v.memory_allocatable or 32768)])
    obj = node_obj(name, 0, registered=False, annotations=annos)
    obj["status"]["capacity"].update(capacity)
    obj["status"]["allocatable"].update(capacity)
    return obj


def _pod(v: Vendor, name: str) -> dict:
    annotations = {METAX_QOS: "fixed-share"} if v.hook == "metax" else {}
    pod = pod_obj(name, gpus=0, annotations=annotations)
    limits = {v.count_resource: "1"}
    if v.core_resource and v.hook == "metax":
        limits[v.core_resource] = "50"  # a share: the card then switches to the pod's QoS
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    return pod


def _own_keys(v: Vendor) -> set[str]:
    if v.hook == "nvidia":
        return {codec.TO_ALLOCATE_ANNOTATION, codec.ALLOCATED_ANNOTATION}
    return {k for k in (v.to_allocate_key, v.allocated_key) if k}


@pytest.mark.parametrize("row", ROWS)
async def test_bind_on_kube_schedulers_other_node_keeps_the_vendors_own_keys(apiserver, row):
    v = TABLE.get(row)
    a, b = _node(v, "pa"), _node(v, "pb")
    async with running_env(apiserver, [a, b], extender_prioritize=True) as env:
        state = env.sched.state
        for _ in range(500):  # the node watch brings both registrations in
            if {"pa", "pb"} <= state.index.nodes.keys():
                break
            await asyncio.sleep(0.01)
        assert {"pa", "pb"} <= state.index.nodes.keys(), (row, sorted(state.index.nodes))
        pod = env.create_pod(_pod(v, "moved"))
        out = await env.filter(pod, ["pa", "pb"])
        assert out["Error"] == "" and sorted(out["NodeNames"] or []) == ["pa", "pb"], (row, out)
        uid = pod["metadata"]["uid"]
        held = env.sched.placer.held[uid].node
        other = "pb" if held == "pa" else "pa"

        res = await env.bind(pod, other)

        assert res["Error"] == "", (row, res)
        stored = env.pod("default", "moved")
        annos = stored["metadata"]["annotations"]
        assert stored["spec"]["nodeName"] == other
        assert annos[codec.VGPU_NODE_ANNOTATION] == other
        own = _own_keys(v)
        assert own <= annos.keys(), (row, sorted(annos))
        if v.name != NVIDIA and v.hook != "nvidia":
            assert codec.ALLOCATED_ANNOTATION not in annos and codec.TO_ALLOCATE_ANNOTATION not in annos, row
        devices = codec.decode_pod_devices(annos[v.allocated_key or codec.ALLOCATED_ANNOTATION])
        placed = [cd for ctr in devices for cd in ctr]
        on_other = {d.id for d in state.index.node(other).devices}
        assert placed and all(cd.uuid in on_other for cd in placed), (row, placed, on_other)
        assert all(cd.type == v.name for cd in placed), (row, placed)
        # byte for byte the commit's annotations for those devices (the time stamps aside)
        containers = len(stored["spec"]["containers"]) + len(stored["spec"].get("initContainers") or [])
        expected = allocation_annotations(tuple(devices[:containers]), TABLE, 0.0, other, stored,
                                          node_usage=state.index.node(other))
        for key in own:
            assert annos[key] == expected[key], (row, key)
        if v.hook == "metax":  # HAMi's addJitteryQos: the card switches to the pod's policy
            assert {state.index.qos_expected.get(cd.uuid) for cd in placed} == {"fixed-share"}, row
        assert env.sched.placer.held.get(uid) is None  # written, no longer held


async def _two_nodes(apiserver, v: Vendor, **sched):
    env_cm = running_env(apiserver, [_node(v, "pa"), _node(v, "pb")], **sched)
    env = await env_cm.__aenter__()
    for _ in range(500):
        if {"pa", "pb"} <= env.sched.state.index.nodes.keys():
            break
        await asyncio.sleep(0.01)
    return env_cm, env


async def test_a_placement_written_at_filter_for_another_node_leaves_no_key_the_new_one_lacks(apiserver):
    """HAMi's flow (another replica) wrote an Ascend placement for one node, with a MIG allocation
    key the new placement does not have; kube-scheduler binds the pod to the other node: the stale
    key is removed before the Binding writes the new placement (a Binding cannot remove keys)."""
    v = TABLE.get("Ascend910B3")
    env_cm, env = await _two_nodes(apiserver, v, extender_prioritize=True)
    try:
        patch_at_filter(env.sched.extender)  # HAMi's flow: the placement is patched at /filter
        pod = env.create_pod(_pod(v, "hami-flow"))
        out = await env.filter(pod, ["pa", "pb"])
        assert sorted(out["NodeNames"]) == ["pa", "pb"], out
        first = env.pod("default", "hami-flow")["metadata"]["annotations"][codec.VGPU_NODE_ANNOTATION]
        other = "pb" if first == "pa" else "pa"
        stored = env.pod("default", "hami-flow")
        stored["metadata"]["annotations"][codec.MIG_ALLOCATIONS_ANNOTATION] = "stale"
        env.store.update("pods", "default", "hami-flow", stored)
        env.forget_held()  # as another replica sees it
        await eventually(lambda: (env.sched.state.pod("default", "hami-flow") or {}).get("metadata", {}).get(
            "annotations", {}).get(codec.MIG_ALLOCATIONS_ANNOTATION) == "stale", 5)
        assert (await env.bind(pod, other))["Error"] == ""
        annos = env.pod("default", "hami-flow")["metadata"]["annotations"]
        assert annos[codec.VGPU_NODE_ANNOTATION] == other
        assert codec.MIG_ALLOCATIONS_ANNOTATION not in annos
        placed = [cd for ctr in codec.decode_pod_devices(annos[v.allocated_key]) for cd in ctr]
        assert placed and {cd.uuid for cd in placed} <= {d.id for d in env.sched.state.index.node(other).devices}
    finally:
        await env_cm.__aexit__(None, None, None)


async def test_a_stale_placement_of_another_vendor_is_cleared_when_the_pod_fits_nowhere(apiserver):
    """A pending pod whose placement HAMi's flow wrote no longer fits anywhere: every vendor's
    allocation keys go, not only NVIDIA's (a stale Ascend placement would hold its NPUs)."""
    v = TABLE.get("Ascend910B3")
    env_cm, env = await _two_nodes(apiserver, v)
    try:
        patch_at_filter(env.sched.extender)  # HAMi's flow: the placement is patched at /filter
        pod = env.create_pod(_pod(v, "stale"))
        assert (await env.filter(pod, ["pa"]))["NodeNames"] == ["pa"]
        await eventually(lambda: v.allocated_key in (env.sched.state.pod("default", "stale") or {}).get(
            "metadata", {}).get("annotations", {}), 5)
        again = env.pod("default", "stale")
        again["metadata"]["annotations"][v.use_uuid_key] = "no-such-npu"  # fits nowhere now
        out = await env.filter(again, ["pa"])
        assert out["NodeNames"] is None, out
        annos = env.pod("default", "stale")["metadata"]["annotations"]
        assert codec.VGPU_NODE_ANNOTATION not in annos
        assert v.allocated_key not in annos and v.to_allocate_key not in annos and v.allocation_key not in annos
    finally:
        await env_cm.__aexit__(None, None, None)


async def test_a_bind_to_a_node_the_pod_does_not_fit_names_the_fits_reason_and_writes_nothing(apiserver):
    nodes = [node_obj("big", 1, mem=40960, handshake=requesting_now()),
             node_obj("small", 1, mem=1000, handshake=requesting_now())]
    async with running_env(apiserver, nodes, extender_prioritize=True) as env:
        pod = env.create_pod(pod_obj("wide", mem=8000))
        assert (await env.filter(pod, ["big", "small"]))["NodeNames"] == ["big"]
        out = await env.bind(pod, "small")
        assert "no placement fits node small" in out["Error"] and "CardInsufficientMemory" in out["Error"], out
        stored = env.pod("default", "wide")
        assert not stored["spec"].get("nodeName")
        assert codec.VGPU_NODE_ANNOTATION not in (stored["metadata"].get("annotations") or {})
        assert env.sched.placer.held[pod["metadata"]["uid"]].node == "big"  # /filter's decision stands
