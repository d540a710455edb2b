"""What a ResourceClaim's allocation gives this node's driver. Pure: claim dict in, shares out.

A claim is written by its creator (spec) and by the scheduler (status.allocation); both are read as
untrusted input. `shares` walks `status.allocation.devices.results[]`, keeps the results of this
driver, and refuses with ClaimError (one message naming the field) when a result is in another
pool (another node), names a device this node does not publish, or consumes more than the device
has. Several results on one device (two requests, each its own shareID) are one share: their
memory, cores and shares add up, so HAMi-core sees one limit per GPU.

`consumedCapacity` missing (a scheduler without DRAConsumableCapacity) means the whole device, as
the capacity's requestPolicy default says; present without `shares`, one share (the policy's
default). A result with `adminAccess: true` consumes nothing (kube-scheduler's allocator leaves such
results out of every capacity and counter): the claim gets the device for monitoring, without
HAMi-core's limits. A claim mixing admin and ordinary results, or MIG devices and whole GPUs, is
refused: one claim has one CDI spec, whose limits apply to all of its devices or none. An admin
result must answer a request whose spec asks for `adminAccess` (the spec is immutable and the API
server admits it only in a namespace labelled for admin access): status is written by the scheduler,
and a forged admin result would otherwise hand out a GPU without limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from hami.device.codec import CodecError
from hami.device.request import parse_quantity
from hami.dra.slices import CAPACITIES, MAX_CORES, MIB, MIG_TYPE, SHARES

WHOLE, STATIC_MIG, PARTITION = "gpu", "mig", "partition"


class ClaimError(ValueError):
    """The claim cannot be prepared here; the message is what kubelet reports for it."""


@dataclass(frozen=True, slots=True)
class PublishedGpu:
    """A device this node publishes: its name in the slice, the GPU behind it, its size."""

    name: str
    uuid: str  # the GPU's; a static MIG instance's own; a partition's parent GPU's
    memory_mib: int
    mig: bool = False  # a MIG instance (static or partition): taken whole, no HAMi-core limits
    cores: int = MAX_CORES  # the device's cores capacity (100 x deviceCoreScaling)
    shares: int = 0  # the device's `shares` capacity (deviceSplitCount); 0: not published
    kind: str = WHOLE
    profile: str = ""  # a partition's MIG profile and placement (memory slices)
    start: int = 0
    size: int = 0
    partitionable: bool = False  # a whole GPU that can also be cut into MIG partitions


@dataclass(frozen=True, slots=True)
class Share:
    """One GPU's part of a claim."""

    device: str  # the slice's device name
    uuid: str
    memory_mib: int
    cores: int
    requests: tuple[str, ...]  # the claim's request names this device serves
    mig: bool = False
    shares: int = 0
    admin: bool = False  # adminAccess: monitoring, no capacity, no HAMi-core limits
    kind: str = WHOLE
    profile: str = ""
    start: int = 0
    size: int = 0


def _capacity_value(device: Mapping, name: str, default: int) -> int:
    raw = ((device.get("capacity") or {}).get(name) or {}).get("value")
    return int(parse_quantity(raw)) if raw is not None else default


def published_gpus(devices: Sequence[Mapping]) -> dict[str, PublishedGpu]:
    """name -> PublishedGpu for the devices of this node's slices (hami.dra.slices.layout_for)."""
    out = {}
    for d in devices:
        a = d["attributes"]
        memory = int(a["memoryBytes"]["int"]) // MIB
        if a["type"]["string"] != MIG_TYPE:
            out[d["name"]] = PublishedGpu(d["name"], a["uuid"]["string"], memory,
                                          cores=_capacity_value(d, "cores", MAX_CORES),
                                          shares=_capacity_value(d, SHARES, 0),
                                          partitionable=bool(d.get("consumesCounters")))
        elif "uuid" in a:
            out[d["name"]] = PublishedGpu(d["name"], a["uuid"]["string"], memory, True, kind=STATIC_MIG)
        else:
            out[d["name"]] = PublishedGpu(d["name"], a["parentUUID"]["string"], memory, True, kind=PARTITION,
                                          profile=a["profile"]["string"], start=int(a["migStart"]["int"]),
                                          size=int(a["migSize"]["int"]))
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


def admin_requests(claim: Mapping) -> frozenset[str]:
    """The names of the claim's requests whose spec asks for adminAccess (a malformed spec: none)."""
    spec = claim.get("spec") if isinstance(claim.get("spec"), Mapping) else {}
    devices = spec.get("devices") if isinstance(spec.get("devices"), Mapping) else {}
    requests = devices.get("requests") if isinstance(devices.get("requests"), list) else []
    return frozenset(r["name"] for r in requests if isinstance(r, Mapping) and isinstance(r.get("name"), str)
                     and isinstance(r.get("exactly"), Mapping) and r["exactly"].get("adminAccess") is True)


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
        name, request, admin, gpu = _result_device(r, path, claim, pool, published, withdrawn or {})
        mem, cores, count = _consumed(r, path, gpu)
        m = merged.setdefault(name, {"gpu": gpu, "mem": Fraction(0), "cores": Fraction(0), "shares": Fraction(0),
                                     "requests": [], "admin": set()})
        m["admin"].add(admin)
        if not admin:
            m["mem"] += mem
            m["cores"] += cores
            m["shares"] += count
        if request and request not in m["requests"]:
            m["requests"].append(request)
    out = [_device_share(name, m) for name, m in merged.items()]
    if not out:
        raise ClaimError(f"claim has no device of driver {driver} in status.allocation.devices.results")
    if len({s.mig for s in out}) > 1:
        raise ClaimError("claim mixes MIG instances and whole GPUs: HAMi-core's limits cannot apply to "
                         "one container's GPUs and not to others")
    if len({s.admin for s in out}) > 1:
        raise ClaimError("claim mixes adminAccess and ordinary devices: HAMi-core's limits cannot apply to "
                         "one container's GPUs and not to others")
    return tuple(out)


def _result_device(r: Mapping, path: str, claim: Mapping, pool: str, published: Mapping[str, PublishedGpu],
                   withdrawn: Mapping[str, str]) -> tuple[str, str, bool, PublishedGpu]:
    """One result's device, request and adminAccess: in this node's pool, published, asked for as given."""
    rpool = _field(r, "pool", path, str)
    name = _field(r, "device", path, str)
    request = _field(r, "request", path, str, "")
    admin = _field(r, "adminAccess", path, bool, False)
    if admin and request not in admin_requests(claim):
        raise ClaimError(f"{path}: adminAccess, but the claim's request {request!r} does not ask for it "
                         f"(spec.devices.requests[].exactly.adminAccess)")
    if rpool != pool:
        raise ClaimError(f"{path}: device {rpool}/{name} is allocated to pool {rpool!r}, "
                         f"not this node's pool {pool!r}")
    gpu = published.get(name)
    if gpu is None and name in withdrawn:
        raise ClaimError(f"{path}: device {name!r} was withdrawn from this node's slice: {withdrawn[name]}")
    if gpu is None:
        raise ClaimError(f"{path}: device {name!r} is not published by this node "
                         f"(known: {', '.join(sorted(published)) or 'none'})")
    return name, request, admin, gpu


def _consumed(r: Mapping, path: str, gpu: PublishedGpu) -> tuple[Fraction, Fraction, Fraction]:
    """One result's consumedCapacity: (memory bytes, cores, shares); the device's whole where not given."""
    consumed = _field(r, "consumedCapacity", path, Mapping, {})
    known = CAPACITIES if gpu.shares else tuple(c for c in CAPACITIES if c != SHARES)
    unknown = sorted(set(consumed) - set(known))
    if unknown:
        raise ClaimError(f"{path}.consumedCapacity: unknown capacity {', '.join(map(repr, unknown))} "
                         f"(this driver has {', '.join(known)})")
    mem = _quantity(consumed["memory"], f"{path}.consumedCapacity.memory") \
        if "memory" in consumed else Fraction(gpu.memory_mib * MIB)
    cores = _quantity(consumed["cores"], f"{path}.consumedCapacity.cores") \
        if "cores" in consumed else Fraction(min(MAX_CORES, gpu.cores))
    if SHARES in consumed:
        count = _quantity(consumed[SHARES], f"{path}.consumedCapacity.shares")
    else:  # the whole device without consumable capacity; else the policy's default, 1
        count = Fraction(gpu.shares if not consumed else min(1, gpu.shares))
    for what, q in (("cores", cores), (SHARES, count)):
        if q.denominator != 1:
            raise ClaimError(f"{path}.consumedCapacity.{what}: {consumed[what]!r} is not a whole number")
    return mem, cores, count


def _device_share(name: str, m: Mapping) -> Share:
    """One device's share from its results merged: admin access, or the sums within what the device has."""
    gpu: PublishedGpu = m["gpu"]
    if m["admin"] == {True}:
        return Share(name, gpu.uuid, gpu.memory_mib, 0, tuple(m["requests"]), gpu.mig, 0, True,
                     gpu.kind, gpu.profile, gpu.start, gpu.size)
    if len(m["admin"]) > 1:
        raise ClaimError(f"device {name}: the claim has it for adminAccess and for ordinary use at once")
    mib = int(m["mem"] // MIB)  # HAMi-core limits in whole MiB; a partial MiB is not handed out
    if m["mem"] > gpu.memory_mib * MIB:
        raise ClaimError(f"device {name}: claim consumes {int(m['mem'])} bytes of memory, "
                         f"the device has {gpu.memory_mib * MIB}")
    if m["cores"] > gpu.cores:
        raise ClaimError(f"device {name}: claim consumes {int(m['cores'])} cores, the device has {gpu.cores}")
    if m["cores"] > MAX_CORES:
        raise ClaimError(f"device {name}: claim consumes {int(m['cores'])} cores, one claim takes at most "
                         f"{MAX_CORES} (the GPU's SMs)")
    if m["shares"] > gpu.shares:
        raise ClaimError(f"device {name}: claim consumes {int(m['shares'])} shares, the device has {gpu.shares}")
    if mib < 1:
        raise ClaimError(f"device {name}: claim consumes {int(m['mem'])} bytes of memory, less than 1 MiB")
    if gpu.mig and (mib, int(m["cores"])) != (gpu.memory_mib, MAX_CORES):
        raise ClaimError(f"device {name} is a MIG instance: it is taken whole, not a share of "
                         f"{mib} MiB and {int(m['cores'])}%")
    return Share(name, gpu.uuid, mib, int(m["cores"]), tuple(m["requests"]), gpu.mig, int(m["shares"]),
                 False, gpu.kind, gpu.profile, gpu.start, gpu.size)
