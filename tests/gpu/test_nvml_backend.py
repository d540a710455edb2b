"""NvmlBackend against a stand-in `pynvml` module (no GPU in CI): discovery (name, UUID, index,
minor, memory in MiB, NOT_SUPPORTED memory, NUMA from sysfs, utilization), per-process SM samples,
and XID health: ignored XIDs (13, 31, 43, 45, 68, 109) leave the GPU healthy, a critical XID marks
only that GPU, a wait error marks every GPU, DP_DISABLE_HEALTHCHECKS=all starts no watcher, and
close() stops the watcher thread."""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import time
import types

import pytest

from hami.gpu.backend import GpuBackendError
from hami.gpu.nvml import NvmlBackend

# nvmlReturn_t values from NVML's documentation (nvml.h)
NOT_SUPPORTED, NOT_FOUND, TIMEOUT, GPU_IS_LOST, UNKNOWN = 3, 6, 10, 15, 999


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"nvml error {value}")
        self.value = value


def fake_pynvml(gpus, events: queue.Queue):
    nv = types.SimpleNamespace()
    nv.NVMLError = NVMLError
    nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_TIMEOUT = NOT_SUPPORTED, TIMEOUT
    nv.NVML_ERROR_NOT_FOUND, nv.NVML_ERROR_GPU_IS_LOST = NOT_FOUND, GPU_IS_LOST
    nv.nvmlEventTypeXidCriticalError, nv.nvmlEventTypeDoubleBitEccError = 8, 2
    nv.nvmlEventTypeSingleBitEccError = 1
    nv.calls = []
    nv.nvmlInit = lambda: nv.calls.append("init")
    nv.nvmlShutdown = lambda: nv.calls.append("shutdown")
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    nv.nvmlDeviceGetHandleByUUID = lambda u: next(g for g in gpus if g["uuid"] == u)
    nv.nvmlDeviceGetUUID = lambda h: h["uuid"].encode()
    nv.nvmlDeviceGetName = lambda h: h["name"]
    nv.nvmlDeviceGetIndex = lambda h: h["index"]
    nv.nvmlDeviceGetMinorNumber = lambda h: h["index"] + 10

    def mem(h):
        if h.get("mem") is None:
            raise NVMLError(NOT_SUPPORTED)
        return types.SimpleNamespace(total=h["mem"] * 1024 * 1024, used=h["used"] * 1024 * 1024)

    nv.nvmlDeviceGetMemoryInfo = mem
    def rates(h):
        if h.get("util_error"):
            raise NVMLError(h["util_error"])
        return types.SimpleNamespace(gpu=h["util"], memory=7)

    nv.nvmlDeviceGetUtilizationRates = rates
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h["bus"].encode())
    def process_samples(h, ts):
        if h.get("proc_error"):
            raise NVMLError(h["proc_error"])
        return [types.SimpleNamespace(pid=p, smUtil=u, timeStamp=100) for p, u in h.get("procs", {}).items()]

    nv.nvmlDeviceGetProcessUtilization = process_samples
    nv.nvmlEventSetCreate = lambda: "set"
    nv.nvmlEventSetFree = lambda es: nv.calls.append("free")
    nv.nvmlDeviceGetSupportedEventTypes = lambda h: 0xFF
    nv.nvmlDeviceRegisterEvents = lambda h, mask, es: nv.calls.append(("register", h["uuid"], mask))

    def wait(es, ms):
        try:
            item = events.get(timeout=ms / 1000)
        except queue.Empty:
            raise NVMLError(TIMEOUT) from None
        if isinstance(item, Exception):
            raise item
        return item

    nv.nvmlEventSetWait = wait
    return nv


@pytest.fixture
def env(monkeypatch):
    sysfs = tempfile.mkdtemp(dir="/tmp")
    os.makedirs(os.path.join(sysfs, "bus/pci/devices/0000:3b:00.0"))
    with open(os.path.join(sysfs, "bus/pci/devices/0000:3b:00.0/numa_node"), "w") as fh:
        fh.write("1\n")
    gpus = [
        {"uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3", "index": 0, "mem": 81559, "used": 100, "util": 30,
         "bus": "00000000:3B:00.0", "procs": {4242: 55}},
        {"uuid": "GPU-b", "name": "NVIDIA GH200", "index": 1, "mem": None, "used": 0, "util": 0,
         "bus": "00000000:AF:00.0"},
    ]
    events: queue.Queue = queue.Queue()
    nv = fake_pynvml(gpus, events)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return types.SimpleNamespace(nv=nv, gpus=gpus, events=events, sysfs=sysfs)


def wait_until(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_discovery_and_process_samples(env):
    b = NvmlBackend(env={}, sysfs_root=env.sysfs, watch_health=False)
    a, gh = b.list_gpus()
    assert (a.uuid, a.index, a.name, a.memory_total_mib, a.memory_used_mib, a.numa, a.minor, a.utilization) == (
        "GPU-a", 0, "NVIDIA H100 80GB HBM3", 81559, 100, 1, 10, 30)
    assert (gh.memory_supported, gh.memory_total_mib, gh.numa) == (False, 0, 0)
    assert b.process_utilization("GPU-a") == {4242: 55}
    b.close()
    assert env.nv.calls[-1] == "shutdown"


def event(uuid, xid, env, etype=8):
    return types.SimpleNamespace(device=next(g for g in env.gpus if g["uuid"] == uuid), eventType=etype,
                                 eventData=xid)


def test_ignored_xids_keep_gpus_healthy_and_critical_xid_marks_one(env):
    b = NvmlBackend(env={}, sysfs_root=env.sysfs)
    try:
        assert wait_until(lambda: sum(1 for c in env.nv.calls if c[0] == "register") == 2)
        for xid in (13, 31, 43, 45, 68, 109):
            env.events.put(event("GPU-a", xid, env))
        env.events.put(event("GPU-a", 94, env, etype=2))  # not an XID event: ignored
        env.events.put(event("GPU-b", 79, env))
        assert wait_until(lambda: not b.list_gpus()[1].healthy)
        assert env.events.empty()
        assert b.list_gpus()[0].healthy
    finally:
        b.close()
    assert "free" in env.nv.calls


def test_wait_error_marks_every_gpu_unhealthy(env):
    b = NvmlBackend(env={}, sysfs_root=env.sysfs)
    try:
        env.events.put(NVMLError(UNKNOWN))
        assert wait_until(lambda: not any(g.healthy for g in b.list_gpus()))
    finally:
        b.close()


def test_healthchecks_disabled_starts_no_watcher(env):
    b = NvmlBackend(env={"DP_DISABLE_HEALTHCHECKS": "all"}, sysfs_root=env.sysfs)
    env.events.put(NVMLError(UNKNOWN))
    assert not b.watching_health
    assert all(g.healthy for g in b.list_gpus())
    b.close()


def test_failed_utilization_read_is_unknown_and_counted_never_zero(env):
    """NVML_ERROR_GPU_IS_LOST from nvmlDeviceGetUtilizationRates: that GPU's utilization is None
    (the monitor leaves its metric out), the other GPU still reports, and the failure is counted."""
    env.gpus[0]["util_error"] = GPU_IS_LOST
    b = NvmlBackend(env={}, sysfs_root=env.sysfs, watch_health=False)
    try:
        a, gh = b.list_gpus()
        assert (a.utilization, a.memory_utilization) == (None, None)
        assert (gh.utilization, gh.memory_utilization) == (0, 7)
        assert b.errors == {"nvmlDeviceGetUtilizationRates": 1}
        assert b.last_error == "nvmlDeviceGetUtilizationRates: nvml error 15"
    finally:
        b.close()


def test_process_samples_not_found_is_empty_but_other_errors_raise(env):
    """NVML documents NOT_FOUND as "no samples since lastSeenTimeStamp": an honest empty answer.
    Any other error (GPU lost) raises, so the caller cannot mistake it for idle processes."""
    b = NvmlBackend(env={}, sysfs_root=env.sysfs, watch_health=False)
    try:
        env.gpus[0]["proc_error"] = NOT_FOUND
        assert b.process_utilization("GPU-a") == {}
        env.gpus[0]["proc_error"] = GPU_IS_LOST
        with pytest.raises(GpuBackendError, match="process utilization of GPU-a: nvml error 15"):
            b.process_utilization("GPU-a")
        assert b.errors == {"nvmlDeviceGetProcessUtilization": 1}
    finally:
        b.close()
