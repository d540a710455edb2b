"""Consumable capacity (KEP-5075) as kube-scheduler 1.36 computes it (pure).

A request's `capacity.requests` against one device's `capacity` (names compared exactly as
published, as upstream does):

- a capacity the request names but the device lacks rules the device out;
- each capacity of the device is consumed: the requested amount rounded up by its
  `requestPolicy`, or, when not requested, the policy's `default`, else the whole capacity;
- rounding (`calculateConsumedCapacity`): under `validRange` with a `min`, an amount below the
  minimum becomes the minimum, else with a `step` it is rounded up to `min + n * step` in whole
  units (Quantity.Value(), which rounds a fraction up); under `validValues` the smallest valid value
  at least the amount (an amount above them all stays as asked, and then violates the policy);
- the rounded amount must keep the policy (`violatesPolicy`): unless it equals the default, not
  above `validRange.max`, on a step, or one of `validValues` (upstream compares with the default as
  Go structs; the value is what a driver means, and the two agree for every policy upstream tests);
- the device fits when, for every capacity, what allocated claims hold plus what this search is
  allocating plus this amount stays within the capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from hami.kubesched.cel import CelError, format_quantity, to_quantity

MIB = 1 << 20


def readable(value: Fraction) -> str:
    """A capacity for people: whole MiB as `4000Mi`, anything else as its quantity."""
    if value.denominator == 1 and value >= MIB and value.numerator % MIB == 0:
        return f"{value.numerator // MIB}Mi"
    return format_quantity(value)


def exact(value: Fraction) -> Fraction | int:
    """An amount as an int when it is whole: the search adds amounts on every step, and int
    arithmetic is many times cheaper than Fraction's."""
    return value.numerator if value.denominator == 1 else value


def _whole(value: Fraction) -> int:
    """resource.Quantity.Value(): the integer value, a fraction rounded up (away from zero)."""
    return math.ceil(value) if value >= 0 else math.floor(value)


@dataclass(frozen=True)
class Policy:
    """A capacity's `requestPolicy`, read once (the allocator applies it on every search step)."""

    default: Fraction | None = None
    has_range: bool = False
    min: Fraction | None = None
    max: Fraction | None = None
    step: Fraction | None = None
    valid: tuple[Fraction, ...] = ()

    @classmethod
    def of(cls, raw: Policy | Mapping | None) -> Policy | None:
        """Parse a v1 CapacityRequestPolicy (CelError naming the bad quantity)."""
        if raw is None or isinstance(raw, Policy):
            return raw
        if not raw:
            return None
        rng = raw.get("validRange")
        rng = rng if isinstance(rng, Mapping) else None

        def q(v: object, what: str) -> Fraction | None:
            return None if v is None else exact(to_quantity(v, field=f"requestPolicy.{what}"))
        return cls(q(raw.get("default"), "default"), rng is not None,
                   q((rng or {}).get("min"), "validRange.min"), q((rng or {}).get("max"), "validRange.max"),
                   q((rng or {}).get("step"), "validRange.step"),
                   tuple(exact(to_quantity(v, field="requestPolicy.validValues"))
                         for v in raw.get("validValues") or ()))


def consumed_amount(requested: Fraction | None, value: Fraction, policy: Policy | Mapping | None) -> Fraction:
    """What one allocation takes of a capacity (`calculateConsumedCapacity`)."""
    policy = Policy.of(policy)
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return value
    if policy is None:
        return requested
    if policy.has_range and policy.min is not None:
        if requested < policy.min:
            return policy.min
        if policy.step is None:
            return requested
        step, base = _whole(policy.step), _whole(policy.min)
        added = _whole(requested) - base
        n = -(-added // step) if step else 0
        return base + step * n
    for v in policy.valid:
        if requested <= v:
            return v
    return requested


def violates_policy(amount: Fraction, policy: Policy | Mapping | None) -> bool:
    policy = Policy.of(policy)
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.has_range:
        if policy.max is not None and amount > policy.max:
            return True
        if policy.step is not None:
            step = _whole(policy.step)
            low = _whole(policy.min) if policy.min is not None else 0
            return step != 0 and (_whole(amount) - low) % step != 0
        return False
    if policy.valid:
        return all(amount != v for v in policy.valid)
    return False


def policy_text(policy: Policy | Mapping | None) -> str:
    """What a request policy allows, for people: ` (1Mi..8000Mi in steps of 1Mi)`, ` (one of 1, 2)`."""
    try:
        policy = Policy.of(policy)
    except CelError:
        return ""
    if policy is None:
        return ""
    if policy.has_range:
        low = readable(Fraction(policy.min)) if policy.min is not None else "0"
        high = readable(Fraction(policy.max)) if policy.max is not None else ""
        step = f" in steps of {readable(Fraction(policy.step))}" if policy.step is not None else ""
        return f" ({low}..{high}{step})"
    if policy.valid:
        return f" (one of {', '.join(readable(Fraction(v)) for v in policy.valid[:8])})"
    return ""


def consumption(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Fraction],
                policies: Mapping[str, Policy | Mapping]) -> dict[str, tuple[Fraction, bool]]:
    """Per capacity of the device: (amount consumed, whether it breaks the policy)."""
    out = {}
    for name, value in capacity.items():
        want = (requests or {}).get(name)
        policy = policies.get(name)
        amount = consumed_amount(want, value, policy)
        out[name] = (amount, violates_policy(amount, policy))
    return out


def fits(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Fraction],
         policies: Mapping[str, Policy | Mapping], held: Mapping[str, Fraction], allocating: Mapping[str, Fraction],
         consumed: Mapping[str, tuple[Fraction, bool]] | None = None) -> tuple[bool, str]:
    """`CmpRequestOverCapacity`: (True, "") or (False, why) for one more allocation of the device
    (`consumed`: this request's `consumption` of the device, when the caller has it already)."""
    for name in requests or {}:
        if name not in capacity:
            return False, f"has no capacity {name}"
    if consumed is None:
        consumed = consumption(requests, capacity, policies)
    for name, (amount, broken) in consumed.items():
        if broken:
            return False, (f"{name}: {readable(Fraction(amount))} is not allowed by its request policy"
                           f"{policy_text(policies.get(name))}")
        total = amount
        before = held.get(name)
        if before:
            total += before
        ongoing = allocating.get(name)
        if ongoing:
            total += ongoing
        if total > capacity[name]:
            free = Fraction(capacity[name] - (before or 0) - (ongoing or 0))
            return False, (f"{name} {readable(Fraction(amount))} requested, {readable(free)} of "
                           f"{readable(Fraction(capacity[name]))} free")
    return True, ""
