"""Drift repair per object, and wakes when a placement is rolled back.

Covers: a pod handler that fails half-way is repaired by resyncing that one pod (no re-list, no index
rebuild): its usage is what a fresh scheduler computes and a placement /filter holds for another pod
(not yet on the watch) stays counted; when the per-object resync fails too, the full re-list and
rebuild still keep that held placement; a node handler failure is repaired per node; /filter's own
rollback of a placement it counted (the pod now fits nowhere) wakes the parked pod those devices fit,
and so does another replica's rollback of a pod not yet bound, seen on the watch (annotations removed:
devices released). A bound pod is never rolled back: it stays counted (tests/security/test_tenant_placement.py).
"""

from __future__ import annotations

from hami.device import codec
from hami.scheduler.cache.waker import REQUEUE_ANNOTATION
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.scheduler.test_state_io import placed, used
from tests.sim._kubesched import merge


def on_node(env, node: str) -> tuple[int, int, int]:
    """(pods, memory, cores) counted on every GPU of `node`."""
    devs = env.sched.state.index.node(node).devices
    return sum(d.used for d in devs), sum(d.usedmem for d in devs), sum(d.usedcores for d in devs)


async def test_a_failed_pod_event_is_repaired_for_that_pod_and_a_held_placement_stays(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as env:
        state = env.sched.state
        fresh = env.create_pod(pod_obj("fresh", mem=5000, cores=5))
        assert (await env.filter(fresh, ["n0"]))["NodeNames"] == ["n0"]
        assert on_node(env, "n0") == (1, 5000, 5)  # held by /filter, no annotation on the pod yet
        real, failures = state.count_pod, []

        def flaky(uid, key, *a, **kw):
            if key == "default/b" and not failures:
                failures.append(key)
                state.index.add_pod(uid, "n1", (), namespace="default")  # half-applied, then the crash
                raise RuntimeError("injected")
            return real(uid, key, *a, **kw)

        state.count_pod = flaky
        lists = state.pods.lists
        env.create_pod(placed("b", "n1", 2000, 20, gpu=1))
        await eventually(lambda: failures and state.pods.object_resync_count == 1 and not state.health(), 10)
        assert used(env, "n1", 1) == (1, 2000, 20)
        assert on_node(env, "n0") == (1, 5000, 5)  # the held placement was not dropped
        assert state.rebuilds == 0 and state.pods.lists == lists  # no re-list, no rebuild
        assert state.handler_failures == 1
        text = env.sched.metrics.exposition().decode()
        assert "hami_scheduler_informer_object_resyncs_total 1.0" in text
        assert "hami_scheduler_index_rebuilds_total 0.0" in text


async def test_when_the_object_resync_fails_the_rebuild_keeps_the_held_placement(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as env:
        state = env.sched.state
        fresh = env.create_pod(pod_obj("fresh", mem=5000, cores=5))
        assert (await env.filter(fresh, ["n0"]))["NodeNames"] == ["n0"]
        real, failures = state.count_pod, []

        def flaky(uid, key, *a, **kw):
            if key == "default/b" and len(failures) < 2:  # the event and its per-object resync
                failures.append(key)
                raise RuntimeError("injected")
            return real(uid, key, *a, **kw)

        state.count_pod = flaky
        env.create_pod(placed("b", "n1", 2000, 20, gpu=1))
        await eventually(lambda: state.rebuilds == 1 and not state.health(), 10)
        assert len(failures) == 2 and state.pods.object_resync_count == 0
        assert used(env, "n1", 1) == (1, 2000, 20)
        assert on_node(env, "n0") == (1, 5000, 5)
        # /bind still finds its decision and writes it.
        assert (await env.bind(fresh, "n0")) == {"Error": ""}


async def test_a_failed_node_event_is_repaired_for_that_node(apiserver):
    apiserver.store.create("pods", "default", placed("a", "n1", 1000, 10))
    async with running_env(apiserver, hami_nodes(2)) as env:
        state = env.sched.state
        real, failures = state.refresh_node, []

        def flaky(node):
            if node["metadata"]["name"] == "n1" and not failures:
                failures.append(1)
                state.index.remove_node("n1")  # half-applied, then the crash
                raise RuntimeError("injected")
            return real(node)

        state.refresh_node = flaky
        merge(env.store, "nodes", "", "n1", {"metadata": {"labels": {"touched": "yes"}}})
        await eventually(lambda: failures and state.nodes.object_resync_count == 1 and not state.health(), 10)
        assert "n1" in state.usable and used(env, "n1") == (1, 1000, 10)
        assert state.rebuilds == 0


async def test_filters_own_rollback_of_a_placement_wakes_the_pod_parked_behind_it(apiserver):
    async with running_env(apiserver, hami_nodes(1, gpus=1), requeue_wakes_per_second=50.0) as env:
        waker = env.sched.waker
        big = env.create_pod(pod_obj("big", mem=40000))
        assert (await env.filter(big, ["n0"]))["NodeNames"] == ["n0"]
        waiting = env.create_pod(pod_obj("waiting", mem=30000))
        assert (await env.filter(waiting, ["n0"]))["NodeNames"] is None
        # kube-scheduler retries "big" where it no longer fits (n0 went away from its candidates):
        # /filter rolls its placement back, so n0's GPU is free for "waiting".
        assert (await env.filter(big, ["n9"]))["NodeNames"] is None
        assert used(env, "n0") == (0, 0, 0)
        await eventually(lambda: waker.wakes == 1, 5)
        assert REQUEUE_ANNOTATION in env.pod("default", "waiting")["metadata"]["annotations"]
        assert REQUEUE_ANNOTATION not in env.pod("default", "big")["metadata"]["annotations"]


async def test_another_replicas_rollback_seen_on_the_watch_releases_and_wakes(apiserver):
    # Another replica's /bind in progress: the pod is not bound yet and holds the node's lock.
    apiserver.store.create("pods", "default", placed("other", "n0", 40000, 0, bound=False))
    async with running_env(apiserver, hami_nodes(1, gpus=1), requeue_wakes_per_second=50.0) as env:
        merge(env.store, "nodes", "", "n0", {"metadata": {"annotations": {
            codec.NODE_LOCK_ANNOTATION: codec.encode_node_lock(1_790_000_000, "default", "other")}}})
        await eventually(lambda: used(env, "n0") == (1, 40000, 0), 5)
        waiting = env.create_pod(pod_obj("waiting", mem=30000))
        assert (await env.filter(waiting, ["n0"]))["NodeNames"] is None
        keys = ("hami.io/vgpu-node", "hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate")
        merge(env.store, "pods", "default", "other", {"metadata": {"annotations": dict.fromkeys(keys)}})
        await eventually(lambda: used(env, "n0") == (0, 0, 0), 5)
        await eventually(lambda: env.sched.waker.wakes == 1, 5)
        assert REQUEUE_ANNOTATION in env.pod("default", "waiting")["metadata"]["annotations"]
