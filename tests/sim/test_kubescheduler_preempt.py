"""Preemption through the extender's preemptVerb under the faithful kube-scheduler loop, and /preempt's
wire format.

Covers: a priority-1000 pod on a full cluster (GPU shares short only, so the --gpu-preemption
controller preempts, kube-scheduler cannot) evicts exactly the minimal set of priority-0 pods (the
node needing one victim beats the node needing two) and then binds there, with no GPU over-committed
at any observed step; a PodDisruptionBudget the cheap node's victims would violate sends the
preemptor to the other node (NumPDBViolations counted as kube-scheduler does); /preempt drops
nodes where no victim set helps and keeps higher-priority pods; a preemptor asking for no HAMi device
gets kube-scheduler's candidates back with their PDB violations counted; bodies of the wrong shape get an
`Error` naming the field (HTTP 400).
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from hami.device import codec
from hami.scheduler.extender.hamiflow import patch_at_filter
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import running_env
from tests.sim._kubesched import gpu_node, running_cluster

GPU_MEM = 40960


def prio(pod: dict, value: int, **labels) -> dict:
    pod["spec"]["priority"] = value
    pod["metadata"]["labels"] = dict(labels)
    return pod


def overcommitted(store) -> list[str]:
    """GPUs whose bound (or binding) pods' memory exceeds the card."""
    used: dict[str, int] = {}
    for e in store.list("pods", "")[1]:
        annos = e.obj["metadata"].get("annotations") or {}
        if not (e.obj.get("spec") or {}).get("nodeName") and annos.get(codec.BIND_PHASE_ANNOTATION) is None:
            continue
        text = annos.get(codec.ALLOCATED_ANNOTATION)
        for ctr in codec.decode_pod_devices(text) if text else ():
            for d in ctr:
                used[d.uuid] = used.get(d.uuid, 0) + d.usedmem
    return [u for u, m in used.items() if m > GPU_MEM]


async def watch_overcommit(store, seen: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        seen.extend(overcommitted(store))
        await asyncio.sleep(0.005)


async def fill_cluster(c) -> None:
    for i in range(4):  # n0: four 10 GiB pods; n1: two 20 GiB pods
        c.create(prio(pod_obj(f"small{i}", mem=10240, annotations={"nvidia.com/use-gpuuuid": _uuid("n0")}), 0))
    for i in range(2):
        c.create(prio(pod_obj(f"big{i}", mem=20480, annotations={"nvidia.com/use-gpuuuid": _uuid("n1")}), 0,
                      app="db"))
    names = [f"small{i}" for i in range(4)] + ["big0", "big1"]
    await eventually(lambda: all(c.node_of(n) for n in names), 10)


def _uuid(node: str) -> str:
    return gpu_uuid(node, 0)


def alive(c, names) -> set[str]:
    return {e.obj["metadata"]["name"] for e in c.store.list("pods", "")[1] if e.obj["metadata"]["name"] in names}


@pytest.mark.parametrize("pdb", [False, True])
async def test_high_priority_pod_evicts_the_minimal_set_and_runs(apiserver, pdb):
    # The shortage is GPU shares only: kube-scheduler (the faithful loop) finds no victims, so the
    # scheduler's --gpu-preemption controller preempts (hami.scheduler.preemption.controller).
    async with running_cluster(apiserver, [gpu_node("n0"), gpu_node("n1")],
                               ext={"preempt_verb": "preempt"}, gpu_preemption=True) as c:
        seen: list = []
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_overcommit(c.store, seen, stop))
        try:
            await fill_cluster(c)
            if pdb:
                c.store.create("poddisruptionbudgets.policy", "default", {
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "db", "namespace": "default"},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}})
                await eventually(lambda: len(c.loop.pdbs.store) == 1 and len(c.env.sched.pdbs.store) == 1, 5)
            fillers = {f"small{i}" for i in range(4)} | {"big0", "big1"}
            c.create(prio(pod_obj("urgent", mem=20480), 1000))
            await eventually(lambda: c.node_of("urgent"), 10)
            gone = fillers - alive(c, fillers)
            if pdb:  # n1's victim would break the PDB: two victims on n0 instead
                assert c.node_of("urgent") == "n0"
                assert len(gone) == 2 and gone <= {f"small{i}" for i in range(4)}
            else:    # one victim on n1 beats two on n0 (pickOneNodeForPreemption)
                assert c.node_of("urgent") == "n1"
                assert len(gone) == 1 and gone <= {"big0", "big1"}
            assert c.env.sched.preempter.victims == len(gone) and c.loop.stats.victims == 0
            assert c.pod("urgent")["status"].get("nominatedNodeName") == c.node_of("urgent")
            await asyncio.sleep(0.1)
        finally:
            stop.set()
            await watcher
        assert seen == []


async def post(env, body) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession() as http, http.post(env.sched.url + "/preempt", data=raw) as r:
        return r.status, orjson.loads(await r.read())


async def test_preempt_drops_nodes_no_victim_set_helps_and_spares_what_it_can(apiserver):
    async with running_env(apiserver, [gpu_node("n0"), gpu_node("n1", mem=10240)]) as env:
        patch_at_filter(env.sched.extender)  # HAMi's flow: the placements are on the pods at once
        uids = {}
        for name, node, mem in (("a", "n0", 10240), ("b", "n0", 30720), ("c", "n1", 10240)):
            p = env.create_pod(prio(pod_obj(name, mem=mem), 0))
            assert (await env.filter(p, [node]))["NodeNames"] == [node]
            uids[name] = p["metadata"]["uid"]
        await eventually(lambda: len(env.sched.state.uid_keys) == 3, 5)
        preemptor = prio(pod_obj("urgent", mem=20480), 1000)
        status, out = await post(env, {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
            "n0": {"Pods": [{"UID": uids["a"]}, {"UID": uids["b"]}], "NumPDBViolations": 0},
            "n1": {"Pods": [{"UID": uids["c"]}], "NumPDBViolations": 0}}})
        assert status == 200
        # n0: evicting b (30 GiB) alone frees enough, a is spared; n1 is too small whatever goes
        assert out == {"NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": uids["b"]}], "NumPDBViolations": 0}}}


async def test_preempt_for_a_pod_without_hami_devices_counts_pdb_violations(apiserver):
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        uids = []
        for i in range(2):
            p = env.create_pod(prio(pod_obj(f"web{i}", gpus=0), 0, app="web"))
            uids.append(p["metadata"]["uid"])
        env.store.create("poddisruptionbudgets.policy", "default", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1}})
        await eventually(lambda: len(env.sched.pdbs.store) == 1 and len(env.sched.state.pods.store) == 2, 5)
        preemptor = prio(pod_obj("cpu-only", gpus=0), 1000)
        status, out = await post(env, {"Pod": preemptor, "NodeNameToMetaVictims": {
            "n0": {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}}})
        assert status == 200
        # one disruption allowed: the first victim uses it, the second violates the budget
        assert out == {"NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 1}}}


@pytest.mark.parametrize("body,field", [
    ({"Pod": None}, "Pod"),
    ({"Pod": {}, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n0": {"Pods": "x"}}}, "NodeNameToMetaVictims.n0.Pods"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": 5}]}}}, "NodeNameToMetaVictims.n0.Pods[0].UID"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n0": {"Pods": [], "NumPDBViolations": "1"}}}, "NumPDBViolations"),
    ({"Pod": {}, "NodeNameToVictims": {"n0": {"Pods": [{"metadata": {"uid": []}}]}}}, "Pods[0].metadata.uid"),
    (b"[]", "extender preemption args"),
    (b"", "extender preemption args"),
])
async def test_preempt_bad_shapes_get_an_error_naming_the_field(apiserver, body, field):
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        status, out = await post(env, body)
        assert status == 400
        assert field in out["Error"]


# ---------------------------------------------------------------- kube-scheduler's own dry run

def pod_slots(node: dict, n: int) -> dict:
    node["status"]["allocatable"]["pods"] = str(n)
    return node


async def test_faithful_loop_never_asks_the_extender_when_only_gpu_shares_are_short(apiserver):
    # What a real cluster does: the in-tree dry run frees nothing it counts, so no victims, no /preempt.
    async with running_cluster(apiserver, [gpu_node("n0")],
                               ext={"preempt_verb": "preempt"}) as c:
        for i in range(2):
            c.create(prio(pod_obj(f"f{i}", mem=20480), 0))
        await eventually(lambda: c.node_of("f0") and c.node_of("f1"), 10)
        c.create(prio(pod_obj("urgent", mem=20480), 1000))

        def message() -> str:
            conds = (c.pod("urgent").get("status") or {}).get("conditions") or []
            return next((x.get("message", "") for x in conds if x.get("type") == "PodScheduled"), "")
        await eventually(lambda: "preemption:" in message(), 10)
        assert message().endswith('preemption: expected at least one victim pod on node "n0"')
        assert c.loop.stats.preemptions == 0 and c.loop.stats.victims == 0
        assert alive(c, {"f0", "f1"}) == {"f0", "f1"} and not c.node_of("urgent")


async def test_the_gpu_only_preemption_switch_asks_the_extender_where_kube_scheduler_would_not(apiserver):
    # A divergence kept as a switch, set here to show what /preempt answers when it is asked for a
    # node short only of GPU shares (a real kube-scheduler never asks; the controller covers it).
    async with running_cluster(apiserver, [gpu_node("n0")],
                               ext={"preempt_verb": "preempt", "gpu_only_preemption": True}) as c:
        for i in range(2):
            c.create(prio(pod_obj(f"f{i}", mem=20480), i))
            await eventually(lambda n=f"f{i}": c.node_of(n), 10)
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: c.node_of("urgent"), 10)
        assert alive(c, {"f0", "f1"}) == {"f1"}  # the extender's minimal set: the less important one
        assert (c.loop.stats.victims, c.loop.stats.gpu_only_preemptions) == (1, 1)


async def test_faithful_loop_in_tree_victims_plus_the_gpu_share_the_extender_adds(apiserver):
    # Three pod slots, the card full: the dry run needs one slot (c, the least important); evicting c
    # frees 10 GiB where the preemptor needs 20, so /preempt adds b from the node's other
    # lower-priority pods. a stays. Before, /preempt dropped the node and nothing was preempted.
    async with running_cluster(apiserver, [pod_slots(gpu_node("n0"), 3)],
                               ext={"preempt_verb": "preempt"}) as c:
        for name, mem, p in (("a", 20480, 5), ("b", 10240, 3), ("c", 10240, 1)):
            c.create(prio(pod_obj(name, mem=mem), p))
            await eventually(lambda n=name: c.node_of(n), 10)
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: c.node_of("urgent"), 10)
        assert alive(c, {"a", "b", "c"}) == {"a"}
        assert (c.loop.stats.victims, c.loop.stats.gpu_only_preemptions) == (2, 0)


async def test_an_in_tree_shortage_keeps_kube_schedulers_victims(apiserver):
    # The card has room; only the pod slots are short. /preempt must not veto kube-scheduler's victim.
    async with running_cluster(apiserver, [pod_slots(gpu_node("n0"), 2)],
                               ext={"preempt_verb": "preempt"}) as c:
        for name, p in (("keep", 7), ("go", 2)):
            c.create(prio(pod_obj(name, mem=10240), p))
            await eventually(lambda n=name: c.node_of(n), 10)
        c.create(prio(pod_obj("urgent", mem=10240), 1000))
        await eventually(lambda: c.node_of("urgent"), 10)
        assert alive(c, {"keep", "go"}) == {"keep"}
        assert c.loop.stats.victims == 1


async def test_preempt_adds_only_lower_priority_pods_beside_kube_schedulers(apiserver):
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        patch_at_filter(env.sched.extender)
        uids = {}
        for name, mem, p in (("a", 10240, 0), ("peer", 20480, 1000), ("b", 10240, 0)):
            pod = env.create_pod(prio(pod_obj(name, mem=mem), p))
            assert (await env.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
            env.store.bind("default", name, {"target": {"name": "n0"}})  # as kube-scheduler's bind would
            uids[name] = pod["metadata"]["uid"]
        await eventually(lambda: all((env.sched.state.pod_by_uid(u) or {}).get("spec", {}).get("nodeName") == "n0"
                                     for u in uids.values()), 5)
        preemptor = prio(pod_obj("urgent", mem=20480), 1000)
        status, out = await post(env, {"Pod": preemptor, "NodeNameToMetaVictims": {
            "n0": {"Pods": [{"UID": uids["a"]}], "NumPDBViolations": 0}}})
        assert status == 200
        # a alone frees 10 GiB of the 20 needed: b (not handed over, priority 0) goes too; the peer
        # (equal priority, 20 GiB) is never picked though evicting it alone would be enough
        got = {v["UID"] for v in out["NodeNameToMetaVictims"]["n0"]["Pods"]}
        assert got == {uids["a"], uids["b"]}


def test_extra_victims_are_only_bound_lower_priority_pods_not_terminating():
    from hami.scheduler.extender.verbs import may_go
    bound = {"spec": {"priority": 1, "nodeName": "n0"}, "metadata": {}}
    assert may_go(bound, 2, "n0") is True
    assert may_go(bound, 1, "n0") is False                                   # not lower priority
    assert may_go(bound, 2, "n1") is False                                   # on another node
    assert may_go({"spec": {"priority": 1}, "metadata": {}}, 2, "n0") is False  # placed, not yet bound
    assert may_go({**bound, "metadata": {"deletionTimestamp": "2026-11-25T10:00:00Z"}}, 2, "n0") is False
    assert may_go(None, 2, "n0") is False
