"""NVML backend (nvidia-ml-py's `pynvml`, imported when the backend is built, never at import time).

Discovery per GPU: name, UUID, index, minor number, memory (NOT_SUPPORTED tolerated), NUMA node
from the PCI bus id via sysfs, utilization. Health follows HAMi (`rm/health.go`): one thread waits
on an NVML event set for XID critical / ECC events; XIDs HAMi ignores (13, 31, 43, 45, 68, 109,
plus `DP_DISABLE_HEALTHCHECKS`, minus `DP_ENABLE_HEALTHCHECKS`) are skipped; a wait error marks
every GPU unhealthy. Unhealthy is sticky for the life of the backend.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from hami.gpu.backend import GpuBackendError, GpuInfo
from hami.gpu.health import DEFAULT_IGNORED_XIDS

_WAIT_MS = 1000


def ignored_xids(env: Mapping[str, str]) -> frozenset[int] | None:
    """XIDs to ignore given the environment; None means health checks are disabled."""
    disabled = {s.strip().lower() for s in env.get("DP_DISABLE_HEALTHCHECKS", "").split(",") if s.strip()}
    if disabled & {"all", "xids"}:
        return None
    out = set(DEFAULT_IGNORED_XIDS)
    for s in disabled:
        if s.isdigit():
            out.add(int(s))
    for s in env.get("DP_ENABLE_HEALTHCHECKS", "").split(","):
        if s.strip().isdigit():
            out.discard(int(s.strip()))
    return frozenset(out)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML `00000000:3B:00.0` -> sysfs `0000:3b:00.0`."""
    s = nvml_bus_id.strip().lower()
    domain, _, rest = s.partition(":")
    if rest and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else s


def numa_node(nvml_bus_id: str, sysfs_root: str = "/sys") -> int:
    """NUMA node of a PCI device, 0 when unknown or negative (HAMi's rule)."""
    path = os.path.join(sysfs_root, "bus/pci/devices", sysfs_bus_id(nvml_bus_id), "numa_node")
    try:
        with open(path) as fh:
            value = int(fh.read().strip())
    except (OSError, ValueError):
        return 0
    return max(value, 0)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlBackend:
    name = "nvml"

    def __init__(self, env: Mapping[str, str] | None = None, sysfs_root: str = "/sys", watch_health: bool = True):
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - dependency is declared
            raise GpuBackendError(f"nvml: cannot import pynvml (nvidia-ml-py): {exc}") from None
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuBackendError(
                f"nvml: cannot load NVML ({exc}); is the NVIDIA driver installed and libnvidia-ml.so.1 "
                "visible? Use --gpu-backend fake --fake-gpus FILE to run without GPUs"
            ) from None
        self._sysfs = sysfs_root
        self._lock = threading.Lock()
        self._unhealthy: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._proc_seen: dict[str, int] = {}
        self.errors: dict[str, int] = {}  # NVML call -> failures (their values were left unknown)
        self.last_error = ""
        self._xids: dict[str, dict[int, int]] = {}  # uuid -> XID code -> events (ignored ones too)
        from hami.gpu.nvml_extra import NvmlMig

        self._mig = NvmlMig(pynvml)
        ignored = ignored_xids(os.environ if env is None else env)
        if watch_health and ignored is not None:
            self._thread = threading.Thread(target=self._watch, args=(ignored,), name="nvml-health", daemon=True)
            self._thread.start()

    @property
    def watching_health(self) -> bool:
        """Whether the health watcher (NVML events, XIDs) was started."""
        return self._thread is not None

    # ------------------------------------------------------------------ discovery

    def list_gpus(self) -> list[GpuInfo]:
        nv = self._nv
        out = []
        try:
            count = nv.nvmlDeviceGetCount()
            for i in range(count):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                out.append(self._info(h))
        except nv.NVMLError as exc:
            raise GpuBackendError(f"nvml: listing GPUs failed: {exc}") from None
        out.sort(key=lambda g: g.index)
        return out

    def _info(self, h: Any) -> GpuInfo:
        nv = self._nv
        uuid = _text(nv.nvmlDeviceGetUUID(h))
        total = used = 0
        supported = True
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            total, used = int(mem.total) // (1024 * 1024), int(mem.used) // (1024 * 1024)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) != nv.NVML_ERROR_NOT_SUPPORTED:
                raise
            supported = False
        util: int | None = None  # a failed read stays unknown: the metric is left out, never 0
        mem_util: int | None = None
        try:
            rates = nv.nvmlDeviceGetUtilizationRates(h)
            util, mem_util = int(rates.gpu), int(rates.memory)
        except nv.NVMLError as exc:
            self._count_error("nvmlDeviceGetUtilizationRates", exc)
        try:
            minor = int(nv.nvmlDeviceGetMinorNumber(h))
        except nv.NVMLError:
            minor = -1
        try:
            numa = numa_node(_text(nv.nvmlDeviceGetPciInfo(h).busId), self._sysfs)
        except nv.NVMLError:
            numa = 0
        with self._lock:
            healthy = uuid not in self._unhealthy
        return GpuInfo(
            uuid=uuid,
            index=int(nv.nvmlDeviceGetIndex(h)),
            name=_text(nv.nvmlDeviceGetName(h)),
            memory_total_mib=total,
            memory_used_mib=used,
            numa=numa,
            healthy=healthy,
            utilization=util,
            memory_utilization=mem_util,
            minor=minor,
            memory_supported=supported,
        )

    def _count_error(self, call: str, exc: Exception) -> None:
        key = f"{call}: {exc}"
        self.errors[call] = self.errors.get(call, 0) + 1
        self.last_error = key

    def process_utilization(self, uuid: str) -> dict[int, int]:
        nv = self._nv
        try:
            h = nv.nvmlDeviceGetHandleByUUID(uuid)
            samples = nv.nvmlDeviceGetProcessUtilization(h, self._proc_seen.get(uuid, 0))
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_NOT_FOUND", 6):
                return {}  # documented: no samples since the last timestamp (nothing ran)
            self._count_error("nvmlDeviceGetProcessUtilization", exc)
            raise GpuBackendError(f"nvml: process utilization of {uuid}: {exc}") from None
        out: dict[int, int] = {}
        newest = self._proc_seen.get(uuid, 0)
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
            newest = max(newest, int(s.timeStamp))
        self._proc_seen[uuid] = newest
        return out

    # ------------------------------------------------------------------ health

    def _mark(self, uuids: list[str]) -> None:
        with self._lock:
            self._unhealthy.update(uuids)

    def _watch(self, ignored: frozenset[int]) -> None:
        nv = self._nv
        mask = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError | nv.nvmlEventTypeSingleBitEccError
        try:
            es = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            self._mark([g.uuid for g in self.list_gpus()])
            return
        all_uuids = []
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nv.nvmlDeviceGetUUID(h))
                all_uuids.append(uuid)
                try:
                    supported = nv.nvmlDeviceGetSupportedEventTypes(h)
                    nv.nvmlDeviceRegisterEvents(h, mask & supported, es)
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) != nv.NVML_ERROR_NOT_SUPPORTED:
                        self._mark([uuid])
            while not self._stop.is_set():
                try:
                    ev = nv.nvmlEventSetWait(es, _WAIT_MS)
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) == nv.NVML_ERROR_TIMEOUT:
                        continue
                    self._mark(all_uuids)
                    continue
                if ev.eventType != nv.nvmlEventTypeXidCriticalError:
                    continue
                self._count_xid(ev)
                if int(ev.eventData) in ignored:
                    continue
                try:
                    self._mark([_text(nv.nvmlDeviceGetUUID(ev.device))])
                except nv.NVMLError:
                    self._mark(all_uuids)
        finally:
            try:
                nv.nvmlEventSetFree(es)
            except nv.NVMLError:
                pass

    def _count_xid(self, ev: Any) -> None:
        try:
            uuid = _text(self._nv.nvmlDeviceGetUUID(ev.device))
        except self._nv.NVMLError:
            return
        with self._lock:
            per = self._xids.setdefault(uuid, {})
            per[int(ev.eventData)] = per.get(int(ev.eventData), 0) + 1

    # ------------------------------------------------------------------ topology, telemetry, MIG

    def links(self):
        from hami.gpu.nvml_extra import read_links

        try:
            return read_links(self._nv)
        except self._nv.NVMLError as exc:
            raise GpuBackendError(f"nvml: reading GPU links failed: {exc}") from None

    def facts(self):
        from hami.gpu.nvml_extra import read_facts

        try:
            return read_facts(self._nv)
        except self._nv.NVMLError as exc:
            raise GpuBackendError(f"nvml: reading GPU versions failed: {exc}") from None

    def health(self):
        from hami.gpu.nvml_extra import read_health

        nv, out = self._nv, []
        try:
            handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        except nv.NVMLError as exc:
            raise GpuBackendError(f"nvml: listing GPUs failed: {exc}") from None
        for h in handles:
            try:
                uuid = _text(nv.nvmlDeviceGetUUID(h))
            except nv.NVMLError:
                continue
            with self._lock:
                xids = dict(self._xids.get(uuid, {}))
            out.append(read_health(nv, h, uuid, xids))
        return out

    def mig_capable(self, uuid):
        return self._mig.mig_capable(uuid)

    def mig_enabled(self, uuid):
        return self._mig.mig_enabled(uuid)

    def set_mig_mode(self, uuid, enabled):
        self._mig.set_mig_mode(uuid, enabled)

    def mig_profiles(self, uuid):
        return self._mig.mig_profiles(uuid)

    def mig_instances(self, uuid):
        return self._mig.mig_instances(uuid)

    def create_mig(self, uuid, profile, start):
        return self._mig.create_mig(uuid, profile, start)

    def mig_busy(self, uuid, gpu_instance_id):
        return self._mig.mig_busy(uuid, gpu_instance_id)

    def destroy_mig(self, uuid, gpu_instance_id):
        self._mig.destroy_mig(uuid, gpu_instance_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_WAIT_MS / 1000 * 3)
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass
