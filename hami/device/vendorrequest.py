"""What each container asks of every vendor in the table (pure, no I/O).

`pod_vendor_requests(pod, table, nvidia_cfg)` returns one entry per container, init containers
first (as `request.pod_requests`): None (no device), a `ContainerDeviceRequest`, or, for a
container that asks for several vendors, a tuple of them in table order (HAMi's
`ContainerDeviceRequests` map, one request per vendor).

NVIDIA keeps its own builder (`request.container_request`); the other vendors are only looked at
when a container names one of their count resources (one set lookup per resource name), so a pod
of NVIDIA containers pays nothing for the table. Builders, after each vendor's
`GenerateResourceRequests` in Project-HAMi/HAMi pkg/device/<vendor>/device.go:

* `generic` (Hygon, ...): nums = count (AsInt64, limits then requests); memreq = memory x
  memoryUnit; cores = defaultCores unless given; a container with no memory asks for 100 % of
  each card (percentage 100), one with memory gets percentage 0 (so memreq counts).
* `cambricon`: the generic rule with memoryUnit 256 and defaultCores 100.
* `awsneuron`: devices x `coresPerCard` cores, or NeuronCores alone (up to one device, or whole
  devices); non-integer or non-positive counts ask for nothing.
* `metax` sGPU: count, cores (default 100) and memory from limits only, memory in GiB unless
  it carries a unit (then bytes), kept in MiB.
* `kunlunxin` vXPU (a row with a memory resource): memory rounded up to a slice size, cores in
  proportion; whole XPUs take the generic rule (memory 0, percentage 100).
* `amd` (pkg/device/amd, v2.10.0): limits only; memory as asked (0 = the whole card, in the fit),
  cores a percentage 1..100 of the card (default 100).
* `enflame` (DRS vGCU, v2.10.0): one card; `drs-gcu: N` names a profile's slices (percentage 0),
  else memory/cores pick the smallest profile holding them (percentage -1).
* `slotsOnly` rows (Biren, Vastai): the generic rule; their fit books no memory or cores.
* `ascend` (HAMi v2.10.0, commit 7a9fbb76 "update ascend trim" and 3494def5 "guard int32
  narrowing"): memory as asked x `memoryUnit` (HAMi's MemoryFactor), never rounded to a template
  here (the webhook rounds limits in template mode); a negative memory, or one beyond int32 before
  or after the factor, asks for nothing; a memory that is no integer counts as none (percentage
  100); cores as asked (0..int32), else 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from hami.device.model import ContainerDeviceRequest, NvidiaConfig
from hami.device.request import (
    container_request,
    container_resources,
    pod_containers,
    quantity_as_int64,
    quantity_value,
)
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import Vendor, VendorTable

_INT32 = 1 << 31


def _int32(n: int) -> int:
    return (n + _INT32) % (1 << 32) - _INT32


def _value(limits: Mapping, requests: Mapping, name: str) -> tuple[bool, int | None]:
    if not name:
        return False, None
    if name in limits:
        return True, quantity_as_int64(limits[name])
    if name in requests:
        return True, quantity_as_int64(requests[name])
    return False, None


def neuron_request(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """AWS Neuron's GenerateResourceRequests: devices (each takes all `coresPerCard` cores), or
    else NeuronCores: up to one device's worth on one device, more only in whole devices."""
    cpd = vendor.cores_per_card
    present, n = _value(limits, requests, vendor.count_resource)
    if present:
        if n is None or not 0 < n < _INT32:
            return None
        return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=0, mempercentagereq=0, coresreq=cpd)
    present, cores = _value(limits, requests, vendor.core_resource)
    if not present or cores is None or not 0 < cores <= (_INT32 - 1) * 2:
        return None
    if cores <= cpd:
        return ContainerDeviceRequest(nums=1, type=vendor.name, memreq=0, mempercentagereq=0, coresreq=cores)
    if cores % cpd or cores // cpd >= _INT32:
        return None  # HAMi: `<core resource> must be 1 or a multiple of <cores per device>`
    return ContainerDeviceRequest(nums=cores // cpd, type=vendor.name, memreq=0, mempercentagereq=0, coresreq=cpd)


def vxpu_request(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """Kunlunxin vXPU: memory rounded up to a slice size (`templates`, else the whole card), cores
    in proportion to the card; no memory is the whole card (percentage 100, cores 100)."""
    present, n = _value(limits, requests, vendor.count_resource)
    if not present or n is None or n <= 0 or n >= _INT32:
        return None
    present, mem = _value(limits, requests, vendor.memory_resource)
    card = vendor.memory_allocatable
    memreq = 0
    if present and mem is not None:
        memreq = next((t.memory for t in vendor.templates if mem <= t.memory), card)
    if memreq == 0:
        return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=card, mempercentagereq=100, coresreq=100)
    return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=memreq, mempercentagereq=0,
                                  coresreq=memreq * 100 // card if card else 0)


def sgpu_request(limits: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """MetaX sGPU (limits only): cores default to 100 (a whole card's compute); vmemory without a
    unit is GiB, with a unit bytes, kept in MiB; no memory asks for 100 % of the card."""
    raw = limits.get(vendor.count_resource)
    n = quantity_as_int64(raw) if raw is not None else None
    if n is None or not 0 < n < _INT32:
        return None
    cores = 100
    if vendor.core_resource in limits:
        c = quantity_as_int64(limits[vendor.core_resource])
        if c is not None:
            if not 0 <= c < _INT32:
                return None
            cores = c
    mem = 0
    if vendor.memory_resource in limits:
        text = limits[vendor.memory_resource]
        v = quantity_as_int64(text)
        if v is not None:
            if any(ch.isalpha() for ch in str(text)):
                mem = v // 1024 // 1024 if v >= 0 else -(-v // 1024 // 1024)
            elif not 0 <= v <= (_INT32 - 1) // vendor.memory_unit:
                return None
            else:
                mem = v * vendor.memory_unit
            if not 0 <= mem < _INT32:
                return None
    return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=mem, mempercentagereq=100 if mem == 0 else 0,
                                  coresreq=cores)


def ascend_request(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """Ascend's GenerateResourceRequests at HAMi v2.10.0 (pkg/device/ascend/device.go)."""
    present, n = _value(limits, requests, vendor.count_resource)
    if not present or n is None or not 0 < n < _INT32:
        return None
    memreq = 0
    present, raw = _lookup_raw(limits, requests, vendor.memory_resource)
    if present:
        if (quantity_value(raw) or 0) < 0:
            return None  # HAMi rejects by sign first (-1m is no int64 but still negative)
        mem = quantity_as_int64(raw)
        if mem is not None:
            if mem >= _INT32 or mem * vendor.memory_unit >= _INT32:
                return None  # MiB, not bytes: 16Gi is a unit mistake, refused rather than wrapped
            memreq = mem * vendor.memory_unit
    cores = 0
    present, c = _value(limits, requests, vendor.core_resource)
    if present:
        if c is None:
            c = quantity_value(_lookup_raw(limits, requests, vendor.core_resource)[1]) or 0
        if not 0 <= c < _INT32:
            return None
        cores = c
    return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=memreq,
                                  mempercentagereq=100 if memreq == 0 else 0, coresreq=cores)


def amd_request(limits: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """AMD's GenerateResourceRequests (pkg/device/amd at v2.10.0, limits only): memory in MiB as
    asked (0: the whole card, decided by the fit); cores a percentage 1..100 of the card's compute
    units, 100 when not named; anything outside those ranges asks for nothing."""
    n = quantity_as_int64(limits[vendor.count_resource]) if vendor.count_resource in limits else None
    if n is None or not 0 < n < _INT32:
        return None
    mem = 0
    if vendor.memory_resource in limits:
        m = quantity_as_int64(limits[vendor.memory_resource])
        if m is None or not 0 <= m < _INT32:
            return None
        mem = m
    cores = 100
    if vendor.core_resource in limits:
        c = quantity_as_int64(limits[vendor.core_resource])
        if c is None or not 1 <= c <= 100:
            return None
        cores = c
    return ContainerDeviceRequest(nums=n, type=vendor.name, memreq=mem, mempercentagereq=0, coresreq=cores)


def drs_request(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """Enflame DRS's GenerateResourceRequests (pkg/device/enflame/device.go at v2.10.0): one card;
    `drs-gcu: N` asks for a profile of N slices directly (percentage 0); else `gcu-memory` and
    `gcu-core` (Quantity.Value, limits then requests) ask for the smallest profile holding them
    (percentage -1); values beyond int32 ask for nothing."""
    present, n = _value(limits, requests, vendor.count_resource)
    if present and n is not None and n > 0:
        if n >= _INT32:
            return None
        return ContainerDeviceRequest(nums=1, type=vendor.name, memreq=n, mempercentagereq=DRS_DIRECT, coresreq=0)
    has_mem, raw_mem = _lookup_raw(limits, requests, vendor.memory_resource)
    has_core, raw_core = _lookup_raw(limits, requests, vendor.core_resource)
    if not has_mem and not has_core:
        return None
    mem = (quantity_value(raw_mem) or 0) if has_mem else 0
    core = (quantity_value(raw_core) or 0) if has_core else 0
    if mem >= _INT32 or core >= _INT32:
        return None
    return ContainerDeviceRequest(nums=1, type=vendor.name, memreq=_int32(mem), mempercentagereq=DRS_BY_SPEC,
                                  coresreq=_int32(core))


DRS_DIRECT = 0  # enflameRequestModeDirect: memreq is the profile's slice count
DRS_BY_SPEC = -1  # enflameRequestModeBySpec: memreq/coresreq pick the smallest profile holding them


def _lookup_raw(limits: Mapping, requests: Mapping, name: str) -> tuple[bool, object]:
    if not name:
        return False, None
    if name in limits:
        return True, limits[name]
    if name in requests:
        return True, requests[name]
    return False, None


def vendor_request(container: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """One vendor's GenerateResourceRequests for one container; None when it asks for none."""
    limits, requests = container_resources(container)
    return OWN_REQUESTS.get(vendor.hook, generic_request)(limits, requests, vendor)


def generic_request(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """The GenerateResourceRequests HAMi's vendor packages share: count, memory (in the row's unit),
    cores (the row's default when not named)."""
    present, n = _value(limits, requests, vendor.count_resource)
    if not present or n is None or n <= 0 or n >= _INT32:
        return None  # HAMi: `n <= 0 || n > math.MaxInt32` is an empty request
    nums = n
    memreq = 0
    present, mem = _value(limits, requests, vendor.memory_resource)
    core_present, c = _value(limits, requests, vendor.core_resource)
    if present and mem is not None:
        if mem < 0 or mem * vendor.memory_unit >= _INT32:
            return None  # overflowing int32 is refused, not truncated
        memreq = mem * vendor.memory_unit
    cores = vendor.default_cores
    if core_present and c is not None:
        if vendor.max_cores and not 0 <= c <= vendor.max_cores:
            return None
        cores = _int32(c)
    pct = 100 if memreq == 0 else 0
    if HOOKS[vendor.hook].split_request_per_card:  # the container's total over its cards (Go int32 division)
        memreq, cores = int(memreq / nums), int(cores / nums)
    return ContainerDeviceRequest(nums=nums, type=vendor.name, memreq=memreq, mempercentagereq=pct, coresreq=cores)


def _vxpu_or_cards(limits: Mapping, requests: Mapping, vendor: Vendor) -> ContainerDeviceRequest | None:
    """Kunlunxin: vXPU slices when the row has a memory resource, else whole XPUs as every vendor asks."""
    if vendor.memory_resource:
        return vxpu_request(limits, requests, vendor)
    return generic_request(limits, requests, vendor)


# A hook's own GenerateResourceRequests (limits and requests, the row); other hooks take generic_request.
OWN_REQUESTS = MappingProxyType({
    "ascend": ascend_request,
    "amd": lambda limits, _requests, vendor: amd_request(limits, vendor),
    "enflame": drs_request,
    "awsneuron": neuron_request,
    "kunlunxin": _vxpu_or_cards,
    "metax": lambda limits, _requests, vendor: sgpu_request(limits, vendor),
})


def container_vendor_requests(container: Mapping, table: VendorTable, cfg: NvidiaConfig):
    """None, one request, or a tuple of requests (several vendors) for one container."""
    first = container_request(container, cfg)
    if not table.others:
        return first
    limits, requests = container_resources(container)
    counts = table.other_counts
    if counts.isdisjoint(limits) and counts.isdisjoint(requests):
        return first
    out = [first] if first is not None else []
    for v in table.others:
        if v.count_resource in limits or v.count_resource in requests or (
                v.core_requests and (v.core_resource in limits or v.core_resource in requests)) or (
                HOOKS[v.hook].asks_by_memory_or_cores and any(r and (r in limits or r in requests)
                                            for r in (v.memory_resource, v.core_resource))):
            r = vendor_request(container, v)
            if r is not None:
                out.append(r)
    if not out:
        return None
    return out[0] if len(out) == 1 else tuple(out)


def pod_vendor_requests(pod: Mapping, table: VendorTable, cfg: NvidiaConfig) -> tuple:
    """HAMi Resourcereqs over the whole table: one entry per container, init containers first."""
    return tuple(container_vendor_requests(c, table, cfg) for c in pod_containers(pod))


def flat_requests(entry) -> tuple[ContainerDeviceRequest, ...]:
    """The requests of one per-container entry, whatever its shape."""
    if entry is None:
        return ()
    if entry.__class__ is tuple:
        return entry
    return (entry,)
