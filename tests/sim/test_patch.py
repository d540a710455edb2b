"""The three PATCH types of the embedded API server (hami.sim.apiserver.patch), pure.

Covers: merge patch (null deletes, nested maps merge, lists replace, RFC 7386 examples); strategic
merge (containers/env by name, conditions by type, volumeMounts by mountPath, finalizers as a set,
`$patch: delete` / `replace`, `$deleteFromPrimitiveList`, `$setElementOrder` ignored, `$retainKeys`);
JSON patch (add/replace/remove/test, `~0` and `~1` escapes, failed test is 422, bad body 400);
unknown content type 415; inputs are never mutated; properties (hypothesis): a merge patch built
from the difference of two documents turns the first into the second, and arbitrary bodies raise
only PatchError.
"""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.sim.apiserver.patch import JSON_PATCH, MERGE, STRATEGIC, PatchError, apply_patch, merge_patch


def ap(obj, patch, ctype):
    return apply_patch(obj, orjson.dumps(patch), ctype)


RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "want"), RFC7386)
def test_merge_patch_rfc7386_examples(target, patch, want):
    before = copy.deepcopy(target)
    assert ap(target, patch, MERGE) == want
    assert target == before


POD = {
    "metadata": {"name": "p", "finalizers": ["a"], "annotations": {"x": "1"}},
    "spec": {"containers": [
        {"name": "main", "image": "i:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "volumeMounts": [{"name": "v", "mountPath": "/data"}]},
        {"name": "side", "image": "s:1"}]},
    "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]},
}


def test_strategic_merge_merges_lists_by_their_keys():
    before = copy.deepcopy(POD)
    out = ap(POD, {
        "metadata": {"finalizers": ["b", "a"]},
        "spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                                 "volumeMounts": [{"mountPath": "/data", "readOnly": True}]},
                                {"name": "new", "image": "n:1"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }, STRATEGIC)
    main, side, new = out["spec"]["containers"]
    assert (main["image"], side["name"], new["name"]) == ("i:1", "side", "new")
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}]
    assert main["volumeMounts"] == [{"name": "v", "mountPath": "/data", "readOnly": True}]
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "PodScheduled",
                                                                                 "status": "True"}]
    assert POD == before


def test_strategic_merge_directives():
    out = ap(POD, {"spec": {"containers": [{"name": "side", "$patch": "delete"}],
                            "$setElementOrder/containers": [{"name": "main"}]},
                   "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"],
                               "annotations": {"$patch": "replace", "y": "2"}}},
             STRATEGIC)
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    assert out["metadata"]["finalizers"] == [] and out["metadata"]["annotations"] == {"y": "2"}
    out = ap(POD, {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}}, STRATEGIC)
    assert out["spec"]["containers"] == [{"name": "only", "image": "o"}]
    out = ap(POD, {"status": {"$patch": "delete"}}, STRATEGIC)
    assert "status" not in out
    out = ap({"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["b", "c"], "c": 3}}, STRATEGIC)
    assert out == {"spec": {"b": 2, "c": 3}}


def test_strategic_merge_lists_without_a_key_replace_and_null_deletes():
    out = ap({"spec": {"tolerations": [{"key": "a"}], "x": 1}}, {"spec": {"tolerations": [{"key": "b"}], "x": None}},
             STRATEGIC)
    assert out == {"spec": {"tolerations": [{"key": "b"}]}}


def test_strategic_merge_item_without_its_merge_key_is_422():
    with pytest.raises(PatchError) as exc:
        ap(POD, {"spec": {"containers": [{"image": "x"}]}}, STRATEGIC)
    assert exc.value.code == 422


def test_json_patch_ops_and_escapes():
    obj = {"metadata": {"annotations": {"hami.io/node-lock": "a", "t~x": "1"}}, "list": [1, 2]}
    out = ap(obj, [
        {"op": "test", "path": "/metadata/annotations/hami.io~1node-lock", "value": "a"},
        {"op": "replace", "path": "/metadata/annotations/hami.io~1node-lock", "value": "b"},
        {"op": "remove", "path": "/metadata/annotations/t~0x"},
        {"op": "add", "path": "/list/-", "value": 3},
        {"op": "copy", "from": "/list/0", "path": "/first"},
    ], JSON_PATCH)
    assert out == {"metadata": {"annotations": {"hami.io/node-lock": "b"}}, "list": [1, 2, 3], "first": 1}
    assert obj["metadata"]["annotations"]["hami.io/node-lock"] == "a"


@pytest.mark.parametrize(("patch", "code"), [
    ([{"op": "test", "path": "/a", "value": 2}], 422),
    ([{"op": "remove", "path": "/missing"}], 422),
    ([{"op": "replace", "path": "/missing/deeper", "value": 1}], 422),
    ([{"op": "frobnicate", "path": "/a"}], 422),
    ({"op": "add"}, 400),
    ([{"path": "/a"}], 422),
], ids=["test-fails", "remove-missing", "replace-missing", "unknown-op", "not-a-list", "no-op"])
def test_json_patch_failures(patch, code):
    with pytest.raises(PatchError) as exc:
        ap({"a": 1}, patch, JSON_PATCH)
    assert exc.value.code == code


def test_malformed_body_is_400_and_unknown_type_415():
    with pytest.raises(PatchError) as exc:
        apply_patch({}, b"{nope", MERGE)
    assert exc.value.code == 400
    with pytest.raises(PatchError) as exc:
        apply_patch({}, b"[1]", STRATEGIC)
    assert exc.value.code == 400
    with pytest.raises(PatchError) as exc:
        apply_patch({}, b"{}", "application/apply-patch+yaml")
    assert exc.value.code == 415


def test_content_type_parameters_are_ignored():
    assert apply_patch({"a": 1}, b'{"a":2}', "application/merge-patch+json; charset=utf-8") == {"a": 2}


json_scalars = st.one_of(st.booleans(), st.integers(-5, 5), st.text(max_size=3))
json_docs = st.recursive(
    st.dictionaries(st.text(max_size=3), json_scalars, max_size=3),
    lambda inner: st.dictionaries(st.text(max_size=3),
                                  st.one_of(json_scalars, inner, st.lists(json_scalars, max_size=2)), max_size=3),
    max_leaves=12,
)


def diff(a: dict, b: dict) -> dict:
    """The merge patch that turns `a` into `b` (b holds no nulls)."""
    out: dict = {k: None for k in a if k not in b}
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            sub = diff(a[k], v)
            if sub:
                out[k] = sub
        elif a.get(k, object()) != v or k not in a:
            out[k] = v
    return out


@given(json_docs, json_docs)
def test_merge_patch_of_the_difference_reaches_the_target(a, b):
    assert merge_patch(a, diff(a, b)) == b


@given(json_docs, json_docs)
def test_strategic_patch_without_keyed_lists_equals_merge_patch(a, b):
    patch = diff(a, b)
    assert ap(a, patch, STRATEGIC) == merge_patch(a, patch)


@given(st.binary(max_size=60), st.sampled_from([MERGE, STRATEGIC, JSON_PATCH]))
def test_arbitrary_bodies_raise_only_patch_error(body, ctype):
    try:
        apply_patch({"a": {"b": [1]}}, body, ctype)
    except PatchError:
        pass
