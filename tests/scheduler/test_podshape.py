"""A burst's pods share a template: /filter works out their requests and PodRequest once per
distinct input (hami.scheduler.placement.podshape).

Covers:
- the requests memo (hypothesis over containers' resources, valid or not, repeated across pods):
  always what the uncached function gives, for init and app containers; a pod whose quantities
  cannot be read raises each time and is not kept; the memo starts over at its size bound; a
  `resources` nested past what orjson writes is worked out without the memo;
- the extender's PodRequest memo over HTTP: pods of one template but different policy annotations
  are placed as each annotation says (binpack, spread); a PodRequest kept before a ResourceQuota
  appeared is not used after it: the second pod of the template is refused once the first used the
  quota up;
- the same template again is a memo hit (counted), a new one a miss.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.config import Config
from hami.device.vendorrequest import pod_vendor_requests
from hami.scheduler.placement.podshape import RequestMemo, ShapeMemo, resources_key
from tests.kube.helpers import gpu_uuid, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env

CFG = Config()


def plain(pod: dict) -> tuple:
    return pod_vendor_requests(pod, CFG.vendors, CFG.nvidia)


quantities = st.one_of(st.sampled_from(["1", "2", "0", "-1", "1024", "3000", "50", "100", "1k", "1.5", "x", ""]),
                       st.integers(-5, 10**10))
resources = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                                                   "nvidia.com/gpumem-percentage", "cpu"]), quantities, max_size=4),
        "requests": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem"]), quantities, max_size=2),
    }),
)
pods = st.builds(
    lambda init, app: {"metadata": {"name": "p"}, "spec": {
        "initContainers": [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)],
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(app)]}},
    st.lists(resources, max_size=2), st.lists(resources, min_size=1, max_size=3))


def outcome(fn, pod):
    try:
        return "ok", fn(pod)
    except ValueError as exc:
        return "error", str(exc)


@settings(max_examples=200, deadline=None)
@given(st.lists(pods, min_size=1, max_size=8), st.data())
def test_the_requests_memo_gives_what_the_function_gives(batch, data):
    memo = RequestMemo(plain, size=4)
    for pod in batch + [data.draw(st.sampled_from(batch)) for _ in range(4)]:  # repeats hit the memo
        assert outcome(memo, pod) == outcome(plain, pod)
    assert len(memo.memo) <= 4


def test_unreadable_requests_raise_each_time_and_are_not_kept():
    calls = []

    def refuse(pod):
        calls.append(pod)
        raise ValueError("nvidia.com/gpu: quantity 'x' is not a number")

    memo = RequestMemo(refuse)
    pod = pod_obj("p", mem=10)
    for _ in range(2):
        with pytest.raises(ValueError, match="quantity 'x'"):
            memo(pod)
    assert len(calls) == 2 and len(memo.memo) == 0


def test_a_template_is_worked_out_once_and_the_memo_is_bounded():
    calls = []

    def counted(pod):
        calls.append(1)
        return plain(pod)

    memo = RequestMemo(counted, size=3)
    for i in range(5):
        assert memo(pod_obj(f"p{i}", mem=1000)) == plain(pod_obj("x", mem=1000))
    assert len(calls) == 1 and memo.memo.hits == 4
    for mem in range(10):
        memo(pod_obj("q", mem=mem + 1))
    assert len(memo.memo) <= 3


def test_resources_too_deep_to_encode_are_worked_out_without_the_memo():
    deep: dict = {}
    cur = deep
    for _ in range(300):
        cur["x"] = {}
        cur = cur["x"]
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}, "deep": deep}}]}}
    assert resources_key(pod) is None
    memo = RequestMemo(plain)
    assert memo(pod) == plain(pod) and len(memo.memo) == 0


def test_shape_memo_counts_and_starts_over_when_full():
    memo = ShapeMemo(size=2)
    assert memo.get("a") is None
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1 and (memo.hits, memo.misses) == (1, 1)
    memo.put("c", 3)  # full: starts over
    assert memo.get("a") is None and memo.get("c") == 3 and len(memo) == 1


# ---------------------------------------------------------------------- through the extender

async def test_one_template_with_different_policies_is_placed_as_each_says(apiserver):
    # one node, two cards; card 0 already half used: binpack takes card 0, spread card 1
    node = node_obj("n0", 2, mem=40960, handshake=requesting_now())
    async with running_env(apiserver, [node]) as e:
        first = e.create_pod(pod_obj("first", mem=20000))
        assert (await e.filter(first, ["n0"]))["NodeNames"] == ["n0"]
        assert (await e.bind(first, "n0"))["Error"] == ""
        used = orjson.loads(orjson.dumps(e.placement("default", "first")))["hami.io/vgpu-devices-allocated"]
        busy = gpu_uuid("n0", 0) if gpu_uuid("n0", 0) in used else gpu_uuid("n0", 1)
        placed = {}
        for policy in ("binpack", "spread", "binpack", "spread"):
            name = f"{policy}-{len(placed)}"
            pod = e.create_pod(pod_obj(name, mem=1000, annotations={"hami.io/gpu-scheduler-policy": policy}))
            assert (await e.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
            placed[name] = e.placement("default", name)["hami.io/vgpu-devices-allocated"]
            e.forget_held()
            e.sched.state.index.remove_pod(pod["metadata"]["uid"])  # each pod meets the same usage
        for name, text in placed.items():
            assert (busy in text) == name.startswith("binpack"), (name, text, busy)
        memo = e.sched.placer.requests
        assert memo.hits >= 2  # the repeated (template, policy) pairs


async def test_in_a_namespace_with_a_quota_nothing_is_kept(apiserver):
    import asyncio

    store = apiserver.store
    store.create("namespaces", "", {"metadata": {"name": "q"}})
    node = node_obj("n0", 2, mem=40960, handshake=requesting_now())
    async with running_env(apiserver, [node]) as e:
        a = e.create_pod(pod_obj("a", "q", mem=1000))
        b = e.create_pod(pod_obj("b", "q", mem=1000))
        assert (await e.filter(a, ["n0"]))["NodeNames"] == ["n0"]  # no quota yet: its PodRequest is kept
        assert len(e.sched.placer.requests) == 1
        store.create("resourcequotas", "q", {"metadata": {"name": "gpu", "namespace": "q"},
                                             "spec": {"hard": {"limits.nvidia.com/gpumem": "1500"}}})
        for _ in range(200):  # the informer brings the quota in
            if e.sched.state.index.quota_view("q") is not None:
                break
            await asyncio.sleep(0.02)
        out = await e.filter(b, ["n0"])  # the same template, but the quota has 500 left
        assert out["NodeNames"] is None and "ResourceQuotaNotFit" in out["FailedNodes"]["n0"], out
