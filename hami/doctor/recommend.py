"""The tuning guide's (seed 002) recommendations, computed from pods and monitor metrics (pure;
`hami tune` in tune.py reads the cluster and the metrics, then calls `recommend`).

- memory over-commit: safe `deviceMemoryScaling` = sum of requested (limit) memory / sum of peak
  used memory x 0.9, over the vGPU devices the metrics cover;
- `deviceSplitCount` from the distribution of memory requests, by the guide's table on the smallest
  request: >= 16 GiB -> 5, 8-16 GiB -> 10, 2-8 GiB -> 20, < 2 GiB -> 40 (guide: 30-50), capped at
  30 on clusters of more than 200 nodes;
- pods that never use their cores: a core limit (gpucores) set, and a peak SM use of 0 on every
  device the metrics show for the pod;
- nodes with pending pods: Pending pods that ask for HAMi resources, by node where one is known.
- other vendors (the vendor table): pods asking for Ascend, Cambricon, ... devices are counted per
  vendor and their Pending ones listed; the memory over-commit and split advice is HAMi-core's
  (NVIDIA), so it says that those vendors' shares are sized by their own device plugins.

`whatif_scenario(r)` hands the recommendation to `hami whatif` as a scenario document.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from hami.device import codec
from hami.device.request import quantity_value
from hami.device.vendors import VendorTable

MIB = 1024 * 1024
SAFETY = 0.9
USED = "hami_vgpu_memory_used_bytes"
LIMIT = "hami_vgpu_memory_limit_bytes"
CORE_USED = "hami_vgpu_core_used_percent"
CORE_LIMIT = "hami_vgpu_core_limit_percent"
METRICS = (USED, LIMIT, CORE_USED, CORE_LIMIT)


class TuneError(ValueError):
    """Metrics text that cannot be parsed: names the source and the problem."""


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: Mapping[str, str]
    value: float


DeviceKey = tuple[str, str, str, str]  # namespace, pod, container, device (index or uuid)


@dataclass(slots=True)
class PeakUsage:
    """Peaks of one container's device over the scrapes (not hami.device.model.DeviceUsage)."""

    limit_bytes: float = 0.0
    peak_used_bytes: float = 0.0
    core_limit: float = 0.0
    peak_core_used: float = 0.0


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    phase: str
    node: str
    gpus: int  # total nvidia.com/gpu over containers
    mem_mib: tuple[int, ...]  # nvidia.com/gpumem per container that sets it (per GPU)
    cores: int  # largest nvidia.com/gpucores of a container


@dataclass(frozen=True, slots=True)
class Recommendations:
    memory_scaling: float | None
    requested_bytes: float
    peak_used_bytes: float
    devices_measured: int
    split_count: int | None
    request_mib: Mapping[str, float]  # min, p10, p50, max, count
    split_reason: str
    idle_core_pods: tuple[str, ...]
    pending_by_node: Mapping[str, tuple[str, ...]]
    advice: tuple[str, ...] = field(default_factory=tuple)
    vendor_pods: Mapping[str, int] = field(default_factory=dict)  # other vendors: pods asking for each
    vendor_pending: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # their Pending pods

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- metrics


def parse_metrics(text: str, source: str = "metrics") -> list[MetricSample]:
    """The four vGPU metrics of a Prometheus text exposition."""
    out = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name in METRICS:
                    out.append(MetricSample(s.name, dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise TuneError(f"{source}: not a Prometheus text exposition: {exc}") from None
    return out


def device_key(labels: Mapping[str, str]) -> DeviceKey:
    """Current labels (namespace, pod, container, vdevice_index) or HAMi's legacy ones."""
    ns = labels.get("namespace", labels.get("podnamespace", ""))
    pod = labels.get("pod", labels.get("podname", ""))
    ctr = labels.get("container", labels.get("ctrname", ""))
    dev = labels.get("vdevice_index", labels.get("vdeviceid", labels.get("device_uuid", labels.get("deviceuuid", ""))))
    return ns, pod, ctr, dev


def merge_peaks(scrapes: Iterable[Iterable[MetricSample]]) -> dict[DeviceKey, PeakUsage]:
    """Per vGPU device: the largest limit and the peak use seen over all scrapes."""
    out: dict[DeviceKey, PeakUsage] = {}
    for scrape in scrapes:
        for s in scrape:
            u = out.setdefault(device_key(s.labels), PeakUsage())
            if s.name == USED:
                u.peak_used_bytes = max(u.peak_used_bytes, s.value)
            elif s.name == LIMIT:
                u.limit_bytes = max(u.limit_bytes, s.value)
            elif s.name == CORE_USED:
                u.peak_core_used = max(u.peak_core_used, s.value)
            else:
                u.core_limit = max(u.core_limit, s.value)
    return out


# --------------------------------------------------------------------------- pods


def quantity_number(v) -> int:
    """A resource quantity as the scheduler reads it (Quantity.Value()); 0 when not one."""
    return quantity_value(v if isinstance(v, int) else str(v)) or 0


def pod_info(pod: Mapping, count: str = "nvidia.com/gpu", mem: str = "nvidia.com/gpumem",
             core: str = "nvidia.com/gpucores") -> PodInfo | None:
    """What tuning needs from a pod; None when it asks for no GPU."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    gpus, mems, cores = 0, [], 0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        vals = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        n = quantity_number(vals.get(count, 0))
        if n <= 0:
            continue
        gpus += n
        if mem in vals:
            mems.append(quantity_number(vals[mem]))
        cores = max(cores, quantity_number(vals.get(core, 0)))
    if gpus == 0:
        return None
    node = spec.get("nodeName") or (meta.get("annotations") or {}).get(codec.VGPU_NODE_ANNOTATION, "")
    return PodInfo(meta.get("namespace", ""), meta.get("name", ""), (pod.get("status") or {}).get("phase", ""),
                   node, gpus, tuple(mems), cores)


@dataclass(frozen=True, slots=True)
class VendorPod:
    """A pod asking for devices of vendors other than NVIDIA (rows of the vendor table)."""

    namespace: str
    name: str
    phase: str
    node: str
    vendors: tuple[str, ...]


def vendor_pod(pod: Mapping, table: VendorTable) -> VendorPod | None:
    """The other vendors a pod asks for (any container: the row's count resource, or AWS Neuron's
    core resource, in limits or requests); None when it asks for none."""
    spec = pod.get("spec") or {}
    found: list[str] = []
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        vals = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        for v in table.others:
            names = (v.count_resource, v.core_resource if v.core_requests else "")
            if v.name not in found and any(n and quantity_number(vals.get(n, 0)) > 0 for n in names):
                found.append(v.name)
    if not found:
        return None
    meta = pod.get("metadata") or {}
    node = spec.get("nodeName") or (meta.get("annotations") or {}).get(codec.VGPU_NODE_ANNOTATION, "")
    return VendorPod(meta.get("namespace", ""), meta.get("name", ""), (pod.get("status") or {}).get("phase", ""),
                     node, tuple(found))


def _vendor_advice(vpods: Sequence[VendorPod]) -> tuple[list[str], dict[str, int], dict[str, tuple[str, ...]]]:
    counts: dict[str, int] = {}
    pending: dict[str, list[str]] = {}
    for p in vpods:
        for v in p.vendors:
            counts[v] = counts.get(v, 0) + 1
            if p.phase == "Pending":
                pending.setdefault(v, []).append(f"{p.namespace}/{p.name}")
    advice = []
    if counts:
        advice.append(f"{len(vpods)} pod(s) ask for other vendors' devices ("
                      + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items()))
                      + "): deviceMemoryScaling and deviceSplitCount are HAMi-core's (NVIDIA); those vendors' "
                      "device plugins size their own shares")
    for v, names in sorted(pending.items()):
        advice.append(f"{len(names)} {v} pod(s) Pending: `hami doctor pod` says why (vendor registration, "
                      f"templates, topology), or add {v} capacity: " + ", ".join(names))
    return advice, counts, {k: tuple(v) for k, v in sorted(pending.items())}


# --------------------------------------------------------------------------- recommendations


def split_for(min_mib: float) -> tuple[int, str]:
    gib = min_mib / 1024
    if gib >= 16:
        return 5, "smallest request >= 16 GiB"
    if gib >= 8:
        return 10, "smallest request 8-16 GiB"
    if gib >= 2:
        return 20, "smallest request 2-8 GiB"
    return 40, "smallest request < 2 GiB (guide: 30-50)"


def _pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def recommend(pods: Sequence[PodInfo], usage: Mapping[DeviceKey, PeakUsage], node_count: int = 0,
              current_scaling: float = 1.0, current_split: int = 10,
              vendor_pods: Sequence[VendorPod] = ()) -> Recommendations:
    advice: list[str] = []
    measured = [u for u in usage.values() if u.limit_bytes > 0]
    req = sum(u.limit_bytes for u in measured)
    peak = sum(u.peak_used_bytes for u in measured)
    scaling = round(req / peak * SAFETY, 2) if peak > 0 else None
    if scaling is None:
        advice.append("deviceMemoryScaling: no memory use measured; keep the current value "
                      f"({current_scaling:g}) and collect metrics for a week")
    elif scaling > current_scaling:
        advice.append(f"deviceMemoryScaling: can rise to {scaling:.2f} (requested {req / MIB:.0f} MiB / peak used "
                      f"{peak / MIB:.0f} MiB x {SAFETY}) over {len(measured)} vGPU devices")
    else:
        advice.append(f"deviceMemoryScaling: keep at most {max(scaling, 0):.2f}; requested {req / MIB:.0f} MiB vs "
                      f"peak used {peak / MIB:.0f} MiB leaves no over-commit headroom")

    reqs = [float(m) for p in pods for m in p.mem_mib if m > 0]
    dist: dict[str, float] = {}
    split, why = None, "no pod sets nvidia.com/gpumem"
    if reqs:
        dist = {"min": min(reqs), "p10": _pct(reqs, 0.10), "p50": statistics.median(reqs), "max": max(reqs),
                "count": float(len(reqs))}
        split, why = split_for(dist["min"])
        if node_count > 200 and split > 30:
            split, why = 30, why + "; capped at 30 on more than 200 nodes (annotation size)"
        advice.append(f"deviceSplitCount: {split} ({why}; requests MiB min {dist['min']:.0f}, "
                      f"p50 {dist['p50']:.0f}, max {dist['max']:.0f}, n={len(reqs)})")

    idle = []
    by_pod: dict[tuple[str, str], list[PeakUsage]] = {}
    for (ns, pod, _, _), u in usage.items():
        by_pod.setdefault((ns, pod), []).append(u)
    cores_of = {(p.namespace, p.name): p.cores for p in pods}
    for key, devs in sorted(by_pod.items()):
        limit = max(max(u.core_limit for u in devs), cores_of.get(key, 0))
        if 0 < limit < 100 and all(u.peak_core_used <= 0 for u in devs):
            idle.append(f"{key[0]}/{key[1]}")
    if idle:
        advice.append(f"{len(idle)} pod(s) never used their GPU cores: lower nvidia.com/gpucores or set "
                      "gpuCorePolicy=disable for them: " + ", ".join(idle))

    pending: dict[str, list[str]] = {}
    for p in pods:
        if p.phase == "Pending":
            pending.setdefault(p.node or "(not placed)", []).append(f"{p.namespace}/{p.name}")
    if pending:
        total = sum(len(v) for v in pending.values())
        advice.append(f"{total} GPU pod(s) Pending: raise deviceSplitCount (now {current_split}) or add GPU nodes; "
                      + "; ".join(f"{n}: {len(v)}" for n, v in sorted(pending.items())))
    extra, vcounts, vpending = _vendor_advice(vendor_pods)
    advice.extend(extra)
    return Recommendations(scaling, req, peak, len(measured), split, dist, why, tuple(idle),
                           {k: tuple(v) for k, v in sorted(pending.items())}, tuple(advice), vcounts, vpending)


def whatif_scenario(r: Recommendations, current_scaling: float = 1.0, current_split: int = 10) -> dict:
    """The recommendation as a `hami whatif --scenario` document: one scenario, "tune", changing
    what the recommendation changes (deviceMemoryScaling, deviceSplitCount), to try before applying."""
    changes: dict = {}
    if r.memory_scaling is not None and r.memory_scaling > 0 and r.memory_scaling != current_scaling:
        changes["deviceMemoryScaling"] = r.memory_scaling
    if r.split_count is not None and r.split_count != current_split:
        changes["deviceSplitCount"] = r.split_count
    return {"scenarios": [{"name": "tune", "changes": changes}]}


def render(r: Recommendations) -> str:
    lines = ["hami tune: recommendations (tuning guide)"]
    lines.extend(f"  - {a}" for a in r.advice)
    return "\n".join(lines) + "\n"
