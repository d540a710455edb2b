"""GPU quantities the wire format can carry, checked at admission (pure).

HAMi's device strings carry counts, memory (MiB) and cores as Go int32
(`hami.io/vgpu-devices-to-allocate`: `<uuid>,<type>,<usedmem>,<usedcores>`). A quantity beyond that,
or one that is not an integer, would be read as "no GPU" (`gpumem: "2147483648"`) or wrap
(`gpucores: "4294967196"` becomes -100 and is placed on a full GPU). The webhook refuses such a pod
instead, naming the container, the resource, the value and the limit.

`check_container(ctr, limits)` -> the refusal message, or None. `nvidia_limits(cfg)` and
`vendor_limits(vendors)` give the (resource, most) pairs to check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.device.codec import CodecError
from hami.device.model import NvidiaConfig
from hami.device.request import parse_quantity
from hami.device.vendors import VendorTable

MAX_INT32 = (1 << 31) - 1


def nvidia_limits(cfg: NvidiaConfig) -> tuple[tuple[str, int, str], ...]:
    """(resource, most, unit) for NVIDIA's resources: memory x memory_factor stays below 2^31 MiB."""
    factor = max(cfg.memory_factor, 1)
    out = [(cfg.resource_count_name, MAX_INT32, "devices"),
           (cfg.resource_memory_name, MAX_INT32 // factor,
            "MiB" if factor == 1 else f"units of {factor} MiB"),
           (cfg.resource_core_name, MAX_INT32, "percent"),
           (cfg.resource_memory_percentage_name, 100, "percent")]
    return tuple((name, most, unit) for name, most, unit in out if name)


def vendor_limits(vendors: VendorTable | None) -> tuple[tuple[str, int, str], ...]:
    out: list[tuple[str, int, str]] = []
    for v in (vendors.others if vendors is not None else ()):
        for name, unit in ((v.count_resource, "devices"), (v.memory_resource, "MiB"), (v.core_resource, "cores")):
            if name:
                out.append((name, MAX_INT32, unit))
    return tuple(out)


def _problem(raw: object, most: int) -> str | None:
    if type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) < 19:
        return None if int(raw) <= most else f"is over the limit of {most}"  # the common case: "1", "4096"
    try:
        value = parse_quantity(raw)
    except CodecError:
        return "is not a Kubernetes quantity"
    if value.denominator != 1:
        return "is not a whole number"
    if value < 0:
        return "is negative"
    if value > most:
        return f"is over the limit of {most}"
    return None


def check_container(ctr: Mapping, limits: Iterable[tuple[str, int, str]]) -> str | None:
    """The first GPU quantity of `ctr` (limits, then requests) the wire format cannot carry."""
    res = ctr.get("resources") if isinstance(ctr.get("resources"), Mapping) else {}
    for part in ("limits", "requests"):
        values = res.get(part) if isinstance(res.get(part), Mapping) else {}
        for name, most, unit in limits:
            if name not in values:
                continue
            problem = _problem(values[name], most)
            if problem is not None:
                return (f"container {ctr.get('name', '')}: resources.{part}[{name}] {values[name]!r} {problem}: "
                        f"it must be a whole number from 0 to {most} ({unit}), the most HAMi's device "
                        f"annotations carry")
    return None
