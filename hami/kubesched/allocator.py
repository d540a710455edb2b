"""DRA structured allocation (pure): kube-scheduler's DynamicResources plugin, for one node.

Inputs are plain API objects: ResourceSlices (`inventory`), the claims already allocated
(`Usage.of`), DeviceClasses by name, and the pod's claims. `allocate(...)` answers, for one node,
either the `status.allocation` of every claim that still needs one (written as the real scheduler
writes it) or the first failure, with a reason naming the claim, the request and what failed, and
per-device details for `hami doctor pod`.

Modelled (resource.k8s.io/v1): `exactly` requests with `deviceClassName`, `selectors[].cel`
(the class's first), `allocationMode` ExactCount (`count`, default 1) or All; consumable capacity
(KEP-5075): a device with `allowMultipleAllocations` serves several allocations while each of its
capacities lasts, a request's `capacity.requests` rounded up by the capacity's `requestPolicy`
(`default`, `validValues`, `validRange` min/max/step), a capacity not requested taking the
policy's default or else all of it; a device without it is exclusive; `constraints[].matchAttribute`
over the listed requests (all when none are listed). Results carry `consumedCapacity` and `shareID`
for shared devices. Not modelled: `firstAvailable`, `distinctAttribute`, `adminAccess`, slices
with `allNodes`/`nodeSelector`, device taints, partitionable devices (counters).

Bounded work: a claim has at most 32 requests and 32 results (the API's limits), and the
backtracking search stops after `MAX_STEPS` device tries with a clear reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hami.kubesched.cel import (
    CelError,
    SelectorCompiler,
    device_activation,
    format_quantity,
    qualify,
    to_quantity,
)

MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_RESULTS = 32  # AllocationResultsMaxSize
MAX_STEPS = 20_000
MIB = 1 << 20
_ACTIVATION = object()  # Device.memo's key of the CEL activation (never an expression)


class AllocationError(ValueError):
    """A claim that cannot be read at all (names the field); the pod cannot be scheduled."""


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str
    raw: Mapping = field(repr=False, compare=False)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)  # "domain/name" -> value
    policies: Mapping[str, Mapping] = field(default_factory=dict, repr=False, compare=False)
    multi: bool = False
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


def inventory(slices: Iterable[Mapping]) -> dict[str, list[Device]]:
    """Devices per node from ResourceSlices: the newest generation of each pool only, in slice
    and device order (the order the allocator tries them)."""
    newest: dict[tuple[str, str], int] = {}
    usable = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        node = spec.get("nodeName")
        if not node:
            continue  # allNodes / nodeSelector slices are not modelled
        k = (str(spec.get("driver", "")), str(pool.get("name", "")))
        gen = int(pool.get("generation") or 0)
        usable.append((k, gen, str(node), spec))
        newest[k] = max(newest.get(k, gen), gen)
    out: dict[str, list[Device]] = {}
    for (driver, pool), gen, node, spec in sorted(usable, key=lambda u: (u[2], u[0])):
        if gen != newest[(driver, pool)]:
            continue
        for d in spec.get("devices") or []:
            caps, policies = {}, {}
            try:
                for cname, craw in (d.get("capacity") or {}).items():
                    q = "/".join(qualify(str(cname), driver))
                    craw = craw if isinstance(craw, Mapping) else {"value": craw}
                    caps[q] = to_quantity(craw.get("value"), field=f"device {d.get('name')} capacity {cname}")
                    if isinstance(craw.get("requestPolicy"), Mapping):
                        policies[q] = craw["requestPolicy"]
            except CelError:
                continue  # a device the API server should have refused is left out, never a crash
            out.setdefault(node, []).append(Device(driver, pool, str(d.get("name", "")), node, d, caps, policies,
                                                   bool(d.get("allowMultipleAllocations"))))
    return out


@dataclass
class Usage:
    """What allocated claims hold: consumed capacity per shared device, and exclusive devices."""

    consumed: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)
    exclusive: set[tuple[str, str, str]] = field(default_factory=set)

    @classmethod
    def of(cls, claims: Iterable[Mapping]) -> Usage:
        u = cls()
        for c in claims:
            u.add_allocation((c.get("status") or {}).get("allocation"))
        return u

    def add_allocation(self, allocation: Mapping | None) -> None:
        for r in ((allocation or {}).get("devices") or {}).get("results") or []:
            key = (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            consumed = r.get("consumedCapacity")
            if r.get("shareID") or consumed:
                slot = self.consumed.setdefault(key, {})
                for name, v in (consumed or {}).items():
                    q = "/".join(qualify(str(name), key[0]))
                    try:
                        slot[q] = slot.get(q, Fraction(0)) + to_quantity(v)
                    except CelError:
                        continue  # a corrupt result counts as nothing, never as a crash
            else:
                self.exclusive.add(key)

    def copy(self) -> Usage:
        return Usage({k: dict(v) for k, v in self.consumed.items()}, set(self.exclusive))

    def free(self, dev: Device, cap: str) -> Fraction:
        return dev.capacity.get(cap, Fraction(0)) - self.consumed.get(dev.key, {}).get(cap, Fraction(0))


# --------------------------------------------------------------------------- capacity

def readable(value: Fraction) -> str:
    """A capacity for people: whole MiB as `4000Mi`, anything else as its quantity."""
    if value.denominator == 1 and value >= MIB and value.numerator % MIB == 0:
        return f"{value.numerator // MIB}Mi"
    return format_quantity(value)


def for_device(requests: Mapping[str, Fraction], dev: Device) -> dict[str, Fraction]:
    """A request's capacity names qualified by the device's driver (`memory` -> `<driver>/memory`)."""
    return {"/".join(qualify(n, dev.driver)): v for n, v in requests.items()}


def consumption(dev: Device, requests: Mapping[str, Fraction]) -> tuple[dict[str, Fraction] | None, str]:
    """What one allocation takes of a shared device: (capacity -> amount, "") or (None, why not).
    Each capacity of the device is taken: the request rounded up by its policy, else the policy's
    default, else all of it (KEP-5075's rules). Unqualified request names are the device driver's."""
    requests = for_device(requests, dev)
    for name in requests:
        if name not in dev.capacity:
            return None, f"has no capacity {name.rpartition('/')[2]}"
    out = {}
    for name, total in dev.capacity.items():
        policy = dev.policies.get(name) or {}
        want = requests.get(name)
        if want is None:
            want = to_quantity(policy["default"]) if policy.get("default") is not None else total
        amount, why = _apply_policy(want, policy)
        if amount is None:
            return None, f"{name.rpartition('/')[2]}: {why}"
        out[name] = amount
    return out, ""


def _apply_policy(want: Fraction, policy: Mapping) -> tuple[Fraction | None, str]:
    if want < 0:
        return None, "a negative request"
    valid = policy.get("validValues")
    if valid:
        options = sorted(to_quantity(v) for v in valid)
        fit = next((v for v in options if v >= want), None)
        if fit is None:
            return None, f"{format_quantity(want)} is above every valid value"
        return fit, ""
    rng = policy.get("validRange")
    if isinstance(rng, Mapping):
        lo = to_quantity(rng["min"]) if rng.get("min") is not None else Fraction(0)
        amount = max(want, lo)
        step = to_quantity(rng["step"]) if rng.get("step") is not None else None
        if step:
            k = -((-(amount - lo)) // step)  # ceil
            amount = lo + k * step
        if rng.get("max") is not None and amount > to_quantity(rng["max"]):
            return None, f"{format_quantity(amount)} is above the maximum {rng['max']}"
        return amount, ""
    return want, ""


# --------------------------------------------------------------------------- requests

@dataclass(frozen=True)
class Request:
    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str  # ExactCount | All
    count: int
    capacity: Mapping[str, Fraction]


def read_requests(claim: Mapping) -> list[Request]:
    """A claim's requests, checked (AllocationError names the field)."""
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
        if r.get("firstAvailable"):
            raise AllocationError(f"{at}.firstAvailable: prioritized lists are not supported by this allocator")
        ex = r.get("exactly")
        if not isinstance(ex, Mapping):
            raise AllocationError(f"{at}.exactly: required")
        mode = ex.get("allocationMode") or "ExactCount"
        count = ex.get("count", 1) if mode == "ExactCount" else 0
        if mode not in ("ExactCount", "All") or not isinstance(count, int) or isinstance(count, bool) or \
                (mode == "ExactCount" and not 1 <= count <= MAX_RESULTS):
            raise AllocationError(f"{at}.exactly: allocationMode {mode!r} with count {count!r} (1..{MAX_RESULTS})")
        caps = {}
        for k, v in ((ex.get("capacity") or {}).get("requests") or {}).items():
            caps[str(k)] = to_quantity(v, field=f"{at}.exactly.capacity.requests[{k}]")
        sels = tuple(str((s.get("cel") or {}).get("expression", "")) for s in ex.get("selectors") or []
                     if isinstance(s, Mapping))
        out.append(Request(str(r.get("name", "")), str(ex.get("deviceClassName", "")), sels, mode, count, caps))
    return out


def _constraints(claim: Mapping, names: Sequence[str]) -> list[tuple[str, frozenset[str]]]:
    out = []
    for i, c in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []):
        if not isinstance(c, Mapping):
            raise AllocationError(f"spec.devices.constraints[{i}]: not an object")
        if c.get("distinctAttribute"):
            raise AllocationError(f"spec.devices.constraints[{i}].distinctAttribute: not supported by this allocator")
        attr = c.get("matchAttribute")
        if not isinstance(attr, str) or not attr:
            raise AllocationError(f"spec.devices.constraints[{i}].matchAttribute: required")
        reqs = frozenset(c.get("requests") or names)
        out.append((attr, reqs))
    return out


def _attribute(dev: Device, qualified: str) -> Any:
    domain, _, short = qualified.rpartition("/")
    for name, raw in (dev.raw.get("attributes") or {}).items():
        d, s = qualify(str(name), dev.driver)
        if s == short and d == (domain or dev.driver) and isinstance(raw, Mapping):
            for kind in ("int", "bool", "string", "version"):
                if kind in raw:
                    return (kind, raw[kind])
    return None


# --------------------------------------------------------------------------- allocation

@dataclass
class Outcome:
    ok: bool
    allocations: dict[str, dict] = field(default_factory=dict)  # "ns/name" -> status.allocation
    reason: str = ""  # one line: the claim, the request, what failed (node-independent)
    details: list[str] = field(default_factory=list)  # per device, for the doctor


@dataclass
class _Candidate:
    dev: Device
    consumed: dict[str, Fraction] | None  # None: exclusive


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


class Allocator:
    """Allocates a pod's claims on one node at a time; holds the compiled-selector cache."""

    def __init__(self, cel: SelectorCompiler | None = None, *, new_share_id: Callable[[], str] | None = None):
        self.cel = cel or SelectorCompiler()
        self.new_share_id = new_share_id or (lambda: str(uuid.uuid4()))

    def allocate(self, claims: Sequence[Mapping], node: str, devices: Sequence[Device], usage: Usage,
                 classes: Mapping[str, Mapping]) -> Outcome:
        usage = usage.copy()
        allocations: dict[str, dict] = {}
        for claim in claims:
            key = _claim_key(claim)
            done = (claim.get("status") or {}).get("allocation")
            if done:
                where = allocated_node(done)
                if where is not None and where != node:
                    return Outcome(False, reason=f"claim {key} is allocated to node {where}")
                continue
            try:
                out = self._one(claim, key, node, devices, usage, classes)
            except (AllocationError, CelError) as exc:
                return Outcome(False, reason=f"claim {key}: {exc}")
            if not out.ok:
                return out
            allocations.update(out.allocations)
            usage.add_allocation(out.allocations[key])
        return Outcome(True, allocations)

    # ------------------------------------------------------------------ one claim

    def _one(self, claim: Mapping, key: str, node: str, devices: Sequence[Device], usage: Usage,
             classes: Mapping[str, Mapping]) -> Outcome:
        requests = read_requests(claim)
        constraints = _constraints(claim, [r.name for r in requests])
        candidates: list[list[_Candidate]] = []
        for req in requests:
            cls = classes.get(req.device_class)
            if cls is None:
                return Outcome(False, reason=f"claim {key}: request {req.name}: device class {req.device_class} "
                                             "not found")
            cands, why, details = self._candidates(req, cls, devices, usage)
            if not cands or (req.mode == "ExactCount" and len(cands) < req.count):
                need = f" ({len(cands)} of {req.count} devices)" if cands else ""
                return Outcome(False, reason=f"claim {key}: request {req.name}: {why}{need}", details=details)
            candidates.append(cands)
        picked = self._search(requests, candidates, constraints, usage)
        if isinstance(picked, str):
            return Outcome(False, reason=f"claim {key}: {picked}")
        results = []
        for req, chosen in zip(requests, picked, strict=True):
            for c in chosen:
                r: dict[str, Any] = {"request": req.name, "driver": c.dev.driver, "pool": c.dev.pool,
                                     "device": c.dev.name}
                if c.consumed is not None:
                    r["shareID"] = self.new_share_id()
                    r["consumedCapacity"] = {n.rpartition("/")[2] if n.startswith(c.dev.driver + "/") else n:
                                             format_quantity(v) for n, v in c.consumed.items()}
                results.append(r)
        if len(results) > MAX_RESULTS:
            return Outcome(False, reason=f"claim {key}: {len(results)} devices, over the limit of {MAX_RESULTS}")
        config = []
        for req in requests:
            for cfg in (classes[req.device_class].get("spec") or {}).get("config") or []:
                config.append({"source": "FromClass", "requests": [req.name], **{k: v for k, v in cfg.items()
                                                                                  if k != "requests"}})
        for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            config.append({"source": "FromClaim", **cfg})
        allocation = {"devices": {"results": results, **({"config": config} if config else {})},
                      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                          {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
        return Outcome(True, {key: allocation})

    def _candidates(self, req: Request, cls: Mapping, devices: Sequence[Device],
                    usage: Usage) -> tuple[list[_Candidate], str, list[str]]:
        """Devices that could serve one slot of `req`, and (when none) the furthest failure."""
        if not devices:
            return [], "no devices published for this node", []
        class_sels = [str((s.get("cel") or {}).get("expression", ""))
                      for s in (cls.get("spec") or {}).get("selectors") or [] if isinstance(s, Mapping)]
        stage, why, details, out = 0, "", [], []
        for dev in devices:
            failed = None
            for which, sels, level in (("device class " + req.device_class, class_sels, 1),
                                       ("request", req.selectors, 2)):
                for expr in sels:
                    try:
                        ok = dev.selector(self.cel, expr)
                    except CelError as exc:
                        failed = (level, f"{which} selector {expr!r}: {exc}")
                        break
                    if not ok:
                        failed = (level, f"{which} selector {expr!r} is false")
                        break
                if failed:
                    break
            if failed is None:
                failed = self._capacity(req, dev, usage)
                if failed is None:
                    cons, _ = consumption(dev, req.capacity) if dev.multi else (None, "")
                    out.append(_Candidate(dev, cons))
                    continue
            details.append(f"{dev.label}: {failed[1]}")
            if failed[0] >= stage:
                stage, why = failed[0], failed[1]
        summary = {1: f"no device matches the selectors of device class {req.device_class}",
                   2: "no device matches the request's selectors"}.get(stage, why)
        if stage in (1, 2) and "runtime error" in why:
            summary += f" ({why})"
        if stage == 3:  # node-independent, so one line counts every node it failed on
            summary = (f"no matching device has capacity {why.rpartition(' ')[2]}" if why.startswith("has no")
                       else f"not enough free {why.split()[0].rstrip(':')} on any matching device")
        elif stage == 4:
            summary = f"every matching device is in use ({why})"
        return out, summary, details

    @staticmethod
    def _capacity(req: Request, dev: Device, usage: Usage) -> tuple[int, str] | None:
        if dev.key in usage.exclusive:
            return 4, "allocated exclusively to another claim"
        if not dev.multi:
            if dev.key in usage.consumed:
                return 4, "shared by another claim, cannot be allocated exclusively"
            for name, want in for_device(req.capacity, dev).items():
                if name not in dev.capacity:
                    return 3, f"has no capacity {name.rpartition('/')[2]}"
                if want > dev.capacity[name]:
                    return 3, (f"{name.rpartition('/')[2]} {readable(want)} requested, the device has "
                               f"{readable(dev.capacity[name])}")
            return None
        cons, why = consumption(dev, req.capacity)
        if cons is None:
            return 3, why
        for name, amount in cons.items():
            free = usage.free(dev, name)
            if amount > free:
                return 3, (f"{name.rpartition('/')[2]} {readable(amount)} requested, "
                           f"{readable(free)} of {readable(dev.capacity[name])} free")
        return None

    def _search(self, requests: Sequence[Request], candidates: Sequence[Sequence[_Candidate]],
                constraints: Sequence[tuple[str, frozenset[str]]], usage: Usage) -> list[list[_Candidate]] | str:
        """Backtracking over the requests' slots: distinct devices within a request, shared devices
        reused across requests while capacity lasts, every matchAttribute constraint kept."""
        slots = []  # (request index) per slot
        for i, req in enumerate(requests):
            n = len(candidates[i]) if req.mode == "All" else req.count
            slots += [i] * n
        if len(slots) > MAX_RESULTS:
            return f"{len(slots)} devices requested, over the limit of {MAX_RESULTS}"
        chosen: list[list[_Candidate]] = [[] for _ in requests]
        values: dict[int, Any] = {}  # constraint index -> the attribute value fixed so far
        steps = 0
        local = usage.copy()

        def ok_constraints(i: int, dev: Device) -> list[int] | None:
            fixed = []
            for ci, (attr, reqs) in enumerate(constraints):
                if requests[i].name not in reqs:
                    continue
                v = _attribute(dev, attr)
                if v is None:
                    return None
                if ci in values:
                    if values[ci] != v:
                        return None
                else:
                    fixed.append(ci)
            for ci in fixed:
                values[ci] = _attribute(dev, constraints[ci][0])
            return fixed

        def fits(c: _Candidate) -> bool:
            if c.consumed is None:
                return c.dev.key not in local.exclusive and c.dev.key not in local.consumed
            if c.dev.key in local.exclusive:
                return False
            return all(amount <= local.free(c.dev, n) for n, amount in c.consumed.items())

        def place(s: int) -> bool:
            nonlocal steps
            if s == len(slots):
                return True
            i = slots[s]
            start = 0
            if s > 0 and slots[s - 1] == i:  # slots of one request take devices in order: no permutations
                prev = chosen[i][-1]
                start = candidates[i].index(prev) + 1
            for c in candidates[i][start:]:
                steps += 1
                if steps > MAX_STEPS:
                    return False
                if not fits(c):
                    continue
                fixed = ok_constraints(i, c.dev)
                if fixed is None:
                    continue
                chosen[i].append(c)
                if c.consumed is None:
                    local.exclusive.add(c.dev.key)
                else:
                    slot = local.consumed.setdefault(c.dev.key, {})
                    for n, amount in c.consumed.items():
                        slot[n] = slot.get(n, Fraction(0)) + amount
                if place(s + 1):
                    return True
                chosen[i].pop()
                if c.consumed is None:
                    local.exclusive.discard(c.dev.key)
                else:
                    for n, amount in c.consumed.items():
                        local.consumed[c.dev.key][n] -= amount
                    if not any(local.consumed[c.dev.key].values()):
                        del local.consumed[c.dev.key]
                for ci in fixed:
                    values.pop(ci, None)
            return False

        if place(0):
            return chosen
        if steps > MAX_STEPS:
            return f"the allocation search gave up after {MAX_STEPS} tries"
        if constraints:
            attrs = ", ".join(sorted({a for a, _ in constraints}))
            return f"no set of devices satisfies the constraints (matchAttribute {attrs}) with enough free capacity"
        return "not enough devices with free capacity for every request together"
