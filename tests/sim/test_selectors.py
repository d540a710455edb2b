"""Label and field selectors of the embedded API server (hami.sim.apiserver.selectors), pure.

Covers: every label-selector form (=, ==, !=, in, notin, exists, !exists, >, <) against a table of
label sets; parse errors raise SelectorError naming the selector and text; field selectors with
=, ==, != and backslash escapes; unsupported field labels; field values of absent, boolean and
nested fields; properties (hypothesis): a rendered selector parses back to requirements whose
verdict matches a direct Python reading of the same condition, and the parser raises only
SelectorError on arbitrary text.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.sim.apiserver.selectors import (
    SelectorError,
    field_value,
    fields_match,
    labels_match,
    matches,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"gpu": "a100", "zone": "z1", "hami.io/vgpu": "true", "rank": "7"}

LABEL_TABLE = [
    ("gpu=a100", True),
    ("gpu==a100", True),
    ("gpu=t4", False),
    ("gpu!=t4", True),
    ("missing!=x", True),
    ("gpu in (t4, a100)", True),
    ("gpu in (t4)", False),
    ("missing in (x)", False),
    ("gpu notin (t4)", True),
    ("missing notin (x)", True),
    ("gpu", True),
    ("missing", False),
    ("!missing", True),
    ("!gpu", False),
    ("hami.io/vgpu=true", True),
    ("rank>5", True),
    ("rank<5", False),
    ("zone=z1,gpu in (a100),!missing", True),
    ("zone=z1,gpu=t4", False),
    ("", True),
    ("gpu=", False),
    ("empty=", True),
]


@pytest.mark.parametrize(("text", "want"), LABEL_TABLE, ids=[t or "empty" for t, _ in LABEL_TABLE])
def test_label_selector_forms(text, want):
    labels = dict(LABELS, empty="") if text == "empty=" else LABELS
    assert labels_match(parse_label_selector(text), labels) is want


@pytest.mark.parametrize("text", ["gpu in (a", "gpu in a,b", "=x", "gpu=a b", "!", "rank>x", "gpu notin (a;b)",
                                  "a,,b", "Bad Key=1"])
def test_bad_label_selectors_raise_selector_error(text):
    with pytest.raises(SelectorError) as exc:
        parse_label_selector(text)
    assert exc.value.selector == "labelSelector" and exc.value.text == text


def test_field_selector_operators_and_escapes():
    pod = {"metadata": {"name": "a,b=c", "namespace": "ml"}, "spec": {"nodeName": "n1", "hostNetwork": True},
           "status": {"phase": "Pending"}}
    def ok(text):
        return fields_match(parse_field_selector(text), pod)

    assert ok("status.phase=Pending") and ok("status.phase==Pending") and not ok("status.phase!=Pending")
    assert ok(r"metadata.name=a\,b\=c")
    assert ok("spec.nodeName=n1,metadata.namespace=ml")
    assert ok("spec.nodeName=n1,,")  # empty terms are skipped
    assert ok("spec.schedulerName=")  # absent reads as ""
    assert ok("spec.hostNetwork=true")
    assert not ok("spec.nodeName!=n1")


def test_event_source_selects_on_component():
    ev = {"source": {"component": "hami-scheduler", "host": "h"}}
    assert field_value(ev, "source") == "hami-scheduler"


def test_unsupported_field_is_rejected_by_name():
    with pytest.raises(SelectorError) as exc:
        parse_field_selector("spec.bogus=1", {"metadata.name"})
    assert "spec.bogus" in str(exc.value) and exc.value.selector == "fieldSelector"


@pytest.mark.parametrize("text", ["status.phase", "=x", r"a=b\q", "a=1,b"])
def test_bad_field_selectors_raise_selector_error(text):
    with pytest.raises(SelectorError):
        parse_field_selector(text)


def test_matches_combines_both_selectors():
    obj = {"metadata": {"name": "p", "labels": {"app": "x"}}, "status": {"phase": "Running"}}
    assert matches(parse_label_selector("app=x"), parse_field_selector("status.phase=Running"), obj)
    assert not matches(parse_label_selector("app=y"), parse_field_selector("status.phase=Running"), obj)
    assert not matches((), parse_field_selector("status.phase=Pending"), obj)


names = st.from_regex(r"[a-z]([a-z0-9.-]{0,6}[a-z0-9])?", fullmatch=True)
values = st.one_of(st.just(""), names)
label_sets = st.dictionaries(st.sampled_from(["a", "b", "c", "x.io/d"]), values, max_size=4)


@st.composite
def requirement(draw):
    key = draw(st.sampled_from(["a", "b", "c", "x.io/d"]))
    op = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!"]))
    if op in ("in", "notin"):
        vals = draw(st.lists(values, min_size=1, max_size=3))
        return f"{key} {op} ({','.join(vals)})", (key, op, set(vals))
    if op == "exists":
        return key, (key, op, None)
    if op == "!":
        return f"!{key}", (key, op, None)
    val = draw(values)
    return f"{key}{op}{val}", (key, op, {val})


def reference(labels: dict, key: str, op: str, vals) -> bool:
    if op in ("=", "=="):
        return key in labels and labels[key] in vals
    if op == "!=":
        return key not in labels or labels[key] not in vals
    if op == "in":
        return key in labels and labels[key] in vals
    if op == "notin":
        return key not in labels or labels[key] not in vals
    if op == "exists":
        return key in labels
    return key not in labels


@given(st.lists(requirement(), min_size=1, max_size=4), label_sets)
def test_rendered_selectors_agree_with_a_direct_reading(reqs, labels):
    text = ",".join(r[0] for r in reqs)
    want = all(reference(labels, *r[1]) for r in reqs)
    assert labels_match(parse_label_selector(text), labels) is want


@given(st.text(max_size=40))
def test_label_parser_raises_only_selector_error(text):
    try:
        parse_label_selector(text)
    except SelectorError:
        pass


@given(st.text(max_size=40))
def test_field_parser_raises_only_selector_error(text):
    try:
        parse_field_selector(text, {"metadata.name", "status.phase"})
    except SelectorError:
        pass


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=20))
def test_escaped_field_values_round_trip(value):
    escaped = value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
    (req,) = parse_field_selector(f"metadata.name={escaped}")
    assert req.value == value
