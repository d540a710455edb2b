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
from typing import NamedTuple

from hami.device import codec
from hami.device.model import DeviceInfo
from hami.doctor.gather import event_fact, node_facts
from hami.doctor.tree import NodeFacts, NodeHealth, failed_reasons, is_gpu_node, node_health

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


class PodPart(NamedTuple):
    """What the cluster view reads of one pod: the node it is placed on ("" when not placed), its
    name, the devices it holds as (container index, device), its MIG allocations text ("" when none),
    and whether it may be a pending GPU pod (pending_pods judges those only)."""

    node: str
    namespace: str
    name: str
    devices: tuple[tuple[int, codec.ContainerDevice], ...]
    mig: str
    waiting: bool = False


_NOT_PLACED = PodPart("", "", "", (), "")


def _waiting(pod: Mapping) -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    return not spec.get("nodeName") and status.get("phase", "Pending") == "Pending"


def pod_part(pod: Mapping) -> PodPart:
    node, devices = placed_devices(pod)
    if not node:
        return PodPart("", "", "", (), "", True) if _waiting(pod) else _NOT_PLACED
    meta = _meta(pod)
    mig = _annos(pod).get(codec.MIG_ALLOCATIONS_ANNOTATION)
    return PodPart(node, str(meta.get("namespace", "")), str(meta.get("name", "")), tuple(devices),
                   mig if isinstance(mig, str) else "")


class NodePart(NamedTuple):
    """What the cluster view reads of one node: its facts and its registered cards by index."""

    facts: NodeFacts
    devices: tuple[DeviceInfo, ...]


class ViewMemo:
    """What one cluster view's build read, for the next build to reuse (hami.ui.role keeps one): each
    pod's and node's reading, keyed by the object itself (an informer replaces an object on every
    change and never edits one, so the same object reads the same), and each node's cards, keyed by
    what they are built from (the node's reading, the slices on each card, their measured use, each
    card's temperature and power and MIG instances). A rebuild after a change reads the changed
    objects and builds the changed nodes' cards; the rest is looked up."""

    def __init__(self) -> None:
        self._pods: dict[int, tuple[Mapping, PodPart]] = {}
        self._nodes: dict[int, tuple[Mapping, NodePart]] = {}
        self._cards: dict[str, tuple[tuple, tuple[Card, ...]]] = {}
        self.reads = 0  # pod and node objects read (not found in the memo), for tests and diagnostics
        self.card_builds = 0  # nodes whose cards were built (not found in the memo)

    def pod_parts(self, pods: Iterable[Mapping]) -> list[PodPart]:
        old, new, out = self._pods, {}, []
        for pod in pods:
            hit = old.get(id(pod))
            if hit is None or hit[0] is not pod:
                hit = (pod, pod_part(pod))
                self.reads += 1
            new[id(pod)] = hit
            out.append(hit[1])
        self._pods = new  # the objects gone are let go
        return out

    def node_parts(self, nodes: Iterable[Mapping], gpu_resource: str) -> list[NodePart]:
        old, new, out = self._nodes, {}, []
        for node in nodes:
            hit = old.get(id(node))
            if hit is None or hit[0] is not node:
                hit = (node, NodePart(node_facts(dict(node), gpu_resource),
                                      tuple(sorted(_registered(node), key=lambda d: d.index))))
                self.reads += 1
            new[id(node)] = hit
            out.append(hit[1])
        self._nodes = new
        return out


def cluster_view(nodes: Iterable[Mapping], pods: Iterable[Mapping], events: Iterable[Mapping] = (),
                 usage: Mapping[tuple[str, str, str], int] | None = None,
                 health: Mapping[str, tuple[float | None, float | None]] | None = None,
                 now: float = 0.0, gpu_resource: str = "nvidia.com/gpu",
                 lock_timeout: float = 300.0, memo: ViewMemo | None = None) -> ClusterView:
    """`usage`: (namespace, pod, device uuid) -> bytes used; `health`: uuid -> (temperature C, power W);
    `memo`: the last build's readings to reuse (None: every object is read)."""
    usage = usage or {}
    health = health or {}
    memo = memo if memo is not None else ViewMemo()
    pods = list(pods)
    held: dict[str, list[tuple[PodPart, int, codec.ContainerDevice]]] = defaultdict(list)  # uuid -> slices
    mig: dict[str, list[str]] = defaultdict(list)  # node -> MIG lines
    mig_held: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)  # uuid -> instances
    parts = memo.pod_parts(pods)
    for part in parts:
        if not part.node:
            continue
        for ctr, d in part.devices:
            held[d.uuid].append((part, ctr, d))
        if part.mig:
            mig[part.node].append(f"{part.mig} -> {part.namespace}/{part.name}")
            for a in _mig_allocations(part.mig):
                mig_held[a.gpu_uuid].append((a.placement.start, a.placement.size, a.profile,
                                             f"{part.namespace}/{part.name}"))
    views = []
    models: dict[str, set[str]] = defaultdict(set)
    model_cards: Counter[str] = Counter()
    cards_before, cards_now = memo._cards, {}
    for npart in memo.node_parts(nodes, gpu_resource):
        facts = npart.facts
        if not is_gpu_node(facts):
            continue
        key = (npart, tuple(_card_inputs(d, held, mig_held, usage, health) for d in npart.devices))
        hit = cards_before.get(facts.name)
        if hit is None or hit[0] != key:
            hit = (key, tuple(_card(facts.name, d, inputs) for d, inputs in zip(npart.devices, key[1], strict=True)))
            memo.card_builds += 1
        cards_now[facts.name] = hit
        for d in npart.devices:
            models[d.type].add(facts.name)
            model_cards[d.type] += 1
        views.append(NodeView(facts.name, hit[1], node_health(facts, now, lock_timeout),
                              tuple(mig.get(facts.name, ()))))
    memo._cards = cards_now
    waiting = [pod for pod, part in zip(pods, parts, strict=True) if part.waiting]
    return ClusterView(tuple(sorted(views, key=lambda v: v.name)), pending_pods(waiting, events, gpu_resource),
                       {m: (len(models[m]), model_cards[m]) for m in sorted(models)})


def _card_inputs(d: DeviceInfo, held: Mapping, mig_held: Mapping, usage: Mapping, health: Mapping) -> tuple:
    """What one card of the view is built from: its slices, their measured use, its temperature and
    power, the MIG instances on it (equal inputs build an equal card)."""
    slices = tuple(held.get(d.id, ()))
    used = tuple(usage.get((p.namespace, p.name, cd.uuid)) for p, _, cd in slices) if usage else ()
    return slices, used, health.get(d.id, (None, None)), tuple(sorted(mig_held.get(d.id, ())))


def _card(node: str, d: DeviceInfo, inputs: tuple) -> Card:
    slices, used, (temp, power), instances = inputs
    width = max((p.start + p.size for prof in d.mig_profiles for p in prof.placements), default=0)
    return Card(node, d.index, d.id, d.type, d.devmem, d.devcore, d.count, d.health, d.mode,
                tuple(Slice(p.namespace, p.name, ctr, cd.usedmem, cd.usedcores, used[i] if used else None)
                      for i, (p, ctr, cd) in enumerate(slices)),
                temp, power, max(width, max((a + b for a, b, _, _ in instances), default=0)), instances)


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
