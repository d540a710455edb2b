"""HAMi's NVIDIA fit: per device, per container and per pod on one node (pure, no I/O).

HAMi sources: `pkg/device/nvidia/device.go` (`Fit`, `CustomFilterRule`, `AddResourceUsage`,
`fitQuota`), `pkg/scheduler/score.go` (`fitInDevices`, init/app container handling),
`pkg/device/common/common.go` (`GenReason`), `pkg/scheduler/event.go`. Spec: scheduler.md §5.

API
---
- `FitOptions` / `fit_options(annotations, gpu_policy, quota=None)`: what the pod's annotations
  ask for (type and UUID filters, vgpu-mode, numa-bind, GPU policy, scoring weights, quota view),
  computed once per request. Raises `PolicyError` for bad `hami.io/device-scoring-weights`.
- `PodRequest` / `pod_request(requests, num_init, annotations, *, gpu_policy, node_policy,
  namespace="", quota=None)`: everything about the pod that a fit needs. `requests` holds one
  entry per container, init containers first: a `ContainerDeviceRequest` (nums <= 0 means none)
  or None.
- `fit_pod(node, pod) -> FitResult`: fit the pod on one `usage.NodeUsage` without changing it:
  init containers each against a fresh copy of the node, app containers cumulatively on one
  copy (§5.1). `FitResult.devices` is the PodDevices (one tuple per container, init first),
  `FitResult.reason` the HAMi reason string when it does not fit, `FitResult.mig` the MIG
  placements chosen as `(container_index, device_index, gpu_uuid, profile_name, placement)`.
- `fit_devices(devices, request, opts, ...)`: HAMi `NvidiaGPUDevices.Fit` over an already sorted
  device list (walked from the end).
- `gen_reason(counts, cards)`, `parse_reason(text)`: HAMi's reason strings.
- MIG profile/placement choice lives in `migplace.py`, the event texts in `messages.py`.
- Failure fast path: for requests without filters, mutex or quota (`FitOptions.plain`), a node
  whose cards all fail before or at the memory check gets its reason from a per-node summary
  (`NodeUsage.fail_summary`, rebuilt after usage or cordon changes) with the text rendered once,
  byte-identical to the per-card walk (tests/scheduler/test_fit_fastfail.py); `try_pod` answers
  NodeInsufficientDevice and that case for the first request before any other setup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from types import MappingProxyType
from typing import Any, NamedTuple

from hami.device.codec import go_to_upper
from hami.device.model import (
    MODE_MIG,
    NVIDIA,
    PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerDeviceRequest,
    MigPlacement,
    PodDevices,
    ScoringWeights,
)
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import Vendor, VendorTable
from hami.scheduler.placement.migplace import is_mig_request, mig_feasible, take_placement
from hami.scheduler.placement.podfilter import split_types as _split_types
from hami.scheduler.placement.podfilter import split_uuids as _split_uuids
from hami.scheduler.placement.policy import (
    BINPACK,
    MUTEX,
    SPREAD,
    TOPOLOGY,
    device_score,
    f32,
    gpu_policy_for,
    node_policy_for,
    parse_bool,
    policy_contains,
    sorted_devices,
    weights_for,
)
from hami.scheduler.placement.usage import DeviceState, NodeUsage, QuotaView, collapse_usage
from hami.scheduler.placement.vendorrules import (
    KUNLUN_UUID_KEYS,
    VNPU_HAMI_CORE,
    card_groups,
    die_mode,
    fit_amd,
    fit_drs,
    fit_metax,
    fit_neuron,
    fit_xpu,
    metax_scored,
    mode_refuses_node,
    network_groups,
    occupied_cards,
    uses_networks,
    vnpu_mode,
    whole_modules,
)
from hami.scheduler.placement.vendorscore import vendor_score

# Reason keys (pkg/device/common/common.go).
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
NUMA_NOT_FIT = "NumaNotFit"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
NODE_UNFIT_POD = "NodeUnfitPod"
NODE_FIT_POD = "NodeFitPod"
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
MODE_NOT_FIT = "ModeNotFit"
DEVICE_TYPE_NOT_FOUND = "Device type not found"

# Pod annotations read by Fit (pkg/device/nvidia/device.go:40-64).
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"
DEVICE_CORDON = "hami.io/device-cordon"


# --------------------------------------------------------------------------- reasons

def gen_reason(counts: Mapping[str, int], cards: int) -> str:
    """GenReason: `"%d/%d %s"` per key, sorted as strings, joined by `", "`."""
    return ", ".join(sorted(f"{n}/{cards} {k}" for k, n in counts.items()))


_REASON_ITEM = re.compile(r"^(\d+)/(\d+) ([A-Za-z][A-Za-z0-9_]*)$")


def parse_reason(text: str) -> dict[str, int]:
    """ParseReason: `{key: count}` for every `N/M Key` entry; other text yields nothing."""
    out: dict[str, int] = {}
    for part in text.split(", "):
        m = _REASON_ITEM.match(part.strip())
        if m:
            out[m.group(3)] = out.get(m.group(3), 0) + int(m.group(1))
    return out


# --------------------------------------------------------------------------- options

@dataclass(frozen=True, slots=True)
class FitOptions:
    """The pod-level inputs of Fit, read once from the pod's annotations."""

    policy: str = "spread"
    numa_bind: bool = False
    use_types: tuple[str, ...] | None = None  # trimmed, upper-cased, non-empty members
    nouse_types: tuple[str, ...] | None = None
    use_uuids: frozenset[str] | None = None
    nouse_uuids: frozenset[str] | None = None
    vgpu_mode: str | None = None
    is_mutex: bool = False
    need_topology: bool = False
    weights: ScoringWeights = field(default_factory=ScoringWeights)
    quota: QuotaView | None = None
    # No filter, no mutex, no quota: a device's first checks do not depend on the pod (see
    # `_FailSummary`); set by `fit_options`.
    plain: bool = False
    # Other vendors' fits read their own use/nouse annotations from these, through the table.
    annotations: Mapping[str, str] | None = field(default=None, compare=False)
    vendors: VendorTable | None = field(default=None, compare=False)

    def type_ok(self, dev: DeviceState) -> bool:
        """use-gputype / nouse-gputype (case-insensitive substring) and vgpu-mode."""
        if self.use_types is not None or self.nouse_types is not None:
            t = go_to_upper(dev.type)
            if self.use_types is not None and not any(u in t for u in self.use_types):
                return False
            if self.nouse_types is not None and any(u in t for u in self.nouse_types):
                return False
        if self.vgpu_mode is not None and dev.mode not in self.vgpu_mode:
            return False
        return True

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuids is not None and uuid not in self.use_uuids:
            return False
        if self.nouse_uuids is not None and uuid in self.nouse_uuids:
            return False
        return True


def fit_options(
    annotations: Mapping[str, str] | None,
    gpu_policy: str = "spread",
    quota: QuotaView | None = None,
    vendors: VendorTable | None = None,
) -> FitOptions:
    """Read the pod annotations Fit depends on. `gpu_policy` is `--gpu-scheduler-policy`."""
    a = annotations or {}
    policy = gpu_policy_for(a, gpu_policy)
    use_types = _split_types(a.get(USE_GPUTYPE))
    nouse_types = _split_types(a.get(NOUSE_GPUTYPE))
    use_uuids = _split_uuids(a.get(USE_GPUUUID))
    nouse_uuids = _split_uuids(a.get(NOUSE_GPUUUID))
    vgpu_mode = a.get(VGPU_MODE)
    is_mutex = policy_contains(policy, MUTEX)
    return FitOptions(
        policy=policy,
        numa_bind=parse_bool(a.get(NUMA_BIND)),
        use_types=use_types,
        nouse_types=nouse_types,
        use_uuids=use_uuids,
        nouse_uuids=nouse_uuids,
        vgpu_mode=vgpu_mode,
        is_mutex=is_mutex,
        need_topology=policy_contains(policy, TOPOLOGY),
        weights=weights_for(a),
        quota=quota,
        plain=(
            use_types is None and nouse_types is None and use_uuids is None
            and nouse_uuids is None and vgpu_mode is None and not is_mutex and quota is None
        ),
        annotations=a,
        vendors=vendors,
    )


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod as the fit sees it: per-container requests (init first) and its options.

    An entry is None, one request, or (a container asking for several vendors) a tuple of them."""

    requests: tuple[ContainerDeviceRequest | tuple[ContainerDeviceRequest, ...] | None, ...]
    num_init: int
    options: FitOptions
    node_policy: str = "binpack"
    namespace: str = ""
    last_app: int = -1  # index of the last app container with a request
    # The request fitted first (first non-None, init containers first): it always meets a fresh
    # copy of the node, so try_pod can answer its cheap failures before any other work.
    first: ContainerDeviceRequest | None = None
    # The rows asked for whose node score depends on the devices chosen (vendorscore): such a pod
    # is scored on every node that fits it instead of taking the first in score order.
    scored: tuple[Vendor, ...] = ()

    @property
    def empty(self) -> bool:
        return all(r is None for r in self.requests)


def pod_request(
    requests: Sequence[ContainerDeviceRequest | None],
    num_init: int,
    annotations: Mapping[str, str] | None,
    *,
    gpu_policy: str = "spread",
    node_policy: str = "binpack",
    namespace: str = "",
    quota: QuotaView | None = None,
    vendors: VendorTable | None = None,
) -> PodRequest:
    reqs = tuple(r if r is not None and (r.__class__ is tuple or r.nums > 0) else None for r in requests)
    last = -1
    for i in range(num_init, len(reqs)):
        if reqs[i] is not None:
            last = i
    scored: tuple[Vendor, ...] = ()
    if vendors is not None:
        for r in reqs:
            if r is None:
                continue
            for one in (r if r.__class__ is tuple else (r,)):
                if one.type != NVIDIA:
                    v = vendors.get(one.type)
                    if v is not None and v.node_score and v not in scored and (
                            v.node_score != "metax" or metax_scored(annotations or {}, v.topology_aware)):
                        scored += (v,)
    return PodRequest(
        requests=reqs,
        num_init=num_init,
        options=fit_options(annotations, gpu_policy, quota, vendors),
        node_policy=node_policy_for(annotations, node_policy),
        namespace=namespace,
        last_app=last,
        first=next((r[0] if r.__class__ is tuple else r for r in reqs if r is not None), None),
        scored=scored,
    )


# --------------------------------------------------------------------------- Fit

def _quota_fits(
    opts: FitOptions,
    allocated: Sequence[tuple[ContainerDevice, ...]],
    chosen: Sequence[ContainerDevice],
    uuid: str,
    memreq: int,
    coresreq: int,
    num_init: int,
) -> bool:
    """fitQuota: the collapsed usage of (allocated + this container with this device)."""
    quota = opts.quota
    if quota is None:
        return True
    cur = tuple(chosen) + (ContainerDevice(uuid, NVIDIA, memreq, coresreq),)
    collapsed = collapse_usage(tuple(allocated) + (cur,), num_init)
    mem = sum(v[0] for v in collapsed.values())
    cores = sum(v[1] for v in collapsed.values())
    return quota.fits(mem, cores)


def fit_devices(
    devices: Sequence[DeviceState],
    request: ContainerDeviceRequest,
    opts: FitOptions,
    cordoned: frozenset[str] | set[str] = frozenset(),
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    allocated: Sequence[tuple[ContainerDevice, ...]] = (),
    num_init: int = 0,
) -> tuple[bool, list[ContainerDevice], str]:
    """HAMi `NvidiaGPUDevices.Fit` (§5.3) over `devices`, sorted as §6.3, walked from the end.

    Returns (fit, chosen devices, reason); the reason is "" on success. `allocated` holds the
    devices of the containers already placed in this phase (for the quota check). Kept whole: a
    faithful port, read beside the Go."""
    origin = request.nums
    nums = origin
    coresreq = request.coresreq
    prevnuma = -1
    tmp: list[ContainerDevice] = []
    reason: dict[str, int] = {}
    numa_bind = opts.numa_bind
    is_mutex = opts.is_mutex
    need_topology = opts.need_topology
    req_type = request.type
    type_is_nvidia = req_type == NVIDIA
    filters = (
        opts.use_types is not None or opts.nouse_types is not None or opts.vgpu_mode is not None
    )
    uuid_filters = opts.use_uuids is not None or opts.nouse_uuids is not None
    memreq_req = request.memreq
    pct = request.mempercentagereq
    i = len(devices) - 1
    while i >= 0:
        dev = devices[i]
        i -= 1
        if not dev.health:
            reason[CARD_NOT_HEALTH] = reason.get(CARD_NOT_HEALTH, 0) + 1
            continue
        if cordoned and dev.id in cordoned:
            reason[CARD_CORDONED] = reason.get(CARD_CORDONED, 0) + 1
            continue
        if not type_is_nvidia or (filters and not opts.type_ok(dev)):
            reason[CARD_TYPE_MISMATCH] = reason.get(CARD_TYPE_MISMATCH, 0) + 1
            continue
        if numa_bind and prevnuma != dev.numa:
            if nums != origin:
                reason[NUMA_NOT_FIT] = reason.get(NUMA_NOT_FIT, 0) + len(tmp)
            nums = origin
            prevnuma = dev.numa
            tmp = []
        if uuid_filters and not opts.uuid_ok(dev.id):
            reason[CARD_UUID_MISMATCH] = reason.get(CARD_UUID_MISMATCH, 0) + 1
            continue
        if dev.count <= dev.used:
            reason[CARD_TIME_SLICING_EXHAUSTED] = reason.get(CARD_TIME_SLICING_EXHAUSTED, 0) + 1
            continue
        if is_mutex and dev.used > 0:
            reason[EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] = reason.get(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0) + 1
            continue
        if coresreq > 100:
            coresreq = 100
        memreq = 0
        if memreq_req > 0:
            memreq = memreq_req
        if pct != PERCENTAGE_UNSET and memreq_req == 0:
            memreq = _go_div(dev.totalmem * pct, 100)
        if opts.quota is not None and not _quota_fits(
            opts, allocated, tmp, dev.id, memreq, coresreq, num_init
        ):
            reason[RESOURCE_QUOTA_NOT_FIT] = reason.get(RESOURCE_QUOTA_NOT_FIT, 0) + 1
            continue
        if dev.totalmem - dev.usedmem < memreq:
            reason[CARD_INSUFFICIENT_MEMORY] = reason.get(CARD_INSUFFICIENT_MEMORY, 0) + 1
            continue
        if dev.totalcore - dev.usedcores < coresreq:
            reason[CARD_INSUFFICIENT_CORE] = reason.get(CARD_INSUFFICIENT_CORE, 0) + 1
            continue
        if dev.totalcore == 100 and coresreq == 100 and dev.used > 0:
            reason[EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] = reason.get(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0) + 1
            continue
        if dev.totalcore != 0 and dev.usedcores == dev.totalcore and coresreq == 0:
            reason[CARD_COMPUTE_UNITS_EXHAUSTED] = reason.get(CARD_COMPUTE_UNITS_EXHAUSTED, 0) + 1
            continue
        is_mig = dev.mode == MODE_MIG
        if is_mig and not mig_feasible(dev, tmp, memreq):
            reason[CARD_MIG_TOPOLOGY_INFEASIBLE] = reason.get(CARD_MIG_TOPOLOGY_INFEASIBLE, 0) + 1
            continue
        if nums > 0:
            if not need_topology:
                nums -= 1
            tmp.append(ContainerDevice(dev.id, req_type, memreq, coresreq, dev.index))
        if nums == 0 and not need_topology:
            return True, tmp, ""
        if is_mig:
            i += 1  # offer the same MIG card again
    if need_topology:
        if len(tmp) == origin:
            return True, tmp, ""
        if len(tmp) > origin:
            scores = pair_scores or {}
            if origin == 1:
                return True, _worst_single(tmp, scores), ""
            return True, _best_combination(tmp, origin, scores), ""
    if tmp:
        reason[ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(tmp)
    return False, tmp, gen_reason(reason, len(devices))


def _go_div(a: int, b: int) -> int:
    """Go integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _pair(scores: Mapping[str, Mapping[str, int]], a: str, b: str) -> int:
    return scores.get(a, {}).get(b, 0)


def _worst_single(cands: list[ContainerDevice], scores) -> list[ContainerDevice]:
    """computeWorstSingleCard: the candidate with the lowest summed pair score to the others."""
    best = None
    best_score = 0
    for d1 in cands:
        total = sum(_pair(scores, d1.uuid, d2.uuid) for d2 in cands if d2.uuid != d1.uuid)
        if best is None or total < best_score:
            best, best_score = d1, total
    return [best] if best is not None else []


def _best_combination(cands: list[ContainerDevice], n: int, scores) -> list[ContainerDevice]:
    """computeBestCombination: the first n-combination (candidate order) with the highest score."""
    best: tuple[ContainerDevice, ...] | None = None
    best_score = 0
    for combo in combinations(cands, n):
        total = 0
        for x in range(len(combo)):
            for y in range(x + 1, len(combo)):
                total += _pair(scores, combo[x].uuid, combo[y].uuid)
        # the first combination always counts, so all-negative pair scores still choose one
        # (HAMi's `found` flag, TestFit_TopologyNegativeScores)
        if best is None or total > best_score:
            best, best_score = combo, total
    return list(best or ())


# --------------------------------------------------------------------------- failure fast path

class _FailSummary:
    """What Fit's first checks decide about each NVIDIA device of a node, whatever the request.

    For a request with no type/UUID/vgpu-mode filter, no mutex policy and no quota, a device's
    walk in `fit_devices` ends at CardNotHealth, CardCordoned or CardTimeSlicingExhausted
    (`base`, in that order of precedence) or reaches the memory check. When the (fixed) memory
    request exceeds the largest free memory among the devices that reach it (`max_free`), every
    one of them fails there, nothing is ever chosen (so no NumaNotFit, no
    AllocatedCardsInsufficientRequest, no MIG or topology step), and the order of the walk does
    not matter: the reason is `base` plus `rest` x CardInsufficientMemory. Its text is rendered
    once per usage change.
    """

    __slots__ = ("cordoned", "base", "rest", "max_free", "cards", "text")

    def __init__(self, node: NodeUsage):
        cordoned = node.cordoned
        base: dict[str, int] = {}
        rest = 0
        max_free: int | None = None
        cards = 0
        for d in node.devices:
            if not d.is_nvidia:
                continue
            cards += 1
            if not d.health:
                key = CARD_NOT_HEALTH
            elif cordoned and d.id in cordoned:
                key = CARD_CORDONED
            elif d.count <= d.used:
                key = CARD_TIME_SLICING_EXHAUSTED
            else:
                rest += 1
                free = d.totalmem - d.usedmem
                if max_free is None or free > max_free:
                    max_free = free
                continue
            base[key] = base.get(key, 0) + 1
        self.cordoned = cordoned
        self.base = base
        self.rest = rest
        self.max_free = max_free
        self.cards = cards
        self.text: str | None = None


def free_memory_bound(node: NodeUsage) -> int:
    """The most free memory any NVIDIA card of the node offers a request (-1: no card passes the
    health, cordon and slot checks). Whatever the pod, a fixed memory request above it fails on
    this node at its first NVIDIA request, so /filter's walk may pass the node by."""
    s = node.fail_summary
    if s is None or s.cordoned is not node.cordoned:
        s = node.fail_summary = _FailSummary(node)
    return -1 if s.max_free is None else s.max_free


def memory_need(pod: PodRequest) -> int | None:
    """The fixed memory the pod's first NVIDIA request asks of one card (None: no such bound,
    e.g. a share of each card's memory, or a first request of another vendor)."""
    first = pod.first
    if first is None or first.type != NVIDIA or first.nums <= 0:
        return None
    if first.memreq > 0:
        return first.memreq
    return None if first.mempercentagereq != PERCENTAGE_UNSET else 0


def fast_fail(node: NodeUsage, request: ContainerDeviceRequest) -> str | None:
    """The reason `fit_devices` would give when no device has the memory asked for, else None.

    Only for `FitOptions.plain` requests of type NVIDIA on a fresh copy of the node; see
    `_FailSummary` for why the answer equals the full walk's.
    """
    memreq_req = request.memreq
    if memreq_req == 0 and request.mempercentagereq != PERCENTAGE_UNSET:
        return None  # memory is a share of each card's total: per-device, take the full walk
    memreq = memreq_req if memreq_req > 0 else 0
    s = node.fail_summary
    if s is None or s.cordoned is not node.cordoned:
        s = node.fail_summary = _FailSummary(node)
    if s.max_free is not None and memreq <= s.max_free:
        return None
    text = s.text
    if text is None:
        counts = dict(s.base)
        if s.rest:
            counts[CARD_INSUFFICIENT_MEMORY] = s.rest
        text = s.text = gen_reason(counts, s.cards)
    return text


# --------------------------------------------------------------------------- per container

def device_order(devices: Sequence[DeviceState], request: ContainerDeviceRequest,
                 opts: FitOptions) -> list[DeviceState]:
    """Compute every device's score for this container and sort as Go's sort.Sort would."""
    reqs = (request,)
    weights = opts.weights
    rtype = request.type
    policy = opts.policy
    # The plain binpack and spread policies on up to 12 devices: each device keyed as
    # `sorted_devices` keys it, (score or -score, numa, position), in this one pass.
    keyed = len(devices) <= 12 and not opts.numa_bind and (policy == BINPACK or policy == SPREAD)
    binpack = policy == BINPACK
    items = []
    for i, d in enumerate(devices):
        if d.type == rtype:  # the request counts in this device's score (§6.2)
            s = device_score(d, reqs, weights)
        else:
            # Otherwise the score is the device's own utilisation: a burst re-sorts a node after
            # each pod placed on it, and only the device that pod took has a new score.
            m = d.score_memo
            if m is None or m[0] is not weights or m[1] != d.used or m[2] != d.usedcores or m[3] != d.usedmem:
                m = d.score_memo = (weights, d.used, d.usedcores, d.usedmem, device_score(d, reqs, weights))
            s = m[4]
        if keyed:
            items.append((s if binpack else -s, d.numa, i, d))
        else:
            items.append((s, d))
    if keyed:
        items.sort()
        return [k[3] for k in items]
    return sorted_devices(items, policy, opts.numa_bind)


def _order_for(
    node: NodeUsage, work: list[DeviceState] | None, request: ContainerDeviceRequest, opts: FitOptions
) -> list[DeviceState]:
    """The device list sorted for this container (§5.2 step 2).

    `work` is None for a fresh copy of the node (registration order); then, when no device
    type equals the request type (so scores do not depend on the request, §6.2), the node's
    cached order for this policy is used.
    """
    if work is None:
        if node.request_free:
            key = (opts.policy, opts.numa_bind, opts.weights)
            order = node.orders.get(key)
            if order is None:
                order = node.orders[key] = device_order(node.devices, request, opts)
            return order
        return device_order(node.devices, request, opts)
    return device_order(work, request, opts)


def _fit_container(
    node: NodeUsage,
    work: list[DeviceState] | None,
    request: ContainerDeviceRequest,
    opts: FitOptions,
    allocated: list[tuple[ContainerDevice, ...]],
    num_init: int,
    keep: bool,
    mig_out: list[tuple[int, int, str, str, MigPlacement]],
    cidx: int,
) -> tuple[tuple[ContainerDevice, ...] | None, str, list[DeviceState] | None]:
    """fitInDevices (§5.2) for one container's NVIDIA request.

    Returns (devices, reason, work): when `keep` is true, `work` is the mutable sorted copy
    with this container's usage added, for the next container.
    """
    if request.type != NVIDIA:
        return _fit_vendor(node, work, request, opts, keep, allocated)
    if request.nums > node.nvidia_count and not (
        node.has_mig and is_mig_request(request, [d for d in node.devices if d.is_nvidia], opts.vgpu_mode)
    ):
        return None, NODE_INSUFFICIENT_DEVICE, work
    if work is None and opts.plain:
        reason = fast_fail(node, request)
        if reason is not None:
            return None, reason, work
    order = _order_for(node, work, request, opts)
    type_devs = order if node.all_nvidia else [d for d in order if d.is_nvidia]
    ok, chosen, reason = fit_devices(
        type_devs, request, opts, node.cordoned, node.pair_scores, allocated, num_init
    )
    if not ok:
        return None, reason, work
    if keep:
        if work is None:
            work = [d.clone() for d in order]
        else:
            work = order
        by_id = {d.id: d for d in work}
    else:
        by_id = node.by_id if work is None else {d.id: d for d in order}
    out: list[ContainerDevice] = []
    mig_local: dict[str, list[MigPlacement]] = {}
    for pos, cd in enumerate(chosen):
        d = by_id[cd.uuid]
        if d.mode == MODE_MIG:
            sel = take_placement(d, cd.usedmem, mig_local)
            if sel is None:
                return None, (
                    f"AddResourceUsage failed for device {d.id}: MIG profile and placement allocation failed"
                ), work
            prof, pl = sel
            cd = ContainerDevice(cd.uuid, cd.type, prof.memory_mb, prof.core, cd.idx)
            if keep:
                d.hold_mig(pl)
            mig_out.append((cidx, pos, d.id, prof.name, pl))
        if keep:
            d.used += 1
            d.usedcores += cd.usedcores
            d.usedmem += cd.usedmem
        out.append(cd)
    return tuple(out), "", work


def _fit_multi(
    node: NodeUsage,
    work: list[DeviceState] | None,
    requests: tuple[ContainerDeviceRequest, ...],
    opts: FitOptions,
    allocated: list[tuple[ContainerDevice, ...]],
    num_init: int,
    mig_out: list[tuple[int, int, str, str, MigPlacement]],
    cidx: int,
) -> tuple[tuple[ContainerDevice, ...] | None, str, list[DeviceState] | None]:
    """One container asking for several vendors: fitInDevices' loop over its requests, each
    vendor's usage kept for the next (HAMi's first failing request gives the reason)."""
    out: list[ContainerDevice] = []
    for r in requests:
        devs, reason, work = _fit_container(node, work, r, opts, allocated, num_init, True, mig_out, cidx)
        if devs is None:
            return None, reason, work
        out.extend(devs)
    return tuple(out), "", work


def _fit_vendor(
    node: NodeUsage,
    work: list[DeviceState] | None,
    request: ContainerDeviceRequest,
    opts: FitOptions,
    keep: bool,
    allocated: Sequence[tuple[ContainerDevice, ...]] = (),
) -> tuple[tuple[ContainerDevice, ...] | None, str, list[DeviceState] | None]:
    """fitInDevices for a request of another vendor of the table (Ascend, Cambricon, Hygon...):
    that vendor's devices of the node, sorted as NVIDIA's, through the vendors' common Fit."""
    vendor = opts.vendors.get(request.type) if opts.vendors is not None else None
    if vendor is None:
        return None, DEVICE_TYPE_NOT_FOUND, work
    same_card = None
    if vendor.one_card_per_pod:  # customFilterRule: all of a pod's containers on one card
        same_card = frozenset(cd.uuid for ctr in allocated for cd in ctr if cd.type == vendor.name)
    vtype = request.type
    base = node.devices if work is None else work
    if request.nums > sum(1 for d in base if d.vendor == vtype):
        return None, NODE_INSUFFICIENT_DEVICE, work
    order = device_order(base, request, opts)
    ok, chosen, reason = fit_vendor_devices(
        [d for d in order if d.vendor == vtype], request, vendor, opts.annotations or {}, node.cordoned,
        opts.is_mutex, same_card, node.networks, node.app_classes, node.link_zones, node.qos_expected,
        node.dies, node.drs,
    )
    if not ok:
        return None, reason, work
    if keep:
        work = [d.clone() for d in order] if work is None else order
        by_id = {d.id: d for d in work}
        for cd in chosen:
            d = by_id[cd.uuid]
            d.used += 1
            d.usedcores += cd.usedcores
            d.usedmem += cd.usedmem
    return tuple(chosen), "", work


def _idx_of(cd: ContainerDevice) -> int:
    return cd.idx


def _uuid_of(cd: ContainerDevice) -> str:
    return cd.uuid


def _kunlun_uuid_check(annotations: Mapping[str, str]):
    """CheckUUID over both Kunlunxin annotation pairs; None when the pod names no card."""
    pairs = [(_split_uuids(annotations.get(u)), _split_uuids(annotations.get(n))) for u, n in KUNLUN_UUID_KEYS]
    pairs = [(u, n) for u, n in pairs if u is not None or n is not None]
    if not pairs:
        return None
    return lambda uuid: all((u is None or uuid in u) and (n is None or uuid not in n) for u, n in pairs)


def fit_vendor_devices(
    devices: Sequence[DeviceState],
    request: ContainerDeviceRequest,
    vendor: Vendor,
    annotations: Mapping[str, str],
    cordoned: frozenset[str] | set[str] = frozenset(),
    is_mutex: bool = False,
    same_card: frozenset[str] | None = None,
    networks: Mapping[str, int | None] | None = None,
    app_classes: Mapping[str, Sequence[int]] | None = None,
    link_zones: Mapping[str, int] | None = None,
    qos_expected: Mapping[str, str] | None = None,
    dies: Mapping[str, tuple[str | None, str | None]] | None = None,
    drs=None,
) -> tuple[bool, list[ContainerDevice], str]:
    """The Fit HAMi's vendor packages share (pkg/device/{ascend,cambricon,hygon,...}/device.go):
    NVIDIA's walk without MIG, topology, quota or numa-bind, with the vendor's own use/nouse
    annotations. `devices` are the vendor's devices, sorted, walked from the end. `is_mutex`
    (`hami.io/gpu-scheduler-policy: mutex`) refuses a card anything already uses; `same_card`
    (Mthreads) the cards other than the one the pod's earlier containers use; `networks` the
    node's Ascend NetworkIDs by device id; `app_classes` its MetaX cards' online/offline pods and
    `link_zones` their MetaLink zones, `qos_expected` the QoS policies cards are switching to. Ascend's vNPU modes, 910C
    module pairing and super-pod network grouping are `vendorrules`, as are AWS Neuron's and Kunlunxin's own
    selections. Kept whole: a faithful port of that Fit."""
    own = OWN_FITS.get(vendor.hook)
    if own is not None:
        ok, chosen, counts = own(devices, request, vendor, annotations, is_mutex,
                                 _VendorFitContext(app_classes, link_zones, qos_expected, drs))
        return ok, chosen, "" if ok else gen_reason(counts, len(devices))
    pairs = topo = False
    total_core = None
    if HOOKS[vendor.hook].vnpu_chips:  # Ascend's vNPU modes, 910C module pairs, super-pod networks
        mode = vnpu_mode(annotations)
        if mode:
            node_core = any(d.mode == VNPU_HAMI_CORE for d in devices)
            if mode_refuses_node(mode, node_core):
                return False, [], gen_reason({MODE_NOT_FIT: 1}, len(devices))
            if mode == VNPU_HAMI_CORE:
                total_core = 100  # HAMi-core shares every card as 100 cores
        pairs = vendor.module_pairs and request.nums > 1 and mode != VNPU_HAMI_CORE
        topo = uses_networks(vendor.name, devices, networks)
    dies_on = vendor.die_groups and die_mode(devices, dies)  # Vastai: dies grouped by card below
    taken_cards = occupied_cards(devices, dies) if dies_on and is_mutex else frozenset()
    use_uuids = _split_uuids(annotations.get(vendor.use_uuid_key)) if vendor.use_uuid_key else None
    nouse_uuids = _split_uuids(annotations.get(vendor.nouse_uuid_key)) if vendor.nouse_uuid_key else None
    use_types = _split_types(annotations.get(vendor.use_type_key)) if vendor.use_type_key else None
    nouse_types = _split_types(annotations.get(vendor.nouse_type_key)) if vendor.nouse_type_key else None
    nums = request.nums
    coresreq = min(request.coresreq, 100)
    memreq_req = request.memreq
    pct = request.mempercentagereq
    tmp: list[ContainerDevice] = []
    reason: dict[str, int] = {}
    type_ok = request.type == vendor.name  # checkType: the request names this vendor
    exclusive = vendor.exclusive_cards
    for dev in reversed(devices):
        if not type_ok:
            key = CARD_TYPE_MISMATCH
        elif not dev.health:
            key = CARD_NOT_HEALTH
        elif cordoned and dev.id in cordoned:
            key = CARD_CORDONED
        elif (use_types is not None and not any(t in go_to_upper(dev.type) for t in use_types)) or (
                nouse_types is not None and any(t in go_to_upper(dev.type) for t in nouse_types)):
            key = CARD_TYPE_MISMATCH
        elif (use_uuids is not None and dev.id not in use_uuids) or (
                nouse_uuids is not None and dev.id in nouse_uuids):
            key = CARD_UUID_MISMATCH
        elif exclusive and dev.used > 0:
            key = EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        elif dev.count <= dev.used:
            key = CARD_TIME_SLICING_EXHAUSTED
        elif is_mutex and (dev.used > 0 or (taken_cards and dies.get(dev.id, (None, None))[1] in taken_cards)):
            key = EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT  # (Vastai dies: a card with a die in use is taken)
        elif vendor.slots_only:  # Biren, Vastai: sharing slots alone, nothing else booked
            tmp.append(ContainerDevice(dev.id, request.type, 0, request.coresreq, dev.index))
            if dies_on:  # every fitting die is a candidate: cards chosen below
                continue
            nums -= 1
            if nums == 0:
                return True, tmp, ""
            continue
        else:
            memreq = memreq_req if memreq_req > 0 else 0
            if pct != PERCENTAGE_UNSET and memreq_req == 0:
                memreq = _go_div(dev.totalmem * pct, 100)
            totalcore = dev.totalcore if total_core is None else total_core
            if dev.totalmem - dev.usedmem < memreq:
                key = CARD_INSUFFICIENT_MEMORY
            elif totalcore - dev.usedcores < coresreq:
                key = CARD_INSUFFICIENT_CORE
            elif totalcore == 100 and coresreq == 100 and dev.used > 0:
                key = EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            elif totalcore != 0 and dev.usedcores == totalcore and coresreq == 0:
                key = CARD_COMPUTE_UNITS_EXHAUSTED
            elif same_card and (len(same_card) > 1 or dev.id not in same_card):
                key = CARD_NOT_FOUND_CUSTOM_FILTER_RULE
            else:
                tmp.append(ContainerDevice(dev.id, request.type, memreq, coresreq, dev.index))
                if pairs or topo:  # every fitting NPU is a candidate: modules / networks chosen below
                    continue
                nums -= 1
                if nums == 0:
                    return True, tmp, ""
                continue
        reason[key] = reason.get(key, 0) + 1
    if pairs:
        chosen = whole_modules(tmp, _idx_of, request.nums)
        if len(chosen) == request.nums:
            return True, chosen, ""
        reason[ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
        return False, chosen, gen_reason(reason, request.nums)
    if dies_on and len(tmp) >= nums:
        chosen = [tmp[0]] if nums == 1 else card_groups(tmp, _uuid_of, dies, nums)
        if len(chosen) == nums:  # (HAMi hands out fewer when dies name no AIC: refused here)
            return True, chosen, ""
    if topo and len(tmp) >= nums:
        if len(tmp) == nums:
            return True, tmp, ""
        chosen = [tmp[0]] if nums == 1 else network_groups(tmp, _uuid_of, networks, nums)
        if len(chosen) == nums:  # (HAMi hands out fewer when NetworkIDs are not numbers: refused here)
            return True, chosen, ""
    if tmp:
        reason[ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(tmp)
    return False, tmp, gen_reason(reason, len(devices))


# --------------------------------------------------------------------------- per pod

@dataclass(frozen=True, slots=True)
class FitResult:
    node: str
    fits: bool
    devices: PodDevices = ()
    reason: str = ""
    score: float = 0.0
    mig: tuple[tuple[int, int, str, str, MigPlacement], ...] = ()


def fit_pod(node: NodeUsage, pod: PodRequest) -> FitResult:
    """Fit every container of `pod` on `node` (§5.1) without modifying `node`.

    Init containers are each fitted against a fresh copy of the node; app containers
    cumulatively against one copy, which is only materialised when a later app container
    needs the earlier ones' usage.
    """
    r = try_pod(node, pod)
    if r.__class__ is str:
        return FitResult(node.name, False, reason=r)
    devices, mig = r
    score = node.score_value
    if pod.scored:  # HAMi's OverrideScore: the vendors' ScoreNode terms for these devices
        score = f32(score + vendor_score(node, devices, pod.scored, pod.node_policy, pod.options.annotations))
    return FitResult(node.name, True, devices, "", score, mig)


def try_pod(node: NodeUsage, pod: PodRequest) -> str | tuple[PodDevices, tuple]:
    """fit_pod without the result object: the reason string, or (PodDevices, mig placements)."""
    opts = pod.options
    first = pod.first
    if first is not None and first.type == NVIDIA:
        # The first fit of _fit_container, without its setup, for the common failures.
        if first.nums > node.nvidia_count:
            if not node.has_mig:
                return NODE_INSUFFICIENT_DEVICE
        elif opts.plain:
            reason = fast_fail(node, first)
            if reason is not None:
                return reason
    num_init = pod.num_init
    requests = pod.requests
    n = len(requests)
    mig: list[tuple[int, int, str, str, MigPlacement]] = []
    init_allocs: list[tuple[ContainerDevice, ...]] = []
    for cidx in range(min(num_init, n)):
        req = requests[cidx]
        if req is None:
            init_allocs.append(())
            continue
        if req.__class__ is tuple:
            devs, reason, _ = _fit_multi(node, None, req, opts, init_allocs, num_init, mig, cidx)
        else:
            devs, reason, _ = _fit_container(node, None, req, opts, init_allocs, num_init, False, mig, cidx)
        if devs is None:
            return reason
        init_allocs.append(devs)
    last = pod.last_app
    work: list[DeviceState] | None = None
    app_allocs: list[tuple[ContainerDevice, ...]] = []
    for cidx in range(num_init, n):
        req = requests[cidx]
        if req is None:
            app_allocs.append(())
            continue
        if req.__class__ is tuple:
            devs, reason, work = _fit_multi(node, work, req, opts, app_allocs, num_init, mig, cidx)
        else:
            devs, reason, work = _fit_container(
                node, work, req, opts, app_allocs, num_init, cidx != last, mig, cidx
            )
        if devs is None:
            return reason
        app_allocs.append(devs)
    if init_allocs:
        return tuple(init_allocs) + tuple(app_allocs), tuple(mig)
    return tuple(app_allocs), tuple(mig)


class _VendorFitContext(NamedTuple):
    """What a vendor's own walk reads of the node beyond its devices (MetaX's pods and links, Enflame's DRS)."""
    app_classes: Mapping[str, Sequence[int]] | None
    link_zones: Mapping[str, int] | None
    qos_expected: Mapping[str, str] | None
    drs: Any


def _card(request: ContainerDeviceRequest):
    return lambda d, mem, cores: ContainerDevice(d.id, request.type, mem, cores, d.index)


def _fit_neuron(devices, request, vendor: Vendor, annotations, is_mutex: bool, ctx: _VendorFitContext):
    return fit_neuron(devices, request, vendor, _split_uuids(annotations.get(vendor.use_uuid_key)),
                      _split_uuids(annotations.get(vendor.nouse_uuid_key)), is_mutex, _card(request))


def _fit_amd(devices, request, vendor: Vendor, annotations, is_mutex: bool, ctx: _VendorFitContext):
    use_t, nouse_t = _split_types(annotations.get(vendor.use_type_key)), _split_types(
        annotations.get(vendor.nouse_type_key))
    use_u, nouse_u = _split_uuids(annotations.get(vendor.use_uuid_key)), _split_uuids(
        annotations.get(vendor.nouse_uuid_key))
    return fit_amd(
        devices, request,
        lambda t: (use_t is None or any(u in go_to_upper(t) for u in use_t)) and (
            nouse_t is None or not any(u in go_to_upper(t) for u in nouse_t)),
        lambda i: (use_u is None or i in use_u) and (nouse_u is None or i not in nouse_u), is_mutex,
        _card(request))


def _fit_drs(devices, request, vendor: Vendor, annotations, is_mutex: bool, ctx: _VendorFitContext):
    """Enflame DRS vGCU: a profile of the node's, then its cards."""
    use_u, nouse_u = _split_uuids(annotations.get(vendor.use_uuid_key)), _split_uuids(
        annotations.get(vendor.nouse_uuid_key))
    return fit_drs(devices, request, ctx.drs, request.mempercentagereq == 0,
                   lambda i: (use_u is None or i in use_u) and (nouse_u is None or i not in nouse_u), is_mutex,
                   _card(request))


def _fit_xpu(devices, request, vendor: Vendor, annotations, is_mutex: bool, ctx: _VendorFitContext):
    return fit_xpu(devices, request, _card(request), shared=bool(vendor.memory_resource), is_mutex=is_mutex,
                   uuid_ok=_kunlun_uuid_check(annotations))


def _fit_metax(devices, request, vendor: Vendor, annotations, is_mutex: bool, ctx: _VendorFitContext):
    return fit_metax(
        devices, request, _split_uuids(annotations.get(vendor.use_uuid_key)),
        _split_uuids(annotations.get(vendor.nouse_uuid_key)), is_mutex, annotations,
        lambda d, mem, cores: ContainerDevice(d.id, d.type, mem, cores, d.index), ctx.app_classes, ctx.link_zones,
        ctx.qos_expected)


# A hook's own Fit walk (HAMi's vendor package's, where it is not the shared one): (ok, devices, reason counts).
OWN_FITS = MappingProxyType({
    "awsneuron": _fit_neuron,
    "amd": _fit_amd,
    "enflame": _fit_drs,
    "kunlunxin": _fit_xpu,
    "metax": _fit_metax,
})
