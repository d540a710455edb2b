"""Full-Nodes bodies read node by node (hami.scheduler.extender.nodescan).

Covers (hypothesis over bodies, one scanner reused across them so its caches are hit): a scan
either declines (None) or gives exactly the full decode: the other arguments with lower-cased
keys and `nodes.items` set aside, and per item the Node itself, its name, register and cordon
annotations, in order; unchanged Nodes are not decoded again, changed ones are, and a repeated
array is taken whole; Nodes with non-ASCII text, a last Node followed by other fields, the cut
mark or the item separator inside the pod or inside a Node, duplicate names, and Nodes /filter
refuses (annotations not strings, metadata not an object) never give a wrong answer; Nodes sent
with kind and apiVersion first, and a pod carrying its own `items` array (a configMap volume); a
scan told where a remembered NodeNames list starts (names holding the array's own bytes too)
answers as the scan of the whole body.
"""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.scheduler.extender.extargs import MIN_CACHED_BYTES, ArgsDecoder, lower_keys
from hami.scheduler.extender.nodescan import NodeScanner

REG = "hami.io/node-nvidia-register"
CORDON = "hami.io/device-cordon"


def _check(scanner: NodeScanner, body: bytes) -> bool:
    got = scanner.scan(body)
    if got is None:
        return False
    args, items = got
    want = lower_keys(orjson.loads(body))
    want_items = want["nodes"]["items"]
    want["nodes"] = dict(want["nodes"], items=None)
    assert args == want
    assert [sn.node() for sn in items] == want_items
    for sn, node in zip(items, want_items, strict=True):
        annos = node["metadata"].get("annotations") or {}
        assert (sn.name, sn.register, sn.cordon) == (node["metadata"].get("name", ""), annos.get(REG),
                                                     annos.get(CORDON))
    return True


texts = st.text(alphabet=st.sampled_from('ab-"\\é€},{[]:7355608001338'), max_size=12)
nodes = st.builds(
    lambda name, reg, cordon, extra, rv: {
        "metadata": {"name": name, "resourceVersion": str(rv),
                     "annotations": {**({REG: reg} if reg is not None else {}),
                                     **({CORDON: cordon} if cordon is not None else {}), "x": extra}},
        "status": {"images": [{"names": [extra]}]}},
    st.sampled_from(["n0", "n1", "n2", "n3", "nö"]), st.none() | texts, st.none() | texts, texts,
    st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(nodes, min_size=1, max_size=5), texts, st.sampled_from(["Nodes", "nodes"]),
                          st.booleans()), min_size=1, max_size=5))
def test_a_scan_is_the_full_decode_or_declines(requests):
    scanner = NodeScanner()
    for items, podtext, key, names_after in requests:
        doc = {"Pod": {"metadata": {"name": podtext}}, key: {"kind": "NodeList", "items": items}}
        if names_after:
            doc["NodeNames"] = None
        _check(scanner, orjson.dumps(doc))


def _body(items, pod=None) -> bytes:
    return orjson.dumps({"Pod": pod or {"metadata": {"name": "p"}}, "Nodes": {"kind": "NodeList", "items": items}})


def _node(name: str, rv: int = 1, **annos) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": {REG: f"reg-{name}", **annos}},
            "status": {"capacity": {"nvidia.com/gpu": "80"}}}


def test_unchanged_nodes_are_reused_and_changed_ones_decoded():
    scanner = NodeScanner()
    items = [_node(f"n{i}") for i in range(10)]
    assert _check(scanner, _body(items))
    assert (scanner.decoded, scanner.reused) == (10, 0)
    assert _check(scanner, _body(items, {"metadata": {"name": "q"}}))  # the same array: taken whole
    assert (scanner.decoded, scanner.reused) == (10, 10)
    items[3] = _node("n3", rv=2, **{CORDON: "GPU-1"})
    items[9] = _node("n9", rv=2)
    assert _check(scanner, _body(items))
    assert (scanner.decoded, scanner.reused) == (12, 18)


def test_separators_and_the_mark_inside_nodes_or_the_pod_never_mislead():
    scanner = NodeScanner()
    sneaky = _node("n1")
    sneaky["spec"] = {"x": [{}, {"metadata": {"name": "n9"}}]}  # `},{"metadata":{"name":"` inside a Node
    # the scan cannot tell a nested array from the items array, so it declines and the full decode answers
    assert _check(scanner, _body([_node("n0"), sneaky, _node("n2")])) is False
    assert (scanner.decoded, scanner.reused) == (0, 0)
    pod = {"metadata": {"name": "p"}, "spec": {"n": 7355608001338, "items": [{"metadata": {"name": "x"}}]}}
    assert _check(scanner, _body([_node("n0")], pod)) is False  # the mark in the body: full decode
    # a Node-shaped array inside the pod comes first: the scan declines, the full decode answers
    assert _check(scanner, _body([_node("n0"), _node("n1")], {"spec": {"items": [_node("n0")]}})) is False


def test_nodes_filter_refuses_are_left_to_the_full_decode():
    scanner = NodeScanner()
    bad = _node("n1")
    bad["metadata"]["annotations"]["x"] = 5
    assert scanner.scan(_body([_node("n0"), bad])) is None
    assert scanner.scan(_body([_node("n0"), {"metadata": {"name": "n1", "annotations": None}}])) is not None
    assert scanner.scan(_body([{"metadata": {"name": 5}}])) is None
    assert scanner.scan(b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}},') is None


def test_duplicate_names_and_non_ascii_last_node():
    scanner = NodeScanner()
    items = [_node("n0"), _node("n0", rv=2), _node("nö", **{CORDON: "€"})]
    assert _check(scanner, _body(items))
    assert _check(scanner, _body(items))


def test_nodes_sent_with_kind_first_and_a_pod_with_its_own_items_array():
    scanner = NodeScanner()
    items = [{"kind": "Node", "apiVersion": "v1", **_node(f"n{i}")} for i in range(4)]
    pod = {"metadata": {"name": "p"}, "spec": {"volumes": [{"configMap": {"items": [{"key": "k", "path": "p"}]}}]}}
    assert _check(scanner, _body(items, pod))
    items[2] = {"kind": "Node", "apiVersion": "v1", **_node("n2", rv=5)}
    assert _check(scanner, _body(items, pod))
    assert (scanner.decoded, scanner.reused) == (5, 3)


@settings(max_examples=150, deadline=None)
@given(st.lists(nodes, max_size=4), st.booleans(), texts,
       st.lists(st.text(alphabet=st.sampled_from('ab"{}[]:\\,'), max_size=4).map(lambda t: 'node-"items":[{' + t),
                min_size=20, max_size=40))
def test_a_scan_stopped_at_a_remembered_name_list_answers_as_the_whole_scan(items, with_nodes, podtext, names):
    """/filter tells the scan where the body's NodeNames list starts when it is one seen before
    (ArgsDecoder.cached_at): the answer is the scan of the whole body, whether or not the body
    also carries Nodes, and whatever the names hold."""
    doc: dict = {"Pod": {"metadata": {"name": podtext}}}
    if with_nodes:
        doc["Nodes"] = {"kind": "NodeList", "items": items}
    doc["NodeNames"] = names
    body = orjson.dumps(doc)
    decoder = ArgsDecoder()
    decoder.decode(body)  # remembers the list
    at = decoder.cached_at(body)
    assert at > 0 and len(orjson.dumps(names)) >= MIN_CACHED_BYTES
    whole, stopped = NodeScanner().scan(body), NodeScanner().scan(body, at)
    assert (whole is None) == (stopped is None)
    if whole is not None:
        assert whole[0] == stopped[0] and [n.raw for n in whole[1]] == [n.raw for n in stopped[1]]
