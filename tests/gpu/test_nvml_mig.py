"""NvmlBackend's MIG control and XID counting against a stand-in pynvml modelling one A100-40GB
(the geometry table's profiles, NVML's GPU-instance/compute-instance calls with pynvml's array-out
signatures).

Covers: MIG capability and mode; profiles read with NVML names and placements (NVML order);
create at an exact placement returns the MIG UUID, GI and CI ids and is listed; an instance with
compute processes is busy; a placement NVML
does not offer or one already in use is refused naming GPU, profile and placement, with the card
unchanged; destroy removes compute and GPU instance; a pending MIG mode change is an error; XID
events are counted per code (ignored ones too) and reach health(), unsupported telemetry is None.
"""

from __future__ import annotations

import ctypes
import queue
import sys
import types

import pytest

from hami.gpu.mig import MigError, geometries
from hami.gpu.nvml import NvmlBackend
from tests.gpu.test_nvml_backend import NOT_SUPPORTED, NVMLError, event, fake_pynvml, wait_until

NOT_FOUND, IN_USE, INSUFFICIENT = 6, 19, 7
PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


class Card:
    """One A100-40GB's MIG state as NVML would hold it."""

    def __init__(self):
        self.mode, self.pending = 0, 0
        self.gis: dict[int, dict] = {}
        self.procs: dict[int, list] = {}
        self.profiles = {}
        for p in geometries()["A100-40GB"]:
            pid = 9 if p.name == "1g.10gb" else PROFILE_IDS[p.slices]
            self.profiles[pid] = p


def add_mig(nv, gpu: dict, card: Card):
    nv.NVML_DEVICE_MIG_DISABLE, nv.NVML_DEVICE_MIG_ENABLE = 0, 1
    for n, pid in PROFILE_IDS.items():
        setattr(nv, f"NVML_GPU_INSTANCE_PROFILE_{n}_SLICE", pid)
        setattr(nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{n}_SLICE", pid)
    nv.NVML_GPU_INSTANCE_PROFILE_6_SLICE, nv.NVML_GPU_INSTANCE_PROFILE_8_SLICE = 6, 5
    nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 9
    nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    nv.c_nvmlGpuInstancePlacement_t = type("P", (ctypes.Structure,), {"_fields_": [("start", ctypes.c_uint),
                                                                                    ("size", ctypes.c_uint)]})
    nv.c_nvmlGpuInstance_t = nv.c_nvmlComputeInstance_t = ctypes.c_int  # handles are ids here

    def mig_mode(h):
        if h is not gpu:
            raise NVMLError(NOT_SUPPORTED)
        return card.mode, card.pending

    def set_mode(h, mode):
        if card.gis:
            raise NVMLError(IN_USE)
        card.mode = card.pending = mode

    def profile(h, pid):
        if pid not in card.profiles or card.mode != 1:
            raise NVMLError(NOT_SUPPORTED)
        p = card.profiles[pid]
        return types.SimpleNamespace(id=pid, sliceCount=p.slices, memorySizeMB=p.memory_mib,
                                     multiprocessorCount=p.multiprocessors, name=f"MIG {p.name}".encode())

    def fill(arr, count_ref, items):
        for i, item in enumerate(items):
            arr[i] = item
        count_ref._obj.value = len(items)

    def placements(h, pid, arr, count_ref):
        fill(arr, count_ref, [nv.c_nvmlGpuInstancePlacement_t(s, z) for s, z in card.profiles[pid].placements])

    def create_gi(h, pid, placement_ref):
        pl = placement_ref._obj
        want = (pl.start, pl.size)
        if want not in card.profiles[pid].placements:
            raise NVMLError(2)
        if any(g["start"] < want[0] + want[1] and want[0] < g["start"] + g["size"] for g in card.gis.values()):
            raise NVMLError(INSUFFICIENT)
        gi = next(i for i in range(1, 15) if i not in card.gis)
        card.gis[gi] = {"pid": pid, "start": want[0], "size": want[1], "ci": None}
        return gi

    def gi_info(gi):
        g = card.gis[gi]
        return types.SimpleNamespace(id=gi, placement=types.SimpleNamespace(start=g["start"], size=g["size"]))

    def create_ci(gi, ci_pid):
        card.gis[gi]["ci"] = 0
        return gi * 100

    def mig_handle(h, i):
        live = [(gi, g) for gi, g in sorted(card.gis.items()) if g["ci"] is not None]
        if i >= len(live):
            raise NVMLError(NOT_FOUND)
        gi, _ = live[i]
        return {"uuid": f"MIG-0000000{gi}-aaaa-5bbb-8ccc-dddddddddddd", "gi": gi}

    def gis(h, pid, arr, count_ref):
        fill(arr, count_ref, [gi for gi, g in sorted(card.gis.items()) if g["pid"] == pid])

    def cis(gi, ci_pid, arr, count_ref):
        g = card.gis[gi]
        fill(arr, count_ref, [gi * 100] if g["ci"] is not None and ci_pid == g["pid"] % 9 else [])

    def destroy_ci(ci):
        card.gis[ci // 100]["ci"] = None

    def destroy_gi(gi):
        if card.gis[gi]["ci"] is not None:
            raise NVMLError(IN_USE)
        del card.gis[gi]

    def gi_by_id(h, gi):
        if gi not in card.gis:
            raise NVMLError(NOT_FOUND)
        return gi

    nv.nvmlDeviceGetMigMode = mig_mode
    nv.nvmlDeviceSetMigMode = set_mode
    nv.nvmlDeviceGetGpuInstanceProfileInfo = profile
    nv.nvmlDeviceGetGpuInstancePossiblePlacements = placements
    nv.nvmlDeviceCreateGpuInstanceWithPlacement = create_gi
    nv.nvmlGpuInstanceGetInfo = gi_info
    nv.nvmlGpuInstanceGetComputeInstanceProfileInfo = lambda gi, pid, eng: types.SimpleNamespace(id=pid)
    nv.nvmlGpuInstanceCreateComputeInstance = create_ci
    nv.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    nv.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    nv.nvmlDeviceGetGpuInstanceId = lambda m: m["gi"]
    nv.nvmlDeviceGetComputeInstanceId = lambda m: 0
    nv.nvmlDeviceGetGpuInstances = gis
    nv.nvmlGpuInstanceGetComputeInstances = cis
    nv.nvmlComputeInstanceDestroy = destroy_ci
    nv.nvmlGpuInstanceDestroy = destroy_gi
    nv.nvmlDeviceGetGpuInstanceById = gi_by_id
    nv.nvmlDeviceGetComputeRunningProcesses = lambda m: card.procs.get(m["gi"], [])
    for name in ("nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                 "nvmlDeviceGetClockInfo", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPcieReplayCounter",
                 "nvmlDeviceGetCurrentClocksThrottleReasons"):
        setattr(nv, name, lambda *a: (_ for _ in ()).throw(NVMLError(NOT_SUPPORTED)))
    for name in ("NVML_TEMPERATURE_GPU", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                 "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"):
        setattr(nv, name, 0)


@pytest.fixture
def mig(monkeypatch, tmp_path):
    gpus = [{"uuid": "GPU-a", "name": "NVIDIA A100-SXM4-40GB", "index": 0, "mem": 40960, "used": 0, "util": 0,
             "bus": "00000000:3B:00.0"},
            {"uuid": "GPU-t", "name": "Tesla T4", "index": 1, "mem": 15360, "used": 0, "util": 0,
             "bus": "00000000:86:00.0"}]
    events: queue.Queue = queue.Queue()
    nv = fake_pynvml(gpus, events)
    card = Card()
    add_mig(nv, gpus[0], card)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return types.SimpleNamespace(nv=nv, card=card, gpus=gpus, events=events, sysfs=str(tmp_path))


def test_create_list_destroy_at_exact_placements(mig):
    b = NvmlBackend(env={}, sysfs_root=mig.sysfs, watch_health=False)
    try:
        assert b.mig_capable("GPU-a") and not b.mig_capable("GPU-t") and not b.mig_enabled("GPU-a")
        b.set_mig_mode("GPU-a", True)
        profiles = {p.name: p for p in b.mig_profiles("GPU-a")}
        assert list(profiles) == ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.10gb"]
        assert profiles["3g.20gb"].placements == ((0, 4), (4, 4)) and profiles["1g.5gb"].memory_mib == 4864
        a = b.create_mig("GPU-a", "3g.20gb", 4)
        assert (a.gpu_instance_id, a.compute_instance_id, a.start, a.size) == (1, 0, 4, 4)
        assert a.mig_uuid.startswith("MIG-00000001")
        small = b.create_mig("GPU-a", "1g.5gb", 0)
        assert b.mig_instances("GPU-a") == (a, small)
        with pytest.raises(MigError, match=r"GPU GPU-a: create GPU instance 2g.10gb at \(4, 2\)"):
            b.create_mig("GPU-a", "2g.10gb", 4)  # overlaps the 3g instance
        with pytest.raises(MigError, match="invalid placement start 3 for 2g.10gb"):
            b.create_mig("GPU-a", "2g.10gb", 3)
        assert b.mig_instances("GPU-a") == (a, small)
        assert not b.mig_busy("GPU-a", a.gpu_instance_id)
        mig.card.procs[a.gpu_instance_id] = [types.SimpleNamespace(pid=42)]
        assert b.mig_busy("GPU-a", a.gpu_instance_id) and not b.mig_busy("GPU-a", small.gpu_instance_id)
        b.destroy_mig("GPU-a", a.gpu_instance_id)
        b.destroy_mig("GPU-a", small.gpu_instance_id)
        assert b.mig_instances("GPU-a") == () and mig.card.gis == {}
        with pytest.raises(MigError, match="destroy GPU instance 1"):
            b.destroy_mig("GPU-a", 1)
        b.set_mig_mode("GPU-a", False)
        assert not b.mig_enabled("GPU-a")
    finally:
        b.close()


def test_pending_mig_mode_change_is_an_error(mig):
    b = NvmlBackend(env={}, sysfs_root=mig.sysfs, watch_health=False)
    mig.nv.nvmlDeviceSetMigMode = lambda h, mode: setattr(mig.card, "pending", mode)  # needs a GPU reset
    try:
        with pytest.raises(MigError, match="pending"):
            b.set_mig_mode("GPU-a", True)
    finally:
        b.close()


def test_xids_are_counted_per_code_and_reach_health(mig):
    b = NvmlBackend(env={}, sysfs_root=mig.sysfs)
    try:
        assert wait_until(lambda: sum(1 for c in mig.nv.calls if c[0] == "register") == 2)
        env = types.SimpleNamespace(gpus=mig.gpus)
        for xid in (13, 79, 79):
            mig.events.put(event("GPU-a", xid, env))
        assert wait_until(lambda: {h.uuid: dict(h.xid_counts) for h in b.health()}["GPU-a"] == {13: 1, 79: 2})
        a, t = b.health()
        assert t.xid_counts == {} and a.temperature_c is None and a.power_w is None
    finally:
        b.close()
