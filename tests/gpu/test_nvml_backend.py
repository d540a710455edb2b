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

from hami.gpu.nvml import NvmlBackend

NOT_SUPPORTED, TIMEOUT, UNKNOWN = 3, 10, 999


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"nvml error {value}")
        self.value = value


def fake_pynvml(gpus, events: queue.Queue):
    nv = types.SimpleNamespace()
    nv.NVMLError = NVMLError
    nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_TIMEOUT = NOT_SUPPORTED, TIMEOUT
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
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=h["util"], memory=7)
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h["bus"].encode())
    nv.nvmlDeviceGetProcessUtilization = lambda h, ts: [
        types.SimpleNamespace(pid=p, smUtil=u, timeStamp=100) for p, u in h.get("procs", {}).items()]
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
    assert b._thread is None
    assert all(g.healthy for g in b.list_gpus())
    b.close()
