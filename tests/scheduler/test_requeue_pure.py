"""Pure pieces behind the requeue wakes, /prioritize and /preempt.

Covers: which failure reasons each kind of change could remove (`requeue.could_help`); the wake list
goes only to pods that now fit on a changed candidate node, oldest failure first, one wake per failure,
one pod at a time (`wakes`: a pod woken or forgotten while the caller waited is passed over);
prioritize scaling (binpack: highest score 10, spread: lowest 10, ties all 10, non-fitting 0);
`select_victims` returns an inclusion-minimal set (every victim needed, checked by putting each back)
and drops nodes no set helps; a victim in the preemptor's namespace gives its ResourceQuota share back
(a quota-bound preemptor evicts its own namespace's pod, not another's); PDB counting as filterPodsWithPDBViolation
(allowance, disruptedPods, empty selectors, namespaces).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, NvidiaConfig
from hami.kubesched import pdb
from hami.scheduler.cache import requeue
from hami.scheduler.placement import fit
from hami.scheduler.placement.prioritize import scale_scores
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.preemption.victims import select_victims

NV = NvidiaConfig()
GPU = DeviceInfo(id="GPU-a", count=10, devmem=40000, devcore=100, type="NVIDIA A100", index=0, numa=0,
                 mode="hami-core", health=True)


def req(mem: int) -> fit.PodRequest:
    r = ContainerDeviceRequest(nums=1, type="NVIDIA", memreq=mem, mempercentagereq=101, coresreq=0)
    return fit.pod_request([r], 0, {})


def test_could_help_by_kind():
    assert requeue.could_help("1/1 CardInsufficientMemory", requeue.FREED)
    assert requeue.could_help("NodeInsufficientDevice", requeue.FREED)
    assert not requeue.could_help("1/1 CardTypeMismatch", requeue.FREED)
    assert not requeue.could_help("1/1 CardTypeMismatch", requeue.DEVICES)
    assert requeue.could_help("1/1 CardNotHealth", requeue.DEVICES)
    assert not requeue.could_help("1/1 CardNotHealth", requeue.FREED)
    assert requeue.could_help("1/1 ResourceQuotaNotFit", requeue.QUOTA)
    assert not requeue.could_help("1/1 CardInsufficientMemory", requeue.QUOTA)


def test_wake_list_only_pods_that_now_fit_oldest_first_once():
    index = UsageIndex(NV)
    index.set_node("n0", [GPU])
    index.add_pod("filler", "n0", ((ContainerDevice("GPU-a", "NVIDIA", 30000, 0),),), namespace="d")
    book = requeue.PendingBook()
    book.record("small", "d", "small", req(5000), ["n0"], {"n0": "1/1 CardInsufficientMemory"}, now=2.0)
    book.record("older", "d", "older", req(5000), ["n0"], {"n0": "1/1 CardInsufficientMemory"}, now=1.0)
    book.record("huge", "d", "huge", req(60000), ["n0"], {"n0": "1/1 CardInsufficientMemory"}, now=0.5)
    book.record("typed", "d", "typed", req(100), ["n0"], {"n0": "1/1 CardTypeMismatch"}, now=0.1)
    book.record("elsewhere", "d", "elsewhere", req(100), ["n9"], {"n9": "1/1 CardInsufficientMemory"}, now=0.2)
    index.remove_pod("filler")
    got = requeue.wake_list(book, {(requeue.FREED, "n0"): {"d"}}, index.nodes)
    assert [(p.uid, n) for p, n in got] == [("older", "n0"), ("small", "n0")]
    for p, _ in got:
        book.woken(p.uid, 3.0)
    assert requeue.wake_list(book, {(requeue.FREED, "n0"): {"d"}}, index.nodes) == []


def test_wakes_judges_one_pod_at_a_time_and_passes_over_one_gone_meanwhile():
    index = UsageIndex(NV)
    index.set_node("n0", [GPU])
    book = requeue.PendingBook()
    for i, uid in enumerate(("first", "bound", "woken", "last")):
        book.record(uid, "d", uid, req(5000), ["n0"], {"n0": "1/1 CardInsufficientMemory"}, now=float(i))
    passing = requeue.wakes(book, {(requeue.FREED, "n0"): {"d"}}, index.nodes)
    first = next(passing)
    assert (first[0].uid, first[1]) == ("first", "n0")
    book.forget("bound")  # bound while the waker waited for its token
    book.woken("woken", 9.0)  # woken by an earlier pass meanwhile
    assert [(p.uid, n) for p, n in passing] == [("last", "n0")]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1000, 20000), min_size=1, max_size=6), want=st.integers(1000, 40000))
def test_select_victims_is_minimal_or_none(sizes, want):
    on_node = {}
    index = UsageIndex(NV)
    index.set_node("n0", [GPU])
    for i, mem in enumerate(sizes):
        uid = f"p{i}"
        index.add_pod(uid, "n0", ((ContainerDevice("GPU-a", "NVIDIA", mem, 0),),), namespace="d")
        on_node[uid] = index.pod(uid)
    candidates = list(on_node)
    picked = select_victims(NV, "n0", [GPU], (), on_node, candidates, set(), req(want))

    def fits_without(victims) -> bool:
        tmp = UsageIndex(NV)
        tmp.set_node("n0", [GPU])
        for uid, rec in on_node.items():
            if uid not in victims:
                tmp.add_pod(uid, "n0", rec.devices, namespace="d")
        return fit.try_pod(tmp.node("n0"), req(want)).__class__ is not str

    if not fits_without(set(candidates)):
        assert picked is None
        return
    victims, violations = picked
    assert violations == 0
    assert fits_without(set(victims))
    for v in victims:  # inclusion-minimal: sparing any one victim breaks the fit
        assert not fits_without(set(victims) - {v})


def test_select_victims_credits_the_quota_a_same_namespace_victim_frees():
    gpus = [GPU, DeviceInfo(id="GPU-b", count=10, devmem=40000, devcore=100, type="NVIDIA A100", index=1,
                            mode="hami-core", health=True)]
    index = UsageIndex(NV)
    index.set_node("n0", gpus)
    index.set_quota("team", "q", {"limits.nvidia.com/gpumem": 30000})
    index.add_pod("mine", "n0", ((ContainerDevice("GPU-a", "NVIDIA", 20000, 0),),), namespace="team")
    index.add_pod("theirs", "n0", ((ContainerDevice("GPU-b", "NVIDIA", 20000, 0),),), namespace="other")
    on_node = {u: index.pod(u) for u in ("mine", "theirs")}
    r = ContainerDeviceRequest(nums=1, type="NVIDIA", memreq=20000, mempercentagereq=101, coresreq=0)
    preq = fit.pod_request([r], 0, {}, namespace="team", quota=index.quota_view("team"))
    refused = fit.try_pod(index.node("n0"), preq)  # the quota (20000 + 20000 > 30000) refuses it now
    assert isinstance(refused, str) and "ResourceQuotaNotFit" in refused, refused
    # the other namespace's pod is listed first (more important to keep last): only "mine" must go
    picked = select_victims(NV, "n0", gpus, (), on_node, ["theirs", "mine"], set(), preq)
    assert picked == (["mine"], 0)
    assert index.quota_view("team").mem.used == 20000  # the live index is untouched


def test_prioritize_scales_to_zero_ten():
    scores = {"a": 1.0, "b": 3.0, "c": 2.0}
    assert scale_scores(scores, ["a", "b", "c", "x"], "binpack") == [
        {"Host": "a", "Score": 0}, {"Host": "b", "Score": 10}, {"Host": "c", "Score": 5}, {"Host": "x", "Score": 0}]
    assert [h["Score"] for h in scale_scores(scores, ["a", "b", "c"], "spread")] == [10, 0, 5]
    assert [h["Score"] for h in scale_scores({"a": 2.0, "b": 2.0}, ["a", "b"], "binpack")] == [10, 10]


def _pod(name: str, ns: str = "d", phase: str = "Running", **labels) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "status": {"phase": phase}}


def test_pdb_violations_follow_the_allowance():
    budget = {"metadata": {"name": "b", "namespace": "d"},
              "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}}}
    pods = [_pod(f"x{i}", app="x") for i in range(3)] + [_pod("other", app="y"), _pod("x9", ns="e", app="x")]
    assert pdb.disruptions_allowed(budget, pods) == 1
    violating, fine = pdb.victims_violating([pods[0], pods[1], pods[3], pods[4]], [budget], pods)
    assert [p["metadata"]["name"] for p in violating] == ["x1"]
    assert [p["metadata"]["name"] for p in fine] == ["x0", "other", "x9"]
    written = dict(budget, status={"disruptionsAllowed": 0, "disruptedPods": {"x0": "2026-01-01T00:00:00Z"}})
    violating, _ = pdb.victims_violating([pods[0], pods[1]], [written], pods)
    assert [p["metadata"]["name"] for p in violating] == ["x1"]
    empty = {"metadata": {"name": "e", "namespace": "d"}, "spec": {"maxUnavailable": 0, "selector": {}}}
    assert pdb.victims_violating(pods[:2], [empty], pods)[0] == []
    expr = {"metadata": {"name": "x", "namespace": "d"}, "spec": {"maxUnavailable": "0%", "selector": {
        "matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "z"]}]}}}
    assert len(pdb.victims_violating(pods[:3], [expr], pods)[0]) == 3
    assert list(itertools.chain(*pdb.victims_violating([], [expr], pods))) == []
