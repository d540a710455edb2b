"""/bind over HTTP against the embedded API server: node lock taken with HAMi's value, bind-phase
allocating and bind-time written, pods/<name>/binding posted, BindingSucceed/BindingFailed
events; unknown node or pod, lock contention and a failed binding (lock released); pods without
HAMi devices bind without a lock; no API reads on the path; and two scheduler instances binding
200 pods onto 10 nodes concurrently with no GPU over-committed."""

from __future__ import annotations

import asyncio
import collections
import random

import orjson
import pytest

from hami.device import codec
from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import hami_nodes, requesting_now, running_env, start_env, stop_env

LOCK = codec.NODE_LOCK_ANNOTATION


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as e:
        yield e


def events(env, reason=None):
    return [e.obj for e in env.store.list("events", "default")[1] if reason in (None, e.obj["reason"])]


async def test_filter_then_bind_locks_marks_and_binds(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    node = (await env.filter(pod, ["n0", "n1"]))["NodeNames"][0]
    reads = env.api_reads()
    out = await env.bind(pod, node)
    assert out == {"Error": ""}
    assert env.api_reads() == reads
    stored = env.pod("default", "p")
    assert stored["spec"]["nodeName"] == node
    annos = stored["metadata"]["annotations"]
    assert annos["hami.io/bind-phase"] == "allocating" and int(annos["hami.io/bind-time"]) > 0
    lock = codec.decode_node_lock(env.store.get("nodes", "", node)["metadata"]["annotations"][LOCK])
    assert (lock.namespace, lock.name) == ("default", "p")
    await env.sched.events.flush()
    [ev] = events(env, "BindingSucceed")
    assert ev["message"] == f"Successfully binding node [{node}] to default/p"


async def test_bind_to_unknown_node_fails_with_event(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    await env.filter(pod, ["n0"])
    out = await env.bind(pod, "ghost")
    assert out["Error"] == 'nodes "ghost" not found'
    await env.sched.events.flush()
    assert [e["message"] for e in events(env, "BindingFailed")] == ['nodes "ghost" not found']


async def test_bind_of_unknown_pod_fails(env):
    pod = pod_obj("never-created")
    pod["metadata"]["uid"] = "nope"
    out = await env.bind(pod, "n0")
    assert out["Error"] == 'pods "never-created" not found'


async def test_lock_contention_fails_the_bind(env):
    holder = env.create_pod(pod_obj("holder", annotations={"hami.io/bind-phase": "allocating"}))
    env.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {"annotations": {
        LOCK: codec.encode_node_lock(env.sched.locker.clock(), "default", "holder")}}}), "application/merge-patch+json")
    pod = env.create_pod(pod_obj("p", mem=1000))
    assert holder
    out = await env.filter(pod, ["n0"])
    assert out["NodeNames"] == ["n0"]
    state = env.sched.state
    await eventually(lambda: state.pod("default", "holder") and LOCK in state.node("n0")["metadata"]["annotations"])
    env.sched.extender.binder.lock_queue = 0.5  # queue behind the holder briefly, not the default 10 s
    out = await env.bind(pod, "n0")
    assert "node lock contention" in out["Error"]
    assert env.pod("default", "p")["spec"].get("nodeName") is None
    await env.sched.events.flush()
    assert len(events(env, "BindingFailed")) == 1


async def test_failed_binding_releases_the_lock(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    node = (await env.filter(pod, ["n0"]))["NodeNames"][0]
    env.store.bind("default", "p", {"target": {"name": "elsewhere"}})  # someone bound it already
    out = await env.bind(pod, node)
    assert out["Error"].startswith("409 Conflict") and 'already assigned to node "elsewhere"' in out["Error"]
    assert LOCK not in env.store.get("nodes", "", node)["metadata"].get("annotations", {})


async def test_pod_without_devices_binds_without_lock(env):
    pod = env.create_pod(pod_obj("cpu", gpus=0))
    out = await env.bind(pod, "n1")
    assert out == {"Error": ""}
    assert env.pod("default", "cpu")["spec"]["nodeName"] == "n1"
    assert LOCK not in env.store.get("nodes", "", "n1")["metadata"].get("annotations", {})


# --------------------------------------------------------------------------- two replicas

NODES, GPUS, PODS = 10, 4, 200
MEM, CORES = 6000, 15  # 6 pods per 40960 MiB / 100-core card: capacity 240 >= 200


def plugin_allocate(store, pod_name: str, node: str) -> None:
    """What the device plugin does after Allocate: bind-phase=success and release our lock."""
    store.patch("pods", "default", pod_name, b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}',
                "application/merge-patch+json")
    value = store.get("nodes", "", node)["metadata"].get("annotations", {}).get(LOCK)
    if value and codec.decode_node_lock(value).owned_by("default", pod_name):
        store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {LOCK: None}}}),
                    "application/merge-patch+json")


async def test_two_schedulers_bind_200_pods_without_overcommit(apiserver):
    """Two replicas, each fed by its own kube-scheduler-like loop (filter one pod at a time, bind
    asynchronously, re-queue failures), place 200 pods on 10 nodes at the same time."""
    nodes = [node_obj(f"n{i}", GPUS, handshake=requesting_now()) for i in range(NODES)]
    # spread: the replicas still collide on the least-used node, but binds proceed on many nodes at once
    a = await start_env(apiserver, nodes, node_scheduler_policy="spread")
    b = await start_env(apiserver, node_scheduler_policy="spread")
    names = [f"n{i}" for i in range(NODES)]
    pods = [a.create_pod(pod_obj(f"w{i}", mem=MEM, cores=CORES)) for i in range(PODS)]
    bound: dict[str, str] = {}
    failures: list[str] = []

    async def bind_then_allocate(env, queue, pod, node, rng):
        err = (await env.bind(pod, node))["Error"]
        if err:
            failures.append(err)
            await asyncio.sleep(0.01 + rng.random() * 0.03)
            queue.put_nowait(pod)
            return
        bound[pod["metadata"]["name"]] = node
        await asyncio.sleep(rng.random() * 0.01)  # the device plugin's Allocate, later
        plugin_allocate(apiserver.store, pod["metadata"]["name"], node)

    async def kube_scheduler(env, mine: list[dict], seed: int):
        rng = random.Random(seed)
        queue: asyncio.Queue = asyncio.Queue()
        for p in mine:
            queue.put_nowait(p)
        binds: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline and not all(p["metadata"]["name"] in bound for p in mine):
            try:
                pod = await asyncio.wait_for(queue.get(), 0.05)
            except TimeoutError:
                continue
            out = await env.filter(pod, names)
            if out.get("NodeNames"):
                t = asyncio.create_task(bind_then_allocate(env, queue, pod, out["NodeNames"][0], rng))
                binds.add(t)
                t.add_done_callback(binds.discard)
            else:
                failures.append("nofit")
                loop.call_later(0.02, queue.put_nowait, pod)
        await asyncio.gather(*binds)

    try:
        await asyncio.gather(kube_scheduler(a, pods[0::2], 1), kube_scheduler(b, pods[1::2], 2))
        assert len(bound) == PODS, (len(bound), collections.Counter(f[:40] for f in failures).most_common(3))
        used: dict[str, list[int]] = {}
        for e in apiserver.store.list("pods", "default")[1]:
            obj = e.obj
            annos = obj["metadata"]["annotations"]
            assert obj["spec"]["nodeName"] == annos["hami.io/vgpu-node"]
            for ctr in codec.decode_pod_devices(annos["hami.io/vgpu-devices-allocated"]):
                for d in ctr:
                    u = used.setdefault(d.uuid, [0, 0, 0])
                    u[0] += 1
                    u[1] += d.usedmem
                    u[2] += d.usedcores
        assert sum(u[0] for u in used.values()) == PODS
        for uuid, (slots, mem, cores) in used.items():
            assert slots <= 10 and mem <= 40960 and cores <= 100, (uuid, slots, mem, cores)
        # The replicas really raced for the same nodes: a bind failed on contention, re-fitted the
        # pod under the lock after the other replica took its devices, or lost a lock swap.
        raced = sum(e.sched.binder.refits + e.sched.locker.conflicts for e in (a, b))
        assert raced or any("lock contention" in f or "concurrent placement" in f for f in failures)
    finally:
        await stop_env(a)
        await stop_env(b)


async def test_bind_refuses_a_placement_that_collides_with_a_bound_pod(env):
    """Another replica's stale /filter put pod2 on the GPU pod1 already holds exclusively."""
    pod1 = env.create_pod(pod_obj("first", cores=100))
    node = (await env.filter(pod1, ["n0"]))["NodeNames"][0]
    assert (await env.bind(pod1, node))["Error"] == ""
    plugin_allocate(env.store, "first", node)
    taken = env.pod("default", "first")["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    pod2 = env.create_pod(pod_obj("second", cores=100, annotations={
        "hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": taken, "hami.io/vgpu-devices-to-allocate": taken}))
    state = env.sched.state
    await eventually(lambda: state.pod("default", "second") and state.pod("default", "first")["spec"].get("nodeName")
                     and LOCK not in state.node(node)["metadata"]["annotations"])
    # Under the lock the bind sees the collision and re-fits the pod on the node's other GPU.
    out = await env.bind(pod2, node)
    assert out["Error"] == ""
    stored = env.pod("default", "second")
    assert stored["spec"]["nodeName"] == node
    mine = stored["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    assert mine != taken and stored["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] == mine
    assert env.sched.binder.overcommit_refusals == 1 and env.sched.binder.refits == 1
    plugin_allocate(env.store, "second", node)

    # A third exclusive pod with the same stale placement: no GPU left on the node, so it is
    # refused and leaves nothing behind (no bind-phase, no lock).
    third = env.create_pod(pod_obj("third", cores=100, annotations={
        "hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": taken, "hami.io/vgpu-devices-to-allocate": taken}))
    await eventually(lambda: state.pod("default", "third") and state.pod("default", "second")["spec"].get("nodeName")
                     and LOCK not in state.node(node)["metadata"]["annotations"])
    out = await env.bind(third, node)
    assert "taken by a concurrent placement" in out["Error"]
    stored = env.pod("default", "third")
    assert stored["spec"].get("nodeName") is None
    assert "hami.io/bind-phase" not in stored["metadata"]["annotations"]
    assert LOCK not in env.store.get("nodes", "", node)["metadata"].get("annotations", {})
    assert env.sched.binder.overcommit_refusals == 2


async def test_a_lock_another_replica_held_is_left_to_it_at_release(env, monkeypatch):
    """Two replicas' binds queued on one node both wake at its release; the one whose replica did
    not hold the lock leaves the node to the other's write (HANDOVER_GRACE_S) instead of racing
    its compare-and-swap, so no 409 (a wasted write) is made, then takes its own turn."""
    from hami.scheduler.extender import bind as bindmod
    monkeypatch.setattr(bindmod, "HANDOVER_GRACE_S", 30.0)  # the other replica's write is the test's
    state, locker = env.sched.state, env.sched.locker

    def lock_for(pod_name: str) -> None:  # the other replica's compare-and-swap
        node = env.store.get("nodes", "", "n0")
        env.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {LOCK: codec.encode_node_lock(locker.clock(), "default", pod_name)}}}),
            "application/merge-patch+json")

    def holder() -> str:
        return (state.node("n0")["metadata"].get("annotations") or {}).get(LOCK, "")

    for other in ("held1", "held2"):
        env.create_pod(pod_obj(other, annotations={"hami.io/bind-phase": "allocating"}))
    lock_for("held1")
    pod = env.create_pod(pod_obj("p", mem=1000))
    assert (await env.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
    await eventually(lambda: state.pod("default", "held2") and "held1" in holder())
    bind = asyncio.create_task(env.bind(pod, "n0"))
    await eventually(lambda: env.sched.placer.binds_in_flight.get("n0"))
    handovers = env.sched.binder.handovers
    plugin_allocate(env.store, "held1", "n0")  # released: our bind wakes and waits for the other replica
    await eventually(lambda: not holder())
    await eventually(lambda: env.sched.binder.handovers > handovers)  # woken, it chose to wait, not to write
    assert LOCK not in env.store.get("nodes", "", "n0")["metadata"].get("annotations", {})
    lock_for("held2")  # the other replica's next bind takes it: its write is not beaten
    await eventually(lambda: "held2" in holder())
    assert not bind.done()
    monkeypatch.setattr(bindmod, "HANDOVER_GRACE_S", 0.05)
    plugin_allocate(env.store, "held2", "n0")  # nobody else wants it now: ours after the grace
    assert (await bind)["Error"] == ""
    assert env.pod("default", "p")["spec"]["nodeName"] == "n0"
    assert locker.conflicts == 0 and not env.sched.client.requests.get(("patch", "nodes", "409"))
