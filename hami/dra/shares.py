"""What a ResourceClaim's allocation gives this node's driver. Pure: claim dict in, shares out.

A claim is written by its creator (spec) and by the scheduler (status.allocation); both are read as
untrusted input. `shares` walks `status.allocation.devices.results[]`, keeps the results of this
driver, and refuses with ClaimError (one message naming the field) when a result is in another
pool (another node), names a device this node does not publish, or consumes more than the device
has. Several results on one device (two requests, each its own shareID) are one share: their
memory and cores add up, so HAMi-core sees one limit per GPU.

`consumedCapacity` missing (a scheduler without DRAConsumableCapacity) means the whole device, as
the capacity's requestPolicy default says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from hami.device.codec import CodecError
from hami.device.request import parse_quantity
from hami.dra.slices import MAX_CORES, MIB, MIG_TYPE


class ClaimError(ValueError):
    """The claim cannot be prepared here; the message is what kubelet reports for it."""


@dataclass(frozen=True, slots=True)
class PublishedGpu:
    """A device this node publishes: its name in the slice, the GPU behind it, its size."""

    name: str
    uuid: str
    memory_mib: int
    mig: bool = False  # a MIG instance: taken whole, no HAMi-core limits


@dataclass(frozen=True, slots=True)
class Share:
    """One GPU's part of a claim."""

    device: str  # the slice's device name
    uuid: str
    memory_mib: int
    cores: int
    requests: tuple[str, ...]  # the claim's request names this device serves
    mig: bool = False


def published_gpus(devices: Sequence[Mapping]) -> dict[str, PublishedGpu]:
    """name -> PublishedGpu for the devices of this node's slice (hami.dra.slices.devices_for)."""
    out = {}
    for d in devices:
        memory = int(d["attributes"]["memoryBytes"]["int"])
        out[d["name"]] = PublishedGpu(d["name"], d["attributes"]["uuid"]["string"], memory // MIB,
                                      d["attributes"]["type"]["string"] == MIG_TYPE)
    return out


def _field(obj: object, key: str, path: str, kind: type, default: object = None) -> object:
    if not isinstance(obj, Mapping):
        raise ClaimError(f"{path}: expected an object, got {type(obj).__name__}")
    value = obj.get(key, default)
    if value is None and default is None:
        raise ClaimError(f"{path}.{key} is missing")
    if not isinstance(value, kind):
        raise ClaimError(f"{path}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _quantity(value: object, path: str) -> Fraction:
    try:
        q = parse_quantity(value, field=path)
    except CodecError as exc:
        raise ClaimError(f"{path}: {exc}") from None
    if q < 0:
        raise ClaimError(f"{path}: negative quantity {value!r}")
    return q


def shares(claim: Mapping, *, driver: str, pool: str, published: Mapping[str, PublishedGpu],
           withdrawn: Mapping[str, str] | None = None) -> tuple[Share, ...]:
    """This driver's shares in `claim`, in result order (first result of each device).
    `withdrawn`: device name -> why this node no longer publishes it (an unhealthy GPU)."""
    status = _field(claim, "status", "claim", Mapping, {})
    allocation = status.get("allocation")
    if allocation is None:
        raise ClaimError("claim is not allocated (status.allocation is empty)")
    devices = _field(allocation, "devices", "status.allocation", Mapping)
    results = _field(devices, "results", "status.allocation.devices", list)
    merged: dict[str, dict] = {}
    for i, r in enumerate(results):
        path = f"status.allocation.devices.results[{i}]"
        if _field(r, "driver", path, str) != driver:
            continue
        rpool = _field(r, "pool", path, str)
        name = _field(r, "device", path, str)
        request = _field(r, "request", path, str, "")
        if rpool != pool:
            raise ClaimError(f"{path}: device {rpool}/{name} is allocated to pool {rpool!r}, "
                             f"not this node's pool {pool!r}")
        gpu = published.get(name)
        if gpu is None and name in (withdrawn or {}):
            raise ClaimError(f"{path}: device {name!r} was withdrawn from this node's slice: {withdrawn[name]}")
        if gpu is None:
            raise ClaimError(f"{path}: device {name!r} is not published by this node "
                             f"(known: {', '.join(sorted(published)) or 'none'})")
        consumed = _field(r, "consumedCapacity", path, Mapping, {})
        unknown = sorted(set(consumed) - {"memory", "cores"})
        if unknown:
            raise ClaimError(f"{path}.consumedCapacity: unknown capacity {', '.join(map(repr, unknown))} "
                             f"(this driver has memory and cores)")
        mem = _quantity(consumed["memory"], f"{path}.consumedCapacity.memory") \
            if "memory" in consumed else Fraction(gpu.memory_mib * MIB)
        cores = _quantity(consumed["cores"], f"{path}.consumedCapacity.cores") \
            if "cores" in consumed else Fraction(MAX_CORES)
        if cores.denominator != 1:
            raise ClaimError(f"{path}.consumedCapacity.cores: {consumed['cores']!r} is not a whole percent")
        m = merged.setdefault(name, {"gpu": gpu, "mem": Fraction(0), "cores": Fraction(0), "requests": []})
        m["mem"] += mem
        m["cores"] += cores
        if request and request not in m["requests"]:
            m["requests"].append(request)
    out = []
    for name, m in merged.items():
        gpu: PublishedGpu = m["gpu"]
        mib = int(m["mem"] // MIB)  # HAMi-core limits in whole MiB; a partial MiB is not handed out
        if m["mem"] > gpu.memory_mib * MIB:
            raise ClaimError(f"device {name}: claim consumes {int(m['mem'])} bytes of memory, "
                             f"the device has {gpu.memory_mib * MIB}")
        if m["cores"] > MAX_CORES:
            raise ClaimError(f"device {name}: claim consumes {int(m['cores'])} cores, the device has {MAX_CORES}")
        if mib < 1:
            raise ClaimError(f"device {name}: claim consumes {int(m['mem'])} bytes of memory, less than 1 MiB")
        if gpu.mig and (mib, int(m["cores"])) != (gpu.memory_mib, MAX_CORES):
            raise ClaimError(f"device {name} is a MIG instance: it is taken whole, not a share of "
                             f"{mib} MiB and {int(m['cores'])}%")
        out.append(Share(name, gpu.uuid, mib, int(m["cores"]), tuple(m["requests"]), gpu.mig))
    if not out:
        raise ClaimError(f"claim has no device of driver {driver} in status.allocation.devices.results")
    if len({s.mig for s in out}) > 1:
        raise ClaimError("claim mixes MIG instances and whole GPUs: HAMi-core's limits cannot apply to "
                         "one container's GPUs and not to others")
    return tuple(out)
