"""What each container of a pod asks of the NVIDIA devices, with HAMi's semantics. Pure.

`pod_requests(pod, cfg)` takes a raw Kubernetes pod dict (as the API server sends it) and returns
one entry per container, init containers first, then app containers (the index HAMi's pod
device string uses): a `ContainerDeviceRequest`, or None for a container that asks for no GPU.
It follows `GenerateResourceRequests` (HAMi pkg/device/nvidia/device.go) step by step:

1. `nums` = limits[count], falling back to requests[count]; absent or not an integer -> None.
2. `memreq` = limits|requests[memory] x memoryFactor; a value that is not an integer, negative,
   or above MaxInt32/factor (e.g. `16Gi`) makes the whole container request None.
3. `mempercentagereq` starts at 101 ("unset"); an integer percentage > 100 is clamped to 100,
   one <= 0 stays 101.
4. 101 and memreq 0: `defaultMemory` when set, else a percentage of 100 (the whole card).
5. `coresreq` = `defaultCores`, overridden by an integer limits|requests[cores].

Quantities are Kubernetes resource quantities (`1`, `4096`, `16Gi`, `500m`, `1e3`); they are read
exactly (`parse_quantity` returns a Fraction), and "an integer" means Go's Quantity.AsInt64 on
the API server's canonical form: an exact integer within int64.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from hami.device.codec import CodecError
from hami.device.model import (
    NVIDIA,
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    NvidiaConfig,
)

MAX_INT32 = (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# --------------------------------------------------------------------------- quantities

_QUANTITY_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT_RE = re.compile(r"[eE]([+-]?[0-9]+)")
# Decimal exponents beyond this are refused rather than turned into enormous integers.
_MAX_EXPONENT = 400


def parse_quantity(text: Any, *, field: str = "quantity") -> Fraction:
    """A Kubernetes resource quantity, exactly (resource.ParseQuantity's grammar).

    Accepts a string, or an int as a hand-built dict might hold. Raises CodecError otherwise.
    """
    if type(text) is int:
        return Fraction(text)
    if type(text) is not str:
        raise CodecError(f"quantity must be a string, got {type(text).__name__}", field=field, text=repr(text))
    if not text:
        raise CodecError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", field=field, text=text, position=0)
    m = _QUANTITY_RE.fullmatch(text)
    sign, num, denom, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if text.count(".") > 1 or not _valid_suffix_chars(suffix):
        raise CodecError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", field=field, text=text,
                         position=len(text) - len(suffix))
    value = Fraction(int(num or "0") * 10 ** len(denom) + int(denom or "0"), 10 ** len(denom))
    if suffix in _DECIMAL_SI:
        value *= Fraction(10) ** _DECIMAL_SI[suffix]
    elif suffix in _BINARY_SI:
        value *= 1 << _BINARY_SI[suffix]
    else:
        em = _EXPONENT_RE.fullmatch(suffix)
        if em is None:
            raise CodecError("unable to parse quantity's suffix", field=field, text=text,
                             position=len(text) - len(suffix))
        exp = int(em.group(1))
        if not _INT64_MIN <= exp <= _INT64_MAX:
            raise CodecError("unable to parse quantity's suffix", field=field, text=text,
                             position=len(text) - len(suffix))
        exp = (exp + (1 << 31)) % (1 << 32) - (1 << 31)  # Go keeps int32(parsed)
        if value and abs(exp) > _MAX_EXPONENT:
            raise CodecError("quantity exponent out of the supported range", field=field, text=text,
                             position=len(text) - len(suffix))
        if value:
            value *= Fraction(10) ** exp
    return -value if sign == "-" else value


def _valid_suffix_chars(suffix: str) -> bool:
    # Go: suffix letters from "eEinumkKMGTP", then an optional sign, then digits, then the end.
    i, n = 0, len(suffix)
    while i < n and suffix[i] in "eEinumkKMGTP":
        i += 1
    if i < n and suffix[i] in "+-":
        i += 1
    while i < n and suffix[i] in "0123456789":
        i += 1
    return i == n


def quantity_as_int64(text: Any) -> int | None:
    """Go Quantity.AsInt64 on the canonical form: the value when it is an exact integer that
    fits int64, else None (also for text that is not a quantity)."""
    if type(text) is str and text.isascii() and text.isdigit() and len(text) < 19:
        return int(text)  # the common case, e.g. "1" or "4096"
    try:
        value = parse_quantity(text)
    except CodecError:
        return None
    if value.denominator != 1 or not _INT64_MIN <= value.numerator <= _INT64_MAX:
        return None
    return value.numerator


def quantity_value(text: Any) -> int | None:
    """Go Quantity.Value(): rounded up, away from zero, to an integer; None if not a quantity."""
    try:
        value = parse_quantity(text)
    except CodecError:
        return None
    n = -((-value.numerator) // value.denominator) if value >= 0 else value.numerator // value.denominator
    return n


def _wrap_int32(n: int) -> int:
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)


# --------------------------------------------------------------------------- container resources


def container_resources(container: Mapping) -> tuple[Mapping, Mapping]:
    res = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(res, Mapping):
        return {}, {}
    limits = res.get("limits")
    requests = res.get("requests")
    return (limits if isinstance(limits, Mapping) else {}), (requests if isinstance(requests, Mapping) else {})


def _lookup(container: Mapping, name: str) -> tuple[bool, Any]:
    """(present, raw) from limits, falling back to requests (HAMi's order)."""
    limits, requests = container_resources(container)
    if name in limits:
        return True, limits[name]
    if name in requests:
        return True, requests[name]
    return False, None


def resource_present(container: Mapping, name: str) -> bool:
    """The resource is named in the container's limits or requests."""
    return bool(name) and _lookup(container, name)[0]


def resource_in_limits(container: Mapping, name: str) -> bool:
    """The resource is named in the container's limits (the webhook looks at limits only)."""
    return bool(name) and name in container_resources(container)[0]


def resource_int(container: Mapping, name: str) -> int | None:
    """limits, else requests, read as Quantity.AsInt64; None when absent or not an integer."""
    present, raw = _lookup(container, name)
    return quantity_as_int64(raw) if present else None


def resource_value(container: Mapping, name: str) -> int | None:
    """limits, else requests, read as Quantity.Value() (rounded up); None when absent/invalid."""
    present, raw = _lookup(container, name)
    return quantity_value(raw) if present else None


def container_request(container: Mapping, cfg: NvidiaConfig) -> ContainerDeviceRequest | None:
    """HAMi GenerateResourceRequests for one container; None when it asks for no GPU."""
    limits, requests = container_resources(container)
    if not limits and not requests:
        return None

    def lookup(name: str) -> tuple[bool, Any]:
        if name in limits:
            return True, limits[name]
        if name in requests:
            return True, requests[name]
        return False, None

    present, raw = lookup(cfg.resource_count_name)
    if not present:
        return None
    n = quantity_as_int64(raw)
    if n is None:
        return None
    nums = _wrap_int32(n)
    if nums <= 0:
        return None

    memreq = 0
    present, raw = lookup(cfg.resource_memory_name)
    if present:
        mem = quantity_as_int64(raw)
        factor = max(cfg.memory_factor, 1)
        if mem is None or mem < 0 or mem > MAX_INT32 // factor:
            return None
        memreq = mem * factor

    pct = PERCENTAGE_UNSET
    present, raw = lookup(cfg.resource_memory_percentage_name)
    if present:
        p = quantity_as_int64(raw)
        if p is not None:
            p = min(p, 100)
            pct = p if p > 0 else PERCENTAGE_UNSET

    if pct == PERCENTAGE_UNSET and memreq == 0:
        if cfg.default_memory != 0:
            memreq = cfg.default_memory
        else:
            pct = 100

    cores = cfg.default_cores
    present, raw = lookup(cfg.resource_core_name)
    if present:
        c = quantity_as_int64(raw)
        if c is not None:
            cores = _wrap_int32(c)

    return ContainerDeviceRequest(
        nums=nums, type=NVIDIA, memreq=_wrap_int32(memreq), mempercentagereq=pct, coresreq=cores
    )


# --------------------------------------------------------------------------- pods


def pod_containers(pod: Mapping) -> tuple[Mapping, ...]:
    """Init containers, then app containers: the order of the pod device string."""
    # (`__class__ is dict` first: a decoded body's objects are dicts, and an ABC isinstance is slow)
    spec = pod.get("spec") if pod.__class__ is dict or isinstance(pod, Mapping) else None
    if spec.__class__ is not dict and not isinstance(spec, Mapping):
        return ()
    out: list[Mapping] = []
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if isinstance(items, list):
            out.extend([c if c.__class__ is dict or isinstance(c, Mapping) else {} for c in items])
    return tuple(out)


def pod_requests(pod: Mapping, cfg: NvidiaConfig) -> tuple[ContainerDeviceRequest | None, ...]:
    """HAMi Resourcereqs for the NVIDIA vendor: one entry per container, init containers first."""
    return tuple(container_request(c, cfg) for c in pod_containers(pod))


def pod_requests_devices(pod: Mapping, cfg: NvidiaConfig) -> bool:
    """Whether any container (init or app) asks for a GPU (HAMi PodRequiresDevice)."""
    return any(container_request(c, cfg) is not None for c in pod_containers(pod))


def app_containers_request_devices(pod: Mapping, cfg: NvidiaConfig) -> bool:
    """Whether an app container asks for a GPU: HAMi takes the NVIDIA node lock only then."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    items = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(items, list):
        return False
    return any(isinstance(c, Mapping) and container_request(c, cfg) is not None for c in items)


def names_hami_resource(container: Mapping, cfg: NvidiaConfig) -> bool:
    """The container names any HAMi NVIDIA resource (count, memory, percentage, cores, priority)
    in its limits or requests, whatever the values."""
    limits, requests = container_resources(container)
    return any(n and (n in limits or n in requests) for n in cfg.resource_names)
