"""HAMi v2.10 `pkg/scheduler/scheduler_test.go`, ported.

Covers `Test_getNodesUsage` (two pods on one card add up: used 2, usedmem 200, usedcores 20) against
the pure usage index, and `Test_Filter` (the node x GPU binpack/spread matrix: node1 device1 at 25 %,
node2 device4 at 75 %) and `Test_ResourceQuota` (limits.hami.io/gpumem|gpucores quotas passing and
denying multi-device and unspecified-memory pods) over HTTP /filter against the embedded API server,
with HAMi's resource names `hami.io/gpu`, `hami.io/gpumem`, `hami.io/gpucores`; and
Test_RegisterFromNodeAnnotations (+ _NIL): a node without a register annotation keeps its
handshake annotations as they were (still `Requesting_<time.DateTime>`), nil annotations stay nil.
Not ported: Test_getPodUsage (HAMi's per-node pod-count stats have no counterpart here),
TestSchedulerOnDelNode* and Test_ListNodes_Concurrent (Go mutex-map and data-race checks).
"""

from __future__ import annotations

import datetime

import aiohttp
import pytest

from hami.config import Config, KubeSettings, SchedulerSettings
from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo, NvidiaConfig
from hami.scheduler.placement import fit
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import eventually
from tests.kube.scheduler_env import Env, requesting_now, stop_env

HAMI_NAMES = dict(resource_count_name="hami.io/gpu", resource_memory_name="hami.io/gpumem",
                  resource_memory_percentage_name="hami.io/gpumem-percentage",
                  resource_core_name="hami.io/gpucores", default_memory=0, default_cores=0, default_gpu_num=1)


def test_getNodesUsage_two_pods_on_one_card_add_up():
    idx = UsageIndex()
    idx.set_node("node1", [DeviceInfo(id=f"GPU{i}", count=10, devmem=1024, devcore=100, type="NVIDIA", index=i,
                                      numa=1, mode="hami", health=True) for i in range(2)])
    devs = [[ContainerDevice("GPU0", "NVIDIA", 100, 10, idx=0)]]
    idx.add_pod("default/test1", "node1", devs, namespace="default")
    idx.add_pod("default/test2", "node1", devs, namespace="default")
    node = idx.node("node1")
    assert len(node.devices) == 2
    d0 = node.devices[0]
    assert (d0.id, d0.used, d0.usedmem, d0.usedcores) == ("GPU0", 2, 200, 20)
    assert (node.devices[1].used, node.devices[1].usedmem) == (0, 0)


# ------------------------------------------------------------------ helpers for the HTTP ports


def hami_node(name: str, devices: list[tuple[str, int, int]]) -> dict:
    """A registered node; devices are (id, index, devmem) with count 10, 100 cores, type NVIDIA."""
    infos = [DeviceInfo(id=i, count=10, devmem=mem, devcore=100, type="NVIDIA", index=ix, numa=0, mode="hami",
                        health=True) for i, ix, mem in devices]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {}, "annotations": {
            codec.REGISTER_ANNOTATION: codec.encode_node_devices(infos),
            codec.HANDSHAKE_ANNOTATION: requesting_now()}},
        "status": {"allocatable": {"hami.io/gpu": str(10 * len(infos))},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def gpu_pod(name: str, limits: dict, annotations: dict | None = None, ns: str = "default") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "gpu-burn", "image": "chrstnhntschl/gpu_burn", "args": ["6000"],
             "resources": {"limits": {k: str(v) for k, v in limits.items()}}}]},
        "status": {"phase": "Pending"},
    }


def running_on(name: str, node: str, uuid: str, mem: int, cores: int) -> dict:
    """An already-placed pod using one card (HAMi's podManager.AddPod in initNode)."""
    pod = gpu_pod(name, {"hami.io/gpu": 1, "hami.io/gpucores": cores, "hami.io/gpumem": mem}, {
        codec.VGPU_NODE_ANNOTATION: node, codec.BIND_PHASE_ANNOTATION: "success",
        codec.ALLOCATED_ANNOTATION: codec.encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", mem, cores)]]),
        codec.TO_ALLOCATE_ANNOTATION: codec.encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", mem, cores)]])})
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    return pod


async def start_hami_env(apiserver, nodes, pods=(), quotas=()) -> Env:
    store = apiserver.store
    for n in nodes:
        store.create("nodes", "", n)
    for p in pods:
        store.create("pods", p["metadata"]["namespace"], p)
    for q in quotas:
        store.create("resourcequotas", q["metadata"]["namespace"], q)
    cfg = Config(kube=KubeSettings(kubeconfig=apiserver.kubeconfig, qps=0, burst=100),
                 scheduler=SchedulerSettings(http_bind="127.0.0.1:0", metrics_bind_address="127.0.0.1:0"),
                 nvidia=NvidiaConfig(**HAMI_NAMES))
    s = await start_scheduler(cfg)
    assert await s.state.wait_synced(10)
    return Env(apiserver, s, aiohttp.ClientSession())


# ------------------------------------------------------------------ Test_Filter

FILTER_CASES = [
    # (gpu policy, node policy, want node, want device)
    ("binpack", "binpack", "node2", "device4"),
    ("spread", "binpack", "node2", "device3"),
    ("binpack", "spread", "node1", "device1"),
    ("spread", "spread", "node1", "device2"),
]


@pytest.mark.parametrize(("gpu_policy", "node_policy", "want_node", "want_dev"), FILTER_CASES, ids=[
    "Test_Filter/node use binpack gpu use binpack policy",
    "Test_Filter/node use binpack gpu use spread policy",
    "Test_Filter/node use spread gpu use binpack policy",
    "Test_Filter/node use spread gpu use spread policy",
])
async def test_Filter_node_and_gpu_policy_matrix(apiserver, gpu_policy, node_policy, want_node, want_dev):
    nodes = [hami_node("node1", [("device1", 0, 8000), ("device2", 1, 8000)]),
             hami_node("node2", [("device3", 0, 8000), ("device4", 1, 8000)])]
    pods = [running_on("pod1", "node1", "device1", 2000, 25), running_on("pod2", "node2", "device4", 6000, 75)]
    env = await start_hami_env(apiserver, nodes, pods)
    try:
        await eventually(lambda: env.sched.state.index.pod_count == 2)
        pod = env.create_pod(gpu_pod("test", {"hami.io/gpu": 1, "hami.io/gpucores": 20, "hami.io/gpumem": 1000}, {
            codec.GPU_SCHEDULER_POLICY_ANNOTATION: gpu_policy, codec.NODE_SCHEDULER_POLICY_ANNOTATION: node_policy}))
        out = await env.filter(pod, ["node1", "node2"])
        assert out["Error"] == ""
        assert out["NodeNames"] == [want_node]
        assert not out["FailedNodes"]
        annos = env.placement("default", "test")
        dev = codec.decode_pod_devices(annos[codec.TO_ALLOCATE_ANNOTATION])[0][0]
        assert (dev.uuid, dev.type, dev.usedmem, dev.usedcores) == (want_dev, "NVIDIA", 1000, 20)
    finally:
        await stop_env(env)


# ------------------------------------------------------------------ Test_ResourceQuota

QUOTA_CASES = [
    # (pod limits, quota hard, passes)
    ({"hami.io/gpu": 2, "hami.io/gpucores": 100, "hami.io/gpumem": 2000},
     {"limits.hami.io/gpucores": "200", "limits.hami.io/gpumem": "4000"}, True),
    ({"hami.io/gpu": 2, "hami.io/gpucores": 60, "hami.io/gpumem": 3000},
     {"limits.hami.io/gpucores": "200", "limits.hami.io/gpumem": "4000"}, False),
    ({"hami.io/gpu": 1}, {"limits.hami.io/gpucores": "100", "limits.hami.io/gpumem": "2000"}, True),
    ({"hami.io/gpu": 1}, {"limits.hami.io/gpucores": "100", "limits.hami.io/gpumem": "1500"}, False),
]


@pytest.mark.parametrize(("limits", "hard", "passes"), QUOTA_CASES, ids=[
    "Test_ResourceQuota/multi device Resourcequota pass",
    "Test_ResourceQuota/multi device Resourcequota deny",
    "Test_ResourceQuota/unspecified device Resourcequota pass",
    "Test_ResourceQuota/unspecified device Resourcequota deny",
])
async def test_ResourceQuota_filter(apiserver, limits, hard, passes):
    # device1..4: devmem 2000, 8000, 4000, 6000; an unspecified-memory request takes the whole card
    node = hami_node("node1", [("device1", 0, 2000), ("device2", 1, 8000), ("device3", 0, 4000),
                               ("device4", 1, 6000)])
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "test-quota", "namespace": "default"}, "spec": {"hard": hard}}
    env = await start_hami_env(apiserver, [node], quotas=[quota])
    try:
        await eventually(lambda: env.sched.state.index.quota_view("default") is not None)
        pod = env.create_pod(gpu_pod("test", limits))
        out = await env.filter(pod, ["node1"])
        assert out["Error"] == ""
        if passes:
            assert out["NodeNames"] == ["node1"] and not out["FailedNodes"]
        else:
            assert not out["NodeNames"]
            assert list(out["FailedNodes"]) == ["node1"]
            # v2.10 (scoreNode -> calcScoreWithOptions) writes the device Fit reason; the older
            # snapshot of this Go test expected the generic "NodeUnfitPod" from pre-scoreNode code.
            assert "ResourceQuotaNotFit" in fit.parse_reason(out["FailedNodes"]["node1"])
    finally:
        await stop_env(env)


# ------------------------------------------------------------------ Test_RegisterFromNodeAnnotations


@pytest.mark.parametrize("annotations", [
    {"hami.io/node-handshake": "Requesting_2025-06-13 09:07:40",
     "hami.io/node-handshake-dcu": "Requesting_2025-06-13 09:07:40"},
    None,
], ids=["Test_RegisterFromNodeAnnotations/test node handshake annotations layout",
        "Test_RegisterFromNodeAnnotations_NIL/test nil annotations handling"])
async def test_register_loop_leaves_nodes_without_devices_parseable(apiserver, annotations):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    if annotations is not None:
        node["metadata"]["annotations"] = dict(annotations)
    env = await start_hami_env(apiserver, [node])
    try:
        await eventually(lambda: env.sched.state.node("node") is not None)
        got = env.store.get("nodes", "", "node")["metadata"].get("annotations")
        if annotations is None:
            assert got is None  # no register annotation: nothing is written to the node
        else:
            for key in ("hami.io/node-handshake", "hami.io/node-handshake-dcu"):
                stamp = got[key].removeprefix("Requesting_")
                datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
        assert env.sched.state.index.node("node") is None  # no register annotation: no devices
    finally:
        await stop_env(env)
