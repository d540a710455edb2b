"""The monitor's Prometheus collector: scan and parse on every scrape (spec node.md §3.3).

Registered into the role's own `CollectorRegistry` (never the global one). Each `collect()`:
lists `--cache-dir`, matches dirs to the pods of this node, reads every region (pread, a few KiB
each), repairs host PIDs where HAMi-core got them wrong, reads host GPUs from the backend, and
yields gauges with HAMi's names, labels and units. A bad file is skipped, counted in
`hami_monitor_cache_errors_total{reason}` and warned about once per file per `warn_interval`;
nothing a file contains can fail a scrape.

Container metrics (labels namespace, pod, container, node, vdevice_index, device_uuid, zone="vGPU"; `node` is
the pod's node, so a per-container series joins the per-device ones without a UUID):
hami_vgpu_memory_used_bytes, hami_vgpu_memory_limit_bytes, hami_container_device_memory_bytes,
hami_container_device_utilization_ratio, hami_container_last_kernel_elapsed_seconds,
hami_vgpu_memory_{context,module,buffer}_bytes, and the tuning guide's hami_vgpu_core_used_percent
and hami_vgpu_core_limit_percent. Host metrics: hami_host_gpu_memory_used_bytes,
hami_host_gpu_utilization_ratio, hami_host_gpu_memory_controller_utilization_ratio (labels node,
device_index, device_uuid, device_type = the card's name once, zone; HAMi leaves `node` off the last one
and doubles the vendor in device_type, #2990: the legacy names keep HAMi's devicetype),
and hami_mig_device_info from the pods' `hami.io/vgpu-mig-allocations` annotation.
"""

from __future__ import annotations

import platform
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from hami.device.codec import MIG_ALLOCATIONS_ANNOTATION, CodecError, decode_mig_allocations
from hami.device.model import device_type_label
from hami.gpu.health import HealthSource
from hami.monitor import hostpid
from hami.monitor.claimdirs import claim_container_dirs, claims_by_uid, claims_dir_for, list_claim_dirs
from hami.monitor.health import gpu_labels, health_families
from hami.monitor.scan import ContainerDir, Loaded, list_container_dirs, load_containers, pods_by_uid
from hami.monitor.shm import REASONS, ShmError

ZONE = "vGPU"
MIB = 1024 * 1024
CTR_LABELS = ["namespace", "pod", "container", "node", "vdevice_index", "device_uuid", "zone"]
HOST_LABELS = ["node", "device_index", "device_uuid", "device_type", "zone"]
LEGACY_CTR_LABELS = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone"]
LEGACY_HOST_LABELS = ["nodeid", "deviceidx", "deviceuuid", "devicetype", "zone"]


class WarnLimiter:
    """At most one warning per key per `interval` seconds."""

    def __init__(self, interval: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self.clock = clock
        self._last: dict[Any, float] = {}

    def allow(self, key: Any) -> bool:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return False
        self._last[key] = now
        if len(self._last) > 10_000:
            cutoff = now - self.interval
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
        return True


@dataclass
class MonitorStats:
    """Counters shared by the scrape path and the feedback loop (guarded by `lock`)."""

    cache_errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    backend_errors: dict[str, int] = field(default_factory=dict)  # GPU backend call -> failed reads
    repaired_total: int = 0
    repaired_now: int = 0
    unresolved_now: int = 0
    feedback_writes: int = 0
    removed_dirs: int = 0
    scrapes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str = "0.0.0"
    revision: str = ""
    build_date: str = ""

    def labels(self) -> dict[str, str]:
        impl = sys.implementation
        return {
            "version": self.version,
            "revision": self.revision,
            "build_date": self.build_date,
            "go_version": f"{impl.name}{platform.python_version()}",  # HAMi's label name, our runtime
            "compiler": impl.name,
            "platform": f"{sys.platform}/{platform.machine().lower().replace('x86_64', 'amd64')}",
        }


def default_build_info() -> BuildInfo:
    try:
        from hami import __version__ as v
    except ImportError:  # pragma: no cover
        v = "0.0.0"
    return BuildInfo(version=str(v))


class MonitorCollector:
    """prometheus_client custom collector; `collect()` runs once per scrape (serialised)."""

    def __init__(
        self,
        *,
        cache_dir: str,
        node_name: str,
        pods: Callable[[], Iterable[dict]],
        backend: Any = None,
        node_backends: dict[str, Any] | None = None,
        proc_root: str = "/proc",
        legacy: bool = False,
        repair: bool = True,
        stats: MonitorStats | None = None,
        warn: Callable[..., None] | None = None,
        warn_interval: float = 300.0,
        clock: Callable[[], float] = time.time,
        build: BuildInfo | None = None,
        claims: Callable[[], Iterable[dict]] | None = None,
        claims_dir: str | None = None,
    ):
        self.cache_dir = cache_dir
        # DRA: ResourceClaims (an informer's store; None where the API serves no resource.k8s.io/v1)
        # and the dir of their cache dirs, `<hook>/vgpu/claims` beside `--cache-dir` by default.
        self.claims = claims
        self.claims_dir = claims_dir if claims_dir is not None else claims_dir_for(cache_dir)
        self.node_name = node_name
        self.pods = pods
        # node name -> GPU backend; one entry normally, one per simulated node in an embedded cluster.
        self.backends: dict[str, Any] = dict(node_backends or {})
        if backend is not None:
            self.backends[node_name] = backend
        self.legacy = legacy
        self.repair = repair
        self.stats = stats or MonitorStats()
        self.warn = warn or (lambda *a, **k: None)
        self.limiter = WarnLimiter(warn_interval)
        self.clock = clock
        self.build = build or default_build_info()
        self.resolver = hostpid.HostPidResolver(proc_root)
        self._lock = threading.Lock()
        self._repaired_live: set[tuple[str, int, int]] = set()

    def describe(self) -> list[Metric]:
        return []  # names are dynamic (legacy); skip the registry's duplicate check

    # ------------------------------------------------------------------ errors

    def file_error(self, path: str, exc: ShmError) -> None:
        with self.stats.lock:
            self.stats.cache_errors[exc.reason] = self.stats.cache_errors.get(exc.reason, 0) + 1
        if self.limiter.allow(path):
            self.warn("Skipping unreadable vGPU cache file", path=path, reason=exc.reason, error=str(exc))

    # ------------------------------------------------------------------ collect

    def dirs(self, pods: dict[str, dict]) -> list[ContainerDir]:
        """Device-plugin container dirs, then the dirs of DRA claims used by `pods`."""
        dirs, _ = list_container_dirs(self.cache_dir)
        if self.claims is not None:
            dirs += claim_container_dirs(list_claim_dirs(self.claims_dir), claims_by_uid(self.claims()), pods)
        return dirs

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            return iter(self._collect())

    def _collect(self) -> list[Metric]:
        fams = _Families(self.legacy)
        now = self.clock()
        pods = pods_by_uid(self.pods())
        loaded = load_containers(self.dirs(pods), pods, self.file_error)
        overrides = self._repair(loaded) if self.repair and self.backends else {}
        for item in loaded:
            self._container(fams, item, overrides.get(item.path), now)
        health_samples = self._host(fams)
        self._mig(fams, pods.values())
        with self.stats.lock:
            self.stats.scrapes += 1
            s = self.stats
            errors = CounterMetricFamily(
                "hami_monitor_cache_errors", "vGPU cache files skipped because they could not be read, by reason",
                labels=["reason"])
            for reason, n in sorted(s.cache_errors.items()):
                errors.add_metric([reason], n)
            backend_errors = CounterMetricFamily(
                "hami_monitor_gpu_backend_errors",
                "GPU backend reads that failed (their metrics are left out for that GPU), by call",
                labels=["call"])
            for call, n in sorted(s.backend_errors.items()):
                backend_errors.add_metric([call], n)
            extra = [
                errors,
                backend_errors,
                _counter("hami_monitor_hostpid_repaired_slots",
                         "Process slots whose host PID the monitor repaired (distinct slots since start)",
                         s.repaired_total),
                _gauge("hami_monitor_hostpid_repaired_slots_current",
                       "Process slots read with a repaired host PID in this scrape", s.repaired_now),
                _gauge("hami_monitor_hostpid_unresolved_slots",
                       "Process slots with a wrong host PID that could not be repaired in this scrape",
                       s.unresolved_now),
                _counter("hami_monitor_feedback_writes", "Fields written into regions by the feedback loop",
                         s.feedback_writes),
                _counter("hami_monitor_cache_dirs_removed",
                         "Cache dirs of vanished pods removed after the grace period", s.removed_dirs),
                _gauge("hami_monitor_cache_files", "vGPU cache files read in this scrape", len(loaded)),
            ]
        info = GaugeMetricFamily("hami_build_info", "Build information of hami", labels=list(self.build.labels()))
        info.add_metric(list(self.build.labels().values()), 1)
        return [info, *fams.all(), *health_families(health_samples), *extra]

    def _repair(self, loaded: list[Loaded]) -> dict[str, dict[int, int]]:
        """Per cache file, SM utilization per device recomputed from repaired host PIDs."""
        wants: dict[tuple[str, int], hostpid.Want] = {}
        for item in loaded:
            cid = hostpid.container_id_of(item.pod, item.dir.container)
            for slot in item.region.procs:
                if hostpid.needs_repair(slot.pid, slot.hostpid):
                    wants[(item.path, slot.index)] = hostpid.Want(item.dir.pod_uid, item.dir.container, slot.pid, cid)
        repaired_now = unresolved = 0
        overrides: dict[str, dict[int, int]] = {}
        live: set[tuple[str, int, int]] = set()
        if wants:
            resolved = self.resolver.resolve(wants.values())
            samples: dict[str, dict[int, int]] = {}
            for item in loaded:
                fixed = {}
                for slot in item.region.procs:
                    w = wants.get((item.path, slot.index))
                    if w is None:
                        continue
                    hp = resolved.get(w)
                    if hp is None:
                        unresolved += 1
                    elif hp != slot.hostpid:
                        fixed[slot.index] = hp
                        live.add((item.path, slot.pid, hp))
                if not fixed:
                    continue
                repaired_now += len(fixed)
                per_dev = {}
                for d in range(item.region.device_count):
                    uuid = item.region.uuid(d)
                    if uuid not in samples:
                        samples[uuid] = self._process_utilization(uuid)
                    sampled = samples[uuid]
                    if sampled is None:
                        per_dev[d] = None  # NVML failed for this GPU: its SM utilization is left out
                        continue
                    total = 0
                    for slot in item.region.procs + item.region.exited:
                        hp = fixed.get(slot.index)
                        total += sampled.get(hp, 0) if hp is not None else slot.sm_util[d]
                    per_dev[d] = total
                overrides[item.path] = per_dev
        with self.stats.lock:
            self.stats.repaired_total += len(live - self._repaired_live)
            self.stats.repaired_now = repaired_now
            self.stats.unresolved_now = unresolved
        self._repaired_live = live
        return overrides

    def _backend_error(self, call: str) -> None:
        with self.stats.lock:
            self.stats.backend_errors[call] = self.stats.backend_errors.get(call, 0) + 1

    def _process_utilization(self, uuid: str) -> dict[int, int] | None:
        """host PID -> SM %, or None when a backend failed: the repaired utilization is then unknown."""
        if not uuid:
            return {}
        out: dict[int, int] = {}
        for backend in self.backends.values():
            try:
                out.update(backend.process_utilization(uuid))
            except Exception as exc:  # a backend failure must not fail the scrape
                self._backend_error("process_utilization")
                if self.limiter.allow(("backend", "process_utilization")):
                    self.warn("GPU backend: per-process utilization failed", uuid=uuid, error=str(exc))
                return None
        return out

    def _container(self, fams: _Families, item: Loaded, sm_override: dict[int, int] | None, now: float) -> None:
        meta = item.pod.get("metadata") or {}
        ns, pod, ctr = meta.get("namespace", ""), meta.get("name", ""), item.dir.container
        node = self.pod_node(item.pod)
        lk = item.region.last_kernel_time
        for dev in item.region.devices(sm_override):
            if dev.label_uuid is None:
                continue  # UUID not initialised yet, or not UTF-8: HAMi skips the device
            labels = [ns, pod, ctr, node, str(dev.index), dev.label_uuid, ZONE]
            legacy = [ns, pod, ctr, str(dev.index), dev.label_uuid, ZONE]  # HAMi's names keep HAMi's labels
            fams.ctr("hami_vgpu_memory_used_bytes", labels, dev.used)
            fams.ctr("hami_vgpu_memory_limit_bytes", labels, dev.limit)
            fams.ctr("hami_container_device_memory_bytes", labels, dev.used)
            fams.ctr("hami_container_device_utilization_ratio", labels, dev.sm_util)
            fams.ctr("hami_vgpu_memory_context_bytes", labels, dev.context)
            fams.ctr("hami_vgpu_memory_module_bytes", labels, dev.module)
            fams.ctr("hami_vgpu_memory_buffer_bytes", labels, dev.buffer)
            fams.ctr("hami_vgpu_core_used_percent", labels, dev.sm_util)
            fams.ctr("hami_vgpu_core_limit_percent", labels, dev.sm_limit)
            elapsed = None
            if lk > 0:
                elapsed = max(int(now) - lk, 0)
                fams.ctr("hami_container_last_kernel_elapsed_seconds", labels, elapsed)
            if self.legacy:
                fams.ctr("vGPU_device_memory_usage_in_bytes", legacy, dev.used)
                fams.ctr("vGPU_device_memory_limit_in_bytes", legacy, dev.limit)
                offset = dev.used - dev.context - dev.module - dev.buffer
                fams.legacy_memory(legacy, dev, offset)
                fams.ctr("Device_utilization_desc_of_container", legacy, dev.sm_util)
                if elapsed is not None:
                    fams.ctr("Device_last_kernel_of_container", legacy, elapsed)

    def pod_node(self, pod: dict) -> str:
        """The node a container runs on: its pod's, else the node this monitor serves (NODE_NAME)."""
        return (pod.get("spec") or {}).get("nodeName") or self.node_name

    def _mig(self, fams: _Families, pods: Iterable[dict]) -> None:
        """hami_mig_device_info from `hami.io/vgpu-mig-allocations` once the plugin filled in the
        runtime identity (migUUID, GPU and compute instance IDs)."""
        for p in pods:
            meta = p.get("metadata") or {}
            text = (meta.get("annotations") or {}).get(MIG_ALLOCATIONS_ANNOTATION)
            if not text:
                continue
            try:
                allocations = decode_mig_allocations(text)
            except CodecError as exc:
                if self.limiter.allow(("mig", meta.get("uid"))):
                    self.warn("Bad MIG allocations annotation", pod=f"{meta.get('namespace')}/{meta.get('name')}",
                              error=str(exc))
                continue
            spec = p.get("spec") or {}
            names = [c.get("name", "") for c in (spec.get("initContainers") or ())]
            names += [c.get("name", "") for c in (spec.get("containers") or ())]
            for a in allocations:
                if not a.mig_uuid or a.gpu_instance_id is None or a.compute_instance_id is None:
                    continue
                if not 0 <= a.container_index < len(names):
                    continue
                base = [meta.get("namespace", ""), meta.get("name", ""), names[a.container_index],
                        str(a.device_index), a.gpu_uuid]
                fams.f["hami_mig_device_info"].add_metric(
                    base[:3] + [self.pod_node(p)] + base[3:]
                    + [a.mig_uuid, a.profile, str(a.gpu_instance_id), str(a.compute_instance_id), ZONE], 1)
                if self.legacy:
                    fams.f["MigInfo"].add_metric(base + [str(a.gpu_instance_id), ZONE], 1)

    def _host(self, fams: _Families) -> list:
        """Host GPU metrics; returns the health samples (node, GpuHealth, labels) of every GPU."""
        samples: list = []
        for node, backend in self.backends.items():
            self._host_node(fams, node, backend, samples)
        return samples

    def _host_node(self, fams: _Families, node: str, backend: Any, samples: list) -> None:
        try:
            gpus = backend.list_gpus()
        except Exception as exc:  # NVML trouble: container metrics still go out
            if self.limiter.allow(("backend", "list_gpus", node)):
                self.warn("GPU backend: listing GPUs failed", node=node, error=str(exc))
            return
        if isinstance(backend, HealthSource):
            labels_of = gpu_labels(gpus)
            try:
                samples.extend((node, h, labels_of[h.uuid]) for h in backend.health() if h.uuid in labels_of)
            except Exception as exc:  # health telemetry is best effort: its metrics are left out
                if self.limiter.allow(("backend", "health", node)):
                    self.warn("GPU backend: reading GPU health failed", node=node, error=str(exc))
        for g in gpus:
            if g.utilization is None:
                self._backend_error("utilization")
            labels = [node, str(g.index), g.uuid, device_type_label("NVIDIA-" + g.name), ZONE]
            legacy_labels = [node, str(g.index), g.uuid, "NVIDIA-" + g.name, ZONE]  # HAMi's devicetype, as is
            if getattr(g, "memory_supported", True):
                fams.host("hami_host_gpu_memory_used_bytes", labels, g.memory_used_mib * MIB)
                if self.legacy:
                    fams.host("HostGPUMemoryUsage", legacy_labels, g.memory_used_mib * MIB)
            fams.host("hami_host_gpu_utilization_ratio", labels, g.utilization)
            fams.host("hami_host_gpu_memory_controller_utilization_ratio", labels,
                      getattr(g, "memory_utilization", 0))
            if self.legacy:
                fams.host("HostCoreUtilization", legacy_labels, g.utilization)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


# name -> (help, label names); order = exposition order.
_CTR = {
    "hami_vgpu_memory_used_bytes": "vGPU device memory usage in bytes",
    "hami_vgpu_memory_limit_bytes": "vGPU device memory limit in bytes",
    "hami_container_device_memory_bytes": "Container device memory usage in bytes",
    "hami_container_device_utilization_ratio": "Container device SM utilization ratio",
    "hami_container_last_kernel_elapsed_seconds": "Seconds since last kernel execution in container",
    "hami_vgpu_memory_context_bytes": "Container device memory context size in bytes",
    "hami_vgpu_memory_module_bytes": "Container device memory module size in bytes",
    "hami_vgpu_memory_buffer_bytes": "Container device memory buffer size in bytes",
    "hami_vgpu_core_used_percent": "Container device SM utilization in percent of the GPU",
    "hami_vgpu_core_limit_percent": "Container device SM limit in percent of the GPU (100 = unlimited)",
}
_HOST = {
    "hami_host_gpu_memory_used_bytes": ("GPU device memory usage in bytes", HOST_LABELS),
    "hami_host_gpu_utilization_ratio": ("GPU core utilization ratio (0-100)", HOST_LABELS),
    "hami_host_gpu_memory_controller_utilization_ratio": (
        "GPU memory controller utilization ratio (0-100)", HOST_LABELS),
}
_LEGACY_CTR = {
    "vGPU_device_memory_usage_in_bytes": "vGPU device usage",
    "vGPU_device_memory_limit_in_bytes": "vGPU device limit",
    "Device_utilization_desc_of_container": "Container device utilization description",
    "Device_last_kernel_of_container": "Container device last kernel description",
}
_LEGACY_HOST = {
    "HostGPUMemoryUsage": "GPU device memory usage",
    "HostCoreUtilization": "GPU core utilization",
}


class _Families:
    """Metric families of one scrape, created up front so every name has HELP/TYPE even when empty."""

    def __init__(self, legacy: bool):
        self.f: dict[str, GaugeMetricFamily] = {}
        for name, doc in _CTR.items():
            self.f[name] = GaugeMetricFamily(name, doc, labels=CTR_LABELS)
        for name, (doc, labels) in _HOST.items():
            self.f[name] = GaugeMetricFamily(name, doc, labels=labels)
        self.f["hami_mig_device_info"] = GaugeMetricFamily(
            "hami_mig_device_info", "MIG runtime identity for a container allocation",
            labels=CTR_LABELS[:-1] + ["mig_uuid", "profile", "gpu_instance_id", "compute_instance_id", "zone"])
        if legacy:
            for name, doc in _LEGACY_HOST.items():
                self.f[name] = GaugeMetricFamily(name, doc, labels=LEGACY_HOST_LABELS)
            for name, doc in _LEGACY_CTR.items():
                self.f[name] = GaugeMetricFamily(name, doc, labels=LEGACY_CTR_LABELS)
            self.f["MigInfo"] = GaugeMetricFamily("MigInfo", "Mig device information for container",
                                                  labels=LEGACY_CTR_LABELS[:-1] + ["instanceid", "zone"])
            self.f["Device_memory_desc_of_container"] = GaugeMetricFamily(
                "Device_memory_desc_of_container", "Container device memory description",
                labels=LEGACY_CTR_LABELS[:-1] + ["context", "module", "data", "offset", "zone"])

    def ctr(self, name: str, labels: list[str], value: float | None) -> None:
        if value is None:
            return  # not measured (an NVML error): the sample is absent, never a made-up 0
        self.f[name].add_metric(labels, value)

    host = ctr

    def legacy_memory(self, labels: list[str], dev: Any, offset: int) -> None:
        self.f["Device_memory_desc_of_container"].add_metric(
            labels[:-1] + [str(dev.context), str(dev.module), str(dev.buffer), str(offset), ZONE], dev.used)

    def all(self) -> list[GaugeMetricFamily]:
        return list(self.f.values())


def _escape_value(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def render(families: Iterable[Metric]) -> bytes:
    """Prometheus text exposition of gauge and counter families, byte-identical to
    `prometheus_client.generate_latest` for what this collector yields (valid names, no
    `_created` samples), at about a third of its cost: label names are not re-validated per sample.
    """
    out: list[str] = []
    append = out.append
    for m in families:
        if m.type not in ("gauge", "counter"):
            raise ValueError(f"render: metric {m.name}: type {m.type} not supported")
        mname = m.name + "_total" if m.type == "counter" else m.name
        doc = m.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        append(f"# HELP {mname} {doc}\n# TYPE {mname} {m.type}\n")
        for sample in m.samples:
            labels = sample.labels
            if labels:
                body = ",".join([f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items())])
                append(f"{sample.name}{{{body}}} {floatToGoString(sample.value)}\n")
            else:
                append(f"{sample.name} {floatToGoString(sample.value)}\n")
    return "".join(out).encode("utf-8")
