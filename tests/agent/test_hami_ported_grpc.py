"""HAMi's GetPreferredAllocation unit tests (plugin/server_test.go) ported onto the real device plugin
over unix-socket gRPC, with the pod held by the node lock in the embedded API server: choosing IDs
on the annotated GPUs honouring must-include IDs, skipping empty (init container) entries, one
slice per physical GPU, and no container entry at all when an annotated GPU is missing or the
annotation has fewer devices than asked for (kubelet then chooses by itself)."""

from __future__ import annotations

import pytest

from hami.agent._pb import api_pb2 as pb
from tests.agent.harness import U1, U2, NodeHarness

pytestmark = pytest.mark.timeout(60)

BASE = "GPU-03f69c50-207a-2038-9b45-23cac89cb6"
A, B, C, D, E, F, G0, G1 = (BASE + s for s in ("7a", "7b", "7c", "7d", "7e", "7f", "80", "81"))


def entry(*uuids: str) -> str:
    return "".join(f"{u},NVIDIA,0,0:" for u in uuids)


CASES = [
    pytest.param(  # TestGetPreferredAllocationAlignsWithAnnotatedDevices
        {"main": 8}, None, entry(A, B, C, D, E, F, G0, G1) + ";",
        [f"{A}-0", f"{A}-1", f"{B}-0", f"{C}-0", f"{D}-0", f"{D}-1", f"{E}-0", f"{F}-0", f"{G0}-0", f"{G1}-0"],
        [f"{D}-1"], 8,
        [[f"{A}-0", f"{B}-0", f"{C}-0", f"{D}-1", f"{E}-0", f"{F}-0", f"{G0}-0", f"{G1}-0"]],
        id="TestGetPreferredAllocationAlignsWithAnnotatedDevices"),
    pytest.param(  # TestGetPreferredAllocationSkipsEmptyAnnotations
        {"main": 2}, {"init": 0}, ";" + entry(A, B) + ";",
        [f"{A}-0", f"{A}-1", f"{B}-0", f"{B}-1"], [], 2, [[f"{A}-0", f"{B}-0"]],
        id="TestGetPreferredAllocationSkipsEmptyAnnotations"),
    pytest.param(  # TestSelectPreferredDeviceIDsWithPhysicalMIGReservations
        {"main": 3}, None, entry(A, B, C) + ";", [f"{A}-0", f"{A}-1", f"{B}-0", f"{C}-0"], [], 3,
        [[f"{A}-0", f"{B}-0", f"{C}-0"]], id="TestSelectPreferredDeviceIDsWithPhysicalMIGReservations"),
    pytest.param(  # TestGetPreferredAllocationFallbackOnAnnotatedDeviceMappingFailure
        {"main": 2}, None, entry(A, BASE + "7z") + ";", [f"{A}-0", f"{B}-0"], [], 2, [],
        id="TestGetPreferredAllocationFallbackOnAnnotatedDeviceMappingFailure"),
    pytest.param(  # TestGetPreferredAllocationFallbackOnInsufficientAnnotatedDevices
        {"main": 2}, None, entry(A) + ";", [f"{A}-0", f"{B}-0"], [], 2, [],
        id="TestGetPreferredAllocationFallbackOnInsufficientAnnotatedDevices"),
]


@pytest.mark.parametrize(("containers", "init", "annotation", "available", "must", "size", "want"), CASES)
async def test_get_preferred_allocation(containers, init, annotation, available, must, size, want):
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("test-pod", containers, annotation, init=init)
        req = pb.PreferredAllocationRequest()
        req.container_requests.add(available_deviceIDs=available, must_include_deviceIDs=must,
                                   allocation_size=size)
        resp = await h.kubelet.plugins["nvidia.com/gpu"].stub.GetPreferredAllocation(req)
        got = [sorted(r.deviceIDs) for r in resp.container_responses]
        assert got == [sorted(w) for w in want]


async def test_allocate_patches_annotation_only_once():
    """alloc_refactor_test.go TestAllocate_PatchesAnnotationOnlyOnce: two containers in one call, one pod patch."""
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("test-pod", {"c0": 1, "c1": 1}, f"{U1},NVIDIA,3000,50:;{U2},NVIDIA,4000,60:;")
        before = h.client.total_requests("patch", "pods")
        resp = await h.kubelet.allocate([[f"{U1}-0"], [f"{U2}-0"]])
        assert h.client.total_requests("patch", "pods") == before + 1
        assert [(c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], c.envs["CUDA_DEVICE_SM_LIMIT"])
                for c in resp.container_responses] == [("3000m", "50"), ("4000m", "60")]
        assert (await h.pod("test-pod"))["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
