"""How many feasible nodes kube-scheduler looks for, and where each search starts (pure).

kube-scheduler (v1.31, pkg/scheduler/schedule_one.go) does not filter every node of a large cluster:
`numFeasibleNodesToFind` says how many feasible nodes end the search, and `findNodesThatPassFilters`
walks the node list from `nextStartNodeIndex`, stopping once it has that many. The next cycle starts
after the nodes this one processed (the feasible ones plus those a filter rejected), so successive
pods see rotating slices of the cluster. Only the feasible nodes found go on to the extender's filter
and to scoring: a policy that ranks nodes (HAMi's binpack or spread) ranks that slice, not the cluster.

The rule (`numFeasibleNodesToFind`):

- under 100 nodes (`minFeasibleNodesToFind`) every node is searched;
- the profile's `percentageOfNodesToScore`, when set, wins over the configuration's global one;
- 0 (or unset everywhere, the upstream default) is adaptive: 50 - nodes/125 percent, at least 5
  (`minFeasibleNodesPercentageToFind`);
- the result is nodes x percentage / 100 (integer division), at least 100.

kube-scheduler's own validation refuses a percentage outside 0..100; so does `nodes_to_find`.

The search here is sequential, kube-scheduler's is parallel (16 workers, cancelled once enough nodes
passed): upstream may check a few nodes past the cut and count the rejected ones among those
processed. Sequentially the processed nodes are exactly the ones checked, which is the order the
parallel search approximates and what `TestFairEvaluationForNodes` asserts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

MIN_FEASIBLE_NODES_TO_FIND = 100  # minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5  # minFeasibleNodesPercentageToFind
ADAPTIVE_BASE_PERCENTAGE = 50  # basePercentageOfNodesToScore
ADAPTIVE_NODES_PER_PERCENT = 125  # the adaptive percentage drops one point per this many nodes
ALL_NODES = 100  # percentageOfNodesToScore that searches every node

Verdict = TypeVar("Verdict")


class PercentageError(ValueError):
    """A percentageOfNodesToScore outside kube-scheduler's valid range [0-100]."""


def effective_percentage(profile: int | None, global_: int | None) -> int:
    """The percentage a profile searches with: its own when set (0 included), else the configuration's
    global one, else kube-scheduler's default 0 (adaptive)."""
    if profile is not None:
        return profile
    return global_ if global_ is not None else 0


def check_percentage(percentage: int | None, field_name: str = "percentageOfNodesToScore") -> None:
    """kube-scheduler's validation: an int in [0-100] (or unset)."""
    if percentage is None:
        return
    if isinstance(percentage, bool) or not isinstance(percentage, int):
        raise PercentageError(f"{field_name}: expected an integer, got {type(percentage).__name__}")
    if not 0 <= percentage <= 100:
        raise PercentageError(f"{field_name}: {percentage} is not in valid range [0-100]")


def nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """numFeasibleNodesToFind: the feasible nodes that end the search (None or 0: adaptive)."""
    check_percentage(percentage)
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percent = percentage or 0
    if percent == 0:
        percent = max(ADAPTIVE_BASE_PERCENTAGE - num_all_nodes // ADAPTIVE_NODES_PER_PERCENT,
                      MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percent // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass
class Search(Generic[Verdict]):
    """One cycle's search: the feasible nodes found (in search order), the rejected ones with their
    verdicts, and where the next cycle starts."""

    feasible: list[str] = field(default_factory=list)
    rejected: dict[str, Verdict] = field(default_factory=dict)
    next_start: int = 0

    @property
    def processed(self) -> int:
        return len(self.feasible) + len(self.rejected)


def find_feasible(names: Sequence[str], start: int, to_find: int,
                  check: Callable[[str], Verdict | None]) -> Search[Verdict]:
    """findNodesThatPassFilters + the index update of findNodesThatFitPod: check nodes from `start`
    (wrapping around) until `to_find` passed (`check` answers None) or every node was checked; the
    next search starts after the processed ones."""
    search: Search[Verdict] = Search()
    total = len(names)
    if total == 0:
        return search
    start %= total
    for i in range(total):
        if len(search.feasible) >= to_find:
            break
        name = names[(start + i) % total]
        verdict = check(name)
        if verdict is None:
            search.feasible.append(name)
        else:
            search.rejected[name] = verdict
    search.next_start = (start + search.processed) % total
    return search
