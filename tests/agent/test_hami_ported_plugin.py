"""HAMi's device-plugin unit tests (pkg/device-plugin/nvidiadevice/nvinternal/plugin/{util,server}_test.go)
ported onto the pure Allocate code (hami.agent.allocate, hami.agent.register.physical_id):
GetNextDeviceRequest (regular / init / init-offset / nothing left), physicalDeviceID on virtual and
plain IDs, alignContainerDevicesWithAllocatedIDs (metadata kept, length mismatch), Allocate with an
empty DevicesIds list, two containers in one call keeping their order, Allocate using kubelet's
selected UUIDs, and PodAllocationTrySuccess leaving devices for the next container."""

from __future__ import annotations

import itertools

import pytest

from hami.agent.allocate import ANN_TO_ALLOCATE, AllocationError, plan_allocation
from hami.agent.register import physical_id
from hami.device.nodeconfig import DeviceSettings

HOOK = "/usr/local"
GA = "GPU-03f69c50-207a-2038-9b45-23cac89cb67a"
GB = "GPU-03f69c50-207a-2038-9b45-23cac89cb67b"


def pod(to_allocate: str, containers=("main",), init=()) -> dict:
    spec = {"containers": [{"name": n} for n in containers]}
    if init:
        spec["initContainers"] = [{"name": n} for n in init]
    return {"metadata": {"name": "test-pod", "namespace": "default", "uid": "pod-uid",
                         "annotations": {ANN_TO_ALLOCATE: to_allocate}}, "spec": spec}


def plan(p, requests, settings=None):
    counter = itertools.count()
    return plan_allocation(p, requests, settings or DeviceSettings(), HOOK,
                           new_cache_name=lambda: f"c{next(counter)}")


# util_test.go TestGetNextDeviceRequest_*: the first non-empty slot, init containers first.
@pytest.mark.parametrize(
    ("annotation", "containers", "init", "want_container", "want_uuid"),
    [
        ("GPU-abc123,NVIDIA,1000,30:;", ("main-container",), (), "main-container", "GPU-abc123"),
        ("GPU-init1,NVIDIA,500,10:;;", ("main-no-gpu",), ("init-with-gpu",), "init-with-gpu", "GPU-init1"),
        (";;GPU-main1,NVIDIA,2000,50:;", ("main-with-gpu",), ("init1-no-gpu", "init2-no-gpu"),
         "main-with-gpu", "GPU-main1"),
    ],
    ids=["TestGetNextDeviceRequest_DeviceInRegularContainer", "TestGetNextDeviceRequest_DeviceInInitContainer",
         "TestGetNextDeviceRequest_DeviceInRegularContainerWithInitOffset"],
)
def test_get_next_device_request(annotation, containers, init, want_container, want_uuid):
    (c,) = plan(pod(annotation, containers, init), [["id-0"]]).containers
    assert c.container == want_container
    assert [d.uuid for d in c.devices] == [want_uuid]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == want_uuid


def test_get_next_device_request_no_device_found():
    """util_test.go TestGetNextDeviceRequest_NoDeviceFound: ';;' has no request left -> error."""
    with pytest.raises(AllocationError, match="no devices left"):
        plan(pod(";;", ("main1",), ("init1",)), [["id-0"]])


# server_test.go TestPhysicalDeviceIDHandlesVirtualFormats
@pytest.mark.parametrize(
    ("device_id", "want"),
    [
        (f"{GA}-0", GA),
        (f"{GA}-10", GA),
        (f"{GA}::replica-1", GA),
        (GA, GA),
        ("GPU-03f69c50-207a-2038-9b45-23cac89cb123", "GPU-03f69c50-207a-2038-9b45-23cac89cb123"),
    ],
    ids=["TestPhysicalDeviceID-virtual-0", "TestPhysicalDeviceID-virtual-10", "TestPhysicalDeviceID-replica",
         "TestPhysicalDeviceID-plain", "TestPhysicalDeviceID-plain-ending-123"],
)
def test_physical_device_id(device_id, want):
    assert physical_id(device_id) == want


def test_align_container_devices_with_allocated_ids_preserves_metadata():
    """server_test.go TestAlignContainerDevicesWithAllocatedIDsPreservesMetadata."""
    p = pod("GPU-annotated-a,NVIDIA,3000,50:GPU-annotated-b,NVIDIA,3000,50:;")
    (c,) = plan(p, [[f"{GA}-0", f"{GB}-1"]], DeviceSettings(enable_get_preferred_allocation=True)).containers
    assert [(d.uuid, d.usedmem, d.usedcores) for d in c.devices] == [(GA, 3000, 50), (GB, 3000, 50)]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == f"{GA},{GB}"


def test_align_container_devices_with_allocated_ids_rejects_length_mismatch():
    """server_test.go TestAlignContainerDevicesWithAllocatedIDsRejectsLengthMismatch."""
    with pytest.raises(AllocationError, match="device number not matched"):
        plan(pod("GPU-annotated-a,NVIDIA,3000,50:;"), [[f"{GA}-0", f"{GB}-1"]],
             DeviceSettings(enable_get_preferred_allocation=True))


def test_allocate_rejects_empty_device_ids():
    """server_test.go TestAllocateRejectsEmptyDeviceIDs."""
    with pytest.raises(AllocationError, match="invalid allocation request with no devices requested"):
        plan(pod("GPU-annotated-a,NVIDIA,3000,50:;"), [[]])


def test_allocate_preserves_container_order():
    """server_test.go TestAllocatePreservesContainerOrderWhenOneContainerFallsBack."""
    p = pod("GPU-annotated-a,NVIDIA,3000,50:;GPU-annotated-b,NVIDIA,4000,60:;", ("c0", "c1"))
    a, b = plan(p, [[f"{GA}-0"], [f"{GB}-1"]], DeviceSettings(enable_get_preferred_allocation=True)).containers
    assert (a.container, a.envs["NVIDIA_VISIBLE_DEVICES"], a.envs["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("c0", GA, "3000m")
    assert (b.container, b.envs["NVIDIA_VISIBLE_DEVICES"], b.envs["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("c1", GB, "4000m")


@pytest.mark.parametrize(("preferred", "visible"), [(True, GA), (False, "GPU-annotated-a")],
                         ids=["TestAllocateUsesSelectedUUIDs-preferred", "TestAllocateUsesSelectedUUIDs-annotation"])
def test_allocate_uses_selected_uuids(preferred, visible):
    """server_test.go TestAllocateUsesSelectedUUIDsAndHostPIDBroker (the UUID and limit part)."""
    (c,) = plan(pod("GPU-annotated-a,NVIDIA,3000,50:;"), [[f"{GA}-0"]],
                DeviceSettings(enable_get_preferred_allocation=preferred)).containers
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == visible
    assert (c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], c.envs["CUDA_DEVICE_SM_LIMIT"]) == ("3000m", "50")


def test_pod_allocation_try_success_keeps_devices_left_for_other_containers():
    """util_test.go Test_PodAllocationTrySuccess: devices still to allocate -> not a success yet."""
    p = plan(pod(f"{GA},NVIDIA,1000,10:;{GB},NVIDIA,1000,10:;", ("a", "b")), [["x"]])
    assert not p.done
    assert p.remaining_text == f";{GB},NVIDIA,1000,10:;;"
    assert plan(pod(p.remaining_text, ("a", "b")), [["y"]]).done


# alloc_refactor_test.go TestPopNextContainerDevices: the first non-empty slot, blanked once served.
@pytest.mark.parametrize(
    ("annotation", "containers", "want_container", "want_uuid", "left"),
    [
        ("", ("c0",), None, None, None),
        (";;;", ("c0", "c1", "c2"), None, None, None),
        ("uuid1,NVIDIA,1024,4:;uuid2,NVIDIA,2048,8:;", ("c0", "c1"), "c0", "uuid1", ";uuid2,NVIDIA,2048,8:;;"),
        (";uuid2,NVIDIA,2048,8:;uuid3,NVIDIA,512,2:;", ("c0", "c1", "c2"), "c1", "uuid2", ";;uuid3,NVIDIA,512,2:;;"),
    ],
    ids=["TestPopNextContainerDevices-EmptyPodSingleDevice", "TestPopNextContainerDevices-AllContainersEmpty",
         "TestPopNextContainerDevices-FirstContainerHasDevices",
         "TestPopNextContainerDevices-SecondContainerHasDevices"],
)
def test_pop_next_container_devices(annotation, containers, want_container, want_uuid, left):
    p = pod(annotation, containers)
    if want_container is None:
        with pytest.raises(AllocationError, match="no pending device allocation found"):
            plan(p, [["id-0"]])
        return
    result = plan(p, [["id-0"]])
    (c,) = result.containers
    assert (c.container, c.devices[0].uuid) == (want_container, want_uuid)
    assert result.remaining_text == left


def test_pop_next_container_devices_after_decode():
    """TestPopNextContainerDevices_AfterDecode: c1 then c2, then nothing left."""
    p = pod(";uuid1,NVIDIA,1024,4:;uuid2,NVIDIA,2048,8:;", ("c0", "c1", "c2"))
    first = plan(p, [["a"]])
    second = plan(pod(first.remaining_text, ("c0", "c1", "c2")), [["b"]])
    assert [first.containers[0].container, second.containers[0].container] == ["c1", "c2"]
    with pytest.raises(AllocationError, match="no pending device allocation found"):
        plan(pod(second.remaining_text, ("c0", "c1", "c2")), [["c"]])


@pytest.mark.parametrize(
    ("annotation", "containers", "requests", "message"),
    [
        (None, ("c0",), [["GPU-aaa-0"]], "device request not found"),
        ("GPU-aaa,NVIDIA,3000,50:;", ("c0", "c1"), [["GPU-aaa-0"], ["GPU-bbb-0"]],
         "no pending device allocation found"),
        ("GPU-aaa,NVIDIA,3000,50:;", ("c0",), [["GPU-aaa-0", "GPU-aaa-1"]], "device number not matched"),
    ],
    ids=["TestAllocate_DecodePodSingleDeviceError",
         "TestAllocate_PopNextContainerDevicesError_MoreContainersThanAnnotation", "TestAllocate_DeviceNumberMismatch"],
)
def test_allocate_errors(annotation, containers, requests, message):
    p = pod(annotation or "", containers)
    if annotation is None:
        del p["metadata"]["annotations"][ANN_TO_ALLOCATE]
    with pytest.raises(AllocationError, match=message):
        plan(p, requests)


@pytest.mark.parametrize(("disabled", "preload"), [("c1", [True, False]), ("c0", [False, True])],
                         ids=["TestAllocate_MultiContainer_CUDA_DISABLE_CONTROL_SecondContainer",
                              "TestAllocate_MultiContainer_CUDA_DISABLE_CONTROL_FirstContainer"])
def test_allocate_multi_container_cuda_disable_control(disabled, preload):
    p = pod("GPU-aaa,NVIDIA,3000,50:;GPU-bbb,NVIDIA,4000,60:;", ("c0", "c1"))
    for c in p["spec"]["containers"]:
        if c["name"] == disabled:
            c["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    # HAMi honours the env; hami only where the node config allows it.
    got = plan(p, [["GPU-aaa-0"], ["GPU-bbb-0"]], DeviceSettings(allow_disable_control=True)).containers
    assert [any(m.container_path == "/etc/ld.so.preload" for m in c.mounts) for c in got] == preload
    kept = plan(p, [["GPU-aaa-0"], ["GPU-bbb-0"]]).containers
    assert all(any(m.container_path == "/etc/ld.so.preload" for m in c.mounts) for c in kept)
    assert [(c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], c.envs["CUDA_DEVICE_SM_LIMIT"]) for c in got] == \
        [("3000m", "50"), ("4000m", "60")]  # TestAllocate_MultiContainer_EachGetsOwnDevice
