"""`--gpu-preemption` with two scheduler replicas on one Lease (the chart's `scheduler.replicas: 2`):
the kube-scheduler loop calls the replica that does NOT hold hami's Lease, as happens when the
kube-scheduler sidecars elect their leader beside another hami replica.

Covers: the leader learns of the failure from the pod's PodScheduled condition (it served no
/filter of the preemptor), evicts the minimal set, publishes the hold on the Node, and the
non-leader replica counts it: a lower-priority pod created during the termination is refused the
held shares by the replica the loop calls and by the leader's /filter too; the preemptor runs and
every hold ends. A leader that dies mid-preemption (one of two victims evicted) takes its
published hold back; the other replica takes the Lease over and finishes, each victim evicted once.
A malformed hold annotation is no hold and never breaks a replica; the leader's refit leaves out
nodes whose taints the pod does not tolerate.
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson

from hami.scheduler.preemption import share as preempt_share
from hami.sim.kubelet.termination import PodTerminator
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for, eventually, pod_obj
from tests.kube.scheduler_env import start_env, stop_env
from tests.sim._kubesched import FAST, device_plugin, gpu_node
from tests.sim.test_gpu_preemption import EvictionLog, die_after_first_eviction, names, on_card, prio

LEASE = {"leader_elect": True, "leader_elect_resource_namespace": "default", "gpu_preemption": True}


@contextlib.asynccontextmanager
async def two_replicas(apiserver, stop_seconds: float):
    """Two replicas, the loop on the follower's extender, the device plugin and the simulated kubelet."""
    apiserver.store.create("nodes", "", gpu_node("n0"))
    a = await start_env(apiserver, identity="replica-a", **LEASE)
    await eventually(lambda: a.sched.leader.is_leader, 10)
    b = await start_env(apiserver, identity="replica-b", **LEASE)
    client = await client_for(apiserver.kubeconfig)
    loop = KubeSchedulerLoop(client, ExtenderConfig(b.sched.url), "hami-scheduler", timings=FAST)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(device_plugin(apiserver.store, stop)),
             asyncio.create_task(PodTerminator(client, stop_seconds=stop_seconds).run(stop))]
    try:
        assert not b.sched.leader.is_leader
        yield a, b, loop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await client.close()
        for env in (b, a):
            with contextlib.suppress(Exception):
                await stop_env(env)


def node_of(store, name: str) -> str:
    return (store.get("pods", "default", name).get("spec") or {}).get("nodeName") or ""


async def test_preemption_served_by_the_non_leader_replica_evicts_holds_and_runs(apiserver, monkeypatch):
    log, store = EvictionLog(monkeypatch), apiserver.store
    async with two_replicas(apiserver, stop_seconds=1.0) as (a, b, loop):
        for name, mem, value in (("batch-a", 10240, 0), ("batch-b", 10240, 0), ("batch-c", 20480, 5)):
            store.create("pods", "default", on_card(name, mem, "n0", value))
        await eventually(lambda: all(node_of(store, n) for n in ("batch-a", "batch-b", "batch-c")), 10)
        store.create("pods", "default", prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: a.sched.preempter.holds, 10)
        uid = store.get("pods", "default", "urgent")["metadata"]["uid"]
        assert b.sched.preempter.holds == {}  # the follower decided nothing...
        await eventually(lambda: uid in b.sched.preempter.mirror.mirrored, 5)  # ...but counts the leader's hold
        published = preempt_share.decode_holds(
            "n0", store.get("nodes", "", "n0")["metadata"]["annotations"][preempt_share.HOLDS_ANNOTATION])
        assert set(published) == {uid} and published[uid].name == "urgent"
        # during the termination a lower-priority pod is refused the held shares by either replica
        store.create("pods", "default", prio(pod_obj("sneaky", mem=20480), 0))
        sneaky = store.get("pods", "default", "sneaky")
        assert store.get("pods", "default", "batch-a")["metadata"].get("deletionTimestamp")  # still terminating
        for env in (a, b):
            out = await env.filter(sneaky, ["n0"])
            assert out["NodeNames"] in (None, []) and "n0" in (out["FailedNodes"] or {}), out
        await eventually(lambda: node_of(store, "urgent"), 20)
        # kube-scheduler tried sneaky again after urgent was bound: still no room for it.
        tried = loop.stats.attempts.get("default/sneaky", 0)
        await eventually(lambda: loop.stats.attempts.get("default/sneaky", 0) > tried, 15)
        assert not node_of(store, "sneaky")
        assert sorted(log.calls) == ["batch-a", "batch-b"] and names(store) >= {"batch-c", "urgent"}
        assert store.get("pods", "default", "urgent")["status"].get("nominatedNodeName") == "n0"
        assert loop.stats.attempts.get("default/urgent", 0) >= 1 and a.sched.preempter.victims == 2
        await eventually(lambda: not a.sched.preempter.holds and not b.sched.preempter.mirror.mirrored, 5)
        await eventually(lambda: preempt_share.HOLDS_ANNOTATION not in (
            store.get("nodes", "", "n0")["metadata"].get("annotations") or {}), 5)


async def test_a_leader_change_mid_preemption_evicts_each_victim_once(apiserver, monkeypatch):
    log, store = EvictionLog(monkeypatch), apiserver.store
    async with two_replicas(apiserver, stop_seconds=0.5) as (a, b, _loop):
        for i in range(4):
            store.create("pods", "default", on_card(f"f{i}", 10240, "n0", i))
        await eventually(lambda: all(node_of(store, f"f{i}") for i in range(4)), 10)
        died = die_after_first_eviction(monkeypatch, a.sched.client)
        store.create("pods", "default", prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(died.is_set, 10)
        assert len(log.calls) == 1 and log.calls[0] in ("f0", "f1")  # one of its two victims, then it died
        await stop_env(a)                           # the leader goes; it takes its published hold back
        assert a.sched.preempter.holds == {}
        await eventually(lambda: b.sched.leader.is_leader, 10)
        await eventually(lambda: node_of(store, "urgent"), 20)
        assert sorted(log.calls) == ["f0", "f1"]    # each once, the second by the new leader; f2, f3 stay
        assert names(store) >= {"f2", "f3", "urgent"}


def test_a_malformed_hold_annotation_is_no_hold():
    for text in ("", "{", "[]", '{"u": 1}', '{"u": {"pod": "x", "devices": "", "until": 1}}',
                 '{"u": {"pod": "a/b", "devices": "GPU-0,NVIDIA,10", "until": 9e9}}',
                 '{"u": {"pod": "a/b", "devices": "", "until": true}}'):
        assert preempt_share.decode_holds("n0", text) == {}, text
    good = preempt_share.encode_hold("a", "b", (), 5.0, {"v": "a/v"})
    got = preempt_share.decode_holds("n0", orjson.dumps({"u": good}).decode())
    assert got["u"].namespace == "a" and got["u"].until == 5.0 and got["u"].victims == {"v": "a/v"}


def test_the_leaders_refit_leaves_out_nodes_whose_taints_the_pod_does_not_tolerate():
    """TaintToleration as kube-scheduler filters (hami.kubesched.taints, shared with hami whatif)."""
    from hami.kubesched.taints import tolerates_node
    tainted = {"spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"},
                                   {"key": "soft", "effect": "PreferNoSchedule"}]}}
    pod = {"spec": {}}
    assert tolerates_node(pod, {"spec": {}}) and not tolerates_node(pod, tainted)
    assert tolerates_node({"spec": {"tolerations": [{"key": "gpu", "value": "a100"}]}}, tainted)
    assert tolerates_node({"spec": {"tolerations": [{"operator": "Exists"}]}}, tainted)
    assert not tolerates_node({"spec": {"tolerations": [{"key": "gpu", "value": "h100"}]}}, tainted)
    assert not tolerates_node({"spec": {"tolerations": ["bad", {"key": "gpu", "effect": "NoExecute",
                                                                "operator": "Exists"}]}}, tainted)
    assert not tolerates_node(pod, {"spec": {"unschedulable": True}})
    assert tolerates_node(pod, {"spec": {"taints": "bad"}})
