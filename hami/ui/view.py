"""What the UI's pages show, computed from what the API server and the monitors say. Pure.

`cluster_view(nodes, pods, events, usage, health, now)` joins four sources an operator otherwise joins
by hand: nodes' register annotations (cards, memory, cores, health), placed pods' device annotations
(who holds which slice of which card), the monitors' metrics (what each slice really uses, temperature,
power) and the scheduler's FilteringFailed events (why a GPU pod is pending, by HAMi reason code).
Nothing here does I/O; `hami.ui.role` gathers the inputs. Objects are raw API dicts, and every field
of them is tenant input: values are kept as text for the renderer to escape, never interpreted.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hami.device import codec
from hami.device.model import DeviceInfo
from hami.doctor.gather import event_fact, node_facts
from hami.doctor.tree import NodeHealth, failed_reasons, is_gpu_node, node_health

MIB = 1 << 20
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Slice:
    namespace: str
    pod: str
    container: int  # index in init + app containers, as the device annotation counts them
    mem: int  # MiB
    cores: int  # percent
    used_bytes: int | None = None  # from the monitor; None when it does not report this slice


@dataclass(frozen=True, slots=True)
class Card:
    node: str
    index: int
    uuid: str
    model: str
    mem: int  # MiB as registered (after deviceMemoryScaling)
    cores: int  # percent as registered
    slots: int  # deviceSplitCount as registered
    healthy: bool
    mode: str
    slices: tuple[Slice, ...] = ()
    temperature_c: float | None = None
    power_w: float | None = None
    # MIG: the card's compute slices (the widest placement end its profiles register) and the
    # instances placed pods hold, as (start, size, profile, "ns/pod").
    mig_slices: int = 0
    mig_instances: tuple[tuple[int, int, str, str], ...] = ()

    @property
    def mem_allocated(self) -> int:
        return sum(s.mem for s in self.slices)

    @property
    def cores_allocated(self) -> int:
        return sum(s.cores for s in self.slices)

    @property
    def used_bytes(self) -> int | None:
        seen = [s.used_bytes for s in self.slices if s.used_bytes is not None]
        return sum(seen) if seen else None


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    cards: tuple[Card, ...]
    health: NodeHealth
    mig: tuple[str, ...] = ()  # MIG instances placed pods hold: "uuid profile -> ns/pod"


@dataclass(frozen=True, slots=True)
class PendingPod:
    namespace: str
    name: str
    reasons: tuple[str, ...]  # HAMi reason codes from its FilteringFailed events; () when none yet


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    pending: tuple[PendingPod, ...]
    models: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # model -> (nodes, cards)

    @property
    def cards(self) -> list[Card]:
        return [c for n in self.nodes for c in n.cards]

    def totals(self) -> dict[str, int]:
        cards = self.cards
        measured = [s for c in cards for s in c.slices if s.used_bytes is not None]
        return {
            "nodes": len(self.nodes), "gpus": len(cards),
            "mem_registered": sum(c.mem for c in cards), "mem_allocated": sum(c.mem_allocated for c in cards),
            "cores_registered": sum(c.cores for c in cards),
            "cores_allocated": sum(c.cores_allocated for c in cards),
            "slices": sum(len(c.slices) for c in cards),
            "measured_slices": len(measured),
            "mem_allocated_measured": sum(s.mem for s in measured),
            "mem_used": sum(s.used_bytes or 0 for s in measured) // MIB,
            "pending": len(self.pending),
        }

    def pending_by_reason(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for p in self.pending:
            counts.update(p.reasons or ("(no reason yet)",))
        return dict(counts.most_common())


def _meta(obj: Mapping) -> Mapping:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _annos(obj: Mapping) -> Mapping:
    a = _meta(obj).get("annotations")
    return a if isinstance(a, Mapping) else {}


def placed_devices(pod: Mapping) -> tuple[str, list[tuple[int, codec.ContainerDevice]]]:
    """(node, [(container index, device)]) of a pod hami placed and that still holds its devices;
    ("", []) otherwise. Placed means bound to the node its `vgpu-node` names (a pending pod's own
    annotations are not trusted to mean anything)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    annos = _annos(pod)
    node = spec.get("nodeName") or ""
    if not node or annos.get(codec.VGPU_NODE_ANNOTATION) != node or status.get("phase") in TERMINAL:
        return "", []
    text = annos.get(codec.ALLOCATED_ANNOTATION) or annos.get(codec.TO_ALLOCATE_ANNOTATION)
    if not isinstance(text, str) or not text:
        return "", []
    devices = _pod_devices(text)
    return (node, list(devices)) if devices is not None else ("", [])


# The pages are rebuilt on every change while most annotations stay the same: decode each text once.
@functools.lru_cache(maxsize=1 << 16)
def _pod_devices(text: str) -> tuple[tuple[int, codec.ContainerDevice], ...] | None:
    try:
        containers = codec.decode_pod_devices(text, field=codec.ALLOCATED_ANNOTATION)
    except codec.CodecError:
        return None  # a damaged annotation shows no slice; the scheduler reports it
    return tuple((i, d) for i, devs in enumerate(containers) for d in devs)


@functools.lru_cache(maxsize=1 << 12)
def _mig_allocations(text: str) -> tuple:
    try:
        return codec.decode_mig_allocations(text)
    except codec.CodecError:
        return ()


@functools.lru_cache(maxsize=1 << 13)
def _register(text: str) -> tuple[DeviceInfo, ...]:
    try:
        return tuple(codec.decode_node_devices(text))
    except codec.CodecError:
        return ()


def _registered(node: Mapping) -> list[DeviceInfo]:
    text = _annos(node).get(codec.REGISTER_ANNOTATION)
    return list(_register(text)) if isinstance(text, str) else []


def cluster_view(nodes: Iterable[Mapping], pods: Iterable[Mapping], events: Iterable[Mapping] = (),
                 usage: Mapping[tuple[str, str, str], int] | None = None,
                 health: Mapping[str, tuple[float | None, float | None]] | None = None,
                 now: float = 0.0, gpu_resource: str = "nvidia.com/gpu",
                 lock_timeout: float = 300.0) -> ClusterView:
    """`usage`: (namespace, pod, device uuid) -> bytes used; `health`: uuid -> (temperature C, power W)."""
    usage = usage or {}
    health = health or {}
    pods = list(pods)
    slices: dict[str, list[Slice]] = defaultdict(list)  # uuid -> slices
    mig: dict[str, list[str]] = defaultdict(list)  # node -> MIG lines
    mig_held: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)  # uuid -> instances
    for pod in pods:
        node, devices = placed_devices(pod)
        if not node:
            continue
        meta = _meta(pod)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        for ctr, d in devices:
            slices[d.uuid].append(Slice(ns, name, ctr, d.usedmem, d.usedcores, usage.get((ns, name, d.uuid))))
        mig_text = _annos(pod).get(codec.MIG_ALLOCATIONS_ANNOTATION)
        if isinstance(mig_text, str) and mig_text:
            mig[node].append(f"{mig_text} -> {ns}/{name}")
            for a in _mig_allocations(mig_text):
                mig_held[a.gpu_uuid].append((a.placement.start, a.placement.size, a.profile, f"{ns}/{name}"))
    views = []
    models: dict[str, set[str]] = defaultdict(set)
    model_cards: Counter[str] = Counter()
    for node in nodes:
        facts = node_facts(dict(node), gpu_resource)
        if not is_gpu_node(facts):
            continue
        cards = []
        for d in sorted(_registered(node), key=lambda d: d.index):
            temp, power = health.get(d.id, (None, None))
            width = max((p.start + p.size for prof in d.mig_profiles for p in prof.placements), default=0)
            held = tuple(sorted(mig_held.get(d.id, ())))
            cards.append(Card(facts.name, d.index, d.id, d.type, d.devmem, d.devcore, d.count, d.health, d.mode,
                              tuple(slices.get(d.id, ())), temp, power,
                              max(width, max((a + b for a, b, _, _ in held), default=0)), held))
            models[d.type].add(facts.name)
            model_cards[d.type] += 1
        views.append(NodeView(facts.name, tuple(cards), node_health(facts, now, lock_timeout),
                              tuple(mig.get(facts.name, ()))))
    return ClusterView(tuple(sorted(views, key=lambda v: v.name)), pending_pods(pods, events, gpu_resource),
                       {m: (len(models[m]), model_cards[m]) for m in sorted(models)})


def asks_for_gpu(pod: Mapping, gpu_resource: str = "nvidia.com/gpu") -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        res = c.get("resources") if isinstance(c, Mapping) and isinstance(c.get("resources"), Mapping) else {}
        for part in ("limits", "requests"):
            if gpu_resource in (res.get(part) or {}):
                return True
    return False


def pending_pods(pods: Sequence[Mapping], events: Iterable[Mapping],
                 gpu_resource: str = "nvidia.com/gpu") -> tuple[PendingPod, ...]:
    by_pod: dict[tuple[str, str], list] = defaultdict(list)
    for ev in events:
        obj = ev.get("involvedObject") if isinstance(ev.get("involvedObject"), Mapping) else {}
        by_pod[(str(obj.get("namespace", "")), str(obj.get("name", "")))].append(event_fact(dict(ev)))
    out = []
    for pod in pods:
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        if spec.get("nodeName") or status.get("phase", "Pending") != "Pending" or not asks_for_gpu(pod, gpu_resource):
            continue
        meta = _meta(pod)
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        out.append(PendingPod(*key, tuple(sorted(failed_reasons(by_pod.get(key, []))))))
    return tuple(sorted(out, key=lambda p: (p.namespace, p.name)))


def quota_rows(quotas: Iterable[Mapping], memory_name: str = "nvidia.com/gpumem",
               cores_name: str = "nvidia.com/gpucores") -> list[tuple[str, str, str, str, str, str]]:
    """(namespace, quota, memory used, memory hard, cores used, cores hard) for quotas on GPU resources."""
    rows = []
    keys = (f"limits.{memory_name}", f"limits.{cores_name}")
    for q in quotas:
        spec_hard = (q.get("spec") or {}).get("hard") or {}
        status = q.get("status") or {}
        hard = {**spec_hard, **(status.get("hard") or {})}
        used = status.get("used") or {}
        if not any(k in hard for k in keys):
            continue
        meta = _meta(q)
        rows.append((str(meta.get("namespace", "")), str(meta.get("name", "")),
                     str(used.get(keys[0], "0")), str(hard.get(keys[0], "-")),
                     str(used.get(keys[1], "0")), str(hard.get(keys[1], "-"))))
    return sorted(rows)


# --------------------------------------------------------------------------- DRA (resource.k8s.io/v1)


@dataclass(frozen=True, slots=True)
class DraShare:
    claim: str  # namespace/name
    pods: tuple[str, ...]  # reservedFor pods
    memory_bytes: int
    cores: int


@dataclass(frozen=True, slots=True)
class DraDevice:
    node: str
    driver: str
    pool: str
    name: str
    uuid: str
    model: str
    memory_bytes: int
    cores: int
    shares: tuple[DraShare, ...] = ()

    @property
    def memory_allocated(self) -> int:
        return sum(s.memory_bytes for s in self.shares)

    @property
    def cores_allocated(self) -> int:
        return sum(s.cores for s in self.shares)


def _quantity(value, default: int = 0) -> int:
    from hami.device.request import parse_quantity

    try:
        return int(parse_quantity(value)) if value is not None else default
    except (codec.CodecError, ValueError, TypeError, OverflowError):
        return default


def _attr(attrs: Mapping, key: str) -> str:
    a = attrs.get(key) if isinstance(attrs, Mapping) else None
    if not isinstance(a, Mapping):
        return ""
    for kind in ("string", "version", "int", "bool"):
        if kind in a:
            return str(a[kind])
    return ""


def dra_devices(slices: Iterable[Mapping], claims: Iterable[Mapping]) -> tuple[DraDevice, ...]:
    """Every device the ResourceSlices publish, with the claims' allocations on it (consumed capacity;
    a whole-device allocation without consumedCapacity takes all of it)."""
    by_device: dict[tuple[str, str, str], list[DraShare]] = defaultdict(list)
    for c in claims:
        meta = _meta(c)
        status = c.get("status") if isinstance(c.get("status"), Mapping) else {}
        alloc = status.get("allocation") if isinstance(status.get("allocation"), Mapping) else {}
        results = (alloc.get("devices") or {}).get("results") if isinstance(alloc.get("devices"), Mapping) else None
        pods = tuple(str(r.get("name", "")) for r in status.get("reservedFor") or [] if isinstance(r, Mapping))
        for r in results if isinstance(results, list) else []:
            if not isinstance(r, Mapping):
                continue
            used = r.get("consumedCapacity") if isinstance(r.get("consumedCapacity"), Mapping) else None
            share = DraShare(f"{meta.get('namespace', '')}/{meta.get('name', '')}", pods,
                             _quantity((used or {}).get("memory"), -1), _quantity((used or {}).get("cores"), -1))
            by_device[(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))].append(share)
    out = []
    for s in slices:
        spec = s.get("spec") if isinstance(s.get("spec"), Mapping) else {}
        driver, node = str(spec.get("driver", "")), str(spec.get("nodeName", ""))
        pool = str((spec.get("pool") or {}).get("name", "")) if isinstance(spec.get("pool"), Mapping) else ""
        for d in spec.get("devices") or []:
            if not isinstance(d, Mapping):
                continue
            cap = d.get("capacity") if isinstance(d.get("capacity"), Mapping) else {}
            mem = _quantity((cap.get("memory") or {}).get("value")) if isinstance(cap.get("memory"), Mapping) else 0
            cores = _quantity((cap.get("cores") or {}).get("value")) if isinstance(cap.get("cores"), Mapping) else 0
            shares = tuple(DraShare(x.claim, x.pods, mem if x.memory_bytes < 0 else x.memory_bytes,
                                    cores if x.cores < 0 else x.cores)
                           for x in by_device.get((driver, pool, str(d.get("name", ""))), ()))
            attrs = d.get("attributes") or {}
            out.append(DraDevice(node, driver, pool, str(d.get("name", "")), _attr(attrs, "uuid"),
                                 _attr(attrs, "productName"), mem, cores, shares))
    return tuple(sorted(out, key=lambda d: (d.node, d.name)))
