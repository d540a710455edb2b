"""The GPU preemption controller's decision (hami.scheduler.preemption.plan), pure.

Covers, by hypothesis over random nodes (1-3, one or two cards), running pods (sizes, priorities,
terminating ones, ones another preemptor already took) and preemptors: a plan's victims are all of
strictly lower priority, bound to the chosen node, neither terminating nor taken; the preemptor fits
on that node once they leave (and the held devices are that fit); the set is inclusion-minimal
(sparing any one victim breaks the fit); no plan only when no node's lower-priority pods free
enough. Examples: preemptionPolicy Never and non-share failures refuse with their reason; the
node choice follows pickOneNodeForPreemption (PDB violations first, then the highest victim's
priority, then fewer victims); priority and policy come from spec, else the PriorityClass, else
the global default; `share_only` reads HAMi's reason texts.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, NvidiaConfig
from hami.scheduler.placement import fit
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.preemption import plan as gpupreempt

NV = NvidiaConfig()
MEM = 40000


def gpu(node: str, i: int) -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{node}-{i}", count=10, devmem=MEM, devcore=100, type="NVIDIA A100", index=i, numa=0,
                      mode="hami-core", health=True)


def req(mem: int) -> fit.PodRequest:
    r = ContainerDeviceRequest(nums=1, type="NVIDIA", memreq=mem, mempercentagereq=101, coresreq=0)
    return fit.pod_request([r], 0, {})


def bound(name: str, node: str, prio: int, *, terminating: bool = False, labels: dict | None = None) -> dict:
    meta = {"name": name, "namespace": "d", "uid": name, "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "priority": prio},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}


def build(layout):
    """layout: {node: (cards, [(name, card, mem, prio, terminating)])} -> (facts, all pods)."""
    facts, all_pods = {}, []
    for node, (cards, pods) in layout.items():
        devices = [gpu(node, i) for i in range(cards)]
        index = UsageIndex(NV)
        index.set_node(node, devices)
        objs = {}
        for name, card, mem, prio, terminating in pods:
            index.add_pod(name, node, ((ContainerDevice(f"GPU-{node}-{card % cards}", "NVIDIA", mem, 0),),),
                          namespace="d")
            objs[name] = bound(name, node, prio, terminating=terminating)
            all_pods.append(objs[name])
        facts[node] = gpupreempt.NodeFacts(node, devices, (), {u: index.pod(u) for u in index.pods_on(node)}, objs)
    return facts, all_pods


def fits_without(f: gpupreempt.NodeFacts, gone: set[str], want: int) -> bool:
    index = UsageIndex(NV)
    index.set_node(f.name, f.devices)
    for uid, rec in f.on_node.items():
        if uid not in gone:
            index.add_pod(uid, f.name, rec.devices, namespace="d")
    return fit.try_pod(index.node(f.name), req(want)).__class__ is not str


pod_st = st.tuples(st.integers(0, 1), st.integers(2000, 24000), st.integers(0, 4), st.booleans())


@settings(max_examples=80, deadline=None)
@given(nodes=st.lists(st.tuples(st.integers(1, 2), st.lists(pod_st, max_size=5)), min_size=1, max_size=3),
       want=st.integers(4000, 40000), prio=st.integers(0, 4), taken_pick=st.sets(st.integers(0, 14), max_size=3))
def test_a_plan_is_minimal_lower_priority_and_makes_room(nodes, want, prio, taken_pick):
    layout, names = {}, []
    for ni, (cards, pods) in enumerate(nodes):
        entries = []
        for pi, (card, mem, p, term) in enumerate(pods):
            name = f"p{ni}-{pi}"
            names.append(name)
            entries.append((name, card, mem, p, term and pi % 2 == 0))
        layout[f"n{ni}"] = (cards, entries)
    facts, all_pods = build(layout)
    taken = frozenset(names[i] for i in taken_pick if i < len(names))
    preemptor = {"metadata": {"name": "urgent", "namespace": "d", "uid": "urgent"}, "spec": {"priority": prio}}
    failed = {n: "1/1 CardInsufficientMemory" for n in facts}
    got = gpupreempt.plan(NV, preemptor, req(want), failed, facts, [], all_pods, taken)

    def leaving(f):
        return {u for u, p in f.pods.items() if p["metadata"].get("deletionTimestamp")} | (taken & set(f.pods))

    if isinstance(got, gpupreempt.Refusal):
        for f in facts.values():  # no node where every lower-priority, movable pod leaving makes room
            movable = {u for u, p in f.pods.items() if p["spec"]["priority"] < prio} - leaving(f)
            assert not movable or not fits_without(f, leaving(f) | movable, want)
        return
    f = facts[got.node]
    victims = set(got.victims)
    for v in victims:
        p = f.pods[v]
        assert p["spec"]["priority"] < prio and p["spec"]["nodeName"] == got.node
        assert v not in leaving(f)
    gone = leaving(f)
    assert fits_without(f, gone | victims, want)
    for v in victims:
        assert not fits_without(f, gone | (victims - {v}), want), "a victim could have been spared"
    if got.devices:  # the hold is exactly a fit on the freed node
        assert sum(cd.usedmem for ctr in got.devices for cd in ctr) == want


def test_refusals_name_their_reason():
    facts, all_pods = build({"n0": (1, [("low", 0, 30000, 0, False)])})
    never = {"metadata": {"uid": "u"}, "spec": {"priority": 9, "preemptionPolicy": "Never"}}
    assert gpupreempt.plan(NV, never, req(20000), {"n0": "1/1 CardInsufficientMemory"}, facts, [], all_pods) == \
        gpupreempt.Refusal(gpupreempt.POLICY_NEVER)
    high = {"metadata": {"uid": "u"}, "spec": {"priority": 9}}
    assert gpupreempt.plan(NV, high, req(20000), {"n0": "1/1 CardTypeMismatch"}, facts, [], all_pods).reason == \
        gpupreempt.NO_SHARE_FAILURE
    equal = {"metadata": {"uid": "u"}, "spec": {"priority": 0}}
    assert gpupreempt.plan(NV, equal, req(20000), {"n0": "1/1 CardInsufficientMemory"}, facts, [], all_pods).reason \
        == gpupreempt.NO_LOWER
    assert gpupreempt.plan(NV, high, req(50000), {"n0": "1/1 CardInsufficientMemory"}, facts, [], all_pods).reason \
        == gpupreempt.NO_SET_HELPS
    plan = gpupreempt.plan(NV, high, req(20000), {"n0": "1/1 CardInsufficientMemory"}, facts, [], all_pods)
    assert plan.victims == ("low",) and plan.node == "n0"


def test_node_choice_prefers_no_pdb_violation_then_lower_victims_then_fewer():
    facts, all_pods = build({"a": (1, [("a-db", 0, 40000, 1, False)]),
                             "b": (1, [("b0", 0, 20000, 1, False), ("b1", 0, 20000, 1, False)]),
                             "c": (1, [("c-hi", 0, 40000, 3, False)])})
    facts["a"].pods["a-db"]["metadata"]["labels"] = {"app": "db"}
    pdb = {"metadata": {"name": "db", "namespace": "d"}, "spec": {"maxUnavailable": 0,
                                                               "selector": {"matchLabels": {"app": "db"}}}}
    urgent = {"metadata": {"uid": "u"}, "spec": {"priority": 9}}
    failed = {n: "1/1 CardInsufficientMemory" for n in facts}
    without_pdb = gpupreempt.plan(NV, urgent, req(40000), failed, facts, [], all_pods)
    assert without_pdb.node == "a"            # one priority-1 victim beats two (b) and a priority-3 one (c)
    with_pdb = gpupreempt.plan(NV, urgent, req(40000), failed, facts, [pdb], all_pods)
    assert with_pdb.node == "b" and with_pdb.pdb_violations == 0 and set(with_pdb.victims) == {"b0", "b1"}


def test_priority_and_policy_as_kube_scheduler_reads_them():
    classes = {"hi": {"metadata": {"name": "hi"}, "value": 50, "preemptionPolicy": "Never"},
               "dflt": {"metadata": {"name": "dflt"}, "value": 3, "globalDefault": True}}
    assert gpupreempt.priority_of({"spec": {"priority": 7, "priorityClassName": "hi"}}, classes) == 7
    assert gpupreempt.priority_of({"spec": {"priorityClassName": "hi"}}, classes) == 50
    assert gpupreempt.priority_of({"spec": {}}, classes) == 3
    assert gpupreempt.priority_of({"spec": {"priority": "9"}}) == 0   # not an integer: ignored
    assert gpupreempt.policy_of({"spec": {"priorityClassName": "hi"}}, classes) == "Never"
    assert gpupreempt.policy_of({"spec": {}}, classes) == "PreemptLowerPriority"
    assert gpupreempt.share_only("2/2 CardInsufficientMemory, 1/2 CardInsufficientCore")
    assert gpupreempt.share_only("NodeUnfitPod")
    assert not gpupreempt.share_only("1/2 CardInsufficientMemory, 1/2 CardTypeMismatch")
    assert not gpupreempt.share_only("node unregistered")
