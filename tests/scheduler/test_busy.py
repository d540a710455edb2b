"""A burst's pending work per node (hami.scheduler.placement.busy.Held, placement.contention, the Placer) over
HTTP: held decisions are counted per node through every way in and out of `Held` (hypothesis: the
counts always equal a recount); a node holding this replica's decision (filter answered, bind not
in) is left for the next best node by the same policy (binpack's fullest, then, among empty nodes
of equal score, the one the replica's identity ranks first), every node contended sends the pod to
the one given a pod longest ago, and once the burst drains binpack packs the fullest node again; an
expired decision stops contending; a lock another scheduler holds never bends the policy of a
replica with nothing pending, but a replica with a burst pending leaves that node to it and, while
another scheduler binds, does not pack its burst."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.device import codec
from hami.scheduler import placer as placermod
from hami.scheduler.placement import contention
from hami.scheduler.placement.busy import Held
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.scheduler.test_bind_io import plugin_allocate

IDENTITY = "replica-a"


@dataclass(frozen=True)
class D:
    node: str


ops = st.lists(st.tuples(st.sampled_from(["set", "pop", "del", "clear"]), st.integers(0, 6),
                         st.sampled_from(["a", "b", "c"])), max_size=60)


@given(ops)
def test_held_counts_equal_a_recount_after_any_sequence(seq):
    held = Held()
    for op, uid, node in seq:
        if op == "set":
            held[uid] = D(node)
        elif op == "pop":
            held.pop(uid, None)
        elif op == "del" and uid in held:
            del held[uid]
        elif op == "clear":
            held.clear()
        assert held.per_node == dict(Counter(d.node for d in held.values()))


def test_pop_of_a_missing_uid_without_default_raises():
    with pytest.raises(KeyError):
        Held().pop("x")


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(3), identity=IDENTITY) as e:
        e.sched.placer.monotonic = lambda: 0.0  # a burst: every decision within one lock hold
        yield e


async def filtered(env, name: str, mem: int, names=("n0", "n1", "n2")) -> str:
    out = await env.filter(env.create_pod(pod_obj(name, mem=mem)), list(names))
    assert out["Error"] == "", out
    return out["NodeNames"][0]


async def test_a_burst_leaves_a_contended_node_for_the_next_best_and_packs_again_once_drained(env):
    placer = env.sched.placer
    assert await filtered(env, "a0", 8000) == "n0"  # every node empty: the first in the request
    assert placer.held.per_node == {"n0": 1}  # filter answered, bind not yet in
    # n0 holds our decision: the next best by binpack is an empty node; both are, and the replica's
    # identity ranks one of them first (never a random pick: the same every time).
    other = max(("n1", "n2"), key=lambda n: contention.rank(IDENTITY, n))
    assert await filtered(env, "a1", 1000) == other
    [empty] = {"n1", "n2"} - {other}
    assert await filtered(env, "a2", 1000) == empty  # the only node our burst does not contend for
    # Every node contended: the one given a pod longest ago, n0, frees first.
    assert await filtered(env, "a3", 1000) == "n0"
    # The burst drains: every decision binds and its allocation releases the lock.
    for name in ("a0", "a1", "a2", "a3"):
        uid = env.pod("default", name)["metadata"]["uid"]
        node = placer.held[uid].node
        assert (await env.bind(env.pod("default", name), node))["Error"] == ""
        plugin_allocate(env.store, name, node)
    assert placer.held.per_node == {} and not placer.binds_in_flight
    await eventually(lambda: not env.sched.state.locked)
    assert await filtered(env, "a4", 1000, (empty, other, "n0")) == "n0"  # binpack's fullest


async def test_a_spread_of_zero_never_leaves_the_policys_best_node(env):
    placer = env.sched.placer
    placer.contention.spread = 0
    assert [await filtered(env, f"z{i}", 1000) for i in range(3)] == ["n0"] * 3


async def bound_and_allocated(env, name: str) -> str:
    """An 8,000 MiB pod filtered, bound and allocated (its lock released): the node binpack fills first."""
    base = env.create_pod(pod_obj(name, mem=8000))
    full = (await env.filter(base, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert (await env.bind(base, full))["Error"] == ""
    plugin_allocate(env.store, name, full)
    await eventually(lambda: not env.sched.state.locked and env.sched.state.pod_keys.get(f"default/{name}"))
    return full


async def test_an_expired_assumed_placement_no_longer_contends_for_its_node(env):
    placer = env.sched.placer
    full = await bound_and_allocated(env, "b0")
    now = [placer.clock()]
    placer.clock = lambda: now[0]
    assert await filtered(env, "e0", 1000) == full
    other = await filtered(env, "e1", 1000, (full, "n1", "n2"))
    assert other != full  # e0 is held on `full`: the next pod goes past it
    # Never bound (kube-scheduler bound them elsewhere, or the pods went away): they expire.
    now[0] += placermod.ASSUME_TTL + 10
    placer.sweep(now[0])
    assert placer.held.per_node == {}
    assert await filtered(env, "e2", 1000, (other, full)) == full


def lock_by_another_scheduler(env, node_name: str) -> None:
    node = env.store.get("nodes", "", node_name)
    node["metadata"]["annotations"][codec.NODE_LOCK_ANNOTATION] = codec.encode_node_lock(
        env.sched.placer.clock(), "x", "other")
    env.store.update("nodes", "", node_name, node)


async def test_another_schedulers_lock_bends_no_policy_but_a_burst_leaves_its_node_to_it(apiserver):
    async with running_env(apiserver, hami_nodes(4), identity=IDENTITY) as env:
        placer = env.sched.placer
        now = [0.0]
        placer.monotonic = lambda: now[0]
        for name, node in (("f0", "n0"), ("f1", "n1")):  # n0 and n1 the fullest: binpack's best
            pod = env.create_pod(pod_obj(name, mem=8000))
            assert (await env.filter(pod, [node]))["NodeNames"] == [node]
            assert (await env.bind(pod, node))["Error"] == ""
            plugin_allocate(env.store, name, node)
        await eventually(lambda: not env.sched.state.locked and len(env.sched.state.pod_keys) == 2)
        for node in ("n0", "n1"):
            lock_by_another_scheduler(env, node)
        await eventually(lambda: env.sched.state.locked == {"n0", "n1"})
        now[0] += 1.0
        # Nothing pending here: the policy's best node, locked or not (the bind waits for the lock).
        assert await filtered(env, "p1", 1000, ("n0", "n2")) == "n0"
        # With p1 held, this replica has a burst pending: it leaves the node the other scheduler
        # is binding to (n1) for the next best, and the empty n3 is that.
        assert await filtered(env, "p2", 1000, ("n1", "n3")) == "n3"
        # Another scheduler binds here: the burst is not packed (every node with our work is
        # contended, however long ago it was given a pod) until its locks are OTHERS_SEEN_S old.
        assert placer.contention.width == contention.WIDE
        for node in ("n0", "n1"):  # the other scheduler's pods allocated: its locks released
            env.store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {
                codec.NODE_LOCK_ANNOTATION: None}}}), "application/merge-patch+json")
        await eventually(lambda: not env.sched.state.locked)
        now[0] += contention.OTHERS_SEEN_S + 1
        await filtered(env, "p3", 1000, ("n2", "n3"))
        assert placer.contention.width < contention.WIDE
