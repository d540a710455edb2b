"""DRA structured allocation (pure): kube-scheduler 1.36's allocator, for one node.

Inputs are plain API objects: the ResourceSlices (`inventory`, whose pools per node are
`hami.kubesched.drapools`), what allocated claims hold (`Usage.of`), DeviceClasses by name, and a
pod's claims. `Allocator.allocate(...)` answers, for one node, the `status.allocation` of every
claim that still needs one (written as the real scheduler writes it) or the failure, with a
reason naming the claim, the request and what failed, and per-device details for `hami doctor pod`.

The search is upstream's (`k8s.io/dynamic-resource-allocation/structured`, the incubating
allocator 1.36 runs with its beta features on): one depth-first search over every claim of the pod,
request by request, device by device, in pool/slice/device order, taking the first complete
solution; within one request devices are taken in order (combinations, not permutations).

Modelled (resource.k8s.io/v1):
- `exactly` requests: `deviceClassName`, the class's and the request's CEL `selectors`,
  `allocationMode` ExactCount (`count`) or All (every matching device of complete, valid pools);
- `firstAvailable` (prioritized lists): the first subrequest that leads to a solution; results
  are named `<request>/<subrequest>`;
- device taints (KEP-5055): a NoSchedule or NoExecute taint must be tolerated by the request's
  `tolerations`; results carry the tolerations;
- `adminAccess`: the device may be in use (by other claims or this search), the result says
  `adminAccess: true` and allocated claims' admin results hold nothing (`Usage`); whether a
  namespace may ask is the API server's check (`hami.sim.apiserver.dravalidate`);
- constraints `matchAttribute` and `distinctAttribute` (upstream's bookkeeping, per request name);
- slices for a node by `nodeName`, `allNodes`, `nodeSelector` or per device; the result's
  `nodeSelector` is the node's name when a device is node-local, else the devices' selectors merged,
  else none;
- binding conditions: results carry `bindingConditions` / `bindingFailureConditions`; pools with
  them are tried last;
- counters and partitionable devices (KEP-4815): a device's `consumesCounters` must fit what its
  pool's counter sets have left after allocated devices and this search;
- consumable capacity (KEP-5075, `hami.kubesched.draconsumable`): a device with
  `allowMultipleAllocations` serves several allocations while each capacity lasts, each result
  with a `shareID` and `consumedCapacity`; a device without it is exclusive.

Upstream quirks kept so answers match: a device rejected for a taint or a constraint after its
counters were checked keeps them counted until the call ends, and a shared device's counters are
only counted once.

Bounded work: a claim has at most 32 requests and 32 results (the API's limits), and the search
stops after `MAX_STEPS` device tries with a clear reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hami.kubesched import draconsumable, drapools, taints
from hami.kubesched.cel import CelError, SelectorCompiler, format_quantity, to_quantity
from hami.kubesched.drapools import Device, Inventory, NodeView, Pool

__all__ = ["MAX_RESULTS", "AllocationError", "Allocator", "Device", "Inventory", "Outcome", "Usage",
           "allocated_node", "inventory"]

MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_RESULTS = 32  # AllocationResultsMaxSize
MAX_STEPS = 20_000
TAINT_EFFECTS = ("NoSchedule", "NoExecute")  # other effects (None) never prevent allocation


class AllocationError(ValueError):
    """A claim that cannot be allocated at all on this node (names the field or the cause)."""


def inventory(slices: Iterable[Mapping], previous: Inventory | None = None) -> Inventory:
    """The devices the slices publish; `previous`: the inventory this one replaces (its reads reused)."""
    return Inventory(slices, previous)


# --------------------------------------------------------------------------- usage

@dataclass
class Usage:
    """What allocated claims hold, as the DynamicResources plugin tracks it: devices allocated
    exclusively, devices with shares, and the capacity those shares consume. Admin-access results
    hold nothing."""

    consumed: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    exclusive: set[tuple[str, str, str]] = field(default_factory=set)
    shared: set[tuple[str, str, str]] = field(default_factory=set)

    @classmethod
    def of(cls, claims: Iterable[Mapping]) -> Usage:
        u = cls()
        for c in claims:
            u.add_allocation((c.get("status") or {}).get("allocation"))
        return u

    def add_allocation(self, allocation: Mapping | None) -> None:
        for r in ((allocation or {}).get("devices") or {}).get("results") or []:
            if not isinstance(r, Mapping) or r.get("adminAccess") is True:
                continue
            key = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            if not r.get("shareID"):
                self.exclusive.add(key)
                continue
            self.shared.add(key)
            consumed = r.get("consumedCapacity")
            if isinstance(consumed, Mapping):
                slot = self.consumed.setdefault(key, {})
                for name, v in consumed.items():
                    try:
                        slot[str(name)] = slot.get(str(name), 0) + draconsumable.exact(to_quantity(v))
                    except CelError:
                        continue  # a corrupt result counts as nothing, never as a crash

    def copy(self) -> Usage:
        return Usage({k: dict(v) for k, v in self.consumed.items()}, set(self.exclusive), set(self.shared))

    def allocated(self, key: tuple[str, str, str]) -> bool:
        return key in self.exclusive or key in self.shared or key in self.consumed


# --------------------------------------------------------------------------- requests

@dataclass(frozen=True)
class Request:
    """An `exactly` request or one subrequest of a `firstAvailable` list."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str  # ExactCount | All
    count: int
    admin: bool = False
    tolerations: tuple[Mapping, ...] = ()
    capacity: Mapping[str, Fraction] | None = None
    parent: str = ""

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name


def _read_one(raw: Mapping, at: str, name: str, parent: str) -> Request:
    mode = raw.get("allocationMode") or "ExactCount"
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if mode not in ("ExactCount", "All"):
        raise AllocationError(f"{at}: unsupported count mode {mode}")
    # No upper bound here: a subrequest asking for more than a claim may hold is passed over for
    # the next one, and a claim that needs more is refused as a whole (`prepare`), as upstream.
    if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise AllocationError(f"{at}: allocationMode {mode!r} with count {count!r} (at least 1)")
    caps = None
    if isinstance(raw.get("capacity"), Mapping):
        caps = {str(k): to_quantity(v, field=f"{at}.capacity.requests[{k}]")
                for k, v in (raw["capacity"].get("requests") or {}).items()}
    sels = []
    for i, s in enumerate(raw.get("selectors") or []):
        expr = (s.get("cel") or {}).get("expression") if isinstance(s, Mapping) else None
        if not isinstance(expr, str) or not expr:
            raise AllocationError(f"{at}.selectors[{i}]: CEL expression empty (unsupported selector type?)")
        sels.append(expr)
    tols = tuple(t for t in raw.get("tolerations") or [] if isinstance(t, Mapping))
    return Request(name, str(raw.get("deviceClassName") or ""), tuple(sels), mode, count,
                   raw.get("adminAccess") is True, tols, caps, parent)


def read_requests(claim: Mapping) -> list[list[Request]]:
    """A claim's requests, each as its alternatives: [the request] or its subrequests in order."""
    spec = claim.get("spec") or {}
    reqs = ((spec.get("devices") or {}).get("requests")) or []
    if not isinstance(reqs, list) or not reqs:
        raise AllocationError("spec.devices.requests: a claim needs at least one request")
    if len(reqs) > MAX_REQUESTS:
        raise AllocationError(f"spec.devices.requests: {len(reqs)} requests, at most {MAX_REQUESTS}")
    out = []
    for i, r in enumerate(reqs):
        at = f"spec.devices.requests[{i}]"
        if not isinstance(r, Mapping):
            raise AllocationError(f"{at}: not an object")
        name = str(r.get("name", ""))
        subs = r.get("firstAvailable")
        if subs:
            if not isinstance(subs, list) or len(subs) > MAX_SUBREQUESTS:
                raise AllocationError(f"{at}.firstAvailable: a list of at most {MAX_SUBREQUESTS} subrequests")
            alts = []
            for j, s in enumerate(subs):
                if not isinstance(s, Mapping) or not s.get("name"):
                    raise AllocationError(f"{at}.firstAvailable[{j}]: a subrequest needs a name")
                alts.append(_read_one(s, f"{at}.firstAvailable[{j}]", str(s["name"]), name))
            out.append(alts)
            continue
        ex = r.get("exactly")
        if not isinstance(ex, Mapping):
            raise AllocationError(f"{at}.exactly: required")
        out.append([_read_one(ex, f"{at}.exactly", name, "")])
    return out


# --------------------------------------------------------------------------- constraints

def attribute(dev: Device, qualified: str) -> tuple[str, Any] | None:
    """`lookupAttribute`: the fully qualified name, or its short name when the domain is the driver's."""
    attrs = dev.raw.get("attributes") or {}
    raw = attrs.get(qualified)
    if raw is None:
        domain, slash, short = qualified.partition("/")
        if not slash or domain != dev.driver:
            return None
        raw = attrs.get(short)
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return (kind, raw[kind])
    return ("unknown", None)


class _Constraint:
    def __init__(self, attr: str, requests: Sequence[str]):
        self.attr = attr
        self.requests = set(requests)

    def applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (bool(sub) and f"{request}/{sub}" in self.requests)


class _Match(_Constraint):
    kind = "matchAttribute"

    def __init__(self, attr: str, requests: Sequence[str]):
        super().__init__(attr, requests)
        self.value: tuple[str, Any] | None = None
        self.n = 0

    def add(self, request: str, sub: str, dev: Device) -> bool:
        if not self.applies(request, sub):
            return True
        got = attribute(dev, self.attr)
        if got is None:
            return False
        if self.n == 0:
            self.value, self.n = got, 1
            return True
        if got[0] == "unknown" or got != self.value:
            return False
        self.n += 1
        return True

    def remove(self, request: str, sub: str, dev: Device) -> None:
        if self.applies(request, sub):
            self.n -= 1


class _Distinct(_Constraint):
    kind = "distinctAttribute"

    def __init__(self, attr: str, requests: Sequence[str]):
        super().__init__(attr, requests)
        self.values: dict[str, tuple[str, Any]] = {}  # by request name, as upstream keeps them
        self.n = 0

    def add(self, request: str, sub: str, dev: Device) -> bool:
        if not self.applies(request, sub):
            return True
        got = attribute(dev, self.attr)
        if got is None:
            return False
        if self.n and (got[0] == "unknown" or any(v == got for v in self.values.values())):
            return False
        self.values[request] = got
        self.n += 1
        return True

    def remove(self, request: str, sub: str, dev: Device) -> None:
        if self.applies(request, sub):
            self.values.pop(request, None)
            self.n -= 1


def _constraints(claim: Mapping) -> list[_Constraint]:
    out: list[_Constraint] = []
    for i, c in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []):
        if not isinstance(c, Mapping):
            raise AllocationError(f"spec.devices.constraints[{i}]: not an object")
        reqs = [str(r) for r in c.get("requests") or []]
        if isinstance(c.get("matchAttribute"), str) and c["matchAttribute"]:
            out.append(_Match(c["matchAttribute"], reqs))
        elif isinstance(c.get("distinctAttribute"), str) and c["distinctAttribute"]:
            out.append(_Distinct(c["distinctAttribute"], reqs))
        else:
            raise AllocationError(f"constraint #{i}: empty constraint (unsupported constraint type?)")
    return out


# --------------------------------------------------------------------------- outcome

@dataclass
class Outcome:
    ok: bool
    allocations: dict[str, dict] = field(default_factory=dict)  # "ns/name" -> status.allocation
    reason: str = ""  # one line: the claim, the request, what failed (node-independent)
    details: list[str] = field(default_factory=list)  # per device, for the doctor
    steps: int = 0  # search steps taken (upstream's allocateOne invocations)
    undecided: bool = False  # the search stopped at its step budget: neither fit nor refusal is known


def _claim_key(claim: Mapping) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def allocated_node(allocation: Mapping) -> str | None:
    """The node an allocation is pinned to (its nodeSelector's metadata.name), if any."""
    for term in ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []):
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and f.get("values"):
                return str(f["values"][0])
    return None


def taint_prevents(dev: Device, req: Request) -> Mapping | None:
    """The first NoSchedule/NoExecute taint of the device the request does not tolerate."""
    for t in dev.taints:
        if t.get("effect") in TAINT_EFFECTS and not any(
                taints.toleration_matches(tol, (str(t.get("key") or ""), str(t.get("value") or ""),
                                                str(t.get("effect"))))
                for tol in req.tolerations):
            return t
    return None


def counters_short(dev: Device, pool: Pool, usage: Usage) -> str:
    """Why the counters the device consumes are not left in its pool once every allocated device's
    consumption is taken off (KEP-4815), e.g. "counter gpu-0-counters/memory: needs 10Gi, 0 of
    40Gi left"; "" when they are."""
    left = {name: dict(cs) for name, cs in pool.counter_sets.items()}
    for other in pool.devices + pool.elsewhere:
        if usage.allocated(other.key):
            for set_name, counters in other.counters:
                have = left.get(set_name, {})
                for c, v in counters.items():
                    if c in have:
                        have[c] -= v
    for set_name, counters in dev.counters:
        for c, v in counters.items():
            have = left.get(set_name, {}).get(c)
            if have is not None and v > have:
                total = pool.counter_sets.get(set_name, {}).get(c, 0)
                readable = draconsumable.readable
                return (f"counter {set_name}/{c}: needs {readable(Fraction(v))}, {readable(Fraction(max(have, 0)))} "
                        f"of {readable(Fraction(total))} left")
    return ""


class _Stop(Exception):
    """The search ran out of steps."""


class _TooMany(Exception):
    """errAllocationResultMaxSizeExceeded: more than 32 results for a claim down this path."""


@dataclass
class _Data:
    req: Request
    cls: Mapping
    num: int
    all_devices: list[tuple[Device, Pool]] = field(default_factory=list)


@dataclass
class _Result:
    req: Request
    dev: Device
    share_id: str | None = None
    consumed: dict[str, Fraction] | None = None


class Allocator:
    """Allocates a pod's claims on one node at a time; holds the compiled-selector cache."""

    def __init__(self, cel: SelectorCompiler | None = None, *, new_share_id: Callable[[], str] | None = None):
        self.cel = cel or SelectorCompiler()
        self.new_share_id = new_share_id or (lambda: str(uuid.uuid4()))

    def allocate(self, claims: Sequence[Mapping], node: Mapping | str, inv: Inventory | Sequence[Pool],
                 usage: Usage, classes: Mapping[str, Mapping], *, max_steps: int = MAX_STEPS) -> Outcome:
        """`node`: the Node object (labels matter for nodeSelector slices) or its name. `max_steps`: the
        search's budget (upstream's is MAX_STEPS); a search that spends it answers `undecided`."""
        view = NodeView.of(node)
        todo = []
        for claim in claims:
            key = _claim_key(claim)
            done = (claim.get("status") or {}).get("allocation")
            if done:
                where = allocated_node(done)
                if where is not None and where != view.name:
                    return Outcome(False, reason=f"claim {key} is allocated to node {where}")
                sel = done.get("nodeSelector")
                if where is None and sel is not None and not drapools.selector_matches(sel, view):
                    return Outcome(False, reason=f"claim {key} is allocated to devices this node cannot reach")
                continue
            todo.append(claim)
        if not todo:
            return Outcome(True)
        pools = inv.pools_for(view) if isinstance(inv, Inventory) else list(inv)
        search = _Search(self, todo, view, pools, usage, classes, max_steps)
        try:
            return search.run()
        except (AllocationError, CelError) as exc:
            return Outcome(False, reason=f"claim {search.current}: {exc}")


class _Search:
    """One Allocate call: upstream's allocateOne recursion and its bookkeeping."""

    def __init__(self, owner: Allocator, claims: Sequence[Mapping], node: NodeView, pools: list[Pool],
                 usage: Usage, classes: Mapping[str, Mapping], max_steps: int = MAX_STEPS):
        self.owner, self.claims, self.node, self.pools = owner, claims, node, pools
        self.usage, self.classes = usage, classes
        self.current = _claim_key(claims[0])
        self.requests: list[list[list[Request]]] = []
        self.data: dict[tuple[int, int, int], _Data] = {}
        self.selected: dict[tuple[int, int], int] = {}
        self.constraints: list[list[_Constraint]] = []
        self.matches: dict[tuple, bool] = {}
        self.allocating: dict[tuple[str, str, str], set[int]] = {}
        self.allocating_cap: dict[tuple[str, str, str], dict[str, Fraction]] = {}
        self.available: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.counting: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.consumed: dict[tuple[int, tuple[str, str, str]], dict[str, tuple[Fraction, bool]]] = {}
        self.steps = 0
        self.max_steps = max_steps

    # ------------------------------------------------------------------ preparation

    def prepare(self) -> None:
        for ci, claim in enumerate(self.claims):
            self.current = _claim_key(claim)
            alts = read_requests(claim)
            self.requests.append(alts)
            least = 0
            for ri, subs in enumerate(alts):
                fewest = None
                for si, req in enumerate(subs):
                    d = self._request_data(ci, ri, si, req)
                    self.data[(ci, ri, si)] = d
                    fewest = d.num if fewest is None else min(fewest, d.num)
                least += fewest or 0
            if least > MAX_RESULTS:
                raise AllocationError(f"number of requested devices {least} exceeds the claim limit of {MAX_RESULTS}")
            self.constraints.append(_constraints(claim))

    def _request_data(self, ci: int, ri: int, si: int, req: Request) -> _Data:
        if not req.device_class:
            raise AllocationError(f"request {req.full_name}: missing device class name (unsupported request type?)")
        cls = self.classes.get(req.device_class)
        if cls is None:
            raise AllocationError(f"request {req.full_name}: device class {req.device_class} not found")
        d = _Data(req, cls, req.count)
        if req.mode == "All":
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(f"request {req.full_name}: asks for all devices, but resource pool "
                                          f"{pool.id} is currently being updated")
                if pool.invalid:
                    raise AllocationError(f"request {req.full_name}: asks for all devices, but resource pool "
                                          f"{pool.id} is currently invalid")
                for dev in pool.devices:
                    if self.selectable(ci, ri, si, d, dev) and self.capacity_fits(req, dev)[0]:
                        d.all_devices.append((dev, pool))
            d.num = len(d.all_devices)
        return d

    # ------------------------------------------------------------------ checks

    def selectable(self, ci: int, ri: int, si: int, d: _Data, dev: Device) -> bool:
        key = (dev.key, ci, ri, si)
        got = self.matches.get(key)
        if got is not None:
            return got
        got = True
        for which, sels in (("class " + d.req.device_class, self._class_selectors(d.cls)),
                            ("claim " + self.current, d.req.selectors)):
            for i, expr in enumerate(sels):
                try:
                    ok = dev.selector(self.owner.cel, expr)
                except CelError as exc:
                    raise CelError(f"{which}: selector #{i}: CEL {exc}") from None
                if not ok:
                    got = False
                    break
            if not got:
                break
        if got and dev.per_device:
            got = drapools.node_matches(self.node, dev.node_name, dev.all_nodes, dev.node_selector)
        self.matches[key] = got
        return got

    @staticmethod
    def _class_selectors(cls: Mapping) -> list[str]:
        return [str((s.get("cel") or {}).get("expression", ""))
                for s in (cls.get("spec") or {}).get("selectors") or [] if isinstance(s, Mapping)]

    def consumption(self, req: Request, dev: Device) -> dict[str, tuple[Fraction, bool]]:
        """What one allocation of `req` takes of `dev` (the same on every search step, so kept)."""
        key = (id(req), dev.key)
        got = self.consumed.get(key)
        if got is None:
            got = self.consumed[key] = draconsumable.consumption(req.capacity, dev.capacity, dev.policies)
        return got

    def capacity_fits(self, req: Request, dev: Device) -> tuple[bool, str]:
        return draconsumable.fits(req.capacity, dev.capacity, dev.policies, self.usage.consumed.get(dev.key, {}),
                                  self.allocating_cap.get(dev.key, {}), self.consumption(req, dev))

    def in_use(self, key: tuple[str, str, str]) -> bool:
        return key in self.usage.exclusive or bool(self.allocating.get(key))

    def _counters_fit(self, dev: Device, pool: Pool) -> bool:
        avail = self.available.get(pool.name)
        if avail is None:
            avail = {name: dict(cs) for name, cs in pool.counter_sets.items()}
            for other in pool.devices + pool.elsewhere:
                if self.usage.allocated(other.key):
                    for set_name, counters in other.counters:
                        have = avail.get(set_name, {})
                        for c, v in counters.items():
                            if c in have:
                                have[c] -= v
            self.available[pool.name] = avail
        self._count(dev, pool, +1)
        taken = self.counting.get(pool.name, {})
        for set_name, counters in avail.items():
            for c, v in counters.items():
                if v < taken.get(set_name, {}).get(c, 0):
                    self._count(dev, pool, -1)
                    return False
        return True

    def _count(self, dev: Device, pool: Pool, sign: int) -> None:
        taken = self.counting.setdefault(pool.name, {})
        for set_name, counters in dev.counters:
            slot = taken.setdefault(set_name, {})
            for c, v in counters.items():
                slot[c] = slot.get(c, 0) + sign * v

    # ------------------------------------------------------------------ one device

    def allocate_device(self, ci: int, ri: int, si: int, dev: Device, pool: Pool,
                        must: bool) -> Callable[[], None] | None:
        """`allocateDevice`: the undo when the device is taken for this slot, else None."""
        d = self.data[(ci, ri, si)]
        req = d.req
        if not dev.multi and req.admin and ci in self.allocating.get(dev.key, ()):
            return None
        if not req.admin and self.in_use(dev.key):
            return None
        skip_counters = dev.multi and (dev.key in self.usage.consumed or dev.key in self.allocating_cap)
        if not skip_counters and dev.counters and not self._counters_fit(dev, pool):
            return None
        base, sub = (req.parent, req.name) if req.parent else (req.name, "")
        if taint_prevents(dev, req) is not None:
            return None
        constraints = self.constraints[ci]
        for i, c in enumerate(constraints):
            if not c.add(base, sub, dev):
                if must:
                    raise AllocationError(f"request {req.name}: cannot add device {dev.driver}/{dev.label} because "
                                          "a claim constraint would not be satisfied")
                for prev in constraints[:i]:
                    prev.remove(base, sub, dev)
                return None
        self.allocating.setdefault(dev.key, set())
        if not dev.multi:
            self.allocating[dev.key].add(ci)
        fits, _ = self.capacity_fits(req, dev)
        if not fits:
            return None
        result = _Result(req, dev)
        if dev.multi:
            result.consumed = {n: a for n, (a, _) in self.consumption(req, dev).items()}
            result.share_id = self.owner.new_share_id()
            slot = self.allocating_cap.setdefault(dev.key, {})
            for n, a in result.consumed.items():
                slot[n] = slot.get(n, 0) + a
        self.results[ci].append(result)
        mark = len(self.results[ci]) - 1

        def undo() -> None:
            for c in constraints:
                c.remove(base, sub, dev)
            self.allocating[dev.key].discard(ci)
            if dev.multi:
                slot = self.allocating_cap[dev.key]
                for n, a in (result.consumed or {}).items():
                    slot[n] -= a
            elif dev.counters:
                self._count(dev, pool, -1)
            del self.results[ci][mark:]
        return undo

    # ------------------------------------------------------------------ the search

    def run(self) -> Outcome:
        self.prepare()
        try:
            done = self.one(0, 0, 0, 0, False, (0, 0, 0))
        except _TooMany:
            done = False
        except _Stop:
            return Outcome(False, reason=f"claim {self.current}: the allocation search gave up after "
                                         f"{self.max_steps} tries", steps=self.steps, undecided=True)
        if not done:
            out = self.explain()
            out.steps = self.steps
            return out
        return Outcome(True, {_claim_key(c): self.allocation(ci, c) for ci, c in enumerate(self.claims)},
                       steps=self.steps)

    def one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: tuple[int, int, int]) -> bool:
        self.steps += 1
        if self.steps > self.max_steps:
            raise _Stop
        if ci >= len(self.claims):
            return True
        self.current = _claim_key(self.claims[ci])
        if ri >= len(self.requests[ci]):
            try:
                return self.one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _TooMany:
                return False
        d = self.data[(ci, ri, si)]
        if not in_sub and d.req.parent:
            all_too_many = True
            for s in range(len(self.requests[ci][ri])):
                try:
                    ok = self.one(ci, ri, s, 0, True, (0, 0, 0))
                except _TooMany:
                    continue
                all_too_many = False
                if ok:
                    self.selected[(ci, ri)] = s
                    return True
            if all_too_many:
                raise _TooMany
            return False
        req = d.req
        if req.mode == "All" and not d.all_devices:
            return False
        if di >= d.num:
            return self.one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if len(self.results[ci]) + d.num - di > MAX_RESULTS:
            raise _TooMany
        if req.mode == "All":
            dev, pool = d.all_devices[di]
            undo = self.allocate_device(ci, ri, si, dev, pool, True)
            if undo is None:
                return False
            return self._descend(undo, ci, ri, si, di + 1, in_sub, (0, 0, 0))
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            for sl in range(start[1] if pi == start[0] else 0, len(pool.slices)):
                devices = pool.slices[sl]
                first = start[2] if (pi, sl) == start[:2] else 0
                for dv in range(first, len(devices)):
                    dev = devices[dv]
                    if req.admin and ci in self.allocating.get(dev.key, ()):
                        continue
                    if not req.admin and self.in_use(dev.key):
                        continue
                    if not self.selectable(ci, ri, si, d, dev) or not self.capacity_fits(req, dev)[0]:
                        continue
                    undo = self.allocate_device(ci, ri, si, dev, pool, False)
                    if undo is None:
                        continue
                    if self._descend(undo, ci, ri, si, di + 1, in_sub, (pi, sl, dv + 1)):
                        return True
        return False

    def _descend(self, undo: Callable[[], None], ci: int, ri: int, si: int, di: int, in_sub: bool,
                 start: tuple[int, int, int]) -> bool:
        try:
            done = self.one(ci, ri, si, di, in_sub, start)
        except BaseException:
            undo()
            raise
        if not done:
            undo()
        return done

    # ------------------------------------------------------------------ the answer

    def allocation(self, ci: int, claim: Mapping) -> dict:
        results = []
        for r in self.results[ci]:
            out: dict[str, Any] = {"request": r.req.full_name, "driver": r.dev.driver, "pool": r.dev.pool,
                                   "device": r.dev.name}
            if r.req.admin:
                out["adminAccess"] = True
            if r.req.tolerations:
                out["tolerations"] = [dict(t) for t in r.req.tolerations]
            if r.dev.binding_conditions:
                out["bindingConditions"] = list(r.dev.binding_conditions)
            if r.dev.binding_failure_conditions:
                out["bindingFailureConditions"] = list(r.dev.binding_failure_conditions)
            if r.share_id is not None:
                out["shareID"] = r.share_id
            if r.consumed:
                out["consumedCapacity"] = {n: format_quantity(Fraction(v)) for n, v in r.consumed.items()}
            results.append(out)
        config = self._config(ci, claim)
        allocation: dict[str, Any] = {"devices": {"results": results, **({"config": config} if config else {})}}
        selector = self.node_selector(self.results[ci])
        if selector is not None:
            allocation["nodeSelector"] = selector
        return allocation

    def _config(self, ci: int, claim: Mapping) -> list[dict]:
        config: list[dict] = []
        by_class: dict[str, tuple[int, int]] = {}
        chosen = []
        for ri, subs in enumerate(self.requests[ci]):
            req = subs[self.selected.get((ci, ri), 0)] if subs[0].parent else subs[0]
            chosen.append(req)
            span = by_class.get(req.device_class)
            if span is not None:
                for i in range(*span):
                    config[i]["requests"].append(req.full_name)
                continue
            first = len(config)
            for cfg in (self.classes[req.device_class].get("spec") or {}).get("config") or []:
                if isinstance(cfg, Mapping):
                    config.append({"source": "FromClass", "requests": [req.full_name],
                                   **{k: v for k, v in cfg.items() if k != "requests"}})
            by_class[req.device_class] = (first, len(config))
        for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            if not isinstance(cfg, Mapping):
                continue
            wanted = list(cfg.get("requests") or [])
            body = {k: v for k, v in cfg.items() if k != "requests"}
            if not wanted:
                config.append({"source": "FromClaim", **body})
                continue
            for req in chosen:
                base = req.parent or req.name
                if base in wanted or (req.parent and req.full_name in wanted):
                    config.append({"source": "FromClaim", "requests": wanted, **body})
        return config

    def node_selector(self, results: Sequence[_Result]) -> dict | None:
        fields: list[dict] = []
        exprs: list[dict] = []
        for r in results:
            if r.dev.node_name or r.dev.binds_to_node:
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node.name]}]}]}
            terms = (r.dev.node_selector or {}).get("nodeSelectorTerms") if isinstance(r.dev.node_selector,
                                                                                       Mapping) else None
            if not terms:
                continue
            if len(terms) > 1:
                raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
            for src, dst in ((terms[0].get("matchFields") or [], fields),
                             (terms[0].get("matchExpressions") or [], exprs)):
                for req in src:
                    if req not in dst:
                        dst.append(dict(req))
        if not fields and not exprs:
            return None
        term = {}
        if exprs:
            term["matchExpressions"] = exprs
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}

    # ------------------------------------------------------------------ why not

    def explain(self) -> Outcome:
        """No solution: the first claim that fails even after the ones before it (allocated alone,
        one after the other), and in it the first request too few devices can serve, with every
        device's reason."""
        if len(self.claims) > 1:
            usage = self.usage.copy()
            for claim in self.claims:
                alone = _Search(self.owner, [claim], self.node, self.pools, usage, self.classes)
                out = alone.run()
                if not out.ok:
                    return out
                usage.add_allocation(out.allocations[_claim_key(claim)])
        invalid = [p for p in self.pools if p.invalid]
        for ci, claim in enumerate(self.claims):
            key = _claim_key(claim)
            self.current = key
            for ri, subs in enumerate(self.requests[ci]):
                seen: list[tuple[str, list[str], int]] = []
                for si, req in enumerate(subs):
                    d = self.data[(ci, ri, si)]
                    found, why, details = self._candidates(ci, ri, si, d)
                    need = d.num if req.mode == "ExactCount" else 1
                    if found >= need:
                        break
                    count = f" ({found} of {need} devices)" if found else ""
                    seen.append((f"request {req.full_name}: {why}{count}", details, si))
                else:
                    reason, details, _ = seen[0]
                    if len(seen) > 1:
                        reason = "; ".join(s[0] for s in seen)
                    if invalid:
                        reason += f" (invalid resource pools were encountered: {invalid[0].id}: {invalid[0].invalid})"
                    return Outcome(False, reason=f"claim {key}: {reason}", details=details)
        key = _claim_key(self.claims[-1])
        kinds = sorted({f"{c.kind} {c.attr}" for cs in self.constraints for c in cs})
        if kinds:
            return Outcome(False, reason=f"claim {key}: no set of devices satisfies the constraints "
                                         f"({', '.join(kinds)}) with enough free capacity")
        return Outcome(False, reason=f"claim {key}: not enough devices with free capacity for every request together")

    def _candidates(self, ci: int, ri: int, si: int, d: _Data) -> tuple[int, str, list[str]]:
        """How many devices could serve one slot of the request alone, and the furthest failure."""
        devices = [(dev, p) for p in self.pools if not p.incomplete and not p.invalid for dev in p.devices]
        if not devices:
            return 0, "no devices published for this node", []
        stage, why, details, found = 0, "", [], 0
        unavailable = {3: 0, 4: 0}  # matching devices short of capacity / in use or tainted
        req = d.req
        for dev, pool in devices:
            failed = None
            for which, sels, level in (("device class " + req.device_class, self._class_selectors(d.cls), 1),
                                       ("request", req.selectors, 2)):
                for expr in sels:
                    try:
                        ok = dev.selector(self.owner.cel, expr)
                    except CelError as exc:
                        failed = (level, f"{which} selector {expr!r}: {exc}")
                        break
                    if not ok:
                        failed = (level, f"{which} selector {expr!r} is false")
                        break
                if failed:
                    break
            if failed is None and dev.per_device and not drapools.node_matches(
                    self.node, dev.node_name, dev.all_nodes, dev.node_selector):
                failed = (1, "not reachable from this node")
            if failed is None:
                failed = self._availability(req, dev)
            if failed is None and dev.counters and not (req.admin and self.usage.allocated(dev.key)):
                short = counters_short(dev, pool, self.usage)
                failed = (3, short) if short else None
            if failed is None:
                found += 1
                continue
            details.append(f"{dev.label}: {failed[1]}")
            if failed[0] in unavailable:
                unavailable[failed[0]] += 1
            if failed[0] >= stage:
                stage, why = failed[0], failed[1]
        summary = {1: f"no device matches the selectors of device class {req.device_class}",
                   2: "no device matches the request's selectors"}.get(stage, why)
        if stage in (1, 2) and "runtime error" in why:
            summary += f" ({why})"
        if stage == 3:  # node-independent, so one line counts every node it failed on
            summary = (f"no matching device has capacity {why.rpartition(' ')[2]}" if why.startswith("has no")
                       else "the counters of every matching device are exhausted" if why.startswith("counter ")
                       else f"not enough free {why.split()[0].rstrip(':')} on any matching device")
        elif stage == 4 and unavailable[3]:
            summary = (f"no matching device is free ({unavailable[3]} short of capacity, {unavailable[4]} in use "
                       f"or tainted: {why})")
        elif stage == 4:
            summary = f"every matching device is {why}"
        elif stage == 0:  # every device could serve: the request asks more of them than there are
            summary = "too few matching devices"
        return found, summary, details

    def _availability(self, req: Request, dev: Device) -> tuple[int, str] | None:
        taint = taint_prevents(dev, req)
        if taint is not None:
            return 4, (f"tainted {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} "
                       "and the request does not tolerate it")
        if not req.admin and dev.key in self.usage.exclusive:
            return 4, "in use (allocated exclusively to another claim)"
        if not req.admin and not dev.multi and dev.key in self.usage.shared:
            return 4, "in use (shared by another claim, cannot be allocated exclusively)"
        fits, why = draconsumable.fits(req.capacity, dev.capacity, dev.policies, self.usage.consumed.get(dev.key, {}),
                                       {})
        if not fits:
            return 3, why
        return None
