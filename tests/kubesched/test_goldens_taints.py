"""Kubernetes' own taint and toleration cases, ported as data (tests/data/kubesched/taints.yaml):
one toleration against one taint (hami.kubesched.taints), the TaintToleration filter (the pure
`tolerates_node` and the embedded loop's `filter_node`), its PreferNoSchedule score
(hami.kubesched.intree) and its node-change queueing hint (the embedded loop's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched import intree, taints
from hami.kubesched import schedqueue as sq
from hami.sim.kubescheduler import HINTED_EVENTS, filter_node

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "taints.yaml").read_text())


def _ids(section):
    return [c["name"] for c in DATA[section]]


def _pod(tolerations):
    return {"metadata": {"name": "pod1"}, "spec": {"tolerations": tolerations}}


def _node(name, node_taints):
    return {"metadata": {"name": name}, "spec": {"taints": node_taints}}


@pytest.mark.parametrize("case", DATA["toleration"], ids=_ids("toleration"))
def test_toleration_tolerates_taint(case):
    t = case["taint"]
    assert taints.toleration_matches(case["toleration"], (t["key"], t.get("value", ""), t["effect"])) is case["want"]


@pytest.mark.parametrize("case", DATA["filter"] + DATA["filter_gate_off"], ids=_ids("filter") + _ids("filter_gate_off"))
def test_taint_toleration_filter(case):
    pod, node = _pod(case["tolerations"]), _node("nodeA", case["taints"])
    assert taints.tolerates_node(pod, node) is case["want"]
    verdict = filter_node(pod, node)
    assert (verdict is None) is case["want"], verdict
    if not case["want"]:
        assert verdict[0] == "TaintToleration"


@pytest.mark.parametrize("case", DATA["score"], ids=_ids("score"))
def test_taint_toleration_score(case):
    nodes = [_node(n, ts) for n, ts in case["nodes"].items()]
    assert intree.taint_toleration_scores(_pod(case["tolerations"]), nodes) == case["want"]


@pytest.mark.parametrize("case", DATA["node_change_hint"], ids=_ids("node_change_hint"))
def test_is_schedulable_after_node_change(case):
    hint = HINTED_EVENTS["TaintToleration"][(sq.NODE, sq.UPDATE_TAINT if "old" in case else sq.ADD)]
    old = _node("nodeA", case["old"]) if "old" in case else None
    assert hint(_pod(case["tolerations"]), old, _node("nodeA", case["new"])) is case["want"]
