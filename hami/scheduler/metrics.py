"""Scheduler metrics: HAMi's names and labels (spec scheduler.md §8.4), computed at scrape time.

One registry per scheduler (no global state). The GPU gauges come from the usage cache through
`snapshot()`; `zone="vGPU"` is a constant label on every HAMi metric, as HAMi's collector sets it.
Names, labels, their meanings and values follow HAMi v2.10.0's cmd/scheduler/metrics.go
(tests/scheduler/test_hami_metrics_golden.py): `device_cores` / `devicecores` is the card's TOTAL
cores, not its allocation. One addition: the container families carry `device_type` (a
cluster of several vendors tells its cards apart).
Ours, besides: filter/bind latency histograms and API request counters by verb, resource and code
(read from `KubeClient.requests` at scrape time), events dropped, and the handshake write count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from hami.device.model import DeviceUsage, device_type_label
from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner
from hami.netaddr import split_host_port

ZONE = "vGPU"
MIB = 1 << 20
_LAT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def amd_core_ratio(device_type: str, total: int, allocated: int) -> tuple[float, float]:
    """HAMi v2.10.0's normalizeAMDCoreMetrics (cmd/scheduler/metrics.go, #2527): an AMD card's
    cores are compute units, so its core limit reads 100 and its allocation the ceiling of the
    percentage; every other device (and an AMD card without cores) keeps its values."""
    if not device_type.upper().startswith("AMD") or total <= 0:
        return float(total), float(allocated)
    return 100.0, float(math.ceil(allocated / total * 100))


@dataclass(frozen=True, slots=True)
class PodAlloc:
    namespace: str
    node: str
    pod: str
    container_index: int
    device_uuid: str
    usedmem: int  # MiB
    usedcores: int
    device_type: str = "NVIDIA"  # the vendor's device type (request type), e.g. Ascend910B3, MLU
    container: str = ""  # the container's name (init containers first, as the device annotation counts)


@dataclass(frozen=True, slots=True)
class QuotaUse:
    namespace: str
    resource: str  # e.g. nvidia.com/gpumem
    used: int
    limit: int


@dataclass(frozen=True, slots=True)
class MigInstance:
    node: str
    device_uuid: str
    device_index: int
    mig_uuid: str
    profile: str
    gpu_instance_id: str
    compute_instance_id: str
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    devices: tuple[tuple[str, DeviceUsage], ...] = ()  # (node, device usage)
    pods: tuple[PodAlloc, ...] = ()
    quotas: tuple[QuotaUse, ...] = ()
    migs: tuple[MigInstance, ...] = ()


def device_label(node: str, index: int) -> str:
    """What the device_uuid label carries without --metrics-device-uuids: the node and the card index."""
    return f"{node}/{index}"


_DEV = ("node", "device_uuid", "device_index", "device_type", "zone")
_DEV_CORES = ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone")
_OVERVIEW = ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type", "zone")
_POD = ("namespace", "node", "pod", "container_index", "device_uuid", "device_type", "container", "zone")
# Who shares which card, keyed as DCGM exporter keys its GPUs (node name + index: `Hostname`, `gpu` after
# a label_replace), so the join needs no UUID (UUIDs are opt-in here): docs/monitor.md.
_SHARE_INFO = ("node", "device_index", "namespace", "pod", "container", "container_index", "zone")
_MIG = ("node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id",
        "placement_start", "placement_size", "zone")
_L_DEV = ("nodeid", "deviceuuid", "deviceidx", "devicetype", "zone")
_L_DEV_CORES = ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone")
_L_RATIO = ("nodeid", "deviceuuid", "deviceidx", "zone")  # HAMi's legacy ratio has no devicetype
_L_MIG = ("nodeid", "deviceuuid", "deviceidx", "migname", "zone")
_L_OVERVIEW = ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone")
_L_POD = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone")


class UsageCollector:
    """HAMi's `ClusterManagerCollector`: gauges over the current usage snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot], legacy: bool = False, device_uuids: bool = False):
        self.snapshot = snapshot
        self.legacy = legacy
        # Issue 27: the scheduler's Service is readable by anyone in the cluster and GPU UUIDs are what a
        # forged placement needs; without the operator's opt-in every GPU and MIG UUID label carries
        # `<node>/<index>` instead (one series per device still, so dashboards keep their shape).
        self.device_uuids = device_uuids

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        snap = self.snapshot()
        g = _current_families()
        legacy = _legacy_families() if self.legacy else {}
        shown = {d.id: (d.id if self.device_uuids else device_label(node, d.index)) for node, d in snap.devices}
        cores_of = self._device_metrics(snap, shown, g, legacy)
        yield self._mig_family(snap, legacy)
        self._pod_metrics(snap, shown, cores_of, g, legacy)
        _quota_metrics(snap, g, legacy)
        yield from g.values()
        yield from legacy.values()

    @staticmethod
    def _device_metrics(snap, shown: dict, g: dict, legacy: dict) -> dict:
        """Each card's families; answers device uuid -> (registered type, total cores), AMD's core ratio."""
        cores_of = {}
        for node, d in snap.devices:
            idx = str(d.index)
            uid = shown[d.id]
            card = device_type_label(d.type)  # HAMi's legacy families keep the registered type as HAMi does
            dev = [node, uid, idx, card, ZONE]
            core_limit, core_alloc = amd_core_ratio(d.type, d.totalcore, d.usedcores)
            cores_of[d.id] = (d.type, d.totalcore)
            g["mem_limit"].add_metric(dev, d.totalmem * MIB)
            g["core_limit"].add_metric(dev, core_limit)
            # device_cores is the card's total (raw, AMD included), as HAMi's: a label that moved
            # with the allocation would start a new series on every placement.
            cores = str(d.totalcore)
            g["mem_alloc"].add_metric([node, uid, idx, cores, card, ZONE], d.usedmem * MIB)
            g["shared"].add_metric(dev, d.used)
            g["core_alloc"].add_metric(dev, core_alloc)
            g["overview"].add_metric([node, uid, idx, cores, str(d.totalmem), card, ZONE], d.usedmem * MIB)
            if d.totalmem > 0:  # HAMi leaves the ratio out for a card without memory
                g["mem_ratio"].add_metric(dev, d.usedmem / d.totalmem)
            if legacy:
                ldev = [node, uid, idx, d.type, ZONE]
                legacy["mem_limit"].add_metric(ldev, d.totalmem * MIB)
                legacy["core_limit"].add_metric(ldev, d.totalcore)
                legacy["mem_alloc"].add_metric([node, uid, idx, cores, d.type, ZONE], d.usedmem * MIB)
                legacy["shared"].add_metric(ldev, d.used)
                legacy["core_alloc"].add_metric(ldev, d.usedcores)
                legacy["overview"].add_metric([node, uid, idx, cores, str(d.totalmem), d.type, ZONE],
                                              d.usedmem * MIB)
                if d.totalmem > 0:
                    legacy["mem_ratio"].add_metric([node, uid, idx, ZONE], d.usedmem / d.totalmem)
        return cores_of

    def _mig_family(self, snap, legacy: dict) -> GaugeMetricFamily:
        """The realized MIG instances (HAMi's RuntimeReady ones), labelled by the scheduler's placement."""
        mig = GaugeMetricFamily("hami_node_gpu_mig_instance_info",
                                "Realized MIG instance identity and scheduler placement", labels=_MIG)
        for m in snap.migs:
            if not (m.mig_uuid and m.gpu_instance_id and m.compute_instance_id):
                continue  # HAMi's RuntimeReady: the device plugin has not created it yet
            gpu = m.device_uuid if self.device_uuids else device_label(m.node, m.device_index)
            inst = m.mig_uuid if self.device_uuids else f"{gpu}/{m.gpu_instance_id}"
            mig.add_metric([m.node, gpu, str(m.device_index), inst, m.profile, m.gpu_instance_id,
                            m.compute_instance_id, str(m.placement_start), str(m.placement_size), ZONE], 1)
            if legacy:
                legacy["mig"].add_metric(
                    [m.node, gpu, str(m.device_index), f"{m.profile}-{m.gpu_instance_id}", ZONE], 1)
        return mig

    def _pod_metrics(self, snap, shown: dict, cores_of: dict, g: dict, legacy: dict) -> None:
        """Each container's share of each card it holds."""
        index_of = {d.id: str(d.index) for _, d in snap.devices}
        for p in snap.pods:
            if not p.device_uuid:
                continue  # HAMi omits a device without a UUID
            if p.device_uuid in index_of:
                g["share_info"].add_metric([p.node, index_of[p.device_uuid], p.namespace, p.pod, p.container,
                                            str(p.container_index), ZONE], 1)
            puid = shown.get(p.device_uuid, p.device_uuid if self.device_uuids else f"{p.node}/?")
            labels = [p.namespace, p.node, p.pod, str(p.container_index), puid, device_type_label(p.device_type),
                      p.container, ZONE]
            g["vmem"].add_metric(labels, p.usedmem * MIB)
            card_type, card_cores = cores_of.get(p.device_uuid, ("", 0))
            g["vcore"].add_metric(labels, amd_core_ratio(card_type, card_cores, p.usedcores)[1])
            if legacy:
                labels = [p.namespace, p.node, p.pod, str(p.container_index), puid, ZONE]
                legacy["vmem"].add_metric(labels, p.usedmem * MIB)
                legacy["vcore"].add_metric(labels, p.usedcores)


def _current_families() -> dict[str, GaugeMetricFamily]:
    """The per-device and per-container families, by HAMi's v2.10 names."""
    return {
        "mem_limit": GaugeMetricFamily("hami_gpu_memory_limit_bytes",
                                       "Device memory limit for a certain GPU", labels=_DEV),
        "core_limit": GaugeMetricFamily("hami_gpu_core_limit_ratio",
                                        "Device core limit for a certain GPU", labels=_DEV),
        "mem_alloc": GaugeMetricFamily("hami_gpu_memory_allocated_bytes",
                                       "Device memory allocated for a certain GPU", labels=_DEV_CORES),
        "shared": GaugeMetricFamily("hami_gpu_shared_count",
                                    "Number of containers sharing this GPU", labels=_DEV),
        "core_alloc": GaugeMetricFamily("hami_gpu_core_allocated_ratio",
                                        "Device core allocated for a certain GPU", labels=_DEV),
        "overview": GaugeMetricFamily("hami_node_gpu_overview",
                                      "GPU overview on a certain node", labels=_OVERVIEW),
        "mem_ratio": GaugeMetricFamily("hami_node_gpu_memory_allocated_ratio",
                                       "GPU Memory Allocated Percentage on a certain GPU", labels=_DEV),
        "vmem": GaugeMetricFamily("hami_vgpu_memory_allocated_bytes",
                                  "vGPU memory allocated from a container", labels=_POD),
        "vcore": GaugeMetricFamily("hami_vgpu_core_allocated_ratio",
                                   "vGPU core allocated from a container", labels=_POD),
        "share_info": GaugeMetricFamily("hami_gpu_share_info",
                                        "1 for each container holding a share of the GPU (node, device_index)",
                                        labels=_SHARE_INFO),
    }


def _legacy_families() -> dict[str, GaugeMetricFamily]:
    """HAMi's legacy metric names with their HELP texts, spelling included (--legacy-metrics)."""
    return {
        "mem_limit": GaugeMetricFamily("GPUDeviceMemoryLimit",
                                       "Device memory limit for a certain GPU", labels=_L_DEV),
        "core_limit": GaugeMetricFamily("GPUDeviceCoreLimit",
                                        "Device memory core limit for a certain GPU", labels=_L_DEV),
        "mem_alloc": GaugeMetricFamily("GPUDeviceMemoryAllocated",
                                       "Device memory allocated for a certain GPU", labels=_L_DEV_CORES),
        "shared": GaugeMetricFamily("GPUDeviceSharedNum",
                                    "Number of containers sharing this GPU", labels=_L_DEV),
        "core_alloc": GaugeMetricFamily("GPUDeviceCoreAllocated",
                                        "Device core allocated for a certain GPU", labels=_L_DEV),
        "overview": GaugeMetricFamily("nodeGPUOverview",
                                      "GPU overview on a certain node", labels=_L_OVERVIEW),
        "mem_ratio": GaugeMetricFamily("nodeGPUMemoryPercentage",
                                       "GPU Memory Allocated Percentage on a certain GPU", labels=_L_RATIO),
        "vmem": GaugeMetricFamily("vGPUMemoryAllocated",
                                  "vGPU memory allocated from a container", labels=_L_POD),
        "vcore": GaugeMetricFamily("vGPUCoreAllocated",
                                   "vGPU core allocated from a container", labels=_L_POD),
        "mig": GaugeMetricFamily("nodeGPUMigInstance",
                                 "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps", labels=_L_MIG),
    }


def _quota_metrics(snap, g: dict, legacy: dict) -> None:
    """ResourceQuota usage and limits, HAMi's families (and its legacy one)."""
    q_used = GaugeMetricFamily("hami_resource_quota_used", "resourcequota usage for a certain device",
                               labels=("namespace", "quota_name", "limit", "zone"))
    q_limit = GaugeMetricFamily("hami_resource_quota_limit", "resourcequota limit for a certain device",
                                labels=("namespace", "quota_name", "zone"))
    # quota_name is the resource (nvidia.com/gpumem, huawei.com/Ascend910B3-memory, ...): HAMi's
    # label set, and it already says whose resource it is. Usage without a limit reads limit="0"
    # and has no limit series, as HAMi's (a limit of 0 means none here).
    for q in snap.quotas:
        q_used.add_metric([q.namespace, q.resource, str(q.limit), ZONE], q.used)
        if q.limit:
            q_limit.add_metric([q.namespace, q.resource, ZONE], q.limit)
    g["q_used"], g["q_limit"] = q_used, q_limit
    if legacy:
        lq = GaugeMetricFamily("QuotaUsed", "resourcequota usage for a certain device",
                               labels=("quotanamespace", "quotaName", "limit", "zone"))
        for q in snap.quotas:
            lq.add_metric([q.namespace, q.resource, str(q.limit), ZONE], q.used)
        legacy["q_used"] = lq


class ApiCollector:
    """API requests by verb, resource and code, read from the client's counter dict on scrape."""

    def __init__(self, counts: Callable[[], dict[tuple[str, str, str], int]],
                 extra: Callable[[], dict[str, float]] | None = None,
                 lanes: Callable[[], dict[str, dict[str, float]]] | None = None):
        self.counts = counts
        self.extra = extra
        self.lanes = lanes

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        c = CounterMetricFamily("hami_scheduler_kube_api_requests", "Kubernetes API requests sent",
                                labels=("verb", "resource", "code"))
        for (verb, resource, code), n in sorted(self.counts().items()):
            c.add_metric([verb, resource, code], n)
        yield c
        if self.extra is not None:
            for name, value in self.extra().items():
                yield CounterMetricFamily(name, name.replace("_", " "), value=value)
        if self.lanes is not None:
            # The client's rate lanes (docs/kube-client.md): wait seconds grow when a lane saturates.
            families = {
                "wait_seconds": CounterMetricFamily("hami_kube_lane_wait_seconds",
                                                    "Seconds requests waited for a token of the lane",
                                                    labels=("lane",)),
                "requests": CounterMetricFamily("hami_kube_lane_requests", "Requests sent on the lane",
                                                labels=("lane",)),
                "throttled": CounterMetricFamily("hami_kube_lane_throttled",
                                                 "429 answers (server-side limits) on the lane", labels=("lane",)),
                "retries": CounterMetricFamily("hami_kube_lane_retries", "Retries after a 429 on the lane",
                                               labels=("lane",)),
            }
            for lane, values in sorted(self.lanes().items()):
                for key, fam in families.items():
                    fam.add_metric([lane], values.get(key, 0.0))
            yield from families.values()


class SchedulerMetrics:
    def __init__(self, snapshot: Callable[[], Snapshot],
                 api_counts: Callable[[], dict[tuple[str, str, str], int]],
                 *, legacy: bool = False, extra: Callable[[], dict[str, float]] | None = None,
                 lanes: Callable[[], dict[str, dict[str, float]]] | None = None, version: str = "0.1.0",
                 device_uuids: bool = False):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(UsageCollector(snapshot, legacy, device_uuids))
        self.registry.register(ApiCollector(api_counts, extra, lanes))
        self.filter_seconds = Histogram("hami_scheduler_filter_duration_seconds", "Time to answer /filter",
                                        labelnames=("result",), buckets=_LAT_BUCKETS, registry=self.registry)
        self.bind_seconds = Histogram("hami_scheduler_bind_duration_seconds", "Time to answer /bind",
                                      labelnames=("result",), buckets=_LAT_BUCKETS, registry=self.registry)
        from prometheus_client import Gauge

        build = Gauge("hami_build_info", "Build information", labelnames=("version",), registry=self.registry)
        build.labels(version).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    async def handle(self, request: web.Request) -> web.Response:
        body = self.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def split_bind(address: str, default_host: str = "0.0.0.0", flag: str = "bind address") -> tuple[str, int]:
    """`:9395` -> ("0.0.0.0", 9395); `127.0.0.1:8080` -> ("127.0.0.1", 8080); `[::1]:80` too."""
    return split_host_port(address, flag=flag, default_host=default_host)


async def serve_metrics(metrics: SchedulerMetrics, address: str, health=None, limits=None) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/metrics", metrics.handle)
    if health is not None:  # kubelet probes this plain-HTTP port (the extender is loopback only)
        health.add_routes(app)
    runner = guarded_runner(app, limits, access_log=None)  # kubelet's probes and scrapes only: small, quick
    await runner.setup()
    host, port = split_bind(address, flag="--metrics-bind-address (scheduler)")
    await GuardedSite(runner, host, port).start()
    return runner
