"""Node policies for pods with DRA claims (pure, no I/O): GPU fill from ResourceSlices and the
claims already allocated, the order a node policy gives, and HAMi-style reasons for nodes where the
structured allocator (hami.kubesched.allocator) cannot place the claims.

Fill is HAMi's node score (ComputeDefaultScore, usage.node_score) read off DRA: per GPU, the shares
taken over the shares published, the `cores` consumed over the `cores` capacity and the `memory`
consumed over the `memory` capacity, each summed over the node and the three ratios added, times 10.
A device allocated without a share (exclusive, no `allowMultipleAllocations`) counts as wholly taken.
A partitionable GPU (KEP-4815: its devices consume a counter set) counts once, as its counter set:
taken shares 1 while any partition or the whole GPU is allocated, memory the `memory` counter its
allocated devices consume. A ratio whose capacity no device publishes (cores on a driver without
them) is left out rather than counted as zero, so drivers without HAMi's capacities still rank by
the devices they hand out.

As in device-plugin mode (score.py), a node's fill depends only on what is already allocated, never
on the pod: binpack prefers the fullest node that fits, spread the emptiest; ties go to the earlier
name in the candidates kube-scheduler sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from hami.kubesched.allocator import Outcome, Usage
from hami.kubesched.drapools import Pool
from hami.scheduler.placement.fit import (
    CARD_INSUFFICIENT_CORE,
    CARD_INSUFFICIENT_MEMORY,
    CARD_NOT_HEALTH,
    CARD_TIME_SLICING_EXHAUSTED,
    CARD_TYPE_MISMATCH,
    NODE_INSUFFICIENT_DEVICE,
    NODE_UNFIT_POD,
    gen_reason,
)
from hami.scheduler.placement.policy import node_order_descending

__all__ = ("node_fill", "order", "scores", "unfit_reason")

MEMORY, CORES, SHARES = "memory", "cores", "shares"


def node_fill(pools: Iterable[Pool], usage: Usage, drivers: frozenset[str] | None = None) -> float:
    """HAMi's node score (0..30) of the devices these pools give a node, `drivers` only when given."""
    sums = {MEMORY: [Fraction(0), Fraction(0)], CORES: [Fraction(0), Fraction(0)], SHARES: [Fraction(0), Fraction(0)]}
    for pool in pools:
        if drivers is not None and pool.driver not in drivers:
            continue
        partitioned: dict[str, Fraction] = {}  # counter set -> memory its allocated devices consume
        for dev in pool.devices:
            key = dev.key
            if dev.counters:
                for set_name, amounts in dev.counters:
                    partitioned.setdefault(set_name, Fraction(0))
                    if usage.allocated(key):
                        partitioned[set_name] += Fraction(amounts.get(MEMORY, 0))
                continue
            whole = key in usage.exclusive
            consumed = usage.consumed.get(key, {})
            for name in (MEMORY, CORES):
                cap = dev.capacity.get(name)
                if cap:
                    sums[name][1] += cap
                    sums[name][0] += cap if whole else min(Fraction(consumed.get(name, 0)), Fraction(cap))
            shares = dev.capacity.get(SHARES) or 1
            sums[SHARES][1] += shares
            if whole:
                sums[SHARES][0] += shares
            elif key in usage.shared:
                sums[SHARES][0] += min(Fraction(consumed.get(SHARES, 1)), Fraction(shares))
        for set_name, used in partitioned.items():
            total = Fraction(pool.counter_sets.get(set_name, {}).get(MEMORY, 0))
            sums[SHARES][1] += 1
            sums[SHARES][0] += 1 if used else 0
            if total:
                sums[MEMORY][1] += total
                sums[MEMORY][0] += min(used, total)
    return float(10 * sum(used / total for used, total in sums.values() if total))


def order(names: Sequence[str], fills: Mapping[str, float], policy: str) -> list[str]:
    """The candidates in the node policy's order: binpack fullest first, spread emptiest first;
    ties keep the candidates' order (a stable sort)."""
    sign = -1 if node_order_descending(policy) else 1
    return sorted(names, key=lambda n: sign * fills.get(n, 0.0))


def scores(names: Sequence[str], fills: Mapping[str, float], policy: str) -> list[dict]:
    """/prioritize's HostPriorityList: 0..10 by fill (binpack: fuller scores higher; spread: emptier),
    scaled over the candidates so the best gets 10 and the worst 0."""
    if not names:
        return []
    values = [fills.get(n, 0.0) for n in names]
    low, high = min(values), max(values)
    out = []
    for name, fill in zip(names, values, strict=True):
        share = 0.0 if high == low else (fill - low) / (high - low)
        if not node_order_descending(policy):
            share = 1.0 - share if high != low else 0.0
        out.append({"Host": name, "Score": round(10 * share)})
    return out


# A device the allocator turned down, by what its detail line names, as HAMi's fit reasons: a
# capacity it is short of (or whose request policy refuses the amount) leads the line.
_CAPACITY_KEYS = ((MEMORY, CARD_INSUFFICIENT_MEMORY), (CORES, CARD_INSUFFICIENT_CORE),
                  (SHARES, CARD_TIME_SLICING_EXHAUSTED))
_DETAIL_KEYS = (
    ("taint", CARD_NOT_HEALTH),
    ("selector", CARD_TYPE_MISMATCH),
    ("in use", CARD_TIME_SLICING_EXHAUSTED),
    ("allocated", CARD_TIME_SLICING_EXHAUSTED),
)


def _detail_key(why: str) -> str:
    for name, key in _CAPACITY_KEYS:
        if why.startswith(name) or why == f"has no capacity {name}":
            return key
    return next((k for needle, k in _DETAIL_KEYS if needle in why), NODE_UNFIT_POD)


def unfit_reason(outcome: Outcome) -> str:
    """FailedNodes' text for a node the claims do not fit: HAMi's `N/M Key` counts over the node's
    devices (messages.filtering_failed_messages reads them), then the allocator's own line."""
    details = outcome.details
    if not details and "no devices published" in outcome.reason:
        return f"{NODE_INSUFFICIENT_DEVICE}, {outcome.reason}"
    counts: dict[str, int] = {}
    for line in details:
        why = line.partition(": ")[2]
        key = _detail_key(why)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        counts[NODE_UNFIT_POD] = 1
    return f"{gen_reason(counts, max(len(details), 1))}, {outcome.reason}"
