"""The walk that places a pod's DRA claims (pure, no I/O): the candidates in the pod's node policy
order by GPU fill (claimfit.py), the structured allocator (hami.kubesched.allocator) run on each,
the first node the claims fit, or, under `--extender-prioritize`, every fitting node best first.

kube-scheduler's DynamicResources plugin allocates the devices; the Placer (hami.scheduler.placer)
only ranks and filters nodes with this walk, and holds the allocation it found on the answered node
(`Walk.hold`) until the claim informer shows the claim allocated, or `ASSUME_SECONDS` pass: the next
pod's fill counts it (`usage_with`), so binpack keeps filling the same node and spread moves on. Same
allocator, same inputs: kube-scheduler allocates the same devices on that node.

The claims' selectors and search are the pod creator's: the walk is bounded in time and in search
steps on the event loop that also serves every other pod's /filter and /bind. Past either bound a
node is left undecided and passed on, because kube-scheduler's own allocator has the last word on
the devices: a node failed open costs at worst an allocation kube-scheduler refuses, never a node
wrongly filtered out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hami.kubesched import cel, extendedres
from hami.kubesched.allocator import Allocator, Inventory, Outcome, Usage
from hami.scheduler.placement import claimfit

__all__ = ("ASSUME_SECONDS", "FILTER_BUDGET_SECONDS", "FILTER_MAX_STEPS", "HeldClaim", "Walk", "claims_on_node",
           "usage_with", "walk")

ASSUME_SECONDS = 30.0  # an answered allocation kube-scheduler has not written by then is dropped
FILTER_BUDGET_SECONDS = 0.05  # the walk over the candidates, selectors (hami.kubesched.cel) included
FILTER_MAX_STEPS = 2_000  # search steps per node (upstream's cases take tens; MAX_STEPS is 20,000)


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """An allocation the walk found on the node /filter answered, held until kube-scheduler writes the
    claim (or `until` passes on the Placer's monotonic clock)."""

    allocation: dict
    until: float
    node: str


@dataclass(slots=True)
class Walk:
    """The walk's answer: /filter's body, the nodes left undecided at a bound, and the allocations to
    hold (claim key -> allocation on `node`; empty when nothing is held)."""

    answer: dict
    node: str | None = None
    hold: dict[str, dict] = field(default_factory=dict)
    undecided: int = 0


def usage_with(claims: Iterable[Mapping], held: Mapping[str, HeldClaim], stored: Mapping[str, Mapping]) -> Usage:
    """The devices taken: the allocated claims, plus each held allocation whose claim the informer does
    not show allocated yet (`stored`: claim key -> the claim as the informer has it)."""
    u = Usage.of(claims)
    for key, h in held.items():
        claim = stored.get(key)
        if claim is None or not (claim.get("status") or {}).get("allocation"):
            u.add_allocation(h.allocation)
    return u


def claims_on_node(pod: dict, claims: list[dict], mapping: Mapping, node: Mapping) -> list[dict]:
    """The claims to fit on one node: the pod's, plus the claim kube-scheduler builds for its mapped
    extended resources where the node's allocatable lacks them (hami.kubesched.extendedres)."""
    wants = extendedres.pod_wants(pod, mapping) if mapping else {}
    need = extendedres.needs_dra(wants, node) if wants else set()
    if not need or extendedres.find_claim(pod, claims):
        return claims
    meta = pod.get("metadata") or {}
    special, _ = extendedres.special_claim(
        pod, need, mapping, name=f"{meta.get('name', '')}-extended-resources-pending-{meta.get('uid', '')[:8]}")
    return [*claims, special]


def walk(ordered: list[str], claims_for: Callable[[str], list[dict]], node_of: Callable[[str], Mapping | str],
         devices: Inventory, usage: Usage, classes: Mapping[str, Mapping], allocator: Allocator,
         clock: Callable[[], float], *, prioritize: bool, known: Callable[[str], bool]) -> Walk:
    """Fit the claims on `ordered` (policy order) until the first fit (every node under `prioritize`),
    within FILTER_BUDGET_SECONDS on `clock` and FILTER_MAX_STEPS a node. `claims_for(node)`: the claims
    to fit there; `known(claim key)`: whether the claim exists yet (one kube-scheduler has still to make
    for extended resources is not held under its name)."""
    fitting: list[str] = []
    failed: dict[str, str] = {}
    outcomes: dict[str, Outcome] = {}
    undecided: list[str] = []
    at = clock() + FILTER_BUDGET_SECONDS
    with cel.deadline(FILTER_BUDGET_SECONDS, clock):
        for i, name in enumerate(ordered):
            if clock() > at:
                undecided += ordered[i:]
                break
            outcome = allocator.allocate(claims_for(name), node_of(name), devices, usage, classes,
                                         max_steps=FILTER_MAX_STEPS)
            if not outcome.ok and (outcome.undecided or clock() > at):
                undecided.append(name)  # stopped by a bound, not refused by the devices
                continue
            if not outcome.ok:
                failed[name] = claimfit.unfit_reason(outcome)
                continue
            fitting.append(name)
            outcomes[name] = outcome
            if not prioritize:
                break
    if undecided:
        passed = {*fitting, *undecided}  # nothing held: which devices kube-scheduler takes is open
        return Walk({"NodeNames": [n for n in ordered if n in passed], "FailedNodes": failed or None, "Error": ""},
                    undecided=len(undecided))
    if not fitting:
        return Walk({"NodeNames": None, "FailedNodes": failed, "Error": ""})
    hold = {}
    if len(fitting) == 1 or not prioritize:
        hold = {k: a for k, a in outcomes[fitting[0]].allocations.items() if known(k)}
    return Walk({"NodeNames": fitting, "FailedNodes": None if not prioritize else failed or None, "Error": ""},
                node=fitting[0], hold=hold)
