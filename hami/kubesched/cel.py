"""The CEL environment of DRA device selectors (pure), on the maintained `cel-python` (`celpy`).

What a DeviceClass or a request's `selectors[].cel.expression` sees, as kube-scheduler's
structured allocator builds it (k8s.io/dynamic-resource-allocation/cel):

- `device.driver`: the driver name; `device.allowMultipleAllocations`: bool.
- `device.attributes["<domain>"].<name>`: int, bool, string or a semantic version. A device's
  attribute `name` without a domain belongs to the driver's domain. An unknown domain is an empty
  map (so `"x" in device.attributes["d"]` works); an unknown name is a runtime error, as upstream.
- `device.capacity["<domain>"].<name>`: a Quantity.
- `quantity("4Gi")`, `isQuantity(s)`; a Quantity's `compareTo`, `isGreaterThan`, `isLessThan`,
  `add`, `sub`, `asInteger`, `asApproximateFloat`, `isInteger`, `sign`.
- `upperAscii`, `lowerAscii` (the strings extension); `semver("1.2.3")`, `isSemver(s)`; a version's `compareTo`,
  `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`.

Expressions are tenant input (a claim's selectors): their length is bounded as the API server
bounds it (10 KiB); compiled programs are cached per expression in a bounded `SelectorCompiler`.
Each evaluation is metered against kube-scheduler's runtime cost limit and may be given a
deadline (hami.kubesched.celcost).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

from hami.device.codec.errors import CodecError
from hami.device.request import parse_quantity
from hami.kubesched.celcost import COST_LIMIT, CelError, MeteredRunner, deadline

__all__ = ["COST_LIMIT", "CelError", "SelectorCompiler", "deadline"]

MAX_EXPRESSION_LENGTH = 10 * 1024  # resource.k8s.io CELSelectorExpressionMaxLength
_SEMVER = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


class Quantity:
    """A resource.Quantity inside CEL: an exact value, compared through its methods."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({format_quantity(self.value)})"


@dataclass(frozen=True, slots=True, order=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: str = ""

    def key(self) -> tuple:
        # A pre-release sorts before its release (semver 2.0.0 §11, simplified to one string compare).
        return (self.major, self.minor, self.patch, self.pre == "", self.pre)


def parse_semver(text: str) -> Semver:
    m = _SEMVER.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise CelError(f"{text!r} is not a semantic version")
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or "")


def format_quantity(value: Fraction) -> str:
    """A quantity's canonical text: an integer as is, else in milli-units when exact."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))


def to_quantity(raw: Any, *, field: str = "quantity") -> Fraction:
    """A quantity string (or int) from an object, exactly; CelError naming the field otherwise."""
    try:
        return parse_quantity(raw, field=field)
    except CodecError as exc:
        raise CelError(f"{field}: {raw!r} is not a quantity ({exc})") from None


# --------------------------------------------------------------------------- functions

def _q(x: Any, what: str) -> Fraction:
    if isinstance(x, Quantity):
        return x.value
    raise CelError(f"{what}: expected a quantity, got {type(x).__name__}")


def _cmp(a: Any, b: Any) -> int:
    if isinstance(a, Semver) and isinstance(b, Semver):
        ka, kb = a.key(), b.key()
    else:
        ka, kb = _q(a, "compareTo"), _q(b, "compareTo")
    return (ka > kb) - (ka < kb)


def _quantity(s: Any) -> Quantity:
    return Quantity(to_quantity(str(s), field="quantity()"))


def _is_quantity(s: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(s))
    except CodecError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_semver(s: Any) -> celtypes.BoolType:
    return celtypes.BoolType(isinstance(s, str) and _SEMVER.fullmatch(s) is not None)


def _as_integer(q: Any) -> celtypes.IntType:
    v = _q(q, "asInteger")
    if v.denominator != 1:
        raise CelError(f"asInteger: {format_quantity(v)} is not an integer")
    return celtypes.IntType(v.numerator)


FUNCTIONS = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": lambda s: parse_semver(str(s)),
    "isSemver": _is_semver,
    "compareTo": lambda a, b: celtypes.IntType(_cmp(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
    "add": lambda a, b: Quantity(_q(a, "add") + (_q(b, "add") if isinstance(b, Quantity) else Fraction(int(b)))),
    "sub": lambda a, b: Quantity(_q(a, "sub") - (_q(b, "sub") if isinstance(b, Quantity) else Fraction(int(b)))),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_q(q, "asApproximateFloat"))),
    "isInteger": lambda q: celtypes.BoolType(_q(q, "isInteger").denominator == 1),
    "sign": lambda q: celtypes.IntType((_q(q, "sign") > 0) - (_q(q, "sign") < 0)),
    # Kubernetes' CEL carries the strings extension library; these two are what selectors use.
    "upperAscii": lambda s: celtypes.StringType("".join(c.upper() if c.isascii() else c for c in str(s))),
    "lowerAscii": lambda s: celtypes.StringType("".join(c.lower() if c.isascii() else c for c in str(s))),
    "major": lambda v: celtypes.IntType(v.major),
    "minor": lambda v: celtypes.IntType(v.minor),
    "patch": lambda v: celtypes.IntType(v.patch),
}


# --------------------------------------------------------------------------- the device

def _attr_value(raw: Any) -> Any:
    """One ResourceSlice attribute ({int|bool|string|version}) as a CEL value."""
    if not isinstance(raw, Mapping):
        raise CelError(f"attribute {raw!r} is not an object")
    if "int" in raw:
        return celtypes.IntType(int(raw["int"]))
    if "bool" in raw:
        return celtypes.BoolType(bool(raw["bool"]))
    if "string" in raw:
        return celtypes.StringType(str(raw["string"]))
    if "version" in raw:
        return parse_semver(str(raw["version"]))
    raise CelError(f"attribute {raw!r} has no int, bool, string or version")


def qualify(name: str, driver: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name: `numa` is the driver's, `a.b/numa` a.b's."""
    domain, slash, short = name.rpartition("/")
    return (domain, short) if slash else (driver, name)


class _Domains(celtypes.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def device_activation(driver: str, device: Mapping, *, multi: bool) -> dict:
    """The `device` variable for one ResourceSlice device (attributes and capacity by domain)."""
    attrs: dict[str, dict] = {}
    for name, raw in (device.get("attributes") or {}).items():
        domain, short = qualify(str(name), driver)
        attrs.setdefault(domain, {})[celtypes.StringType(short)] = _attr_value(raw)
    caps: dict[str, dict] = {}
    for name, raw in (device.get("capacity") or {}).items():
        domain, short = qualify(str(name), driver)
        value = to_quantity((raw or {}).get("value") if isinstance(raw, Mapping) else raw,
                            field=f"capacity[{name}].value")
        caps.setdefault(domain, {})[celtypes.StringType(short)] = Quantity(value)
    return {"device": celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(multi),
        celtypes.StringType("attributes"): _Domains(
            {celtypes.StringType(d): celtypes.MapType(v) for d, v in attrs.items()}),
        celtypes.StringType("capacity"): _Domains(
            {celtypes.StringType(d): celtypes.MapType(v) for d, v in caps.items()}),
    })}


class SelectorCompiler:
    """Compiles selector expressions once each (bounded LRU) and evaluates them on devices."""

    def __init__(self, max_cached: int = 512, cost_limit: int = COST_LIMIT):
        self.cost_limit = cost_limit
        self._env = celpy.Environment(runner_class=MeteredRunner)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._max = max_cached

    def program(self, expression: str) -> Any:
        prog = self._cache.get(expression)
        if prog is not None:
            self._cache.move_to_end(expression)
            return prog
        if not isinstance(expression, str) or not expression.strip():
            raise CelError("expression is empty")
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise CelError(f"expression is {len(expression)} characters, over the limit of {MAX_EXPRESSION_LENGTH}")
        try:
            prog = self._env.program(self._env.compile(expression), functions=FUNCTIONS)
            prog.expression, prog.cost_limit = expression, self.cost_limit
        except celpy.CELParseError as exc:
            raise CelError(f"compilation failed: {str(exc).splitlines()[0]}") from None
        except Exception as exc:  # noqa: BLE001 - celpy raises several types for bad programs
            raise CelError(f"compilation failed: {exc}") from None
        self._cache[expression] = prog
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return prog

    def check(self, expression: str) -> None:
        """Raise CelError when `expression` does not compile (the API server's validation)."""
        self.program(expression)

    def matches(self, expression: str, activation: Mapping) -> bool:
        """The selector's verdict on one device; CelError on a compile or run-time error, or a
        result that is not a bool (as upstream: "must evaluate to bool")."""
        prog = self.program(expression)
        try:
            out = prog.evaluate(activation)
        except CelError:
            raise
        except Exception as exc:  # noqa: BLE001 - CELEvalError and errors from our functions
            raise CelError(f"runtime error: {_eval_text(exc)}") from None
        if isinstance(out, Exception):
            raise CelError(f"runtime error: {_eval_text(out)}")
        if not isinstance(out, (bool, celtypes.BoolType)):
            raise CelError(f"must evaluate to bool, got {type(out).__name__}")
        return bool(out)


def _eval_text(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str):
        return args[0]
    return str(exc)
