"""The faithful kube-scheduler loop against the real extender, and the requeue wakes.

Covers (with the loop's `extender_parks` switch, modelling HAMi's parked-pod reports): a pending GPU pod
on a full node is parked (unschedulablePods) after the extender rejects it;
deleting a filler wakes it (hami.io/requeue-at) and it binds, long before the 5-minute flush, while a
pod that still cannot fit (wrong GPU type) gets no wake; a filler that finishes (Succeeded) frees the
same way, and so do its init containers finishing (its usage shrinks); devices registered on a new node
wake a parked pod, but not a pod whose own nodeSelector keeps it off that node; the wake metrics count it; a flood of
frees sends wakes no faster than the configured rate (each pending pod woken once per failure).
The wake-to-bound latency is printed for the report (never asserted).
"""

from __future__ import annotations

import time

import pytest

from hami.kubesched.schedqueue import UNSCHEDULABLE
from hami.scheduler.cache.waker import REQUEUE_ANNOTATION
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import running_env
from tests.sim._kubesched import Cluster, gpu_node, merge, running_cluster


@pytest.fixture
async def cluster(apiserver):
    # parks=True: these tests model HAMi's reports of extender-rejected pods parked until the
    # 5-minute flush (upstream 1.31 backs them off instead), which the requeue wakes answer.
    async with running_cluster(apiserver, [gpu_node("n0")], parks=True, requeue_wakes_per_second=50.0) as c:
        yield c


async def fill(c: Cluster, n: int = 2, mem: int = 20000) -> None:
    for i in range(n):
        c.create(pod_obj(f"filler{i}", mem=mem))
    await eventually(lambda: all(c.node_of(f"filler{i}") for i in range(n)), 10)


async def test_deleting_a_filler_wakes_the_pending_pod_and_it_binds(cluster):
    c = cluster
    await fill(c)
    c.create(pod_obj("waiting", mem=20000))
    c.create(pod_obj("wrongtype", mem=1000, annotations={"nvidia.com/use-gputype": "H100"}))
    await eventually(lambda: c.where("waiting") == UNSCHEDULABLE and c.where("wrongtype") == UNSCHEDULABLE, 10)
    attempts = c.loop.stats.attempts["default/waiting"]
    freed_at = time.monotonic()
    c.store.delete("pods", "default", "filler0")
    await eventually(lambda: c.node_of("waiting") == "n0", 10)
    print(f"\nfreed -> bound: {time.monotonic() - freed_at:.3f}s (target 2 s; flush would be 300 s)")
    assert REQUEUE_ANNOTATION in c.annotations("waiting")
    assert c.loop.stats.attempts["default/waiting"] == attempts + 1
    assert REQUEUE_ANNOTATION not in c.annotations("wrongtype")
    assert c.where("wrongtype") == UNSCHEDULABLE
    waker = c.env.sched.waker
    await eventually(lambda: waker.bound_after_wake == 1, 5)
    assert waker.wakes == 1
    body = c.env.sched.metrics.exposition().decode()
    assert "hami_scheduler_requeue_wakes_total 1.0" in body
    assert "hami_scheduler_requeue_bound_after_wake_total 1.0" in body


async def test_a_filler_that_finishes_frees_its_gpu_for_the_parked_pod(cluster):
    c = cluster
    await fill(c)
    c.create(pod_obj("waiting", mem=20000))
    await eventually(lambda: c.where("waiting") == UNSCHEDULABLE, 10)
    merge(c.store, "pods", "default", "filler1", {"status": {"phase": "Succeeded"}}, "status")
    await eventually(lambda: c.node_of("waiting") == "n0", 10)
    assert REQUEUE_ANNOTATION in c.annotations("waiting")


async def test_devices_registered_on_a_new_node_wake_the_parked_pod(cluster):
    c = cluster
    await fill(c)
    c.create(pod_obj("waiting", mem=30000))
    await eventually(lambda: c.where("waiting") == UNSCHEDULABLE, 10)
    bare = gpu_node("n1")
    register = bare["metadata"]["annotations"].pop("hami.io/node-nvidia-register")
    c.store.create("nodes", "", bare)  # a node add moves nothing an extender rejected
    # Both schedulers have seen the node (kube-scheduler moves pods in its node handler) and the
    # waker has judged every change: the pod stays parked.
    await eventually(lambda: "n1" in c.loop.nodes.store and "n1" in c.env.sched.state.nodes.store
                     and c.env.sched.waker.idle, 10)
    assert c.where("waiting") == UNSCHEDULABLE
    merge(c.store, "nodes", "", "n1", {"metadata": {"annotations": {"hami.io/node-nvidia-register": register}}})
    await eventually(lambda: c.node_of("waiting") == "n1", 10)


async def test_devices_on_a_new_node_the_pods_selector_excludes_wake_nothing(cluster):
    c = cluster
    merge(c.store, "nodes", "", "n0", {"metadata": {"labels": {"pool": "a"}}})
    await fill(c)
    picky = pod_obj("picky", mem=30000)
    picky["spec"]["nodeSelector"] = {"pool": "a"}
    c.create(picky)
    c.create(pod_obj("any", mem=30000))
    await eventually(lambda: c.where("picky") == UNSCHEDULABLE and c.where("any") == UNSCHEDULABLE, 10)
    assert len(c.env.sched.waker.book.pods) == 2  # both rejected by the extender on n0, both recorded
    c.store.create("nodes", "", gpu_node("n1", labels={"pool": "b"}))
    await eventually(lambda: c.node_of("any") == "n1", 10)  # woken: no constraint of its own
    await eventually(lambda: c.env.sched.waker.idle, 10)  # every change judged, every chosen wake sent
    assert REQUEUE_ANNOTATION in c.annotations("any")
    assert REQUEUE_ANNOTATION not in c.annotations("picky")  # pool b is no place for it: no wake
    assert c.where("picky") == UNSCHEDULABLE


async def test_a_flood_of_frees_sends_wakes_at_the_configured_rate(apiserver):
    nodes = [gpu_node(f"n{i}") for i in range(6)]
    async with running_env(apiserver, nodes, requeue_wakes_per_second=5.0) as env:
        waker = env.sched.waker
        names = [n["metadata"]["name"] for n in nodes]
        for i, n in enumerate(names):  # fill every node through the real /filter
            p = env.create_pod(pod_obj(f"filler{i}", mem=40000))
            assert (await env.filter(p, [n]))["NodeNames"] == [n]
        pending = []
        for i in range(24):
            p = env.create_pod(pod_obj(f"pending{i}", mem=1000))
            assert (await env.filter(p, names))["NodeNames"] is None
            pending.append(p)
        assert len(waker.book.pods) == 24
        for i in range(len(names)):
            env.store.delete("pods", "default", f"filler{i}")
        await eventually(lambda: waker.wakes == 24, 15)
        sent = list(waker.sent)
        # token bucket: burst 5, then 5 per second: never more than burst + rate * window in a window
        for i, t0 in enumerate(sent):
            in_window = sum(1 for t in sent[i:] if t - t0 <= 1.0)
            assert in_window <= 5 + 5 * 1.0 + 1
        assert sent[-1] - sent[0] >= (24 - 5) / 5.0 - 0.2
        woken = [p["metadata"]["name"] for p in pending
                 if REQUEUE_ANNOTATION in (env.pod("default", p["metadata"]["name"])["metadata"]["annotations"])]
        assert len(woken) == 24
        # Every free seen by the cache and judged by the waker: still one wake per recorded failure.
        await eventually(lambda: all(env.sched.state.pod("default", f"filler{i}") is None for i in range(len(names)))
                         and waker.idle, 10)
        assert waker.wakes == 24  # one wake per recorded failure, however many frees follow


async def test_init_containers_finishing_shrink_the_filler_and_wake_the_parked_pod(cluster):
    c = cluster
    init = [{"name": "warmup", "image": "cuda", "resources": {"limits": {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}}}]
    c.create(pod_obj("filler", mem=10000, init=init))
    await eventually(lambda: c.node_of("filler") == "n0", 10)
    c.create(pod_obj("waiting", mem=20000))
    await eventually(lambda: c.where("waiting") == UNSCHEDULABLE, 10)
    done = {"name": "warmup", "state": {"terminated": {"exitCode": 0}}}
    merge(c.store, "pods", "default", "filler", {"status": {"initContainerStatuses": [done]}}, "status")
    await eventually(lambda: c.node_of("waiting") == "n0", 10)
    assert REQUEUE_ANNOTATION in c.annotations("waiting")
