"""Validation of the resource.k8s.io/v1 kinds the embedded API server stores (pure).

The API server's checks that matter for what tenants and drivers write: shapes, the API's size
limits (requests, selectors, results, reservedFor, devices, attributes), quantities, CEL that
compiles, and a claim's spec being immutable. The 1.36 fields are accepted as v1 does:
`firstAvailable` subrequests (named, at most 8), request `tolerations` (KEP-5055), `adminAccess`
(only in a namespace labelled `resource.kubernetes.io/admin-access: "true"`, the DRAAdminAccess
admission rule), `distinctAttribute`, slices' `sharedCounters` and devices' `consumesCounters`
(KEP-4815), device `taints`, `bindingConditions` / `bindingFailureConditions`, capacity
`requestPolicy` (KEP-5075). Each failure is `FieldInvalid(field, message)`;
the store answers it 422 naming the field, as kube-apiserver does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from hami.device.codec.errors import CodecError
from hami.device.request import parse_quantity

MAX_REQUESTS = 32
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_RESULTS = 32
MAX_COUNT = 32
MAX_RESERVED_FOR = 256
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITY = 32
MAX_SUBREQUESTS = 8
MAX_TOLERATIONS = 16
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED = re.compile(r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

DRA_KEYS = frozenset({"deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io",
                      "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io"})


class FieldInvalid(ValueError):
    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


CelCheck = Callable[[str], None]  # raises ValueError with the compile error


def _dict(v: Any, field: str, required: bool = False) -> Mapping:
    if v is None and not required:
        return {}
    if not isinstance(v, Mapping):
        raise FieldInvalid(field, "Required value" if v is None else f"Invalid value: expected an object, "
                                                                     f"got {type(v).__name__}")
    return v


def _list(v: Any, field: str, most: int) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise FieldInvalid(field, f"Invalid value: expected a list, got {type(v).__name__}")
    if len(v) > most:
        raise FieldInvalid(field, f"Too many: {len(v)}: must have at most {most} items")
    return v


def _quantity(v: Any, field: str, *, non_negative: bool = True) -> None:
    try:
        q = parse_quantity(v, field=field)
    except CodecError:
        raise FieldInvalid(field, f"Invalid value: {str(v)[:64]!r}: not a quantity") from None
    if non_negative and q < 0:
        raise FieldInvalid(field, f"Invalid value: {v!r}: must be greater than or equal to 0")


def _selectors(v: Any, field: str, cel: CelCheck) -> None:
    for i, s in enumerate(_list(v, field, MAX_SELECTORS)):
        expr = _dict(_dict(s, f"{field}[{i}]", True).get("cel"), f"{field}[{i}].cel", True).get("expression")
        at = f"{field}[{i}].cel.expression"
        if not isinstance(expr, str) or not expr.strip():
            raise FieldInvalid(at, "Required value")
        try:
            cel(expr)
        except ValueError as exc:
            raise FieldInvalid(at, f"Invalid value: {str(exc)[:300]}") from None


def _tolerations(v: Any, field: str) -> None:
    for i, t in enumerate(_list(v, field, MAX_TOLERATIONS)):
        t = _dict(t, f"{field}[{i}]", True)
        op = t.get("operator", "Equal")
        if op not in ("Equal", "Exists"):
            raise FieldInvalid(f"{field}[{i}].operator",
                               f'Unsupported value: {op!r}: supported values: "Equal", "Exists"')
        if op == "Exists" and t.get("value"):
            raise FieldInvalid(f"{field}[{i}].value", "Invalid value: must be empty when `operator` is 'Exists'")
        if not t.get("key") and op != "Exists":
            raise FieldInvalid(f"{field}[{i}].operator", "Invalid value: operator must be Exists when `key` is empty")
        if t.get("effect") and t["effect"] not in TAINT_EFFECTS:
            raise FieldInvalid(f"{field}[{i}].effect", f"Unsupported value: {t['effect']!r}")


def _claim_spec(spec: Any, field: str, cel: CelCheck, admin_access_allowed: bool = False) -> None:
    devices = _dict(_dict(spec, field).get("devices"), f"{field}.devices")
    names = set()
    for i, r in enumerate(_list(devices.get("requests"), f"{field}.devices.requests", MAX_REQUESTS)):
        at = f"{field}.devices.requests[{i}]"
        r = _dict(r, at, True)
        name = r.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name) or len(name) > 63:
            raise FieldInvalid(f"{at}.name", f"Invalid value: {name!r}: must be a DNS label")
        if name in names:
            raise FieldInvalid(f"{at}.name", f"Duplicate value: {name!r}")
        names.add(name)
        if ("exactly" in r) == ("firstAvailable" in r):
            raise FieldInvalid(at, "Invalid value: exactly one of exactly or firstAvailable is required")
        subs = [(f"{at}.exactly", r["exactly"])] if "exactly" in r else [
            (f"{at}.firstAvailable[{j}]", s) for j, s in enumerate(_list(r["firstAvailable"],
                                                                         f"{at}.firstAvailable", MAX_SUBREQUESTS))]
        if "firstAvailable" in r and not subs:
            raise FieldInvalid(f"{at}.firstAvailable", "Required value: at least one subrequest")
        sub_names: set[str] = set()
        for sat, ex in subs:
            ex = _dict(ex, sat, True)
            if "firstAvailable" in r:
                sub = ex.get("name")
                if not isinstance(sub, str) or not _DNS_LABEL.fullmatch(sub) or len(sub) > 63:
                    raise FieldInvalid(f"{sat}.name", f"Invalid value: {sub!r}: must be a DNS label")
                if sub in sub_names:
                    raise FieldInvalid(f"{sat}.name", f"Duplicate value: {sub!r}")
                sub_names.add(sub)
                names.add(f"{name}/{sub}")
            admin = ex.get("adminAccess")
            if admin is not None and not isinstance(admin, bool):
                raise FieldInvalid(f"{sat}.adminAccess", f"Invalid value: {admin!r}: must be a boolean")
            if admin and not admin_access_allowed:
                raise FieldInvalid(f"{sat}.adminAccess", f"Forbidden: admin access to devices requires the "
                                                         f"`{ADMIN_ACCESS_LABEL}: true` label on this namespace")
            _tolerations(ex.get("tolerations"), f"{sat}.tolerations")
            cls = ex.get("deviceClassName")
            if not isinstance(cls, str) or not cls:
                raise FieldInvalid(f"{sat}.deviceClassName", "Required value")
            mode = ex.get("allocationMode", "ExactCount")
            if mode not in ("ExactCount", "All"):
                raise FieldInvalid(f"{sat}.allocationMode", f'Unsupported value: {mode!r}: supported values: '
                                                            '"All", "ExactCount"')
            count = ex.get("count", 1)
            if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool)
                                         or not 1 <= count <= MAX_COUNT):
                raise FieldInvalid(f"{sat}.count", f"Invalid value: {count!r}: must be between 1 and {MAX_COUNT}")
            _selectors(ex.get("selectors"), f"{sat}.selectors", cel)
            reqs = _dict(_dict(ex.get("capacity"), f"{sat}.capacity").get("requests"), f"{sat}.capacity.requests")
            for k, v in reqs.items():
                if not _QUALIFIED.fullmatch(str(k)):
                    raise FieldInvalid(f"{sat}.capacity.requests", f"Invalid value: {k!r}: not a qualified name")
                _quantity(v, f"{sat}.capacity.requests[{k}]")
    for i, c in enumerate(_list(devices.get("constraints"), f"{field}.devices.constraints", MAX_CONSTRAINTS)):
        at = f"{field}.devices.constraints[{i}]"
        c = _dict(c, at, True)
        kinds = [k for k in ("matchAttribute", "distinctAttribute") if c.get(k) is not None]
        if len(kinds) != 1:
            raise FieldInvalid(at, "Invalid value: exactly one of matchAttribute or distinctAttribute is required")
        attr = c[kinds[0]]
        if not isinstance(attr, str) or not _QUALIFIED.fullmatch(attr) or "/" not in attr:
            raise FieldInvalid(f"{at}.{kinds[0]}", f"Invalid value: {attr!r}: a fully qualified attribute "
                                                   "name (domain/name) is required")
        for r in _list(c.get("requests"), f"{at}.requests", MAX_REQUESTS):
            if str(r) not in names and str(r).split("/")[0] not in names:
                raise FieldInvalid(f"{at}.requests", f"Invalid value: {r!r}: must be the name of a request")
    _list(devices.get("config"), f"{field}.devices.config", MAX_REQUESTS)


def _claim_status(status: Any) -> None:
    status = _dict(status, "status")
    alloc = _dict(status.get("allocation"), "status.allocation")
    results = _list(_dict(alloc.get("devices"), "status.allocation.devices").get("results"),
                    "status.allocation.devices.results", MAX_RESULTS)
    for i, r in enumerate(results):
        at = f"status.allocation.devices.results[{i}]"
        r = _dict(r, at, True)
        for key in ("request", "driver", "pool", "device"):
            if not isinstance(r.get(key), str) or not r.get(key):
                raise FieldInvalid(f"{at}.{key}", "Required value")
        for k, v in _dict(r.get("consumedCapacity"), f"{at}.consumedCapacity").items():
            _quantity(v, f"{at}.consumedCapacity[{k}]")
    for i, ref in enumerate(_list(status.get("reservedFor"), "status.reservedFor", MAX_RESERVED_FOR)):
        ref = _dict(ref, f"status.reservedFor[{i}]", True)
        for key in ("resource", "name", "uid"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                raise FieldInvalid(f"status.reservedFor[{i}].{key}", "Required value")


def _slice_spec(spec: Any) -> None:
    """kube-apiserver's ValidateResourceSliceSpec, field by field in its order (kept whole: a faithful port)."""
    spec = _dict(spec, "spec", True)
    if not isinstance(spec.get("driver"), str) or not spec["driver"]:
        raise FieldInvalid("spec.driver", "Required value")
    pool = _dict(spec.get("pool"), "spec.pool", True)
    if not isinstance(pool.get("name"), str) or not pool["name"]:
        raise FieldInvalid("spec.pool.name", "Required value")
    for key, least in (("generation", 0), ("resourceSliceCount", 1)):
        v = pool.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            raise FieldInvalid(f"spec.pool.{key}", f"Invalid value: {v!r}: must be an integer >= {least}")
    where = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(where) != 1:
        raise FieldInvalid("spec", "Invalid value: exactly one of nodeName, nodeSelector, allNodes, "
                                   f"perDeviceNodeSelection is required (got {len(where)})")
    sets: dict[str, set[str]] = {}
    for i, cs in enumerate(_list(spec.get("sharedCounters"), "spec.sharedCounters", MAX_COUNTER_SETS)):
        cs = _dict(cs, f"spec.sharedCounters[{i}]", True)
        name = cs.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            raise FieldInvalid(f"spec.sharedCounters[{i}].name", f"Invalid value: {name!r}: must be a DNS label")
        if name in sets:
            raise FieldInvalid(f"spec.sharedCounters[{i}].name", f"Duplicate value: {name!r}")
        counters = _dict(cs.get("counters"), f"spec.sharedCounters[{i}].counters", True)
        if not counters or len(counters) > MAX_COUNTERS:
            raise FieldInvalid(f"spec.sharedCounters[{i}].counters", f"Invalid value: 1 to {MAX_COUNTERS} counters")
        for k, v in counters.items():
            _quantity(_dict(v, f"spec.sharedCounters[{i}].counters[{k}]", True).get("value"),
                      f"spec.sharedCounters[{i}].counters[{k}].value")
        sets[name] = set(counters)
    names = set()
    for i, d in enumerate(_list(spec.get("devices"), "spec.devices", MAX_DEVICES_PER_SLICE)):
        at = f"spec.devices[{i}]"
        d = _dict(d, at, True)
        name = d.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name) or len(name) > 63:
            raise FieldInvalid(f"{at}.name", f"Invalid value: {name!r}: must be a DNS label")
        if name in names:
            raise FieldInvalid(f"{at}.name", f"Duplicate value: {name!r}")
        names.add(name)
        attrs = _dict(d.get("attributes"), f"{at}.attributes")
        caps = _dict(d.get("capacity"), f"{at}.capacity")
        if len(attrs) + len(caps) > MAX_ATTRIBUTES_AND_CAPACITY:
            raise FieldInvalid(at, f"Too many: {len(attrs) + len(caps)}: attributes and capacity together "
                                   f"must have at most {MAX_ATTRIBUTES_AND_CAPACITY}")
        for k, v in attrs.items():
            v = _dict(v, f"{at}.attributes[{k}]", True)
            kinds = [t for t in ("int", "bool", "string", "version") if t in v]
            if len(kinds) != 1:
                raise FieldInvalid(f"{at}.attributes[{k}]", "Invalid value: exactly one of int, bool, string or "
                                                            "version is required")
        for k, v in caps.items():
            v = _dict(v, f"{at}.capacity[{k}]", True)
            _quantity(v.get("value"), f"{at}.capacity[{k}].value")
            policy = _dict(v.get("requestPolicy"), f"{at}.capacity[{k}].requestPolicy")
            if policy.get("default") is not None:
                _quantity(policy["default"], f"{at}.capacity[{k}].requestPolicy.default")
            if policy.get("validValues") is not None and policy.get("validRange") is not None:
                raise FieldInvalid(f"{at}.capacity[{k}].requestPolicy", "Invalid value: validValues and validRange "
                                                                         "are mutually exclusive")
            for j, q in enumerate(_list(policy.get("validValues"), f"{at}.capacity[{k}].requestPolicy.validValues",
                                        10)):
                _quantity(q, f"{at}.capacity[{k}].requestPolicy.validValues[{j}]")
            rng = _dict(policy.get("validRange"), f"{at}.capacity[{k}].requestPolicy.validRange")
            for part in ("min", "max", "step"):
                if rng.get(part) is not None:
                    _quantity(rng[part], f"{at}.capacity[{k}].requestPolicy.validRange.{part}")
            if rng and rng.get("min") is None:
                raise FieldInvalid(f"{at}.capacity[{k}].requestPolicy.validRange.min", "Required value")
        for j, t in enumerate(_list(d.get("taints"), f"{at}.taints", MAX_TAINTS)):
            t = _dict(t, f"{at}.taints[{j}]", True)
            if not isinstance(t.get("key"), str) or not _QUALIFIED.fullmatch(t["key"]):
                raise FieldInvalid(f"{at}.taints[{j}].key", f"Invalid value: {t.get('key')!r}: a qualified name")
            if t.get("effect") not in TAINT_EFFECTS:
                raise FieldInvalid(f"{at}.taints[{j}].effect", f"Unsupported value: {t.get('effect')!r}: supported "
                                                               'values: "NoExecute", "NoSchedule", "None"')
        for key in ("bindingConditions", "bindingFailureConditions"):
            for j, c in enumerate(_list(d.get(key), f"{at}.{key}", MAX_BINDING_CONDITIONS)):
                if not isinstance(c, str) or not c:
                    raise FieldInvalid(f"{at}.{key}[{j}]", "Invalid value: a condition type is required")
        if d.get("bindingFailureConditions") and not d.get("bindingConditions"):
            raise FieldInvalid(f"{at}.bindingConditions", "Required value: when bindingFailureConditions are set")
        for j, cc in enumerate(_list(d.get("consumesCounters"), f"{at}.consumesCounters", MAX_COUNTER_SETS)):
            cc = _dict(cc, f"{at}.consumesCounters[{j}]", True)
            if not isinstance(cc.get("counterSet"), str) or not cc["counterSet"]:
                raise FieldInvalid(f"{at}.consumesCounters[{j}].counterSet", "Required value")
            for k, v in _dict(cc.get("counters"), f"{at}.consumesCounters[{j}].counters", True).items():
                _quantity(_dict(v, f"{at}.consumesCounters[{j}].counters[{k}]", True).get("value"),
                          f"{at}.consumesCounters[{j}].counters[{k}].value")


def validate(key: str, obj: Mapping, cel: CelCheck, *, subresource: str = "", old: Mapping | None = None,
             admin_access_allowed: bool = False) -> None:
    """Raise FieldInvalid when `obj` (of store key `key`) is not a valid object of its kind.
    `admin_access_allowed`: the object's namespace carries the admin-access label."""
    if key == "deviceclasses.resource.k8s.io":
        spec = _dict(obj.get("spec"), "spec")
        _selectors(spec.get("selectors"), "spec.selectors", cel)
        _list(spec.get("config"), "spec.config", MAX_REQUESTS)
    elif key == "resourceclaims.resource.k8s.io":
        if subresource == "status":
            _claim_status(obj.get("status"))
            return
        if old is not None and obj.get("spec") != old.get("spec"):
            raise FieldInvalid("spec", "Invalid value: field is immutable")
        _claim_spec(obj.get("spec"), "spec", cel, admin_access_allowed)
    elif key == "resourceclaimtemplates.resource.k8s.io":
        spec = _dict(obj.get("spec"), "spec", True)
        _claim_spec(spec.get("spec"), "spec.spec", cel, admin_access_allowed)
    elif key == "resourceslices.resource.k8s.io":
        _slice_spec(obj.get("spec"))
