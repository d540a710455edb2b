"""Funnel avoidance in a burst (hami.scheduler.placement.busy, issue 30): held decisions counted per node
through every way in and out of `Held` (hypothesis: the counts always equal a recount); `avoid`
picks the nodes with more pending than the least busy candidate; over HTTP, a node holding an
assumed placement (filter answered, bind not in) is avoided while another fits, like a locked node,
every node equally busy leaves the choice to the replica's salt (spread.py) while this replica has a
burst pending, but a lock seen on some node with nothing pending here leaves binpack's best fit
first (another scheduler's lock or an Allocate in progress is not a burst), and the placement is
forgotten once it binds or expires, after which binpack packs the fullest node again."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.device import codec
from hami.scheduler import placer as placermod
from hami.scheduler.placement import spread
from hami.scheduler.placement.busy import Busy, Held
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.scheduler.test_bind_io import plugin_allocate


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


def test_pending_adds_held_in_flight_and_locks():
    busy = Busy({"a": 2}, {"a": 1, "b": 1}, {"c", "a"}, ["a", "b", "c"])
    assert [busy.pending(n) for n in "abcd"] == [4, 1, 1, 0]


def avoid(held: dict, candidates: list[str]) -> frozenset[str]:
    return Busy(held, {}, (), candidates).nodes()


def test_avoid_spares_idle_nodes_then_the_least_busy():
    assert avoid({}, ["a", "b"]) == frozenset() and not Busy({}, {}, (), ["a"])
    assert avoid({"a": 1}, ["a", "b", "c"]) == {"a"}  # an idle node left: every busy one avoided
    assert avoid({"a": 2, "b": 1, "c": 1}, ["a", "b", "c"]) == {"a"}  # all busy: the least busy kept
    assert avoid({"a": 1, "b": 1}, ["a", "b"]) == frozenset()  # all equally busy: nothing avoided
    assert Busy({}, {"a": 1}, {"b"}, ["a", "b"]).nodes() == frozenset()  # a lock weighs one bind


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(3)) as e:
        yield e


async def test_an_assumed_placement_makes_its_node_busy_until_it_binds(env):
    ext = env.sched.placer
    first = env.create_pod(pod_obj("a0", mem=8000))
    full = (await env.filter(first, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert ext.held.per_node == {full: 1}  # filter answered, bind not yet in
    second = env.create_pod(pod_obj("a1", mem=1000))
    other = (await env.filter(second, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert other != full  # binpack alone would stack it on `full` (the fullest node)
    [empty] = {"n0", "n1", "n2"} - {full, other}
    # Every node busy but `empty`: the next pod takes it.
    assert (await env.filter(env.create_pod(pod_obj("a2", mem=1000)), ["n0", "n1", "n2"]))["NodeNames"] == [empty]
    # Each node now has one pending: none is avoided, and while the burst is pending this
    # replica's salt picks among the fits (spread.py), not binpack's fullest: a salt that ranks
    # `empty` first sends the pod there.
    ext.replica_salt = next(s for s in (bytes([i]) for i in range(256))
                            if max(("n0", "n1", "n2"), key=lambda n: spread.rank(s, n)) == empty)
    assert (await env.filter(env.create_pod(pod_obj("a3", mem=1000)), ["n0", "n1", "n2"]))["NodeNames"] == [empty]
    # The burst drains: every decision binds and its allocation releases the lock.
    for name in ("a0", "a1", "a2", "a3"):
        uid = env.pod("default", name)["metadata"]["uid"]
        node = ext.held[uid].node
        assert (await env.bind(env.pod("default", name), node))["Error"] == ""
        plugin_allocate(env.store, name, node)
    assert ext.held.per_node == {}
    await eventually(lambda: not env.sched.state.locked)
    assert (await env.filter(env.create_pod(pod_obj("a4", mem=1000)), [empty, full]))["NodeNames"] == [full]


async def bound_and_allocated(env, name: str) -> str:
    """An 8,000 MiB pod filtered, bound and allocated (its lock released): the node binpack fills first."""
    base = env.create_pod(pod_obj(name, mem=8000))
    full = (await env.filter(base, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert (await env.bind(base, full))["Error"] == ""
    plugin_allocate(env.store, name, full)
    await eventually(lambda: not env.sched.state.locked and env.sched.state.pod_keys.get(f"default/{name}"))
    return full


async def test_an_expired_assumed_placement_no_longer_makes_its_node_busy(env):
    ext = env.sched.placer
    full = await bound_and_allocated(env, "b0")
    now = [ext.clock()]
    ext.clock = lambda: now[0]
    assert (await env.filter(env.create_pod(pod_obj("e0", mem=1000)), ["n0", "n1", "n2"]))["NodeNames"] == [full]
    other = sorted({"n0", "n1", "n2"} - {full})[0]
    assert ext.busy_nodes([other, full]).nodes() == {full}  # held: the next pod would go to `other`
    # Never bound (kube-scheduler bound it elsewhere, or the pod went away): it expires.
    now[0] += placermod.ASSUME_TTL + 10
    ext.sweep(now[0])
    assert ext.held.per_node == {} and ext.busy_nodes([other, full]).nodes() == frozenset()
    assert (await env.filter(env.create_pod(pod_obj("e1", mem=1000)), [other, full]))["NodeNames"] == [full]


async def test_a_lock_seen_with_nothing_pending_here_leaves_binpacks_best_fit_first(env):
    ext = env.sched.placer
    full = await bound_and_allocated(env, "l0")
    locked, free = sorted({"n0", "n1", "n2"} - {full})
    node = env.store.get("nodes", "", locked)
    node["metadata"]["annotations"][codec.NODE_LOCK_ANNOTATION] = codec.encode_node_lock(ext.clock(), "x", "other")
    env.store.update("nodes", "", locked, node)
    await eventually(lambda: locked in env.sched.state.locked)
    assert ext.held.per_node == {}  # nothing pending on this replica
    # a salt that would rank the emptier free node first if spreading applied
    ext.replica_salt = next(s for s in (bytes([i]) for i in range(256))
                            if max((full, free), key=lambda n: spread.rank(s, n)) == free)
    assert (await env.filter(env.create_pod(pod_obj("l1", mem=1000)), ["n0", "n1", "n2"]))["NodeNames"] == [full]
