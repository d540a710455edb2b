"""`--gpu-preemption` on the faithful kube-scheduler loop (upstream 1.31: no GPU-only preemption of its
own, extender rejections backed off), with the embedded server's Eviction API and graceful deletions.

Covers: a high-priority inference pod needing 20 GiB on a full GPU evicts the minimal set of
low-priority pods (through pods/eviction: the victims terminate gracefully, never a plain delete),
gets status.nominatedNodeName, and runs; `Preempted` events on each victim name it, a Normal event on
it names the victims, the metrics count them; an equal-priority pod and a `preemptionPolicy: Never`
pod evict nothing; two preemptors pending together evict no more than they need between them; a
lower-priority pod created while the victims terminate does not take the held shares, and the hold
ends once the preemptor is placed; a leader that dies mid-preemption (one of two victims evicted)
leaves no hold, and the next leader finishes without evicting any pod twice; the hold ends on its
timeout and when the preemptor is deleted; a nomination the API refuses evicts nothing and holds
nothing; with the controller off nothing is ever evicted.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from hami.scheduler.preemption import plan as gpupreempt
from hami.sim.apiserver import server as apiserver_mod
from hami.sim.kubelet.termination import PodTerminator
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for, eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import start_env, stop_env
from tests.sim._kubesched import FAST, device_plugin, gpu_node, running_cluster


def prio(pod: dict, value: int, policy: str | None = None, **labels) -> dict:
    pod["spec"]["priority"] = value
    if policy:
        pod["spec"]["preemptionPolicy"] = policy
    pod["metadata"]["labels"] = dict(labels)
    return pod


def on_card(name: str, mem: int, node: str, value: int, **labels) -> dict:
    return prio(pod_obj(name, mem=mem, annotations={"nvidia.com/use-gpuuuid": gpu_uuid(node, 0)}), value, **labels)


def names(store) -> set[str]:
    return {e.obj["metadata"]["name"] for e in store.list("pods", "default")[1]}


def events_for(store, name: str, reason: str) -> list[str]:
    return [e.obj.get("message", "") for e in store.list("events", "default")[1]
            if e.obj.get("involvedObject", {}).get("name") == name and e.obj.get("reason") == reason]


class EvictionLog:
    """Every pods/eviction the embedded server answers, by pod name."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        real = apiserver_mod.evict

        def counting(store, ns, name, body):
            self.calls.append(name)
            return real(store, ns, name, body)
        monkeypatch.setattr(apiserver_mod, "evict", counting)


def die_after_first_eviction(monkeypatch, client) -> asyncio.Event:
    """The leader dies after its first eviction: every later one never returns (the process is gone)."""
    died = asyncio.Event()
    real_evict = client.evict_pod

    async def evict_then_die(ns, name, uid=""):
        if died.is_set():
            await asyncio.Event().wait()
        await real_evict(ns, name, uid)
        died.set()
    monkeypatch.setattr(client, "evict_pod", evict_then_die)
    return died


async def fill(c, plan) -> None:
    for name, mem, node, value in plan:
        c.create(on_card(name, mem, node, value))
    await eventually(lambda: all(c.node_of(n) for n, *_ in plan), 10)


async def test_inference_pod_evicts_the_minimal_set_runs_and_is_reported(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True, stop_seconds=0.3) as c:
        await fill(c, [("batch-a", 10240, "n0", 0), ("batch-b", 10240, "n0", 0), ("batch-c", 20480, "n0", 5)])
        c.create(prio(pod_obj("inference", mem=20480), 1000))
        # the victims terminate gracefully first (deletionTimestamp), then go
        await eventually(lambda: any(e.obj["metadata"].get("deletionTimestamp")
                                     for e in c.store.list("pods", "default")[1]), 10)
        await eventually(lambda: c.node_of("inference"), 15)
        gone = {"batch-a", "batch-b", "batch-c"} - names(c.store)
        # one priority-5 pod frees 20 GiB, as do the two priority-0 ones: kube-scheduler's reprieve keeps
        # the most important pod, so the two priority-0 pods go
        assert gone == {"batch-a", "batch-b"} and sorted(log.calls) == ["batch-a", "batch-b"]
        assert c.pod("inference")["status"].get("nominatedNodeName") == "n0"
        p = c.env.sched.preempter
        assert (p.preemptions, p.victims, p.failed_evictions) == (1, 2, 0)
        await eventually(lambda: all(events_for(c.store, v, "Preempted") for v in gone), 10)
        assert "default/inference" in events_for(c.store, "batch-a", "Preempted")[0]
        await eventually(lambda: events_for(c.store, "inference", "GPUPreemption"), 10)
        assert "default/batch-a" in events_for(c.store, "inference", "GPUPreemption")[0]
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{c.env.sched.metrics_port}/metrics") as r:
            text = await r.text()
        assert "hami_scheduler_gpu_preemption_victims_total 2.0" in text
        await eventually(lambda: not p.holds, 5)  # placed: the hold is over


async def test_equal_priority_and_never_policy_evict_nothing(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True) as c:
        await fill(c, [("f0", 20480, "n0", 100), ("f1", 20480, "n0", 0)])
        c.create(prio(pod_obj("peer", mem=40960), 100))              # needs both: f0 is not lower
        c.create(prio(pod_obj("polite", mem=20480), 1000, "Never"))  # could take f1, but may not
        await eventually(lambda: c.loop.stats.attempts.get("default/peer", 0) >= 3
                         and c.loop.stats.attempts.get("default/polite", 0) >= 3, 15)
        p = c.env.sched.preempter
        assert log.calls == [] and p.victims == 0 and names(c.store) >= {"f0", "f1"}
        assert not c.node_of("peer") and not c.node_of("polite")
        assert p.refusals[c.pod("polite")["metadata"]["uid"]] == gpupreempt.POLICY_NEVER
        assert p.refusals[c.pod("peer")["metadata"]["uid"]] == gpupreempt.NO_SET_HELPS  # f0 (equal) may not go


async def test_two_preemptors_evict_only_what_they_need(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True, stop_seconds=0.3) as c:
        await fill(c, [(f"f{i}", 10240, "n0", 0) for i in range(4)])
        c.create(prio(pod_obj("u0", mem=10240), 1000))
        c.create(prio(pod_obj("u1", mem=10240), 1000))
        await eventually(lambda: c.node_of("u0") and c.node_of("u1"), 20)
        assert len(log.calls) == 2 and len(set(log.calls)) == 2
        assert len({f"f{i}" for i in range(4)} & names(c.store)) == 2


async def test_a_lower_priority_pod_does_not_take_the_held_shares(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True, stop_seconds=1.0) as c:
        await fill(c, [("f0", 20480, "n0", 0), ("f1", 20480, "n0", 0)])
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: log.calls, 10)
        c.create(prio(pod_obj("sneaky", mem=20480), 0))  # lower than urgent, no higher than any pod: it only waits
        await eventually(lambda: c.node_of("urgent"), 15)
        # kube-scheduler tried sneaky again after urgent was bound (and the hold ended): still no room.
        tried = c.loop.stats.attempts.get("default/sneaky", 0)
        await eventually(lambda: c.loop.stats.attempts.get("default/sneaky", 0) > tried, 15)
        assert not c.node_of("sneaky") and len(log.calls) == 1
        assert c.env.sched.preempter.victims == 1


async def test_a_leader_dying_mid_preemption_leaves_no_hold_and_no_double_eviction(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    store = apiserver.store
    for n in (gpu_node("n0"),):
        store.create("nodes", "", n)
    first = await start_env(apiserver, (), gpu_preemption=True)
    port = first.sched.port
    client = await client_for(apiserver.kubeconfig)
    loop = KubeSchedulerLoop(client, ExtenderConfig(first.sched.url), "hami-scheduler", timings=FAST)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(device_plugin(store, stop)),
             asyncio.create_task(PodTerminator(client, stop_seconds=0.5).run(stop))]
    second = None
    try:
        for i in range(4):
            store.create("pods", "default", on_card(f"f{i}", 10240, "n0", i))
        await eventually(lambda: all(store.get("pods", "default", f"f{i}")["spec"].get("nodeName")
                                     for i in range(4)), 10)
        died = die_after_first_eviction(monkeypatch, first.sched.client)
        store.create("pods", "default", prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(died.is_set, 10)
        uid = store.get("pods", "default", "urgent")["metadata"]["uid"]
        assert len(log.calls) == 1      # one of its two victims evicted, then it died
        await stop_env(first)           # the crash: its hold was only in its memory
        assert first.sched.preempter.holds == {}
        second = await start_env(apiserver, (), gpu_preemption=True, http_bind=f"127.0.0.1:{port}")
        assert second.sched.state.index.pod(uid) is None  # the new leader holds nothing it did not decide
        await eventually(lambda: (store.get("pods", "default", "urgent")["spec"].get("nodeName")), 20)
        assert sorted(log.calls) == ["f0", "f1"]            # each once, the second by the new leader; f2, f3 stay
        assert names(store) >= {"f2", "f3", "urgent"}
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await client.close()
        if second is not None:
            await stop_env(second)
        with contextlib.suppress(Exception):
            await stop_env(first)


async def test_with_the_controller_off_nothing_is_evicted(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], ext={"preempt_verb": "preempt"}) as c:
        await fill(c, [("f0", 20480, "n0", 0), ("f1", 20480, "n0", 0)])
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: c.loop.stats.attempts.get("default/urgent", 0) >= 4, 15)
        assert log.calls == [] and names(c.store) >= {"f0", "f1"} and not c.node_of("urgent")
        assert c.env.sched.preempter is None and c.loop.stats.victims == 0



async def test_the_hold_ends_on_timeout_and_when_the_preemptor_is_deleted(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True, stop_seconds=30.0,
                               gpu_preemption_hold_timeout=2.0) as c:
        await fill(c, [("f0", 20480, "n0", 0), ("f1", 20480, "n0", 0)])
        p, index = c.env.sched.preempter, c.env.sched.state.index
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        uid = c.pod("urgent")["metadata"]["uid"]
        # The hold is stored before the eviction's awaits: wait for each on its own condition.
        await eventually(lambda: bool(p.holds) and index.pod(uid) is not None, 10)  # held: counted
        await eventually(lambda: len(log.calls) == 1, 10)
        await eventually(lambda: not p.holds, 10)         # 2 s: the victim still stops, the hold is gone
        assert index.pod(uid) is None and not c.node_of("urgent") and len(log.calls) == 1
        c.create(prio(pod_obj("second", mem=10240), 1000))  # a new decision: the other filler goes
        await eventually(lambda: p.holds, 10)
        c.store.delete("pods", "default", "second")
        await eventually(lambda: not p.holds, 5)
        assert all(index.pod(u) is None for u in (uid, "second"))


async def test_a_refused_nomination_evicts_nothing_and_holds_nothing(apiserver, monkeypatch):
    log = EvictionLog(monkeypatch)
    apiserver.authz.deny("patch", "pods/status")  # RBAC without pods/status: the chart grants it only when on
    async with running_cluster(apiserver, [gpu_node("n0")], gpu_preemption=True) as c:
        await fill(c, [("f0", 20480, "n0", 0), ("f1", 20480, "n0", 0)])
        c.create(prio(pod_obj("urgent", mem=20480), 1000))
        await eventually(lambda: c.loop.stats.attempts.get("default/urgent", 0) >= 3, 15)
        p, uid = c.env.sched.preempter, c.pod("urgent")["metadata"]["uid"]
        # each decision holds the room only until its nomination is refused (a few ms)
        await eventually(lambda: not p.holds and c.env.sched.state.index.pod(uid) is None, 5)
        assert log.calls == [] and p.victims == 0 and not c.node_of("urgent")
