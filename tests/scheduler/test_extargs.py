"""ExtenderArgs decoding with the node name list cached (hami.scheduler.extender.extargs).

Covers (hypothesis over bodies, the decoder reused across them so the cache is hit): the decoded
arguments always equal a full parse with lower-cased keys; a repeated name list is taken from the
cache (hits counted) whatever key case, pod or field order the body has; the same list inside the
pod, as a duplicate key, or the substitution mark already in the body never fool it (a node named
like the mark is still served from the cache); bad JSON
gives the error text of the body as sent, not of the substituted one; a non-object body and
lists that are not all strings are reported as the full parse would see them.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.scheduler.extender.extargs import ArgsDecoder, BadArgs, lower_keys

NAMES = [f"node-{i}" for i in range(120)]


def _reference(body: bytes):
    args = lower_keys(orjson.loads(body))
    value = args.get("nodenames")
    ok = isinstance(value, list) and all(isinstance(n, str) for n in value)
    return args, ok


def _same(got_args: dict, names, body: bytes) -> None:
    want, ok = _reference(body)
    assert (names is not None) == ok
    if ok:
        assert list(names.names) == want["nodenames"]
        got_args = dict(got_args, nodenames=list(got_args["nodenames"]))
    assert got_args == want


pods = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(max_size=8)})},
                             optional={"spec": st.fixed_dictionaries({"args": st.sampled_from(
                                 [NAMES, NAMES[:3], ["x"], [1, 2], "7355608001337"])})})
name_lists = st.one_of(st.just(NAMES), st.just(NAMES[:60]), st.just(list(reversed(NAMES))),
                       st.lists(st.sampled_from(NAMES), max_size=5), st.just([1, "a"]), st.none(),
                       st.just(7355608001337), st.just(NAMES[:40] + ["7355608001337"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(pods, name_lists, st.sampled_from(["NodeNames", "nodenames", "NODENAMES"]),
                          st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_decoded_args_equal_a_full_parse(requests):
    dec = ArgsDecoder()
    for pod, names_value, key, names_first, dup in requests:
        doc = {key: names_value, "Pod": pod} if names_first else {"Pod": pod, key: names_value}
        body = orjson.dumps(doc)
        if dup:  # a second, differently spelled key: the last one wins in both paths
            body = body[:-1] + b',"nodeNames":' + orjson.dumps(NAMES) + b"}"
        args, names = dec.decode(body)
        _same(args, names, body)


def test_a_repeated_list_is_served_from_the_cache():
    dec = ArgsDecoder()
    for i in range(3):
        body = orjson.dumps({"pod": {"metadata": {"name": f"p{i}"}}, "nodenames": NAMES})
        args, names = dec.decode(body)
        _same(args, names, body)
    assert (dec.misses, dec.hits) == (1, 2)


def test_a_list_naming_the_mark_is_still_served_from_the_cache():
    # only the bytes around the replaced list may not hold the mark; a node named like it is fine
    dec = ArgsDecoder()
    odd = NAMES[:40] + ["7355608001337"]
    for i in range(3):
        body = orjson.dumps({"Pod": {"metadata": {"name": f"p{i}"}}, "NodeNames": odd})
        args, names = dec.decode(body)
        _same(args, names, body)
    assert (dec.misses, dec.hits) == (1, 2)
    body = orjson.dumps({"Pod": {"metadata": {"name": "7355608001337"}, "n": 7355608001337}, "NodeNames": odd})
    args, names = dec.decode(body)
    _same(args, names, body)
    assert (dec.misses, dec.hits) == (2, 2)  # the mark next to the list: the full parse


def test_the_list_inside_the_pod_is_not_taken_for_the_top_level_one():
    dec = ArgsDecoder()
    dec.decode(orjson.dumps({"pod": {}, "nodenames": NAMES}))
    body = orjson.dumps({"nodenames": NAMES[:2], "pod": {"spec": {"args": NAMES}}})
    args, names = dec.decode(body)
    _same(args, names, body)
    assert list(names.names) == NAMES[:2]
    body = orjson.dumps({"pod": {"spec": {"args": NAMES}}, "nodenames": None})
    args, names = dec.decode(body)
    assert names is None and args["nodenames"] is None and args["pod"]["spec"]["args"] == NAMES


def test_bad_json_reports_the_body_as_sent():
    dec = ArgsDecoder()
    dec.decode(orjson.dumps({"pod": {}, "nodenames": NAMES}))
    body = b'{"pod": {"x": tru}, "nodenames":' + orjson.dumps(NAMES) + b"}"
    with pytest.raises(orjson.JSONDecodeError) as got:
        dec.decode(body)
    with pytest.raises(orjson.JSONDecodeError) as want:
        orjson.loads(body)
    assert str(got.value) == str(want.value)


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(BadArgs, match="non-object"):
        ArgsDecoder().decode(b"[1, 2]")
