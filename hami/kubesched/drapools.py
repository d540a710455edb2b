"""The resource pools a node can allocate from (pure): kube-scheduler's `GatherPools`, Kubernetes 1.36.

From every ResourceSlice (resource.k8s.io/v1), the pools whose slices target a node: a slice with
`nodeName` (that node), `allNodes`, a `nodeSelector` (the node's labels and name), or
`perDeviceNodeSelection` (any of its devices' `nodeName` / `allNodes` / `nodeSelector` matches),
and every slice with `sharedCounters` (KEP-4815: counter sets live in their own slices). Within a
pool only the newest `generation` counts. A pool is:

- incomplete when fewer slices than its `resourceSliceCount` are known (nothing is allocated from
  it, and a request for All devices fails while it is);
- invalid when two devices share a name, two counter sets share a name, or a device consumes a
  counter set or counter the pool does not declare (nothing is allocated from it, and a node where
  nothing else fits reports it);
- else usable: its device slices in name order, its counter sets, and the devices of its slices
  that target other nodes (their allocations consume the same counters).

Pools come sorted by driver and name; pools with a device that has `bindingConditions` come last,
so a device that needs no external preparation is preferred. The `Device` objects carry what the
allocator checks: capacities with request policies (KEP-5075), `allowMultipleAllocations`, taints
(KEP-5055), counter consumption, binding conditions, per-device node selection.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hami.kubesched import nodeaffinity
from hami.kubesched.cel import CelError, SelectorCompiler, device_activation, to_quantity
from hami.kubesched.draconsumable import Policy, exact

_ACTIVATION = object()  # Device.memo's key of the CEL activation (never an expression)


@dataclass(frozen=True)
class NodeView:
    """What node selection reads of a Node: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Mapping | str) -> NodeView:
        if isinstance(node, str):
            return cls(node)
        meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        return cls(str(meta.get("name", "")), {str(k): str(v) for k, v in labels.items()})


def selector_matches(selector: Any, node: NodeView) -> bool:
    """A v1.NodeSelector: any term matches (a selector without terms matches no node)."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    return isinstance(terms, list) and any(nodeaffinity.term_matches(t, node.labels, node.name) for t in terms)


def node_matches(node: NodeView, node_name: str, all_nodes: bool, selector: Any) -> bool:
    """`NodeMatches`: a node name, all nodes, or a node selector (else no node)."""
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    slice: str
    raw: Mapping = field(repr=False, compare=False)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)  # name as published -> value
    policies: Mapping[str, Policy] = field(default_factory=dict, repr=False, compare=False)
    multi: bool = False  # allowMultipleAllocations
    taints: tuple[Mapping, ...] = ()
    counters: tuple[tuple[str, Mapping[str, Fraction]], ...] = ()  # (counter set, counter -> amount)
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    # Where the device is reachable: the slice's node selection, or the device's own under
    # perDeviceNodeSelection (nodeName, allNodes, nodeSelector).
    node_name: str = ""
    all_nodes: bool = False
    node_selector: Any = field(default=None, compare=False)
    per_device: bool = False
    # Selector verdicts (expression -> bool or the CelError text) and the CEL activation: a device's
    # attributes only change with its slice, which makes new Device objects.
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def selector(self, cel: SelectorCompiler, expression: str) -> bool:
        got = self.memo.get(expression)
        if got is None:
            act = self.memo.get(_ACTIVATION)
            if act is None:
                act = self.memo[_ACTIVATION] = device_activation(self.driver, self.raw, multi=self.multi)
            try:
                got = cel.matches(expression, act)
            except CelError as exc:
                got = str(exc)
            self.memo[expression] = got
        if isinstance(got, str):
            raise CelError(got)
        return got

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    @property
    def label(self) -> str:
        return f"{self.pool}/{self.name}"

    @property
    def node(self) -> str:
        return self.node_name


@dataclass
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str = ""  # why the pool cannot be used
    slices: list[list[Device]] = field(default_factory=list)  # device slices targeting the node, by name
    elsewhere: list[Device] = field(default_factory=list)  # devices of this generation's other slices
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def devices(self) -> list[Device]:
        return [d for s in self.slices for d in s]

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions for d in self.devices)


@dataclass(frozen=True)
class _Slice:
    name: str
    driver: str
    pool: str
    generation: int
    count: int
    node_name: str
    all_nodes: bool
    node_selector: Any
    per_device: bool
    devices: tuple[Device, ...]
    counter_sets: tuple[tuple[str, Mapping[str, Fraction]], ...]
    bad: str  # a field the API server should have refused (the pool is then invalid)


def _quantities(raw: Any, what: str) -> dict[str, Fraction]:
    out = {}
    for name, v in (raw.items() if isinstance(raw, Mapping) else ()):
        v = v.get("value") if isinstance(v, Mapping) else v
        out[str(name)] = exact(to_quantity(v, field=f"{what} {name}"))
    return out


_KINDS = ("int", "bool", "string", "version")


def _device(raw: Mapping, driver: str, pool: str, slice_name: str, spec: Mapping) -> Device:
    for aname, a in (raw.get("attributes") or {}).items():
        if not isinstance(a, Mapping) or sum(k in a for k in _KINDS) != 1:
            raise CelError(f"device {raw.get('name')} attribute {aname}: unsupported attribute value")
    caps, policies = {}, {}
    for cname, craw in (raw.get("capacity") or {}).items():
        craw = craw if isinstance(craw, Mapping) else {"value": craw}
        caps[str(cname)] = exact(to_quantity(craw.get("value"), field=f"device {raw.get('name')} capacity {cname}"))
        if isinstance(craw.get("requestPolicy"), Mapping):
            policy = Policy.of(craw["requestPolicy"])
            if policy is not None:
                policies[str(cname)] = policy
    counters = tuple((str(c.get("counterSet", "")), _quantities(c.get("counters"), f"device {raw.get('name')} counter"))
                     for c in raw.get("consumesCounters") or [] if isinstance(c, Mapping))
    per_device = spec.get("perDeviceNodeSelection") is True
    src = raw if per_device else spec
    taints = tuple(t for t in raw.get("taints") or [] if isinstance(t, Mapping))
    return Device(driver, pool, str(raw.get("name", "")), slice_name, raw, caps, policies,
                  raw.get("allowMultipleAllocations") is True, taints, counters,
                  tuple(str(c) for c in raw.get("bindingConditions") or []),
                  tuple(str(c) for c in raw.get("bindingFailureConditions") or []),
                  raw.get("bindsToNode") is True, str(src.get("nodeName") or ""), src.get("allNodes") is True,
                  src.get("nodeSelector"), per_device)


def _read_slice(s: Mapping) -> _Slice | None:
    spec = s.get("spec") if isinstance(s.get("spec"), Mapping) else {}
    pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
    driver, pool_name = str(spec.get("driver", "")), str(pool.get("name", ""))
    name = str((s.get("metadata") or {}).get("name", ""))
    try:
        generation, count = int(pool.get("generation") or 0), int(pool.get("resourceSliceCount") or 1)
    except (TypeError, ValueError):
        return None
    bad, devices, sets = "", [], []
    try:
        for d in spec.get("devices") or []:
            if isinstance(d, Mapping):
                devices.append(_device(d, driver, pool_name, name, spec))
        for cs in spec.get("sharedCounters") or []:
            if isinstance(cs, Mapping):
                sets.append((str(cs.get("name", "")), _quantities(cs.get("counters"), f"counter set {cs.get('name')}")))
    except CelError as exc:
        bad = str(exc)
    return _Slice(name, driver, pool_name, generation, count, str(spec.get("nodeName") or ""),
                  spec.get("allNodes") is True, spec.get("nodeSelector"), spec.get("perDeviceNodeSelection") is True,
                  tuple(devices), tuple(sets), bad)


class Inventory:
    """Every ResourceSlice, read once; `pools_for(node)` gathers the pools one node can use.

    The slices are indexed as they are read: those naming a node (`nodeName`) by that node, and the
    few any node may match (counter sets, `allNodes`, a `nodeSelector`, per-device selection) in a
    list of their own, so a node's gather reads its own slices and that list, never every slice (at
    5,000 nodes a scan of every slice per node made a scheduling cycle quadratic in the node count).
    A slice event makes the owner build a new Inventory (the slices changed), which re-indexes; given
    the one it replaces (`previous`), a slice object it read already (the same object: the watch
    replaces an object on every change, never edits it) is not read again, so a change costs the
    changed slices' devices and a pass over the rest, not every device's capacities read anew."""

    def __init__(self, slices: Iterable[Mapping], previous: Inventory | None = None):
        known = previous._read if previous is not None else {}
        # id(slice object) -> (the object, kept so the id stays its own; what it was read as)
        self._read: dict[int, tuple[Mapping, _Slice | None]] = {}
        for obj in slices:
            hit = known.get(id(obj))
            self._read[id(obj)] = hit if hit is not None and hit[0] is obj else (obj, _read_slice(obj))
        self.slices: list[_Slice] = [r for _, r in self._read.values() if r is not None]
        self._cache: dict[tuple, list[Pool]] = {}
        # (position in `slices`, slice): a gather keeps the slices' order, as a scan of all of them would
        self._by_node: dict[str, list[tuple[int, _Slice]]] = {}
        self._wide: list[tuple[int, _Slice]] = []
        self._by_pool: dict[tuple[str, str], list[_Slice]] = {}
        for i, sl in enumerate(self.slices):
            self._by_pool.setdefault((sl.driver, sl.pool), []).append(sl)
            if sl.node_name and not sl.counter_sets:
                self._by_node.setdefault(sl.node_name, []).append((i, sl))
            elif sl.counter_sets or sl.all_nodes or sl.node_selector is not None or sl.per_device:
                self._wide.append((i, sl))
            # else: a slice that targets no node is never gathered
        # a pools_for answer per node kept, for every node the slices name and as many others
        self._cache_max = max(4096, 2 * len(self._by_node) + 1024)

    @property
    def nodes(self) -> set[str]:
        """The nodes named by a slice's (or a device's) nodeName."""
        return {s.node_name for s in self.slices if s.node_name} | {
            d.node_name for s in self.slices if s.per_device for d in s.devices if d.node_name}

    def __bool__(self) -> bool:
        return any(s.devices for s in self.slices)

    def pools_for(self, node: Mapping | str | NodeView) -> list[Pool]:
        view = node if isinstance(node, NodeView) else NodeView.of(node)
        memo = (view.name, tuple(sorted(view.labels.items())))
        got = self._cache.get(memo)
        if got is None:
            if len(self._cache) > self._cache_max:
                self._cache.clear()
            got = self._cache[memo] = self._gather(view)
        return got

    def _relevant(self, s: _Slice, node: NodeView) -> bool:
        if s.counter_sets:
            return True
        if s.node_name or s.all_nodes or s.node_selector is not None:
            return node_matches(node, s.node_name, s.all_nodes, s.node_selector)
        if s.per_device:
            return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices)
        return False

    def _candidates(self, node: NodeView) -> Iterable[_Slice]:
        """The slices that may target `node`, in their order in `slices`: its own and the wide ones."""
        own = self._by_node.get(node.name, ())
        if not self._wide:
            return (s for _, s in own)
        if not own:
            return (s for _, s in self._wide)
        return (s for _, s in heapq.merge(own, self._wide, key=lambda pair: pair[0]))

    def _gather(self, node: NodeView) -> list[Pool]:
        by_pool: dict[tuple[str, str], list[_Slice]] = {}
        for s in self._candidates(node):
            if not self._relevant(s, node):
                continue
            have = by_pool.get((s.driver, s.pool))
            if have is None or s.generation > have[0].generation:
                by_pool[(s.driver, s.pool)] = [s]
            elif s.generation == have[0].generation:
                have.append(s)
        plain, waiting = [], []
        for (driver, name), mine in by_pool.items():
            generation, count = mine[0].generation, mine[0].count
            every = mine
            if len(mine) != count:
                same = self._by_pool[(driver, name)]
                if any(s.generation > generation for s in same):
                    continue  # obsolete: a newer generation exists for other nodes
                every = [s for s in same if s.generation == generation]
                if len(every) != count:
                    plain.append(Pool(driver, name, incomplete=True))
                    continue
            pool = _build(driver, name, mine, every)
            (waiting if pool.has_binding_conditions else plain).append(pool)
        plain.sort(key=lambda p: (p.driver, p.name))
        waiting.sort(key=lambda p: (p.driver, p.name))
        return plain + waiting


def _build(driver: str, name: str, mine: Sequence[_Slice], every: Sequence[_Slice]) -> Pool:
    mine = sorted(mine, key=lambda s: s.name)
    pool = Pool(driver, name)
    bad = next((s.bad for s in every if s.bad), "")
    if bad:
        pool.invalid = bad
        return pool
    device_slices = [s for s in mine if not s.counter_sets]
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                pool.invalid = f"duplicate device name {d.name}"
                return pool
            seen.add(d.name)
    for s in mine:
        for set_name, counters in s.counter_sets:
            if set_name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {set_name}"
                return pool
            pool.counter_sets[set_name] = dict(counters)
    targeting = {s.name for s in mine}
    others = [d for s in every if s.name not in targeting for d in s.devices]
    for d in [d for s in mine for d in s.devices] + others:
        for set_name, counters in d.counters:
            have = pool.counter_sets.get(set_name)
            if have is None:
                pool.invalid = f"counter set {set_name} not found"
                return pool
            for counter in counters:
                if counter not in have:
                    pool.invalid = f"counter {counter} not found in counter set {set_name}"
                    return pool
    pool.slices = [list(s.devices) for s in device_slices]
    pool.elsewhere = others
    return pool
