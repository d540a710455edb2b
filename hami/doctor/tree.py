"""The debugging runbook's decision tree, as a pure function over gathered facts (no I/O).

`diagnose_pod(PodFacts) -> Diagnosis` walks the tree of ../shared/runbooks.md (seed 001):

    bind-phase=failed                      -> allocate-failed        (Allocate failed on the node)
    pending, and the request exceeds what the biggest card/node registers
                                           -> never-fits             (hami.doctor.neverfit, with the numbers)
    no HAMi event:
        scheduler not running              -> scheduler-not-running
        pod asks for no HAMi resource      -> no-hami-resource
        schedulerName is not ours          -> wrong-scheduler-name
        else                               -> no-event               (raise -v to 5)
    latest HAMi event BindingFailed:
        node lock contention               -> binding-lock-contention
        else                               -> binding-api-error
    latest FilteringFailed:
        ResourceQuotaNotFit / quota full   -> resource-quota
        NodeUnfitPod or no reason code, and a GPU node without register annotation
                                           -> node-register-missing
        ... and a GPU node whose handshake is stale -> handshake-stale
        else                               -> filtering-failed       (advice per reason code)
    latest FilteringSucceed, still Pending -> filter-succeed-pending (another plugin blocks it)
    BindingSucceed, bind-phase=allocating  -> allocating             (waiting for the node agent)
    scheduled and running                  -> not-pending

`node_health(NodeFacts, now) -> NodeHealth` is the per-node check of `hami doctor nodes`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import MappingProxyType

from hami.device import codec
from hami.device.codec import keys
from hami.device.model import DeviceInfo, NvidiaConfig
from hami.device.request import pod_requests, quantity_value
from hami.device.vendorregister import decode_one
from hami.device.vendorrequest import vendor_request
from hami.device.vendors import Vendor, VendorTable
from hami.doctor.neverfit import never_fits

HAMI_EVENT_REASONS = ("FilteringFailed", "FilteringSucceed", "BindingFailed", "BindingSucceed")
HANDSHAKE_WINDOW_S = 60.0  # hami.scheduler.cache.handshake.WINDOW_S: a Requesting older than this needs devices
_FAILED_KEY = re.compile(r"^(\d+) nodes ([A-Za-z][A-Za-z0-9_]*)\(([^)]*)\)$")
_BARE_KEYS = ("NodeInsufficientDevice", "ResourceQuotaNotFit", "NodeUnfitPod", "AllocatedCardsInsufficientRequest",
              # MetaX sGPU's own reason keys (pkg/device/metax sdevice.go)
              "CardQosPolicyMismatch", "CardUnhealthy", "CardAppClassMismatch")

# Reason code -> (what it means, what to do). Keys are HAMi's (pkg/device/common/common.go).
REASON_ADVICE: dict[str, tuple[str, str]] = {
    "NodeInsufficientDevice": ("the node has fewer GPUs than one container asks for",
                               "ask for fewer nvidia.com/gpu per container, or add nodes with more GPUs"),
    "CardInsufficientMemory": ("no card has enough free memory for the request",
                               "lower nvidia.com/gpumem (or gpumem-percentage), wait for pods to finish, "
                               "or raise deviceMemoryScaling if cards are under-used (hami tune)"),
    "CardInsufficientCore": ("no card has enough free cores (nvidia.com/gpucores)",
                             "lower nvidia.com/gpucores or wait for pods holding cores to finish"),
    "ExclusiveDeviceAllocateConflict": ("the pod wants a whole card (gpucores 100) but every card is shared, "
                                        "or a card is held exclusively",
                                        "wait for the sharing pods to finish, or schedule to another node"),
    "CardTimeSlicingExhausted": ("every card already has deviceSplitCount tasks",
                                 "raise deviceSplitCount (hami tune) or add GPUs"),
    "CardComputeUnitsExhausted": ("a card's cores are fully allocated",
                                  "lower gpucores requests or wait for pods to finish"),
    "CardTypeMismatch": ("no card matches nvidia.com/use-gputype / nouse-gputype",
                         "fix the pod's GPU type annotations or add that GPU model"),
    "CardUuidMismatch": ("no card matches nvidia.com/use-gpuuuid / nouse-gpuuuid",
                         "fix the pod's GPU UUID annotations"),
    "CardNotHealth": ("the cards are reported unhealthy by the node agent",
                      "check the node agent log and `nvidia-smi` on the node (XID errors)"),
    "CardCordoned": ("the cards are cordoned with hami.io/device-cordon",
                     "remove the UUIDs from the node's hami.io/device-cordon annotation"),
    "NumaNotFit": ("nvidia.com/numa-bind asks for cards on one NUMA node and none has enough",
                   "drop numa-bind or ask for fewer GPUs"),
    "CardNotFoundCustomFilterRule": ("a custom filter rule rejected every card", "review the device filter rules"),
    "CardMigTopologyInfeasible": ("no MIG placement fits on the card", "ask for another MIG size or free a GPU"),
    "AllocatedCardsInsufficientRequest": ("fewer fitting cards than requested",
                                          "ask for fewer GPUs or free some cards"),
    "NodeUnfitPod": ("the node's device information is stale or does not match the pod",
                     "check the node agent (register annotation, handshake), see `hami doctor nodes`"),
    "ResourceQuotaNotFit": ("the namespace's ResourceQuota for GPU memory/cores is used up",
                            "raise the quota (limits.nvidia.com/gpumem, limits.nvidia.com/gpucores) "
                            "or delete pods in the namespace"),
    "ModeNotFit": ("nvidia.com/vgpu-mode does not match the cards' mode (hami-core, mig, mps)",
                   "fix the pod's vgpu-mode annotation or the node's operatingmode"),
}


@dataclass(frozen=True, slots=True)
class EventFact:
    reason: str
    message: str
    type: str = "Normal"
    component: str = ""
    time: float = 0.0  # unix seconds of the last occurrence
    count: int = 1


@dataclass(frozen=True, slots=True)
class SchedulerFact:
    """What gathering learnt about the scheduler: alive True/False, or None when nothing told."""

    alive: bool | None
    how: str  # "healthz http://...: 200" / "no event from hami-scheduler for 10m" / "lease renewed 5s ago"


# Published by the node agent (hami.agent.hamicore.ANNOTATION): the installed version or "missing".
HAMI_CORE_ANNOTATION = keys.HAMI_CORE_ANNOTATION


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable_gpu: int = 0
    capacity_gpu: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    # Every extended resource (other vendors register through capacity and handshake on allocatable).
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QuotaFact:
    name: str
    hard: Mapping[str, int]
    used: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PodFacts:
    pod: Mapping
    events: Sequence[EventFact]
    scheduler: SchedulerFact
    nodes: Sequence[NodeFacts]
    quotas: Sequence[QuotaFact] = ()
    now: float = 0.0
    scheduler_name: str = "hami-scheduler"
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    lock_timeout: float = 300.0
    hami_namespace: str = "kube-system"  # where the chart installed HAMi (the Helm release namespace)
    vendors: VendorTable | None = None  # the other vendors the scheduler places (config/vendors.yaml)


# Labels the chart puts on its pods (deploy/helm/hami): what the fixes' kubectl commands select.
SCHEDULER_SELECTOR = "app.kubernetes.io/component=hami-scheduler"
DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/component=hami-device-plugin"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    pod: str
    leaf: str
    summary: str
    evidence: tuple[str, ...]
    fix: str
    path: tuple[str, ...]
    setup: tuple[str, ...] = ()  # what the doctor read about the installation (namespace, device config)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class NodeHealth:
    name: str
    gpu_node: bool
    register: str  # "ok (8 GPUs)", "missing", "invalid: ..."
    handshake: str  # the raw value, or "-"
    handshake_age: float | None
    lock_holder: str  # "ns/pod", "(legacy)", or "-"
    lock_age: float | None
    schedulable_gpus: int
    healthy: bool
    problems: tuple[str, ...]
    vendors: tuple[str, ...] = ()  # one line per other vendor the node registers: registration, handshake
    hami_core: str = "-"  # installed HAMi-core version, "missing", or "-" (not reported: e.g. HAMi's Go agent)
    mode: str = "-"  # hami.io/gpu-mode: device-plugin, dra, or "-" (unmarked: HAMi's Go agent, older hami)

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- small readers


def _meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def _annos(obj: Mapping) -> Mapping:
    return _meta(obj).get("annotations") or {}


def _age(now: float, ts: float | None) -> str:
    if ts is None:
        return "unknown age"
    s = max(0, int(now - ts))
    return f"{s // 3600}h{s % 3600 // 60}m{s % 60}s ago" if s >= 3600 else (
        f"{s // 60}m{s % 60}s ago" if s >= 60 else f"{s}s ago")


def hami_resources(cfg: NvidiaConfig) -> tuple[str, ...]:
    return (cfg.resource_count_name, cfg.resource_memory_name, cfg.resource_memory_percentage_name,
            cfg.resource_core_name)


def requested_hami_resources(pod: Mapping, cfg: NvidiaConfig, vendors: VendorTable | None = None) -> dict[str, str]:
    """HAMi resource names (every vendor's) the pod's containers ask for -> the first value seen."""
    names = hami_resources(cfg) + (tuple(n for v in vendors.others for n in v.resource_names) if vendors else ())
    spec = pod.get("spec") or {}
    out: dict[str, str] = {}
    for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            for k, v in (res.get(part) or {}).items():
                if k in names:
                    out.setdefault(k, str(v))
    return out


def _int(v) -> int:
    """A resource quantity as the scheduler reads it (Quantity.Value()); 0 when not one."""
    return quantity_value(v if isinstance(v, int) else str(v)) or 0


def pod_gpu_counts(pod: Mapping, cfg: NvidiaConfig) -> list[int]:
    spec = pod.get("spec") or {}
    out = []
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        v = (res.get("limits") or {}).get(cfg.resource_count_name,
                                          (res.get("requests") or {}).get(cfg.resource_count_name))
        if v is not None:
            out.append(_int(v))
    return out


def pod_quota_request(pod: Mapping, cfg: NvidiaConfig) -> dict[str, int]:
    """What the pod adds to `limits.<gpumem|gpucores>` of a quota: per container nums x value."""
    spec = pod.get("spec") or {}
    mem = cores = 0
    for c in spec.get("containers") or []:
        lim = (c.get("resources") or {}).get("limits") or {}
        n = _int(lim.get(cfg.resource_count_name, 0))
        mem += n * _int(lim.get(cfg.resource_memory_name, 0))
        cores += n * _int(lim.get(cfg.resource_core_name, 0))
    return {f"limits.{cfg.resource_memory_name}": mem, f"limits.{cfg.resource_core_name}": cores}


def asked_vendors(pod: Mapping, vendors: VendorTable | None) -> list[tuple[Vendor, int]]:
    """The other vendors the pod asks for, with the largest count one container asks."""
    spec = pod.get("spec") or {}
    ctrs = [c for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
            if isinstance(c, Mapping)]
    out = []
    for v in (vendors.others if vendors is not None else ()):
        nums = [r.nums for r in (vendor_request(c, v) for c in ctrs) if r is not None]
        if nums:
            out.append((v, max(nums)))
    return out


def vendor_advice(key: str, v: Vendor) -> tuple[str, str]:
    """REASON_ADVICE in the words of another vendor: its resources, annotations and rules (a hook's own
    texts in OWN_ADVICE first)."""
    own = OWN_ADVICE.get(v.hook)
    said = own(key, v) if own is not None else None
    if said is not None:
        return said
    mem, core, count = v.memory_resource or "memory", v.core_resource or "cores", v.count_resource
    if key == "NodeInsufficientDevice":
        return (f"the node has fewer {v.name} devices than one container asks for",
                f"ask for fewer {count} per container, or add nodes with more {v.name} devices")
    if key == "CardInsufficientMemory":
        return f"no {v.name} card has enough free memory", f"lower {mem} or wait for pods to finish"
    if key in ("CardInsufficientCore", "CardComputeUnitsExhausted", "ExclusiveDeviceAllocateConflict"):
        default = (f"; a container without {core} asks for {v.default_cores} (a whole card)"
                   if v.default_cores else "")
        return (f"no {v.name} card has the cores asked for, or the pod wants a whole card that is shared{default}",
                f"set {core} lower to share a card, or wait for the pods holding cores to finish")
    if key == "CardUuidMismatch":
        return (f"no {v.name} card matches {v.use_uuid_key} / {v.nouse_uuid_key}",
                "fix the pod's UUID annotations (exact device ids, comma separated)")
    if key == "CardTypeMismatch":
        return (f"no {v.name} card matches {v.use_type_key or 'the requested type'} / {v.nouse_type_key or '-'}",
                "fix the pod's type annotations")
    if key == "CardTimeSlicingExhausted":
        return (f"every {v.name} card already runs as many tasks as its device plugin allows",
                f"free cards, add {v.name} nodes, or raise the split count of the {v.family} device plugin")
    return REASON_ADVICE.get(key, ("unknown reason code", "raise -v to 4 and read the filter log"))


def _ascend_advice(key: str, v: Vendor) -> tuple[str, str] | None:
    if key == "CardInsufficientMemory":
        sizes = ", ".join(f"{t.name}={t.memory}" for t in v.templates)
        return (f"no {v.name} card has the free memory of the vNPU template the request rounds up to "
                f"(templates {sizes}; more than the largest is a whole card, {v.memory_allocatable} MiB)",
                f"ask for a smaller template with {v.memory_resource or 'memory'}, or wait for pods on the cards "
                "to finish")
    if key == "ModeNotFit":
        return (f"the pod's huawei.com/vnpu-mode does not match the {v.name} node: hami-core needs a node "
                "annotated hami-vnpu-core: \"true\" (or vnpus.hamiVnpuCore), template a node without it",
                "pick the mode the nodes run (or drop the annotation and the core resource for templates), or "
                "annotate the node hami-vnpu-core as its device plugin runs")
    return None


def _cambricon_advice(key: str, v: Vendor) -> tuple[str, str] | None:
    if key == "CardInsufficientMemory":
        mem = v.memory_resource or "memory"
        return (f"no MLU has enough free memory ({mem} counts 256 MiB units)",
                f"lower {mem} (1 = 256 MiB) or wait for pods to finish")
    return None


def _neuron_advice(key: str, v: Vendor) -> tuple[str, str] | None:
    if key == "NumaNotFit":
        return (f"no free group of {v.name} devices next to each other: Inferentia nodes take any run of "
                "free devices, others only 1, 4, 8 or 16 aligned ones",
                f"ask for 1, 4, 8 or 16 {v.count_resource} (or NeuronCores within one device), or wait for "
                "neighbours to free")
    return None


def _kunlunxin_advice(key: str, v: Vendor) -> tuple[str, str] | None:
    if key == "NumaNotFit":
        return (f"the {v.name} cards free on the board do not form a group the XPU links allow (one wing, "
                "linked pairs, a linked group of 4, or all 8)" + ("; vXPU cards only take slices of the size "
                                                                  "they already run" if v.memory_resource else ""),
                f"ask for 1, 2, 4 or 8 {v.count_resource}, or wait for cards in the same wing to free")
    return None


def _metax_advice(key: str, v: Vendor) -> tuple[str, str] | None:
    if key == "CardQosPolicyMismatch":
        return ("every used MetaX card runs another QoS policy than the pod's metax-tech.com/sgpu-qos-policy",
                "use the QoS policy of the shared cards, take a whole card (vcore 100), or wait for a card "
                "to empty")
    if key == "CardUnhealthy":
        return ("the MetaX device plugin reports the cards unhealthy (metax-tech.com/node-gpu-devices)",
                "check the MetaX sGPU device plugin and the cards on that node")
    if key == "CardAppClassMismatch":
        return ("online/offline pods and ordinary pods do not share a MetaX card",
                "drop or change metax-tech.com/sgpu-app-class, or wait for a card without the other class")
    return None


# A hook's own doctor texts for a reason key: (what happened, what to do), or None for the shared text.
OWN_ADVICE = MappingProxyType({
    "ascend": _ascend_advice,
    "cambricon": _cambricon_advice,
    "awsneuron": _neuron_advice,
    "kunlunxin": _kunlunxin_advice,
    "metax": _metax_advice,
})


def failed_reasons(events: Sequence[EventFact]) -> dict[str, list[str]]:
    """Reason key -> nodes, from FilteringFailed texts `2 nodes Key(n1,n2)` and bare keys."""
    out: dict[str, list[str]] = {}
    for e in events:
        if e.reason != "FilteringFailed":
            continue
        m = _FAILED_KEY.match(e.message.strip())
        if m:
            out.setdefault(m.group(2), []).extend(n for n in m.group(3).split(",") if n)
            continue
        for key in (*REASON_ADVICE, *_BARE_KEYS):
            if key in e.message and key not in out:
                out[key] = []
    return out


def handshake_state(node: NodeFacts, now: float) -> tuple[str, float | None, bool]:
    """(raw value, age seconds, stale?) of `hami.io/node-handshake`, judged as the scheduler does."""
    value = node.annotations.get(codec.HANDSHAKE_ANNOTATION)
    if value is None:
        return "-", None, False
    hs = codec.decode_handshake(value)
    age = None if hs.timestamp is None else now - hs.timestamp
    stale = (hs.state == codec.HANDSHAKE_DELETED) or (
        hs.state == codec.HANDSHAKE_REQUESTING and age is not None and age > HANDSHAKE_WINDOW_S
        and node.allocatable_gpu <= 0)
    return value, age, stale


def register_state(node: NodeFacts) -> tuple[str, tuple[DeviceInfo, ...] | None]:
    value = node.annotations.get(codec.REGISTER_ANNOTATION)
    if value is None:
        return "missing", None
    return _register_state(value) if isinstance(value, str) else _register_state.__wrapped__(value)


# The UI judges every node's health at each rebuild of its cluster view, while most registrations
# stay the same: each text is decoded once.
@functools.lru_cache(maxsize=1 << 13)
def _register_state(value: str) -> tuple[str, tuple[DeviceInfo, ...] | None]:
    try:
        devices = tuple(codec.decode_node_devices(value))
    except codec.CodecError as exc:
        return f"invalid: {exc}", None
    return f"ok ({len(devices)} GPUs)", devices


@dataclass(frozen=True, slots=True)
class VendorState:
    """One other vendor on one node: its registration and handshake, judged as the scheduler does."""

    vendor: Vendor
    register: str  # "ok (2 devices)" or "invalid: <key>: <why>"
    devices: tuple[DeviceInfo, ...] | None  # None when the registration does not decode
    handshake: str = "-"
    handshake_age: float | None = None
    stale: bool = False

    def line(self, now: float) -> str:
        v = self.vendor
        where = v.register_key or f"capacity {v.core_resource}"
        text = f"{v.name}: register {self.register} ({where})"
        if v.handshake_key:
            age = "" if self.handshake_age is None else f", {int(self.handshake_age)}s"
            text += f"; handshake {v.handshake_key}={self.handshake}{age}" + (" STALE" if self.stale else "")
        return text


def vendor_states(node: NodeFacts, now: float, vendors: VendorTable | None) -> list[VendorState]:
    """The other vendors this node registers (an annotation or capacity of theirs is present)."""
    out: list[VendorState] = []
    for v in (vendors.others if vendors is not None else ()):
        try:
            devices = decode_one(v, node.name, node.annotations, node.capacity)
        except codec.CodecError as exc:
            out.append(VendorState(v, f"invalid: {exc}", None))
            continue
        if not devices:
            continue
        hs, age, stale = "-", None, False
        if v.handshake_key and v.handshake_key in node.annotations:
            hs = node.annotations[v.handshake_key]
            parsed = codec.decode_handshake(hs)
            age = None if parsed.timestamp is None else now - parsed.timestamp
            alloc = _int(node.allocatable.get(v.count_resource, 0))
            stale = parsed.state == codec.HANDSHAKE_DELETED or (
                parsed.state == codec.HANDSHAKE_REQUESTING and age is not None and age > HANDSHAKE_WINDOW_S
                and alloc <= 0)
        out.append(VendorState(v, f"ok ({len(devices)} devices)", devices, hs, age, stale))
    return out


def is_gpu_node(node: NodeFacts) -> bool:
    return (codec.REGISTER_ANNOTATION in node.annotations or codec.HANDSHAKE_ANNOTATION in node.annotations
            or node.capacity_gpu > 0 or node.allocatable_gpu > 0
            or any(k.startswith("nvidia.com/") or k == "gpu" for k in node.labels))


def node_health(node: NodeFacts, now: float, lock_timeout: float = 300.0,
                vendors: VendorTable | None = None) -> NodeHealth:
    vstates = vendor_states(node, now, vendors)
    mode = node.labels.get(codec.GPU_MODE_LABEL) or "-"
    dra = mode == "dra"
    gpu = is_gpu_node(node) or bool(vstates) or dra
    problems = []
    register, devices = register_state(node)
    if dra:
        if devices is not None or node.allocatable_gpu > 0:
            problems.append(
                f"both modes serve this node: it is marked {codec.GPU_MODE_LABEL}=dra (hami --role dra) but a device "
                f"plugin {'registered GPUs' if devices is not None else 'advertises nvidia.com/gpu'}; one GPU "
                f"would be handed out twice. Stop the device plugin there, then "
                f"`kubectl annotate node {node.name} {codec.REGISTER_ANNOTATION}-`")
        elif register == "missing":
            register = "- (dra: ResourceSlices)"
    elif gpu and devices is None and not vstates:
        problems.append(f"register annotation {register}: the node agent has not registered GPUs")
    elif devices is None and register == "missing" and vstates:
        register = "- (" + ", ".join(s.vendor.name for s in vstates) + ")"
    for s in vstates:
        if s.devices is None:
            problems.append(f"{s.register}: the {s.vendor.name} device plugin's registration does not decode, "
                            "so the scheduler treats the node as unregistered; fix or restart that plugin")
        elif s.stale:
            problems.append(f"{s.vendor.handshake_key} stale ({s.handshake}, allocatable "
                            f"{s.vendor.count_resource}={node.allocatable.get(s.vendor.count_resource, 0)}): "
                            f"the {s.vendor.name} device plugin is not reporting")
    hs_value, hs_age, stale = handshake_state(node, now)
    if stale:
        problems.append(f"handshake stale ({hs_value}, {_age(now, now - hs_age if hs_age is not None else None)}, "
                        f"allocatable {node.allocatable_gpu}): the device plugin is not reporting")
    lock = node.annotations.get(codec.NODE_LOCK_ANNOTATION)
    holder, lock_age = "-", None
    if lock:
        try:
            held = codec.decode_node_lock(lock)
            holder = "(legacy)" if held.legacy else f"{held.namespace}/{held.name}"
            lock_age = now - held.timestamp
            if lock_age > lock_timeout:
                problems.append(f"node lock held by {holder} for {int(lock_age)}s (> {int(lock_timeout)}s)")
        except codec.CodecError as exc:
            holder = f"(invalid: {exc})"
            problems.append(f"node lock annotation unreadable: {exc}")
    schedulable = 0
    if devices is not None and not stale:
        schedulable = sum(1 for d in devices if d.health)
        sick = len(devices) - schedulable
        if sick:
            problems.append(f"{sick} GPU(s) unhealthy")
    schedulable += sum(sum(1 for d in s.devices if d.health) for s in vstates if s.devices and not s.stale)
    hami_core = node.annotations.get(HAMI_CORE_ANNOTATION) or "-"
    if gpu and hami_core == "missing":
        problems.append("HAMi-core (libvgpu.so) is not installed on the host: Allocate refuses GPU pods; "
                        "check the node agent's --vgpu-lib and --hook-path and its log")
    return NodeHealth(node.name, gpu, register if gpu or devices is not None else "-", hs_value, hs_age,
                      holder, lock_age, schedulable, not (gpu and problems), tuple(problems),
                      tuple(s.line(now) for s in vstates), hami_core, mode)


# --------------------------------------------------------------------------- the tree


def _hami_events(f: PodFacts) -> list[EventFact]:
    evs = [e for e in f.events if e.reason in HAMI_EVENT_REASONS]
    return sorted(evs, key=lambda e: e.time)


def _ev(e: EventFact, now: float) -> str:
    return f"event {e.type} {e.reason} ({_age(now, e.time)}, x{e.count}): {e.message}"


def diagnose_pod(f: PodFacts) -> Diagnosis:
    """The runbook's tree (module docstring): the first branch that explains the pod answers."""
    pod = f.pod
    meta = _meta(pod)
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    annos = _annos(pod)
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    path: list[str] = [f"pod phase {phase}"]
    evidence: list[str] = []

    def done(leaf: str, summary: str, fix: str) -> Diagnosis:
        return Diagnosis(ref, leaf, summary, tuple(evidence), fix, tuple(path))

    bind_phase = annos.get(codec.BIND_PHASE_ANNOTATION)
    node_name = spec.get("nodeName") or annos.get(codec.VGPU_NODE_ANNOTATION, "")
    if bind_phase == "failed":
        return _allocate_failed(f, annos, node_name, path, evidence, done)
    if phase == "Pending" and not spec.get("nodeName"):
        impossible = _never_fits(f, path, evidence, done)
        if impossible is not None:
            return impossible
    hami = _hami_events(f)
    if phase != "Pending" and not hami:
        return done("not-pending", f"the pod is {phase}, not Pending", "nothing to do")
    if not hami:
        return _no_hami_event(f, path, evidence, done)
    last = hami[-1]
    evidence.append(_ev(last, f.now))
    path.append(f"latest HAMi event {last.reason}")
    if last.reason == "BindingFailed":
        return _binding_failed(f, last, node_name, evidence, done)
    if last.reason == "FilteringFailed":
        return _filtering_failed(f, hami, path, evidence, done)
    if last.reason == "FilteringSucceed" and phase == "Pending" and not spec.get("nodeName"):
        return _filter_succeeded_pending(f, evidence, done)
    if bind_phase == "allocating" and phase == "Pending":
        evidence.append(f"annotation {codec.BIND_PHASE_ANNOTATION}=allocating on {node_name}")
        return done("allocating", f"bound to {node_name}, waiting for the node agent's Allocate",
                    f"check the node agent on {node_name} is running and registered with kubelet")
    return done("not-pending", f"the pod is {phase}", "nothing to do")


def _allocate_failed(f: PodFacts, annos: Mapping, node_name: str, path: list, evidence: list, done) -> Diagnosis:
    """bind-phase=failed: the device plugin's Allocate failed on the node."""
    path.append("bind-phase=failed")
    evidence.append(f"annotation {codec.BIND_PHASE_ANNOTATION}=failed on node {node_name or '?'}")
    if codec.BIND_TIME_ANNOTATION in annos:
        evidence.append(f"annotation {codec.BIND_TIME_ANNOTATION}={annos[codec.BIND_TIME_ANNOTATION]}")
    evidence.extend(_ev(e, f.now) for e in f.events if e.type == "Warning" and e.reason not in HAMI_EVENT_REASONS)
    return done("allocate-failed", f"the device plugin's Allocate failed on node {node_name or '?'}",
                f"read the node agent log on {node_name or 'the node'} (hami --role node-agent -v=4) for the "
                "Allocate error; delete the pod so its controller recreates it")


def _never_fits(f: PodFacts, path: list, evidence: list, done) -> Diagnosis | None:
    """A pending pod whose request exceeds what the biggest card or node registers (hami.doctor.neverfit)."""
    impossible = never_fits(pod_requests(f.pod, f.nvidia),
                            {n.name: register_state(n)[1] or () for n in f.nodes if is_gpu_node(n)})
    if impossible is None:
        return None
    path.append(f"request never fits ({impossible.what})")
    seen: set[str] = set()  # the scheduler's own words: each distinct filter message, newest first
    for e in reversed(_hami_events(f)):
        if e.reason == "FilteringFailed" and e.message not in seen and len(seen) < 3:
            seen.add(e.message)
            evidence.append(_ev(e, f.now))
    return done("never-fits", impossible.line, impossible.fix)


def _no_hami_event(f: PodFacts, path: list, evidence: list, done) -> Diagnosis:
    """No HAMi event yet: the scheduler is down, the pod asks for nothing HAMi serves, or not HAMi's name."""
    alive = "running" if f.scheduler.alive else "not running" if f.scheduler.alive is False else "unknown"
    path.append("no HAMi event")
    evidence.append(f"scheduler: {alive} ({f.scheduler.how})")
    if f.scheduler.alive is False:
        return done("scheduler-not-running", "the HAMi scheduler is not running",
                    f"restart it: kubectl -n {f.hami_namespace} rollout restart deployment/hami-scheduler, "
                    f"then read its log (kubectl -n {f.hami_namespace} logs -l {SCHEDULER_SELECTOR} "
                    "-c hami-scheduler)")
    path.append("scheduler running" if f.scheduler.alive else "scheduler state unknown")
    requested = requested_hami_resources(f.pod, f.nvidia, f.vendors)
    if not requested:
        evidence.append("containers ask for none of " + ", ".join(hami_resources(f.nvidia)))
        return done("no-hami-resource", "the pod asks for no HAMi resource, so HAMi does not schedule it",
                    f"add resources.limits {f.nvidia.resource_count_name} (and {f.nvidia.resource_memory_name} "
                    "or gpumem-percentage, gpucores) to the container")
    path.append("asks for " + ", ".join(f"{k}={v}" for k, v in requested.items()))
    got = (f.pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    evidence.append(f"spec.schedulerName={got}")
    if got != f.scheduler_name:
        return done("wrong-scheduler-name", f"schedulerName is {got!r}, HAMi's is {f.scheduler_name!r}",
                    f"set spec.schedulerName: {f.scheduler_name} (the webhook does this for pods that ask "
                    "for HAMi resources: check the MutatingWebhookConfiguration is installed)")
    path.append("schedulerName ok")
    return done("no-event", "no HAMi event although the pod should be scheduled by HAMi",
                "raise the scheduler's log level to -v=5 and follow the pod in its log")


def _binding_failed(f: PodFacts, last: EventFact, node_name: str, evidence: list, done) -> Diagnosis:
    """The latest HAMi event is BindingFailed: the node lock was held, or the API server refused a write."""
    if "lock" in last.message and ("contention" in last.message or "locked within" in last.message):
        node = next((n for n in f.nodes if n.name == node_name), None)
        if node is not None:
            h = node_health(node, f.now, f.lock_timeout)
            evidence.append(f"node {node.name} lock holder {h.lock_holder}, "
                            f"{_age(f.now, f.now - h.lock_age if h.lock_age is not None else None)}")
        return done("binding-lock-contention", "binding failed: another pod holds the node lock",
                    "usually transient: kube-scheduler retries. If the holder is gone or stuck, the lock "
                    f"expires after nodeLockExpire ({int(f.lock_timeout)}s); lower it if it blocks too long")
    return done("binding-api-error", "binding failed: the API server refused a write",
                "check the API server and etcd health, and that the scheduler's ServiceAccount may patch "
                "nodes and pods and create pods/binding (kubectl auth can-i patch nodes --as ...)")


def _filtering_failed(f: PodFacts, hami: list[EventFact], path: list, evidence: list, done) -> Diagnosis:
    """The latest HAMi event is FilteringFailed: a quota, another vendor, NVIDIA's registration, or the reasons."""
    pod, last = f.pod, hami[-1]
    failed_events = [e for e in hami if e.reason == "FilteringFailed"]
    reasons = failed_reasons(failed_events)
    seen_msgs = {last.message}
    for e in reversed(failed_events):
        if e.message not in seen_msgs:
            seen_msgs.add(e.message)
            evidence.append(_ev(e, f.now))
    path.append("reasons " + (", ".join(f"{k}({','.join(v)})" for k, v in sorted(reasons.items())) or "none given"))
    quota = _quota_full(f, reasons, evidence, done)
    if quota is not None:
        return quota
    asked = asked_vendors(pod, f.vendors)
    if asked:
        return _diagnose_vendor_filter(f, asked, reasons, path, evidence, done,
                                       nvidia=bool(pod_gpu_counts(pod, f.nvidia)))
    gpu_nodes = [n for n in f.nodes if is_gpu_node(n)]
    if not set(reasons) - {"NodeUnfitPod"}:
        nv = _nvidia_registration(f, gpu_nodes, path, evidence, done)
        if nv is not None:
            return nv
        counts = pod_gpu_counts(pod, f.nvidia)
        biggest = max((len(register_state(n)[1] or ()) for n in gpu_nodes), default=0)
        if counts and max(counts) > biggest:
            reasons.setdefault("NodeInsufficientDevice", [])
            evidence.append(f"a container asks for {max(counts)} GPUs, the largest node has {biggest}")
    advice = []
    for key in sorted(reasons):
        meaning, todo = REASON_ADVICE.get(key, ("unknown reason code", "raise -v to 4 and read the filter log"))
        advice.append(f"{key}: {meaning} -> {todo}")
    if not advice:
        advice.append("no reason code in the events: raise -v to 4 and read the per-node filter log")
    return done("filtering-failed", "no node fits the pod's GPU request", "; ".join(advice))


def _quota_full(f: PodFacts, reasons: Mapping, evidence: list, done) -> Diagnosis | None:
    """ResourceQuotaNotFit, or a ResourceQuota in the namespace the pod's request would go over."""
    over = []
    want = pod_quota_request(f.pod, f.nvidia)
    for q in f.quotas:
        for key, add in want.items():
            if add and key in q.hard and q.used.get(key, 0) + add > q.hard[key]:
                over.append(f"ResourceQuota {q.name}: {key} used {q.used.get(key, 0)} + {add} > hard {q.hard[key]}")
    if "ResourceQuotaNotFit" not in reasons and not over:
        return None
    evidence.extend(over or [f"ResourceQuota {q.name} hard {dict(q.hard)} used {dict(q.used)}" for q in f.quotas])
    return done("resource-quota", "a ResourceQuota in the namespace leaves no room for the pod",
                REASON_ADVICE["ResourceQuotaNotFit"][1])


def _filter_succeeded_pending(f: PodFacts, evidence: list, done) -> Diagnosis:
    """HAMi found a node but the pod is still Pending: another plugin rejects it, or binding never happened."""
    for c in (f.pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            evidence.append(f"condition PodScheduled=False {c.get('reason', '')}: {c.get('message', '')}")
    evidence.extend(_ev(e, f.now) for e in f.events if e.reason == "FailedScheduling")
    return done("filter-succeed-pending", "HAMi found a node but the pod is still Pending",
                "another scheduler plugin (affinity, taints, volumes, ports) rejects it or binding never "
                "happened: read kube-scheduler's events/log for the pod at -v=5")


def _nvidia_registration(f: PodFacts, gpu_nodes: list, path: list, evidence: list, done) -> Diagnosis | None:
    """NVIDIA's side of a FilteringFailed: no GPU node registered, or its handshake stale."""
    missing = [n.name for n in gpu_nodes if register_state(n)[1] is None]
    stale = [n for n in gpu_nodes if handshake_state(n, f.now)[2]]
    if missing or not gpu_nodes:
        path.append("node register annotation missing")
        evidence.append(f"nodes without {codec.REGISTER_ANNOTATION}: "
                        + (", ".join(missing) if missing else "(no GPU node at all)"))
        return done("node-register-missing", "the device plugin has not registered GPUs on the node(s)",
                    "check the node agent (device plugin) pod on those nodes is running: "
                    f"kubectl -n {f.hami_namespace} get pods -l {DEVICE_PLUGIN_SELECTOR} -o wide; "
                    "read its log")
    if stale:
        path.append("handshake stale")
        for n in stale:
            value, age, _ = handshake_state(n, f.now)
            evidence.append(f"node {n.name} {codec.HANDSHAKE_ANNOTATION}={value} "
                            f"({int(age or 0)}s old), allocatable {f.nvidia.resource_count_name}={n.allocatable_gpu}")
        return done("handshake-stale", "the node's handshake is stale: the device plugin stopped reporting",
                    "check the device plugin can reach the API server and kubelet (its log, network "
                    "policy, kubelet device-plugins socket); restart it on that node")
    return None


def _diagnose_vendor_filter(f: PodFacts, asked, reasons: dict, path: list, evidence: list, done,
                            nvidia: bool = False) -> Diagnosis:
    """FilteringFailed for a pod asking for another vendor: is the vendor registered anywhere,
    readable, handshaking; then each reason code in that vendor's words, with its fix. A pod that
    asks for NVIDIA too is checked on NVIDIA's side as well, and needs one node with all of them."""
    states = {n.name: vendor_states(n, f.now, f.vendors) for n in f.nodes}
    for v, nums in asked:
        mine = [(name, s) for name, ss in states.items() for s in ss if s.vendor.name == v.name]
        ok = [(name, s) for name, s in mine if s.devices is not None and not s.stale]
        bad = [(name, s) for name, s in mine if s.devices is None]
        stale = [(name, s) for name, s in mine if s.stale]
        where = v.register_key or f"node capacity {v.core_resource}"
        if not ok:
            evidence.extend(f"node {name}: {s.register}" for name, s in bad)
            evidence.extend(f"node {name}: {s.line(f.now)}" for name, s in stale)
            if bad:
                path.append(f"{v.name} registration unreadable")
                return done("vendor-register-invalid",
                            f"the {v.name} registration on {', '.join(n for n, _ in bad)} does not decode, so "
                            "the scheduler treats those nodes as unregistered",
                            f"fix or restart the {v.family} device plugin there: it must write {where} in HAMi's "
                            "format (see docs/vendors.md)")
            if stale:
                path.append(f"{v.name} handshake stale")
                return done("handshake-stale", f"the {v.name} handshake is stale: its device plugin stopped reporting",
                            f"check the {v.family} device plugin on {', '.join(n for n, _ in stale)} (its log, "
                            f"kubelet socket); {v.handshake_key} is re-requested once it reports again")
            path.append(f"no node registers {v.name}")
            evidence.append(f"no node has {where}")
            return done("vendor-not-registered", f"no node registers {v.name} devices",
                        f"run the {v.family} vendor's HAMi device plugin on the {v.name} nodes: it writes {where}"
                        " (hami's own node agent is NVIDIA-only)")
        biggest = max(len(s.devices or ()) for _, s in ok)
        if nums > biggest:
            reasons.setdefault("NodeInsufficientDevice", [])
            evidence.append(f"a container asks for {nums} {v.name}, the largest {v.name} node has {biggest}")
        path.append(f"{v.name} registered on {len(ok)} node(s)")
    advice = []
    v = asked[0][0]
    names = [v.name for v, _ in asked]
    if nvidia:
        # NVIDIA nodes: what the NVIDIA plugin writes, or a GPU node no other vendor registers.
        gpu_nodes = [n for n in f.nodes if is_gpu_node(n) and (
            codec.REGISTER_ANNOTATION in n.annotations or codec.HANDSHAKE_ANNOTATION in n.annotations
            or n.capacity_gpu or n.allocatable_gpu or not states.get(n.name))]
        nv = _nvidia_registration(f, gpu_nodes, path, evidence, done)
        if nv is not None:
            return nv
        names.insert(0, "NVIDIA")
        holders = {n.name for n in gpu_nodes if register_state(n)[1]}
        for other, _ in asked:
            holders &= {name for name, ss in states.items() if any(s.vendor.name == other.name and s.devices
                                                                 for s in ss)}
        path.append("nodes with " + " and ".join(names) + f": {len(holders)}")
        if not holders:
            evidence.append("no node registers " + " and ".join(names) + " together")
            return done("vendor-mix-no-node", "the pod asks for " + " and ".join(names) + " and no node has all "
                        "of them (HAMi places every device of a pod on one node)",
                        "split the pod so each part asks for one vendor, or add a node that runs the device "
                        "plugins of all of them")
    for key in sorted(reasons):
        meaning, todo = vendor_advice(key, v)
        if nvidia and key in REASON_ADVICE:
            meaning = f"{meaning} (or, for the NVIDIA cards: {REASON_ADVICE[key][0]})"
        advice.append(f"{key}: {meaning} -> {todo}")
    if not advice:
        advice.append("no reason code in the events: raise -v to 4 and read the per-node filter log")
    return done("filtering-failed", "no node fits the pod's " + " and ".join(names) + " request", "; ".join(advice))


# --------------------------------------------------------------------------- rendering


def render_diagnosis(d: Diagnosis) -> str:
    lines = [f"pod {d.pod}: {d.leaf}", f"  {d.summary}", "  path: " + " -> ".join(d.path)]
    if d.evidence:
        lines.append("  evidence:")
        lines.extend(f"    - {e}" for e in d.evidence)
    lines.append(f"  fix: {d.fix}")
    lines.extend(f"  setup: {s}" for s in d.setup)
    return "\n".join(lines) + "\n"


def render_nodes(rows: Sequence[NodeHealth]) -> str:
    def age(v: float | None) -> str:
        return "-" if v is None else f"{int(v)}s"

    header = ("NODE", "GPU", "MODE", "REGISTER", "HAMI-CORE", "HANDSHAKE", "HS-AGE", "LOCK-HOLDER", "LOCK-AGE",
              "SCHEDULABLE", "STATUS")
    table = [header]
    for r in rows:
        hs = r.handshake if len(r.handshake) <= 32 else r.handshake[:29] + "..."
        table.append((r.name, "yes" if r.gpu_node else "no", r.mode, r.register, r.hami_core, hs, age(r.handshake_age),
                      r.lock_holder, age(r.lock_age), str(r.schedulable_gpus), "ok" if r.healthy else "UNHEALTHY"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    for r in rows:
        for v in r.vendors:
            out.append(f"{r.name}: {v}")
        for p in r.problems:
            out.append(f"{r.name}: {p}")
    seen = {r.handshake.split("_", 1)[0].split(" ", 1)[0] for r in rows}
    legend = [f"  {state + '_<time>':<17} {text}" for state, text in HANDSHAKE_LEGEND if state in seen]
    if legend:
        out += ["", "HANDSHAKE (hami.io/node-handshake, HS-AGE its age):", *legend]
    return "\n".join(out) + "\n"


# What each hami.io/node-handshake value means (../shared/spec/scheduler.md §2.1), for the table's legend.
HANDSHAKE_LEGEND = (
    ("Requesting", "the scheduler's health probe, written at <time>; the node is healthy while it is under "
                   "60 s old, or the node still advertises nvidia.com/gpu"),
    ("Reported", "written by a HAMi device plugin of v2.6/v2.7 on each registration; the scheduler answers "
                 "with Requesting_"),
    ("Deleted", "the scheduler dropped the node's GPUs at <time> (old protocol); it probes again"),
)
