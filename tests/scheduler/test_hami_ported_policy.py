"""HAMi v2.10 `pkg/scheduler/policy/node_policy_test.go` (and what of gpu_policy_test.go is not in
test_policy.py), ported to hami.scheduler.placement.score / usage / policy.

Covers TestLess (node order: binpack chooses the higher score, spread the lower; HAMi sorts with
Less and takes the last element, we order by preference and take the first), TestComputeDefaultScore
(zero capacity and no devices score 0 without error, two devices score 25) and TestDeviceUsageListLen /
TestNodeScoreListLen style emptiness. Not ported: TestOverrideScore (Metax and DCU vendors only),
the NUMA-first cases of TestDeviceUsageList_Less and the cross-type cases of TestComputeScore, which
the stored snapshot of gpu_policy_test.go has from before v2.10 (score-primary ordering, #1806, and
type-equal requests only, spec §6.2; both covered in test_policy.py).
"""

from __future__ import annotations

import pytest

from hami.scheduler.placement.policy import node_order_descending
from hami.scheduler.placement.score import order_nodes
from hami.scheduler.placement.usage import node_score

from ._helpers import dev, node


def scored_node(name: str, score: float):
    """A node whose default score is `score` (10 or 20): one card, 10/10 slots used, memory 0 or full."""
    usedmem = 100 if score == 20 else 0
    n = node(name, [dev(f"{name}-gpu", count=10, used=10, totalmem=100, usedmem=usedmem, totalcore=100)])
    assert node_score(n.devices) == score
    return n


@pytest.mark.parametrize(("policy", "score_i", "score_j", "hami_less"), [
    ("spread", 20.0, 10.0, True),
    ("spread", 10.0, 20.0, False),
    ("binpack", 10.0, 20.0, True),
    ("binpack", 20.0, 10.0, False),
], ids=["TestLess/Spread strategy, i score higher", "TestLess/Spread strategy,j score higher",
        "TestLess/Default strategy (Binpack), i score lower", "TestLess/Default strategy (Binpack), j score lower"])
def test_TestLess_node_order(policy, score_i, score_j, hami_less):
    ni, nj = scored_node("node1", score_i), scored_node("node2", score_j)
    # HAMi: sort.Sort then take the last; Less(i, j) true puts i first, so j is chosen.
    hami_choice = "node2" if hami_less else "node1"
    assert order_nodes([ni, nj], policy)[0].name == hami_choice
    assert node_order_descending(policy) is (policy != "spread")


@pytest.mark.parametrize(("devices", "want"), [
    ([dev("z", count=0, totalcore=0, totalmem=0)], 0.0),
    ([], 0.0),
    ([dev("device1", index=1, used=50, count=100, usedmem=100, totalmem=100, totalcore=100, usedcores=100,
          numa=0, type="GPU"),
      dev("device2", index=2, used=75, count=150, usedmem=200, totalmem=200, totalcore=200, usedcores=200,
          numa=1, type="CPU", health=False)], 25.0),
], ids=["TestComputeDefaultScore/Zero capacity devices returns score 0 without panic",
        "TestComputeDefaultScore/Empty device list returns score 0 without panic",
        "TestComputeDefaultScore/Test with devices"])
def test_TestComputeDefaultScore(devices, want):
    assert node_score(devices) == want
    assert node("n", devices).score_value == want


def test_empty_node_list_orders_to_nothing():
    assert order_nodes([], "binpack") == [] and order_nodes([], "spread") == []
