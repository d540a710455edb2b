"""One answer per wire field, whatever the whitespace.

`hami.io/device-cordon` reaches the scheduler twice: from the node cache (NodeNames mode, the
usage index) and from the Node objects in the request (full-Nodes mode). Both now decode it with the
codec's one parser, with Go's strings.TrimSpace as HAMi does. The property feeds the same
annotation, wrapped in any mix of Unicode and ASCII whitespace (and look-alikes that are not
whitespace to Go, such as U+001C..U+001F that Python's str.strip() removes), to /filter in both
modes and asserts they agree with Go's answer. `hami.io/gpu-scheduler-policy` members are trimmed
the same way (HAMi's PolicyContains).
"""

from __future__ import annotations

import asyncio

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.config import Config
from hami.device import codec
from hami.kube.events import EventRecorder
from hami.scheduler.cache.state import ClusterState
from hami.scheduler.extender.server import Extender
from hami.scheduler.placement.policy import gpu_sort_chain, policy_contains
from hami.scheduler.placer import Placer
from hami.scheduler.role import make_requests_fn
from tests.kube.helpers import gpu_uuid, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now

# Go's unicode.IsSpace: the Unicode White_Space property (written out here, not taken from the code).
GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                     "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# Everything Python calls whitespace, Go's set, and look-alikes that are whitespace to neither.
SPACES = sorted({chr(c) for c in range(0x3001) if chr(c).isspace()} | GO_SPACE | {"\u200b", "\ufeff", "\u180e"})
pad = st.text(st.sampled_from(SPACES), max_size=3)

UUID = gpu_uuid("n0", 0)


def go_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start] in GO_SPACE:
        start += 1
    while end > start and text[end - 1] in GO_SPACE:
        end -= 1
    return text[start:end]


def _node(cordon: str) -> dict:
    return node_obj("n0", 1, handshake=requesting_now(), annotations={codec.CORDON_ANNOTATION: cordon})


def _filter_both_modes(node: dict) -> tuple[bool, bool, frozenset, frozenset]:
    config = Config()

    def extender() -> tuple[Extender, ClusterState]:
        state = ClusterState(None, config.nvidia)
        placer = Placer(config, state, requests_fn=make_requests_fn(config))
        ext = Extender(config, state, placer, None, EventRecorder(None, "hami-scheduler"))
        return ext, state

    pod = pod_obj("p", mem=1000)
    pod["metadata"]["uid"] = "uid-p"
    # NodeNames mode: the node comes from the watch cache into the usage index.
    cached, state = extender()
    state.refresh_node(node)
    by_names = asyncio.run(cached.filter(orjson.dumps({"Pod": pod, "NodeNames": ["n0"]})))
    index_cordon = state.index.node("n0").cordoned
    # full-Nodes mode: the node comes in the request; this scheduler has never seen it.
    fresh, fresh_state = extender()
    by_nodes = asyncio.run(fresh.filter(orjson.dumps({"Pod": pod, "Nodes": {"items": [node]}})))
    request_cordon = fresh.placer.node_usage(node, fresh_state.index).cordoned
    assert by_names["Error"] == "" and by_nodes["Error"] == "", (by_names, by_nodes)
    return bool(by_names["NodeNames"]), bool(by_nodes["Nodes"]), index_cordon, request_cordon


@settings(max_examples=200, deadline=None)
@given(before=pad, after=pad, extra=st.lists(st.tuples(pad, st.sampled_from(["", "GPU-other", UUID]), pad),
                                             max_size=2))
def test_cordon_gives_one_answer_in_both_filter_modes(before, after, extra):
    text = ",".join([before + UUID + after, *(a + u + b for a, u, b in extra)])
    want = frozenset(u for u in (go_trim(p) for p in text.split(",")) if u)
    fits_names, fits_nodes, index_cordon, request_cordon = _filter_both_modes(_node(text))
    assert index_cordon == request_cordon == want
    assert fits_names is fits_nodes is (UUID not in want)


def test_cordon_edges_python_and_go_disagree_on():
    # U+001C..U+001F are whitespace to str.strip() but not to Go: the GPU stays usable.
    for sep in "\x1c\x1d\x1e\x1f":
        assert _filter_both_modes(_node(sep + UUID))[:2] == (True, True)
    # NBSP and the ideographic space are whitespace to Go: the GPU is cordoned in both modes.
    for sep in "\xa0\u3000\x85":
        assert _filter_both_modes(_node(sep + UUID + sep))[:2] == (False, False)


@given(before=pad, after=pad, name=st.sampled_from(["mutex", "topology-aware", "binpack"]),
       other=st.sampled_from(["", "spread", "numa"]))
def test_policy_members_are_trimmed_like_go(before, after, name, other):
    text = f"{other},{before}{name}{after}" if other else f"{before}{name}{after}"
    want = go_trim(before + name + after) == name
    assert policy_contains(text, name) is want
    # the sort chain reads the same annotation: the same members survive the trimming
    chain = gpu_sort_chain(text)
    assert (name in chain) is (want and name != "mutex" and name != "topology-aware")
