"""NVML reads and writes beyond discovery: link topology, health telemetry, versions, MIG instances.

Functions take the `pynvml` module (`nv`) so the backend stays the only importer. A call NVML
answers NOT_SUPPORTED (or any other error) leaves that field None: never a made-up 0.
MIG follows HAMi's MigInstanceManager (`plugin/migmgr.go`): GPU instance at the scheduler's exact
placement, one compute instance of the same slice count, MIG UUID found by GPU instance id.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from typing import Any

from hami.gpu.facts import GpuFacts, cuda_version
from hami.gpu.health import GpuHealth
from hami.gpu.mig import MigError, MigInstance, MigProfileInfo, slice_key
from hami.gpu.topology import GpuLinks, PairLink, nvlink_count

_MAX_LINKS = 18  # NVLink ports per GPU on current parts (NVML's own max is larger)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(nv, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except nv.NVMLError:
        return None


def _bus(nv, info) -> str:
    s = _text(info.busId).lower()
    return s[4:] if s.startswith("0000") and len(s) > 12 else s


def gpu_links(nv, h) -> GpuLinks:
    uuid = _text(nv.nvmlDeviceGetUUID(h))
    bus = _bus(nv, nv.nvmlDeviceGetPciInfo(h))
    remotes, switch = [], 0
    for link in range(_MAX_LINKS):
        try:
            if nv.nvmlDeviceGetNvLinkState(h, link) != nv.NVML_FEATURE_ENABLED:
                continue
        except nv.NVMLError:
            continue  # NOT_SUPPORTED / INVALID_ARGUMENT: no such link
        remote = _try(nv, lambda link=link: nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link))
        if remote is not None:
            remotes.append(_bus(nv, remote))
        kind = _try(nv, lambda link=link: nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
        if kind == getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
            switch += 1
    return GpuLinks(uuid, bus, tuple(remotes), switch)


def read_links(nv) -> dict[tuple[str, str], PairLink]:
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    facts = [gpu_links(nv, h) for h in handles]
    out = {}
    for i, (ha, a) in enumerate(zip(handles, facts, strict=True)):
        for j, (hb, b) in enumerate(zip(handles, facts, strict=True)):
            if i == j:
                continue
            level = _try(nv, lambda ha=ha, hb=hb: int(nv.nvmlDeviceGetTopologyCommonAncestor(ha, hb)))
            out[(a.uuid, b.uuid)] = PairLink(level, nvlink_count(a, b))
    return out


def read_facts(nv) -> dict[str, GpuFacts]:
    """uuid -> versions and bus id of every GPU; a call the driver does not answer leaves "" behind."""
    driver = _text(_try(nv, nv.nvmlSystemGetDriverVersion) or "")
    cuda = _try(nv, nv.nvmlSystemGetCudaDriverVersion)
    cuda_text = cuda_version(int(cuda)) if isinstance(cuda, int) and cuda > 0 else ""
    out = {}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        uuid = _text(nv.nvmlDeviceGetUUID(h))
        cc = _try(nv, lambda h=h: nv.nvmlDeviceGetCudaComputeCapability(h))
        info = _try(nv, lambda h=h: nv.nvmlDeviceGetPciInfo(h))
        out[uuid] = GpuFacts(uuid, f"{cc[0]}.{cc[1]}" if cc else "", driver, cuda_text,
                             _bus(nv, info) if info is not None else "")
    return out


def read_health(nv, h, uuid: str, xids: Mapping[int, int]) -> GpuHealth:
    def val(fn: Callable[[], Any], conv: Callable[[Any], Any] = int) -> Any:
        v = _try(nv, fn)
        return None if v is None else conv(v)

    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return GpuHealth(
        uuid=uuid,
        temperature_c=val(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        power_w=val(lambda: nv.nvmlDeviceGetPowerUsage(h), lambda mw: mw / 1000.0),
        power_limit_w=val(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), lambda mw: mw / 1000.0),
        sm_clock_mhz=val(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        mem_clock_mhz=val(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        ecc_corrected=val(lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)),
        ecc_uncorrected=val(lambda: nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
        pcie_replays=val(lambda: nv.nvmlDeviceGetPcieReplayCounter(h)),
        throttle_reasons=val(lambda: reasons(h)),
        xid_counts=dict(xids),
    )


# --------------------------------------------------------------------------- MIG

_GI_BY_SLICES = {1: "NVML_GPU_INSTANCE_PROFILE_1_SLICE", 2: "NVML_GPU_INSTANCE_PROFILE_2_SLICE",
                 3: "NVML_GPU_INSTANCE_PROFILE_3_SLICE", 4: "NVML_GPU_INSTANCE_PROFILE_4_SLICE",
                 6: "NVML_GPU_INSTANCE_PROFILE_6_SLICE", 7: "NVML_GPU_INSTANCE_PROFILE_7_SLICE",
                 8: "NVML_GPU_INSTANCE_PROFILE_8_SLICE"}
_CI_BY_SLICES = {k: v.replace("GPU_INSTANCE", "COMPUTE_INSTANCE") for k, v in _GI_BY_SLICES.items()}
# Profiles HAMi offers: the plain N-slice ones and the double-memory 1-slice one (1g.10gb on A100-40GB).
_GI_EXTRA = ("NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2",)


def _profile_name(info) -> str:
    name = _text(getattr(info, "name", b"") or "")
    if name.startswith("MIG "):
        return name[4:]
    return f"{int(info.sliceCount)}g.{math.ceil(int(info.memorySizeMB) / 1024)}gb"


def _array_call(fn: Callable, head: tuple, item_type, size: int = 32) -> list:
    """pynvml's array-out calls take (..., array, count*); return the filled prefix."""
    arr = (item_type * size)()
    count = ctypes.c_uint(size)
    fn(*head, arr, ctypes.byref(count))
    return [arr[i] for i in range(count.value)]


class NvmlMig:
    """MigControl over NVML for the GPUs of one NvmlBackend."""

    def __init__(self, nv):
        self.nv = nv

    def _h(self, uuid: str):
        try:
            return self.nv.nvmlDeviceGetHandleByUUID(uuid)
        except self.nv.NVMLError as exc:
            raise MigError(f"nvml: GPU {uuid}: {exc}") from None

    def mig_capable(self, uuid: str) -> bool:
        try:
            self.nv.nvmlDeviceGetMigMode(self._h(uuid))
            return True
        except self.nv.NVMLError:
            return False

    def mig_enabled(self, uuid: str) -> bool:
        try:
            current, _pending = self.nv.nvmlDeviceGetMigMode(self._h(uuid))
        except self.nv.NVMLError:
            return False
        return current == self.nv.NVML_DEVICE_MIG_ENABLE

    def set_mig_mode(self, uuid: str, enabled: bool) -> None:
        nv = self.nv
        want = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        try:
            nv.nvmlDeviceSetMigMode(self._h(uuid), want)
            current, pending = nv.nvmlDeviceGetMigMode(self._h(uuid))
        except nv.NVMLError as exc:
            raise MigError(f"nvml: GPU {uuid}: set MIG mode {'on' if enabled else 'off'}: {exc}") from None
        if current != want:
            raise MigError(f"nvml: GPU {uuid}: MIG mode change is pending (current={current} pending={pending}); "
                           "a GPU reset is required")

    def _gi_ids(self) -> list[int]:
        names = [_GI_BY_SLICES[k] for k in sorted(_GI_BY_SLICES)] + list(_GI_EXTRA)
        return [getattr(self.nv, n) for n in names if hasattr(self.nv, n)]

    def mig_profiles(self, uuid: str) -> tuple[MigProfileInfo, ...]:
        nv, h = self.nv, self._h(uuid)
        out = []
        for pid in self._gi_ids():
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, pid)
                placements = _array_call(nv.nvmlDeviceGetGpuInstancePossiblePlacements, (h, info.id),
                                         nv.c_nvmlGpuInstancePlacement_t)
            except nv.NVMLError:
                continue  # profile not offered by this card
            out.append(MigProfileInfo(
                name=_profile_name(info), slices=int(info.sliceCount), memory_mib=int(info.memorySizeMB),
                multiprocessors=int(info.multiprocessorCount),
                placements=tuple((int(p.start), int(p.size)) for p in placements), gi_profile=pid,
            ))
        return tuple(out)

    def _mig_uuid(self, h, gi_id: int) -> tuple[str, int]:
        nv = self.nv
        for i in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except nv.NVMLError:
                continue
            if int(nv.nvmlDeviceGetGpuInstanceId(m)) == gi_id:
                return _text(nv.nvmlDeviceGetUUID(m)), int(nv.nvmlDeviceGetComputeInstanceId(m))
        raise MigError(f"nvml: no MIG device for GPU instance {gi_id}")

    def mig_busy(self, uuid: str, gpu_instance_id: int) -> bool:
        """Compute processes on the instance's MIG device; an NVML error counts as busy (HAMi)."""
        nv, h = self.nv, self._h(uuid)
        try:
            for i in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
                try:
                    m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                except nv.NVMLError:
                    continue
                if int(nv.nvmlDeviceGetGpuInstanceId(m)) == gpu_instance_id:
                    return len(nv.nvmlDeviceGetComputeRunningProcesses(m)) > 0
        except nv.NVMLError:
            return True
        return False

    def mig_instances(self, uuid: str) -> tuple[MigInstance, ...]:
        nv, h = self.nv, self._h(uuid)
        if not self.mig_enabled(uuid):
            return ()
        out = []
        for prof in self.mig_profiles(uuid):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, prof.gi_profile)
                gis = _array_call(nv.nvmlDeviceGetGpuInstances, (h, info.id), nv.c_nvmlGpuInstance_t)
            except nv.NVMLError:
                continue
            for gi in gis:
                gi_info = nv.nvmlGpuInstanceGetInfo(gi)
                try:
                    mig_uuid, ci_id = self._mig_uuid(h, int(gi_info.id))
                except MigError:
                    mig_uuid, ci_id = "", -1  # a GPU instance without compute instance
                out.append(MigInstance(uuid, int(gi_info.id), ci_id, prof.name, int(gi_info.placement.start),
                                       int(gi_info.placement.size), mig_uuid))
        return tuple(sorted(out, key=lambda m: m.gpu_instance_id))

    def create_mig(self, uuid: str, profile: str, start: int) -> MigInstance:
        nv, h = self.nv, self._h(uuid)
        prof = next((p for p in self.mig_profiles(uuid) if p.name == profile), None)
        if prof is None:
            raise MigError(f"nvml: GPU {uuid}: MIG profile {profile!r} not offered by this card")
        pl = next((p for p in prof.placements if p[0] == start), None)
        if pl is None:
            raise MigError(f"nvml: GPU {uuid}: invalid placement start {start} for {profile}")
        ci_name = _CI_BY_SLICES.get(int(slice_key(profile).rstrip("g") or 0))
        if ci_name is None:
            raise MigError(f"nvml: GPU {uuid}: unsupported MIG compute profile {profile!r}")
        try:
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, prof.gi_profile)
            placement = nv.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = pl
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.byref(placement))
        except nv.NVMLError as exc:
            raise MigError(f"nvml: GPU {uuid}: create GPU instance {profile} at {pl}: {exc}") from None
        gi_id = int(nv.nvmlGpuInstanceGetInfo(gi).id)
        try:
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, getattr(nv, ci_name), nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            mig_uuid, ci_id = self._mig_uuid(h, gi_id)
        except (nv.NVMLError, MigError) as exc:
            _try(nv, lambda: self._destroy_gi(gi))
            raise MigError(f"nvml: GPU {uuid}: create compute instance for {profile}: {exc}") from None
        return MigInstance(uuid, gi_id, ci_id, profile, pl[0], pl[1], mig_uuid)

    def _destroy_gi(self, gi) -> None:
        nv = self.nv
        for ci_name in _CI_BY_SLICES.values():
            if not hasattr(nv, ci_name):
                continue
            try:
                ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, getattr(nv, ci_name), nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                cis = _array_call(nv.nvmlGpuInstanceGetComputeInstances, (gi, ci_info.id),
                                  nv.c_nvmlComputeInstance_t)
            except nv.NVMLError:
                continue
            for ci in cis:
                nv.nvmlComputeInstanceDestroy(ci)
        nv.nvmlGpuInstanceDestroy(gi)

    def destroy_mig(self, uuid: str, gpu_instance_id: int) -> None:
        nv, h = self.nv, self._h(uuid)
        try:
            gi = nv.nvmlDeviceGetGpuInstanceById(h, gpu_instance_id)
            self._destroy_gi(gi)
        except nv.NVMLError as exc:
            raise MigError(f"nvml: GPU {uuid}: destroy GPU instance {gpu_instance_id}: {exc}") from None
