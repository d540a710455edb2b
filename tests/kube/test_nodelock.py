"""Node lock `hami.io/mutex.lock` against the embedded API server, decided from the informer
cache (no GET): HAMi's value format, re-entrancy, contention, compare-and-swap between two
lockers (exactly one wins), expiry under a fake clock, exact owner parsing (no suffix match),
immediate takeover from a gone or terminal owner, takeover from a never-bound owner after the
orphan timeout (45 s, not the 5-minute expiry), marking an expired owner that is still
allocating as failed, release only by the owner, and a malformed value."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from hami.device import codec
from hami.kube.informer import Informer
from hami.kube.nodelock import LOCK_KEY, NodeLocker, NodeLockError
from tests.kube.helpers import Clock, client_for, eventually, node_obj

T0 = 1_800_000_000.0


@pytest.fixture
async def env(apiserver):
    client = await client_for(apiserver.kubeconfig)
    apiserver.store.create("nodes", "", node_obj("n1"))
    nodes = Informer(client, "nodes")
    stop = asyncio.Event()
    task = asyncio.create_task(nodes.run(stop))
    assert await nodes.wait_synced(5)
    pods: dict[tuple[str, str], dict] = {}
    clock = Clock(T0)
    locker = NodeLocker(client, nodes, lambda ns, n: pods.get((ns, n)), timeout=300, clock=clock)

    class Env:
        pass

    e = Env()
    e.client, e.nodes, e.pods, e.clock, e.locker, e.store = client, nodes, pods, clock, locker, apiserver.store
    e.gets_before = client.total_requests(verb="get")
    try:
        yield e
    finally:
        stop.set()
        await task
        await client.close()


def set_lock(store, value: str) -> None:
    store.patch("nodes", "", "n1", orjson.dumps({"metadata": {"annotations": {LOCK_KEY: value}}}),
                "application/merge-patch+json")


def lock_value(store) -> str | None:
    return store.get("nodes", "", "n1")["metadata"].get("annotations", {}).get(LOCK_KEY)


def running(ns, name, phase="Running", bind_phase=None):
    annos = {"hami.io/bind-phase": bind_phase} if bind_phase else {}
    return {"metadata": {"namespace": ns, "name": name, "annotations": annos, "resourceVersion": "1"},
            "status": {"phase": phase}}


async def test_lock_writes_hami_value_and_release_removes_it(env):
    await env.locker.lock("n1", "default", "p1")
    value = lock_value(env.store)
    assert value == "2027-01-15T08:00:00Z,default,p1"
    assert codec.decode_node_lock(value).owned_by("default", "p1")
    assert await env.locker.release("n1", "default", "p1")
    assert lock_value(env.store) is None
    assert env.client.total_requests(verb="get") == env.gets_before  # no reads at all


async def test_lock_is_reentrant_for_the_same_pod(env):
    await env.locker.lock("n1", "default", "p1")
    # The node cache has our lock (the watch event is in): the second call judges from it.
    await eventually(lambda: LOCK_KEY in (env.locker.nodes.store["n1"]["metadata"].get("annotations") or {}))
    patches = env.client.total_requests(verb="patch")
    await env.locker.lock("n1", "default", "p1")
    assert env.client.total_requests(verb="patch") == patches


async def test_other_pod_meets_contention_with_hami_message(env):
    env.pods[("default", "p1")] = running("default", "p1", bind_phase="allocating")
    await env.locker.lock("n1", "default", "p1")
    await asyncio.sleep(0.05)
    with pytest.raises(NodeLockError, match="node n1 has been locked within 5m0s: node lock contention"):
        await env.locker.lock("n1", "default", "p2")


async def test_owner_is_parsed_exactly_not_by_suffix(env):
    # HAMi matched `strings.HasSuffix(value, ",<ns>,<name>")`-style; "x,default,p1" must not pass for "default,p1"
    env.pods[("team-default", "p1")] = running("team-default", "p1", bind_phase="allocating")
    set_lock(env.store, codec.encode_node_lock(T0, "team-default", "p1"))
    await asyncio.sleep(0.1)
    with pytest.raises(NodeLockError):
        await env.locker.lock("n1", "default", "p1")
    assert not await env.locker.release("n1", "default", "p1")
    assert lock_value(env.store).endswith(",team-default,p1")


async def test_two_lockers_racing_exactly_one_wins(env):
    other = NodeLocker(env.client, env.nodes, lambda ns, n: env.pods.get((ns, n)), clock=env.clock)
    env.pods[("default", "a")] = running("default", "a", bind_phase="allocating")
    env.pods[("default", "b")] = running("default", "b", bind_phase="allocating")
    results = await asyncio.gather(env.locker.lock("n1", "default", "a"), other.lock("n1", "default", "b"),
                                   return_exceptions=True)
    wins = [r for r in results if r is None]
    assert len(wins) == 1
    assert isinstance([r for r in results if r is not None][0], NodeLockError)
    owner = codec.decode_node_lock(lock_value(env.store))
    assert owner.name == ("a" if results[0] is None else "b")
    assert env.client.requests.get(("patch", "nodes", "409"), 0) >= 1


async def test_expired_lock_is_taken_over_after_timeout_under_fake_time(env):
    env.pods[("default", "old")] = running("default", "old", bind_phase="success")
    env.pods[("default", "old")]["metadata"]["annotations"] = {}  # pending: not terminal, not allocating
    env.pods[("default", "old")]["spec"] = {"nodeName": "n1"}  # bound: not an orphan of a dead binder
    await env.locker.lock("n1", "default", "old")
    await asyncio.sleep(0.05)
    env.clock.now += 299
    with pytest.raises(NodeLockError):
        await env.locker.lock("n1", "default", "new")
    env.clock.now += 2
    await env.locker.lock("n1", "default", "new")
    assert codec.decode_node_lock(lock_value(env.store)).name == "new"


async def test_unbound_holder_is_taken_over_after_the_orphan_timeout_not_the_expiry(env):
    env.pods[("default", "old")] = running("default", "old", phase="Pending")  # no bind-phase, no nodeName
    await env.locker.lock("n1", "default", "old")
    await asyncio.sleep(0.05)
    env.clock.now += env.locker.orphan_timeout - 1  # a /bind could still be this old
    with pytest.raises(NodeLockError, match="held by default/old"):
        await env.locker.lock("n1", "default", "new")
    env.clock.now += 2  # older than any /bind, far inside the 5-minute expiry
    assert env.locker.orphan_timeout + 1 < env.locker.timeout
    await env.locker.lock("n1", "default", "new")
    assert codec.decode_node_lock(lock_value(env.store)).name == "new"
    assert env.locker.takeovers == 1


@pytest.mark.parametrize("holder", [None, running("default", "old", phase="Succeeded"),
                                    running("default", "old", phase="Failed"),
                                    running("default", "old", bind_phase="failed")],
                         ids=["gone", "succeeded", "failed", "bind-failed"])
async def test_lock_of_gone_or_finished_owner_is_taken_over_at_once(env, holder):
    if holder is not None:
        env.pods[("default", "old")] = holder
    set_lock(env.store, codec.encode_node_lock(T0, "default", "old"))
    await asyncio.sleep(0.1)
    await env.locker.lock("n1", "default", "new")
    assert codec.decode_node_lock(lock_value(env.store)).name == "new"
    assert env.locker.takeovers == 1


async def test_expired_owner_still_allocating_is_marked_failed_first(env, apiserver):
    from tests.kube.helpers import pod_obj

    created = apiserver.store.create("pods", "default", pod_obj("old",
                                                                annotations={"hami.io/bind-phase": "allocating"}))
    env.pods[("default", "old")] = created.obj
    await env.locker.lock("n1", "default", "old")
    await asyncio.sleep(0.05)
    env.clock.now += 301
    await env.locker.lock("n1", "default", "new")
    old = apiserver.store.get("pods", "default", "old")
    assert old["metadata"]["annotations"]["hami.io/bind-phase"] == "failed"
    assert codec.decode_node_lock(lock_value(env.store)).name == "new"


async def test_release_leaves_other_owners_lock_alone(env):
    env.pods[("default", "p1")] = running("default", "p1", bind_phase="allocating")
    await env.locker.lock("n1", "default", "p1")
    await asyncio.sleep(0.05)
    assert not await env.locker.release("n1", "default", "p2")
    assert codec.decode_node_lock(lock_value(env.store)).name == "p1"  # p1 keeps its lock


async def test_malformed_lock_value_fails_with_codec_message(env):
    set_lock(env.store, "a,b")
    await asyncio.sleep(0.1)
    with pytest.raises(NodeLockError, match="malformed lock annotation"):
        await env.locker.lock("n1", "default", "p")


async def test_conflict_from_unrelated_node_change_is_retried(env):
    # The cached node is stale (its RV is behind): the CAS fails once, the informer catches up, retry wins.
    env.store.patch("nodes", "", "n1", b'{"metadata":{"labels":{"x":"1"}}}', "application/merge-patch+json")
    await env.locker.lock("n1", "default", "p1")
    assert codec.decode_node_lock(lock_value(env.store)).name == "p1"
