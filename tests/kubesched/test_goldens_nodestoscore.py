"""hami.kubesched.nodestoscore against Kubernetes' own cases (tests/data/kubesched/nodestoscore.yaml:
TestNumFeasibleNodesToFind, TestFairEvaluationForNodes), and its properties.

Covers: numFeasibleNodesToFind for global and profile percentages (the profile's wins, 0 is adaptive);
the rotating search finds that many nodes per cycle and starts the next one after them, so every node is
searched in turn; the bounds (never more than all nodes, at least min(all, 100), all of them at 100 and
under 100 nodes) and monotony in the percentage, for any cluster size; a search stops at the count,
counts rejected nodes as processed, and wraps around; a percentage outside [0-100] is refused by name
(in the rule, in a KubeSchedulerConfiguration, and by the embedded loop)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami.kubesched import nodestoscore
from hami.kubesched.nodestoscore import PercentageError, effective_percentage, find_feasible, nodes_to_find
from hami.kubesched.schedconfig import ConfigShapeError, profile

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "nodestoscore.yaml").read_text())
CASES = DATA["num_feasible_nodes_to_find"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_num_feasible_nodes_to_find(case):
    percentage = effective_percentage(case["profile"], case["global"])
    assert nodes_to_find(percentage, case["nodes"]) == case["want"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_num_feasible_nodes_to_find_read_from_a_configuration(case):
    """The same cases through a KubeSchedulerConfiguration: the global field, the profile's own."""
    doc = {"percentageOfNodesToScore": case["global"], "profiles": [{"schedulerName": "hami-scheduler"}]}
    if case["profile"] is not None:
        doc["profiles"][0]["percentageOfNodesToScore"] = case["profile"]
    assert nodes_to_find(profile(doc, "hami-scheduler").percentage_of_nodes_to_score, case["nodes"]) == case["want"]


def test_unset_everywhere_is_adaptive():
    doc = {"profiles": [{"schedulerName": "hami-scheduler"}]}
    assert profile(doc, "hami-scheduler").percentage_of_nodes_to_score == 0


def test_fair_evaluation_for_nodes():
    """TestFairEvaluationForNodes: every node feasible; each cycle finds nodesToFind and the next one
    starts (i+1)*nodesToFind % numAllNodes, over more than two laps of the cluster."""
    total, percentage = DATA["fair_evaluation"]["nodes"], DATA["fair_evaluation"]["percentage"]
    names = [str(i) for i in range(total)]
    to_find = nodes_to_find(percentage, total)
    assert total % to_find != 0  # upstream's setup: the laps do not line up with the cycles
    start, seen = 0, set()
    for i in range(2 * (total // to_find + 1)):
        search = find_feasible(names, start, to_find, lambda _: None)
        assert len(search.feasible) == to_find
        assert search.next_start == (i + 1) * to_find % total
        seen.update(search.feasible)
        start = search.next_start
    assert seen == set(names)


@given(st.integers(0, 20_000), st.integers(1, 100), st.integers(1, 100))
def test_bounds_and_monotone_in_the_percentage(total, low, high):
    low, high = min(low, high), max(low, high)
    for percentage in (0, low, high):
        n = nodes_to_find(percentage, total)
        assert min(total, nodestoscore.MIN_FEASIBLE_NODES_TO_FIND) <= n <= total
    assert nodes_to_find(low, total) <= nodes_to_find(high, total)
    assert nodes_to_find(100, total) == total
    if total < nodestoscore.MIN_FEASIBLE_NODES_TO_FIND:
        assert nodes_to_find(low, total) == nodes_to_find(0, total) == total


@given(st.integers(100, 20_000))
def test_adaptive_share_is_between_five_and_fifty_percent_and_never_below_100_nodes(total):
    n = nodes_to_find(0, total)
    assert max(total * 5 // 100, 100) <= n <= max(total // 2, 100)


@given(st.lists(st.booleans(), min_size=1, max_size=300), st.integers(0, 1000), st.integers(1, 300))
def test_a_search_is_one_window_of_the_rotation(passes, start, to_find):
    """The processed nodes are consecutive from the start (wrapping); the feasible ones are the passing
    nodes among them, at most `to_find`; the search stops at the count or after every node; the next
    start follows the window."""
    names = [f"n{i:03d}" for i in range(len(passes))]
    ok = dict(zip(names, passes, strict=True))
    search = find_feasible(names, start, to_find, lambda n: None if ok[n] else ("Filter", "no"))
    total = len(names)
    window = [names[(start + i) % total] for i in range(search.processed)]
    assert search.feasible == [n for n in window if ok[n]]
    assert set(search.rejected) == {n for n in window if not ok[n]}
    assert len(search.feasible) <= to_find
    assert len(search.feasible) == to_find or search.processed == total
    if search.processed < total:
        assert ok[window[-1]]  # it stopped on the node that completed the count
    assert search.next_start == (start + search.processed) % total


def test_no_nodes_is_an_empty_search():
    search = find_feasible([], 7, 100, lambda _: None)
    assert (search.feasible, search.rejected, search.next_start) == ([], {}, 0)


@pytest.mark.parametrize("bad", [-1, 101, True, 12.5, "30"])
def test_a_percentage_outside_0_to_100_is_refused_by_name(bad):
    with pytest.raises(PercentageError, match="percentageOfNodesToScore"):
        nodes_to_find(bad, 500)
    with pytest.raises(ConfigShapeError, match=r"^percentageOfNodesToScore"):
        profile({"percentageOfNodesToScore": bad}, "default-scheduler")
    with pytest.raises(ConfigShapeError, match=r"profiles\[\]\.percentageOfNodesToScore"):
        profile({"profiles": [{"schedulerName": "s", "percentageOfNodesToScore": bad}]}, "s")


def test_the_embedded_loop_refuses_a_percentage_outside_0_to_100():
    from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop

    with pytest.raises(PercentageError, match="percentage_of_nodes_to_score: 101"):
        KubeSchedulerLoop(None, ExtenderConfig(""), "hami-scheduler", percentage_of_nodes_to_score=101)
