"""HAMi's namespace quotas under DRA (pure): what the namespace's claims hold, its ResourceQuota hard
limits on `nvidia.com/gpu`, `nvidia.com/gpumem` and `nvidia.com/gpucores`, and whether one more pod
fits them (the webhook's `exceeding resource quota`).

Kubernetes' own ResourceQuota counts DRA devices by class only, and the webhook removes the GPU
resources from a pod it turns into claims, so these limits would stop holding. The webhook keeps
them: a claim of HAMi's DeviceClass counts `count` GPUs, and per GPU its `memory` (MiB, rounded up)
and `cores`: what kube-scheduler consumed once it is allocated (`consumedCapacity`: a claim without
a memory request holds the whole card then), what it requests until then. Limits are read as HAMi
reads them: `limits.nvidia.com/gpumem` (times `memoryFactor`) and `limits.nvidia.com/gpucores`; the
GPU count from `requests.nvidia.com/gpu` (the only form Kubernetes accepts for an extended
resource) or `limits.nvidia.com/gpu`. Several ResourceQuotas in a namespace: the smallest wins.

Reservations (hami.scheduler.admission.quotaledger) cover a pod between its admission and its
claims' creation; `over` adds them. In a namespace with pods of both modes (admission.gpumode), each
check counts the other mode too: a claim pod's check adds what the namespace's device-plugin pods
hold (`device_plugin_usage`: HAMi's own usage index, and Kubernetes' count of `requests.nvidia.com/gpu`
in the quota's status), a device-plugin pod's check adds what the namespace's claims hold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from hami.kubesched.cel import CelError, to_quantity

MIB = 1 << 20
EXCEEDING = "exceeding resource quota"  # HAMi's text


class Amounts(NamedTuple):
    gpus: int = 0
    mem: int = 0  # MiB
    cores: int = 0

    def __add__(self, other: Amounts) -> Amounts:  # type: ignore[override]
        return Amounts(self.gpus + other.gpus, self.mem + other.mem, self.cores + other.cores)


class Limits(NamedTuple):
    gpus: int | None = None
    mem: int | None = None
    cores: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in self)


def _int(raw: object) -> int | None:
    try:
        return math.ceil(to_quantity(raw))
    except (CelError, TypeError, ValueError):
        return None


def _mib(raw: object) -> int:
    try:
        return math.ceil(to_quantity(raw) / MIB)
    except (CelError, TypeError, ValueError):
        return 0


def claim_amounts(claim: Mapping, device_class: str) -> Amounts:
    """What one ResourceClaim holds of HAMi's GPUs (its class only): allocated results when it has
    them, else its requests (a firstAvailable request counts its largest subrequest)."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    if isinstance(results, list) and results:
        own = {r.get("name") for r in _requests(claim) if _class_of(r) == device_class}
        total = Amounts()
        for r in results:
            if not isinstance(r, Mapping) or r.get("adminAccess") is True:
                continue
            if str(r.get("request", "")).partition("/")[0] not in own:
                continue
            used = r.get("consumedCapacity") if isinstance(r.get("consumedCapacity"), Mapping) else {}
            total += Amounts(1, _mib(used.get("memory", 0)), _int(used.get("cores", 0)) or 0)
        return total
    total = Amounts()
    for req in _requests(claim):
        options = [req.get("exactly")] if isinstance(req.get("exactly"), Mapping) else [
            s for s in req.get("firstAvailable") or [] if isinstance(s, Mapping)]
        best = Amounts()
        for opt in options:
            if (opt.get("deviceClassName") or "") != device_class or opt.get("adminAccess") is True:
                continue
            count = opt.get("count") if opt.get("allocationMode", "ExactCount") == "ExactCount" else 1
            count = count if isinstance(count, int) and count > 0 else 1
            capacity = opt.get("capacity")
            caps = ((capacity or {}).get("requests") or {}) if isinstance(capacity, Mapping) else {}
            got = Amounts(count, count * _mib(caps.get("memory", 0)), count * (_int(caps.get("cores", 0)) or 0))
            best = Amounts(*(max(a, b) for a, b in zip(best, got, strict=True)))
        total += best
    return total


def _requests(claim: Mapping) -> list[Mapping]:
    reqs = (((claim.get("spec") or {}).get("devices") or {}).get("requests")) or []
    return [r for r in reqs if isinstance(r, Mapping)]


def _class_of(req: Mapping) -> str:
    if isinstance(req.get("exactly"), Mapping):
        return str(req["exactly"].get("deviceClassName") or "")
    subs = [s for s in req.get("firstAvailable") or [] if isinstance(s, Mapping)]
    return str(subs[0].get("deviceClassName") or "") if subs else ""


def namespace_usage(claims: Iterable[Mapping], device_class: str) -> Amounts:
    total = Amounts()
    for c in claims:
        if not (c.get("metadata") or {}).get("deletionTimestamp"):
            total += claim_amounts(c, device_class)
    return total


def hard_limits(quotas: Iterable[Mapping], count: str, memory: str, cores: str, memory_factor: int = 1) -> Limits:
    """The namespace's smallest hard limit of each (None: unlimited)."""
    out: list[int | None] = [None, None, None]
    for q in quotas:
        hard = (q.get("spec") or {}).get("hard") or {}
        for i, keys in enumerate(((f"requests.{count}", f"limits.{count}"), (f"limits.{memory}",),
                                  (f"limits.{cores}",))):
            for key in keys:
                if key in hard:
                    v = _int(hard[key])
                    if v is not None:
                        if i == 1:
                            v *= max(memory_factor, 1)
                        out[i] = v if out[i] is None else min(out[i], v)
    return Limits(*out)


def over(limits: Limits, used: Amounts, want: Amounts) -> str:
    """"" when `want` fits beside `used`, else which limit it would pass."""
    for i, (name, limit, have, more) in enumerate(zip(("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
                                                      limits, used, want, strict=True)):
        if limit is None or more <= 0 or (i > 0 and limit == 0):  # HAMi: a memory or cores limit of 0 is none
            continue
        if have + more > limit:
            return f"{name}: {more} requested, {have} of {limit} used"
    return ""


def device_plugin_usage(quotas: Iterable[Mapping], count: str, mem_used: int, cores_used: int) -> Amounts:
    """What the namespace's device-plugin pods hold: GPUs as Kubernetes counts them (the largest
    `status.used` of `requests.<count>` among the quotas), memory and cores as HAMi's index does."""
    gpus = 0
    for q in quotas:
        used = (q.get("status") or {}).get("used") or {}
        for key in (f"requests.{count}", f"limits.{count}"):
            if key in used:
                gpus = max(gpus, _int(used[key]) or 0)
    return Amounts(gpus, mem_used, cores_used)
