"""HAMi's pkg/util/util_test.go pod-finding cases ported onto hami.agent.allocate (allocating_pods,
lock_owner) and, over real gRPC with the embedded API server, onto the device plugin's Allocate:
TestGetPendingPod (bind-time, bind-phase, vgpu-node and Pending rules; the lock owner is found
whatever its phase), TestGetAllocatePodByNode (no lock, a lock naming no pod, a lock naming a pod),
Test_IsPodInTerminatedState (only Pending pods are allocated) and TestGetAPIDevicesRegistersHealthyDevice
(plugin/register_test.go)."""

from __future__ import annotations

import grpc
import pytest

from hami.agent import allocate as alloc
from hami.agent.register import build_devices
from hami.device.nodeconfig import DeviceSettings
from hami.gpu.backend import GpuInfo
from tests.agent.harness import LOCK, NODE, U1, NodeHarness

TO_ALLOCATE = f"{U1},NVIDIA,1000,10:;"


def go_pod(name, node, phase, **anns):
    anns.setdefault(alloc.ANN_TO_ALLOCATE, TO_ALLOCATE)
    return {"metadata": {"name": name, "namespace": "default", "annotations": anns},
            "spec": {"nodeName": node, "containers": [{"name": "main"}]}, "status": {"phase": phase}}


BT, PH, VN = alloc.ANN_BIND_TIME, alloc.ANN_BIND_PHASE, alloc.ANN_VGPU_NODE
RFC = "2024-01-01T00:00:00Z"  # HAMi's test uses an RFC 3339 bind time: only its presence counts
GO_PODS = [
    go_pod("pending-pod", "test-node-0", "Pending", **{BT: RFC, PH: "allocating", VN: "test-node-0"}),
    go_pod("ignore-pod-0", "test-node-0", "Failed"),
    go_pod("ignore-pod-1", "test-node-0", "Pending"),
    go_pod("ignore-pod-2", "test-node-0", "Pending", **{BT: RFC, VN: "test-node-0"}),
    go_pod("ignore-pod-3", "test-node-2", "Pending", **{BT: RFC, PH: "", VN: "test-node-2"}),
    go_pod("ignore-pod-4", "test-node-2", "Pending", **{BT: RFC, PH: "allocating"}),
]


@pytest.mark.parametrize(("node", "want"), [("test-node-0", ["pending-pod"]), ("test-node-2", [])],
                         ids=["TestGetPendingPod-find-pending-pod", "TestGetPendingPod-no-vgpu-node-or-phase"])
def test_get_pending_pod(node, want):
    assert [p["metadata"]["name"] for p in alloc.allocating_pods(GO_PODS, node)] == want


@pytest.mark.parametrize(("phase", "chosen"), [("Failed", False), ("Succeeded", False), ("Running", False),
                                               ("Unknown", False), ("Pending", True)],
                         ids=[f"Test_IsPodInTerminatedState-{p}" for p in
                              ("failed", "succeeded", "running", "unknown", "pending")])
def test_only_pending_pods_are_allocated(phase, chosen):
    p = go_pod("p", "n1", phase, **{BT: "100", PH: "allocating", VN: "n1"})
    assert bool(alloc.allocating_pods([p], "n1")) is chosen


@pytest.mark.parametrize("phase", ["allocating", "success"], ids=["allocating", "success"])
def test_get_pending_pod_accepts_allocating_and_success(phase):
    """HAMi GetPendingPod: bind-phase allocating or success (multi-container pods)."""
    p = go_pod("p", "n1", "Pending", **{BT: "100", PH: phase, VN: "n1"})
    assert alloc.allocating_pods([p], "n1") == [p]


@pytest.mark.parametrize(
    ("lock", "want"),
    [(None, None), (f"{RFC},,", None), (f"{RFC},default,pod0", ("default", "pod0"))],
    ids=["TestGetAllocatePodByNode-missing-lock", "TestGetAllocatePodByNode-missing-ns-and-name",
         "TestGetAllocatePodByNode-finding-allocated-pod"],
)
def test_get_allocate_pod_by_node(lock, want):
    node = {"metadata": {"name": "n", "annotations": {alloc.ANN_NODE_LOCK: lock} if lock else {}}}
    assert alloc.lock_owner(node) == want


async def test_get_pending_pod_lock_owner_is_found_whatever_its_phase():
    """TestGetPendingPod "find allocated pod": the node lock names a pod with no HAMi annotations;
    GetPendingPod returns it (no phase checks), so Allocate fails on that pod, not "no binding pod"."""
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.client.create("pods", {"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": "allocated-pod", "namespace": "default"},
                                       "spec": {"nodeName": NODE, "containers": [{"name": "main"}]}}, "default")
        await h.lock_node("default", "allocated-pod")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([[f"{U1}-0"]])
        assert "default/allocated-pod" in err.value.details()
        assert "has no hami.io/vgpu-devices-to-allocate" in err.value.details()
        assert LOCK not in ((await h.node())["metadata"].get("annotations") or {})


async def test_get_pending_pod_ignores_pods_without_vgpu_node():
    """TestGetPendingPod ignore-pod-4 on a live node: allocating, bind-time, but no hami.io/vgpu-node."""
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.client.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "ignore-pod-4", "namespace": "default",
            "annotations": {BT: RFC, PH: "allocating", alloc.ANN_TO_ALLOCATE: TO_ALLOCATE}},
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]}}, "default")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([[f"{U1}-0"]])
        assert err.value.details().startswith(f"no binding pod found on node {NODE}")


def test_get_api_devices_registers_healthy_device():
    """plugin/register_test.go TestGetAPIDevicesRegistersHealthyDevice: index 3, 8 GiB, "Tesla T4", split 2."""
    gpu = GpuInfo(uuid="GPU-test-uuid", index=3, name="Tesla T4", memory_total_mib=8 * 1024)
    (d,) = build_devices([gpu], DeviceSettings(split_count=2, memory_scaling=1.0, core_scaling=1.0))
    assert (d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.health) == \
        ("GPU-test-uuid", 3, 2, 8192, 100, "NVIDIA-Tesla T4", True)
