"""What the UI shows of DRA (resource.k8s.io/v1): every device the ResourceSlices publish, with what
each claim allocated on it consumes. Pure; the objects are raw API dicts, every field tenant input,
kept as text for the renderer to escape."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami.device import codec


def _meta(obj: Mapping) -> Mapping:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


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
