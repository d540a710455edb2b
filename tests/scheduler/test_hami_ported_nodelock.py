"""HAMi v2.10 `pkg/util/nodelock/nodelock_test.go` (lock semantics) and `pkg/scheduler/event_test.go`,
ported to the scheduler's own NodeLocker and EventRecorder over the embedded API server.

Lock: Test_LockNode (node not found, locked by another live pod, an invalid value, success),
TestLockNodeWithTimeout (`has been locked within 2m0s`), TestLockNodeWithDangling (a lock whose pod
is gone is taken over), TestReleaseNodeLock (not locked, another owner's lock left alone, own lock
removed; a node we do not know releases nothing), TestConcurrentNodeLocks (a held lock on one node
does not block another). The codec parts (ParseNodeLock, GeneratePodNamespaceName) are in
tests/device. Not ported: TestCleanupNodeLockOnNodeDelete and TestSimulateRetryStorm test Go's
per-node mutex map and client-go backoff jitter, which this design replaces with a
resourceVersion compare-and-swap fed by the node informer.

Events: TestRecordScheduleFilterResultEvent and TestRecordScheduleBindingResultEvent, driven
through /filter and /bind: success is a Normal event, failure a Warning one, on the pod.
"""

from __future__ import annotations

import contextlib
import time

import orjson
import pytest

from hami.device import codec
from hami.kube.nodelock import LOCK_KEY, NodeLockError
from hami.sim.apiserver.store import ApiError
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env


def bare_node(name: str, lock: str | None = None) -> dict:
    annos = {LOCK_KEY: lock} if lock is not None else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def fresh_lock(ns: str, name: str) -> str:
    return codec.encode_node_lock(time.time(), ns, name)


def live_pod(env, name: str, ns: str) -> None:
    with contextlib.suppress(ApiError):  # already there
        env.store.create("namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    env.create_pod(pod_obj(name, ns))


def lock_of(env, node: str) -> str | None:
    return env.store.get("nodes", "", node)["metadata"].get("annotations", {}).get(LOCK_KEY)


async def wait_cached(env, *nodes, pods=()):
    await eventually(lambda: all(env.sched.state.node(n) is not None for n in nodes)
                     and all(env.sched.state.pod(ns, n) is not None for ns, n in pods))


LOCK_CASES = [
    ("node", None, None, "node node not found"),
    ("worker-1", "other", True, "has been locked within 5m0s"),
    ("worker-2", "lock", False, 'parsing time "lock"'),
    ("worker-3", None, False, None),
]


@pytest.mark.parametrize(("node", "holder", "holder_alive", "error"), LOCK_CASES, ids=[
    "Test_LockNode/node not found", "Test_LockNode/node has been locked",
    "Test_LockNode/node lock is invalid", "Test_LockNode/successfully set node lock"])
async def test_Test_LockNode(apiserver, node, holder, holder_alive, error):
    nodes = []
    if node != "node":
        value = None if holder is None else (holder if holder == "lock" else fresh_lock("hami-ns", holder))
        nodes = [bare_node(node, value)]
    async with running_env(apiserver, nodes) as env:
        if holder_alive:
            live_pod(env, holder, "hami-ns")
        await wait_cached(env, *[n["metadata"]["name"] for n in nodes],
                          pods=[("hami-ns", holder)] if holder_alive else [])
        if error:
            with pytest.raises(NodeLockError, match=error):
                await env.sched.locker.lock(node, "hami-ns", "hami")
        else:
            await env.sched.locker.lock(node, "hami-ns", "hami")
            assert codec.decode_node_lock(lock_of(env, node)).owned_by("hami-ns", "hami")


async def test_TestLockNodeWithTimeout_names_the_configured_timeout(apiserver):
    node = bare_node("test-node-timeout", fresh_lock("test-ns", "test-pod"))
    async with running_env(apiserver, [node], node_lock_timeout=120) as env:
        live_pod(env, "test-pod", "test-ns")
        await wait_cached(env, "test-node-timeout", pods=[("test-ns", "test-pod")])
        with pytest.raises(NodeLockError, match="has been locked within 2m0s"):
            await env.sched.locker.lock("test-node-timeout", "new-ns", "new-pod")
        assert codec.decode_node_lock(lock_of(env, "test-node-timeout")).name == "test-pod"


async def test_TestLockNodeWithDangling_takes_over(apiserver):
    node = bare_node("test-node-timeout", fresh_lock("test-ns", "test-pod"))
    async with running_env(apiserver, [node], node_lock_timeout=120) as env:
        await wait_cached(env, "test-node-timeout")
        await env.sched.locker.lock("test-node-timeout", "new-ns", "new-pod")
        assert codec.decode_node_lock(lock_of(env, "test-node-timeout")).owned_by("new-ns", "new-pod")


RELEASE_CASES = [
    ("node", None, False, None),  # HAMi returns the GET error; the cache-fed locker releases nothing
    ("worker-1", None, False, None),
    ("worker-2", ("namespace", "pod"), False, ("namespace", "pod")),
    ("worker-3", ("hami-ns", "hami"), True, None),
]


@pytest.mark.parametrize(("node", "owner", "released", "left"), RELEASE_CASES, ids=[
    "TestReleaseNodeLock/node not found", "TestReleaseNodeLock/node is not lock",
    "TestReleaseNodeLock/node lock is not set by this pod", "TestReleaseNodeLock/successfully release node lock"])
async def test_TestReleaseNodeLock(apiserver, node, owner, released, left):
    nodes = [] if node == "node" else [bare_node(node, fresh_lock(*owner) if owner else None)]
    async with running_env(apiserver, nodes) as env:
        await wait_cached(env, *[n["metadata"]["name"] for n in nodes])
        assert await env.sched.locker.release(node, "hami-ns", "hami") is released
        if nodes:
            value = lock_of(env, node)
            if left is None:
                assert value is None
            else:
                assert codec.decode_node_lock(value).owned_by(*left)


async def test_TestConcurrentNodeLocks_other_nodes_are_not_blocked(apiserver):
    async with running_env(apiserver, [bare_node("node-a"), bare_node("node-b")]) as env:
        live_pod(env, "pod-x", "test-ns")
        await wait_cached(env, "node-a", "node-b", pods=[("test-ns", "pod-x")])
        locker = env.sched.locker
        await locker.lock("node-a", "test-ns", "pod-x")
        await locker.lock("node-b", "test-ns", "pod-b")
        assert await locker.release("node-b", "test-ns", "pod-b")
        await eventually(lambda: LOCK_KEY in (env.sched.state.node("node-a")["metadata"].get("annotations") or {}))
        with pytest.raises(NodeLockError):
            await locker.lock("node-a", "test-ns", "pod-a")
        assert await locker.release("node-a", "test-ns", "pod-x")
        await eventually(lambda: LOCK_KEY not in (env.sched.state.node("node-a")["metadata"].get("annotations") or {}))
        await locker.lock("node-a", "test-ns", "pod-a")
        assert await locker.release("node-a", "test-ns", "pod-a")


# ------------------------------------------------------------------ event_test.go


def pod_events(env, name: str) -> list[dict]:
    return [e.obj for e in env.store.list("events", "default")[1]
            if e.obj["involvedObject"]["name"] == name]


@pytest.mark.parametrize(("fits", "etype", "reason"), [(True, "Normal", "FilteringSucceed"),
                                                        (False, "Warning", "FilteringFailed")],
                         ids=["TestRecordScheduleFilterResultEvent/schedule success",
                              "TestRecordScheduleFilterResultEvent/schedule failed"])
async def test_TestRecordScheduleFilterResultEvent(apiserver, fits, etype, reason):
    async with running_env(apiserver, hami_nodes(1)) as env:
        pod = env.create_pod(pod_obj("test-pod", mem=1000 if fits else 10**7))
        out = await env.filter(pod, ["n0"])
        assert bool(out["NodeNames"]) is fits
        evs = await eventually(lambda: [e for e in pod_events(env, "test-pod") if e["reason"] == reason])
        assert {e["type"] for e in evs} == {etype}
        assert all(e["involvedObject"]["kind"] == "Pod" for e in evs)
        if fits:
            assert evs[0]["message"].startswith("find fit node(n0)")


@pytest.mark.parametrize(("ok", "etype", "reason"), [(True, "Normal", "BindingSucceed"),
                                                      (False, "Warning", "BindingFailed")],
                         ids=["TestRecordScheduleBindingResultEvent/schedule success",
                              "TestRecordScheduleBindingResultEvent/schedule failed"])
async def test_TestRecordScheduleBindingResultEvent(apiserver, ok, etype, reason):
    async with running_env(apiserver, hami_nodes(1)) as env:
        pod = env.create_pod(pod_obj("test-pod", mem=1000))
        out = await env.filter(pod, ["n0"])
        assert out["NodeNames"] == ["n0"]
        if not ok:  # another live pod holds the node lock
            env.sched.extender.binder.lock_queue = 0.5  # queue behind it briefly, not the default 10 s
            env.create_pod(pod_obj("holder"))
            env.store.patch("nodes", "", "n0", orjson.dumps(
                {"metadata": {"annotations": {LOCK_KEY: fresh_lock("default", "holder")}}}),
                "application/merge-patch+json")
            await eventually(lambda: LOCK_KEY in env.sched.state.node("n0")["metadata"]["annotations"]
                             and env.sched.state.pod("default", "holder") is not None)
        res = await env.bind(env.pod("default", "test-pod"), "n0")
        assert (res["Error"] == "") is ok
        evs = await eventually(lambda: [e for e in pod_events(env, "test-pod") if e["reason"] == reason])
        assert {e["type"] for e in evs} == {etype}
