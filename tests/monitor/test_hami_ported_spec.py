"""HAMi's monitor unit tests ported onto hami.monitor: pkg/monitor/nvidia/v1/spec_test.go and
v0/spec_test.go (the C ABI offsets of shared_region_t, per-device sums of context / module /
buffer / offset / total memory and SM utilization over procs[:procnum] for each device index,
whatever the slot status (Go's zero value is 0), device count, UUID validity and text, memory
limits, last kernel time, priority, recent kernel, utilization switch) and
cmd/vGPUmonitor/feedback_test.go (CheckBlocking / CheckPriority through `observe`, every device
of the container looked at)."""

from __future__ import annotations

import pytest

from hami.monitor import shm
from hami.monitor.feedback import Container, Decision, observe
from hami.monitor.shm import DeviceMemory, parse_bytes
from hami.monitor.shmwrite import Dev, Proc, build_region

from ._fixtures import U0, U1

LAYOUTS = ["0", "1.1", "1.2", "1.1-interim"]


@pytest.mark.parametrize(
    ("field", "offset"),
    [("sm_init_flag", 12), ("owner_pid", 16), ("sem", 24), ("device_num", 56), ("uuids", 64), ("limit", 1600),
     ("sm_limit", 1728), ("procs", 1856), ("proc_num", 2_008_896), ("utilization_switch", 2_008_900),
     ("recent_kernel", 2_008_904), ("priority", 2_008_908), ("last_kernel_time", 2_008_912),
     ("size", 2_008_952)],
    ids=lambda v: f"TestSharedRegionTLayoutMatchesCABI-{v}" if isinstance(v, str) else str(v),
)
def test_shared_region_layout_matches_c_abi(field, offset):
    """v1/spec_test.go TestSharedRegionTLayoutMatchesCABI (and Test_MinSize: the total size)."""
    assert getattr(shm.V1, field) == offset


# v{0,1}/spec_test.go Test_DeviceMemory{ContextSize,ModuleSize,BufferSize,Offset,Total} and Test_DeviceSmUtil:
# procnum 2, each slot has 100 on device 0 and 200 on device 1, status left at Go's zero value.
FIELDS = [("context_size", "context"), ("module_size", "module"), ("data_size", "buffer"), ("offset", "offset"),
          ("total", "used"), ("sm_util", "sm_util")]
GO_NAMES = {"context_size": "ContextSize", "module_size": "ModuleSize", "data_size": "BufferSize",
            "offset": "Offset", "total": "Total", "sm_util": "SmUtil"}


def _slot(field: str) -> Proc:
    if field == "sm_util":
        return Proc(pid=0, status=0, sm_util={0: 100, 1: 200})
    return Proc(pid=0, status=0, used={0: DeviceMemory(**{field: 100}), 1: DeviceMemory(**{field: 200})})


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize(("idx", "want"), [(0, 200), (1, 400)], ids=["idx0", "idx1"])
@pytest.mark.parametrize(("field", "attr"), FIELDS,
                         ids=[f"Test_DeviceMemory{GO_NAMES[f]}" if f != "sm_util" else "Test_DeviceSmUtil"
                              for f, _ in FIELDS])
def test_device_sums_over_procnum_slots(field, attr, idx, want, version):
    r = parse_bytes(build_region([Dev(U0), Dev(U1)], [_slot(field), _slot(field)], version, proc_num=2))
    assert getattr(r.devices()[idx], attr) == want


@pytest.mark.parametrize("version", LAYOUTS)
def test_slots_beyond_procnum_are_not_summed(version):
    """Only procs[:procnum] count (v1 spec.go activeProcs)."""
    r = parse_bytes(build_region([Dev(U0)], [Proc(pid=1, used={0: 7}), Proc(pid=2, used={0: 1000})], version,
                                 proc_num=1))
    assert r.devices()[0].used == 7


@pytest.mark.parametrize("num", [2, 4], ids=["Test_DeviceNum-2", "Test_DeviceNum-4"])
def test_device_num(num):
    r = parse_bytes(build_region([Dev(f"GPU-{i}") for i in range(num)], [], "1.2"))
    assert (r.device_num, r.device_count, len(r.devices())) == (num, num, num)


def test_device_max_is_16():
    """Test_DeviceMax: 16 device slots whatever num says."""
    r = parse_bytes(build_region([Dev(U0)], [], "1.2", device_num=99))
    assert len(r.uuids) == 16 and r.device_count == 16


@pytest.mark.parametrize("version", LAYOUTS)
def test_is_valid_uuid_and_device_uuid(version):
    """Test_IsValidUUID / Test_DeviceUUID: a set first byte is valid; the UUID reads back as written."""
    r = parse_bytes(build_region([Dev("a1b2"), Dev("c3d4")], [], version, device_num=3))
    assert (r.uuid(0), r.uuid(1), r.uuid(2)) == ("a1b2", "c3d4", "")
    assert r.valid_uuids() == ["a1b2", "c3d4"]


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize(("idx", "want"), [(0, 100), (1, 200)], ids=["Test_DeviceMemoryLimit-0",
                                                                     "Test_DeviceMemoryLimit-1"])
def test_device_memory_limit(version, idx, want):
    r = parse_bytes(build_region([Dev(U0, limit=100), Dev(U1, limit=200)], [], version))
    assert r.devices()[idx].limit == want


@pytest.mark.parametrize("version", ["1.1", "1.2", "1.1-interim"])
def test_last_kernel_time_priority_recent_kernel_and_switch(version):
    """Test_LastKernelTime / Test_GetPriority / Test_GetRecentKernel / Test_GetUtilizationSwitch."""
    r = parse_bytes(build_region([Dev(U0)], [], version, last_kernel_time=1234, priority=1, recent_kernel=-1,
                                 utilization_switch=0))
    assert (r.last_kernel_time, r.priority, r.recent_kernel, r.utilization_switch) == (1234, 1, -1, 0)


# feedback_test.go: UtilizationPerDevice{p0, p1} = active containers at priority 0 / 1 on a GPU.
def _containers(priority, uuids, sw):
    me = Container("me", tuple(uuids), priority, 0, 0)
    others = [Container(f"{u}-{p}-{k}", (u,), p, 2, 0)
              for u, counts in sw.items() for p, n in enumerate(counts) for k in range(n)]
    return [me, *others]


@pytest.mark.parametrize(
    ("priority", "uuids", "sw", "blocked"),
    [
        (3, ["gpu-0"], {"gpu-0": (0, 1)}, True),
        (2, ["gpu-0"], {"gpu-0": (0, 0)}, False),
        (1, ["gpu-0", "gpu-1"], {"gpu-0": (0, 0), "gpu-1": (1, 0)}, True),
        (1, ["gpu-0", "gpu-1", "gpu-2"], {"gpu-0": (0, 0), "gpu-1": (0, 0), "gpu-2": (0, 0)}, False),
        (1, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], {"gpu-0": (0, 0), "gpu-1": (0, 0), "gpu-2": (0, 0), "gpu-3": (1, 0)},
         True),
        (1, ["gpu-0", "gpu-1", "gpu-2"], {"gpu-1": (1, 0)}, True),
        (1, ["gpu-0", "gpu-1"], {"gpu-9": (1, 0)}, False),
        (1, ["gpu-0", "gpu-1"], {}, False),
    ],
    ids=["TestCheckFunctionsHighPriority-blocked", "TestCheckFunctionsHighPriority-clear",
         "TestCheckBlocking_MultiDevice-two-devices-contention-on-second",
         "TestCheckBlocking_MultiDevice-three-devices-all-clear",
         "TestCheckBlocking_MultiDevice-four-devices-contention-only-on-last",
         "TestCheckBlocking_MultiDevice-some-uuids-missing-present-one-contended",
         "TestCheckBlocking_MultiDevice-none-in-switch-map", "TestCheckBlocking_MultiDevice-empty-switch-map"],
)
def test_check_blocking_and_priority(priority, uuids, sw, blocked):
    """CheckBlocking -> recent_kernel -1 (paused); CheckPriority -> utilization_switch 1."""
    got = observe(_containers(priority, uuids, sw))["me"]
    assert got == (Decision(-1, 1) if blocked else Decision(0, 0))
