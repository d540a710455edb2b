"""The one node-affinity matcher (scheduler waker, embedded kube-scheduler, hami whatif)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kubesched.nodeaffinity import (
    REQUIRED,
    node_matches,
    required_terms,
    spec_required_terms,
    term_matches,
)


def _pod(*terms, selector=None):
    spec = {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"spec": spec}


def _expr(key, op, *values):
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(("have", "op", "want", "verdict"), [
    ("5", "Gt", "3", True),
    ("+5", "Gt", "3", True),          # ParseInt takes a sign
    ("-2", "Lt", "-1", True),
    (" 5", "Gt", "3", False),         # Python's int() would take the space; Go's ParseInt does not
    ("1_0", "Gt", "3", False),        # nor the underscore
    ("5", "Gt", "3.0", False),
    ("9223372036854775808", "Gt", "3", False),  # past int64: ParseInt's range error
    ("5", "Lt", "5", False),
])
def test_gt_and_lt_compare_as_go_parseint(have, op, want, verdict):
    assert term_matches({"matchExpressions": [_expr("n", op, want)]}, {"n": have}, "node") is verdict


def test_terms_are_ored_expressions_anded_and_fields_match_the_name():
    terms = required_terms(_pod({"matchExpressions": [_expr("zone", "In", "a"), _expr("gpu", "Exists")]},
                                {"matchFields": [_expr("metadata.name", "In", "n7")]}))
    assert node_matches(None, terms, {"zone": "a", "gpu": "1"}, "n1") is True
    assert node_matches(None, terms, {"zone": "a"}, "n1") is False
    assert node_matches(None, terms, {}, "n7") is True
    assert node_matches({"pool": "x"}, terms, {}, "n7") is False     # nodeSelector is ANDed in
    assert node_matches(None, [], {}, "n1") is True                  # no terms: every node
    assert node_matches(None, [{}], {}, "n1") is False               # an empty term matches nothing


@pytest.mark.parametrize("bad", [
    None, "x", 3, ["matchExpressions"], {"matchExpressions": "zone In a"},
    {"matchExpressions": [{"key": 5, "operator": "Exists"}]},
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": "a"}]},  # values not a list: empty
    {"matchExpressions": [["zone", "In", "a"]]},
])
def test_a_malformed_term_matches_nothing_and_never_raises(bad):
    assert term_matches(bad, {"zone": "a"}, "n") is False


@pytest.mark.parametrize("spec", [None, {}, {"affinity": "x"}, {"affinity": {"nodeAffinity": []}},
                                  {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": {"a": 1}}}}}])
def test_a_missing_or_malformed_term_list_is_no_constraint(spec):
    assert spec_required_terms(spec) == []


_label = st.sampled_from(["zone", "gpu", "5", "metadata.name"])
_value = st.sampled_from(["a", "b", "7", "-3", " 7", "x"])
_expr_st = st.fixed_dictionaries({"key": _label, "operator": st.sampled_from(
    ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]), "values": st.lists(_value, max_size=2)})
_term_st = st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(_expr_st, max_size=3),
                                               "matchFields": st.lists(_expr_st, max_size=2)})


def _valid(expr, field):
    """Whether upstream can build the requirement (labels.NewRequirement / the field selector):
    an invalid one makes its term match nothing."""
    key, op, values = expr["key"], expr["operator"], expr["values"]
    if field:
        return key == "metadata.name" and op in ("In", "NotIn") and len(values) == 1
    if op in ("In", "NotIn"):
        return bool(values) and all(re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", v) for v in values)
    if op in ("Exists", "DoesNotExist"):
        return not values
    if op in ("Gt", "Lt"):
        return len(values) == 1 and re.fullmatch(r"[+-]?[0-9]+", values[0]) is not None
    return False


def _reference(expr, labels):
    """The operators as kube's docs define them, written out independently."""
    key, op, values = expr["key"], expr["operator"], expr["values"]
    present = key in labels
    if op in ("Gt", "Lt"):
        digits = present and len(values) == 1 and all(
            re.fullmatch(r"[+-]?[0-9]+", v) for v in (labels[key], values[0]))
        if not digits:
            return False
        return (int(labels[key]) > int(values[0])) if op == "Gt" else (int(labels[key]) < int(values[0]))
    return {"In": present and labels.get(key) in values, "NotIn": not present or labels[key] not in values,
            "Exists": present, "DoesNotExist": not present}.get(op, False)


@settings(max_examples=300, deadline=None)
@given(st.lists(_term_st, max_size=3), st.dictionaries(_label, _value, max_size=3), st.sampled_from(["n", "7"]))
def test_well_formed_terms_agree_with_the_reference(terms, labels, name):
    want = not terms or any(
        bool(t.get("matchExpressions") or t.get("matchFields"))
        and all(_valid(e, False) for e in t.get("matchExpressions", []))
        and all(_valid(f, True) for f in t.get("matchFields", []))
        and all(_reference(e, labels) for e in t.get("matchExpressions", []))
        and all(_reference(f, {"metadata.name": name}) for f in t.get("matchFields", []))
        for t in terms)
    assert node_matches(None, terms, labels, name) is want
