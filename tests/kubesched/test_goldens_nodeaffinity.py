"""Kubernetes' own node-affinity cases (component-helpers' nodeaffinity_test.go), ported as data
(tests/data/kubesched/nodeaffinity.yaml), against hami.kubesched.nodeaffinity: node selectors,
preferred-term scores, single requirements, and a pod's nodeSelector with its required affinity."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched import drapools, nodeaffinity

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "nodeaffinity.yaml").read_text())


def _ids(section):
    return [c["name"] for c in DATA[section]]


@pytest.mark.parametrize("case", DATA["node_selector_match"], ids=_ids("node_selector_match"))
def test_node_selector_match(case):
    node = case["node"]
    got = node is not None and drapools.selector_matches(
        case["selector"], drapools.NodeView(node["name"], node.get("labels") or {}))
    assert got is case["want"]


@pytest.mark.parametrize("case", DATA["preferred_score"], ids=_ids("preferred_score"))
def test_preferred_scheduling_terms_score(case):
    node = case["node"]
    assert nodeaffinity.preferred_score(case["terms"], node.get("labels") or {}, node["name"]) == case["want"]


@pytest.mark.parametrize("case", DATA["requirements"], ids=_ids("requirements"))
def test_node_selector_requirements(case):
    got = bool(case["in"]) and nodeaffinity.term_matches({"matchExpressions": case["in"]}, case["labels"], "node")
    assert got is case["want"]


@pytest.mark.parametrize("case", DATA["pod_matches"], ids=_ids("pod_matches"))
def test_pod_matches_node_selector_and_affinity_terms(case):
    assert nodeaffinity.pod_matches(case["spec"], case.get("labels") or {}, case.get("nodeName") or "") is case["want"]
