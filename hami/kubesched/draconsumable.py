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
from fractions import Fraction

from hami.kubesched.cel import format_quantity, to_quantity

MIB = 1 << 20


def readable(value: Fraction) -> str:
    """A capacity for people: whole MiB as `4000Mi`, anything else as its quantity."""
    if value.denominator == 1 and value >= MIB and value.numerator % MIB == 0:
        return f"{value.numerator // MIB}Mi"
    return format_quantity(value)


def _whole(value: Fraction) -> int:
    """resource.Quantity.Value(): the integer value, a fraction rounded up (away from zero)."""
    return math.ceil(value) if value >= 0 else math.floor(value)


def consumed_amount(requested: Fraction | None, value: Fraction, policy: Mapping | None) -> Fraction:
    """What one allocation takes of a capacity (`calculateConsumedCapacity`)."""
    if requested is None:
        if policy and policy.get("default") is not None:
            return to_quantity(policy["default"])
        return value
    if not policy:
        return requested
    rng = policy.get("validRange")
    if isinstance(rng, Mapping) and rng.get("min") is not None:
        low = to_quantity(rng["min"])
        if requested < low:
            return low
        if rng.get("step") is None:
            return requested
        step, base = _whole(to_quantity(rng["step"])), _whole(low)
        added = _whole(requested) - base
        n = -(-added // step) if step else 0
        return Fraction(base + step * n)
    valid = policy.get("validValues")
    if valid:
        for v in (to_quantity(x) for x in valid):
            if requested <= v:
                return v
    return requested


def violates_policy(amount: Fraction, policy: Mapping | None) -> bool:
    if not policy:
        return False
    if policy.get("default") is not None and amount == to_quantity(policy["default"]):
        return False
    rng = policy.get("validRange")
    if isinstance(rng, Mapping):
        if rng.get("max") is not None and amount > to_quantity(rng["max"]):
            return True
        if rng.get("step") is not None:
            step = _whole(to_quantity(rng["step"]))
            low = _whole(to_quantity(rng["min"])) if rng.get("min") is not None else 0
            return step != 0 and (_whole(amount) - low) % step != 0
        return False
    valid = policy.get("validValues")
    if valid:
        return all(amount != to_quantity(v) for v in valid)
    return False


def consumption(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Fraction],
                policies: Mapping[str, Mapping]) -> dict[str, tuple[Fraction, bool]]:
    """Per capacity of the device: (amount consumed, whether it breaks the policy)."""
    out = {}
    for name, value in capacity.items():
        want = (requests or {}).get(name)
        policy = policies.get(name)
        amount = consumed_amount(want, value, policy)
        out[name] = (amount, violates_policy(amount, policy))
    return out


def fits(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Fraction], policies: Mapping[str, Mapping],
         held: Mapping[str, Fraction], allocating: Mapping[str, Fraction]) -> tuple[bool, str]:
    """`CmpRequestOverCapacity`: (True, "") or (False, why) for one more allocation of the device."""
    for name in requests or {}:
        if name not in capacity:
            return False, f"has no capacity {name}"
    for name, (amount, broken) in consumption(requests, capacity, policies).items():
        if broken:
            return False, f"{name}: {readable(amount)} is not allowed by its request policy"
        total = held.get(name, Fraction(0)) + amount + allocating.get(name, Fraction(0))
        if total > capacity[name]:
            free = capacity[name] - held.get(name, Fraction(0)) - allocating.get(name, Fraction(0))
            return False, f"{name} {readable(amount)} requested, {readable(free)} of {readable(capacity[name])} free"
    return True, ""
