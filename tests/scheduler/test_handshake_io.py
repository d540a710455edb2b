"""The node handshake: the pure verdict table (HAMi v2.10 CheckHealth with the 60 s window, the
allocatable fallback, legacy Reported/Deleted values, unregistered nodes) and the writes against
the embedded API server: one patch per HAMi node on first sight and none for plain nodes, zero
requests in steady state, one clean-up for a dead node and silence afterwards, no writes when
not leader, and a stale resourceVersion answered 409 without harm."""

from __future__ import annotations

import time

import pytest

from hami.device import codec
from hami.scheduler.cache.handshake import HANDSHAKE_KEY, Handshaker, Seen, judge
from tests.kube.helpers import eventually, node_obj
from tests.kube.scheduler_env import running_env, start_env, stop_env

# The pure cases judge against this fixed instant; the I/O cases stamp their nodes at the time they run
# (a clock read at import would close a 60 s window before a late-scheduled file even starts).
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def req(age: float, now: float = NOW) -> str:
    return codec.encode_handshake_requesting(now - age, None)


@pytest.mark.parametrize(("node", "seen", "healthy", "write"), [
    (node_obj("n", handshake=req(10)), Seen(), True, None),
    (node_obj("n", handshake=req(120)), Seen(), True, None),
    (node_obj("n", handshake=req(120), allocatable=0), Seen(), False, "clean"),
    (node_obj("n"), Seen(), True, "request"),
    (node_obj("n", handshake="Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895"), Seen(),
     True, "request"),
    (node_obj("n", handshake="Deleted_2024-01-23 04:30:04"), Seen(), True, "request"),
    (node_obj("n", handshake="Requesting"), Seen(), True, None),
    (node_obj("n", registered=False), Seen(), False, None),
    (node_obj("n", handshake=req(10), allocatable=0), Seen(allocatable=20), False, "clean"),
], ids=["fresh", "old-but-allocatable", "dead", "absent", "legacy-reported", "deleted", "no-stamp",
        "unregistered", "allocatable-dropped"])
def test_judge_follows_hami(node, seen, healthy, write):
    v = judge(node, NOW, seen)
    assert (v.healthy, v.write) == (healthy, write)


def test_cleaned_node_stays_quiet_until_it_changes():
    node = node_obj("n", allocatable=0)
    reg = node["metadata"]["annotations"][codec.REGISTER_ANNOTATION]
    assert judge(node, NOW, Seen(0, reg, cleaned=True)).write is None
    assert judge(node, NOW, Seen(0, reg + " ", cleaned=True)).write == "request"


@pytest.fixture
async def env(apiserver):
    nodes = [node_obj("fresh"), node_obj("also"), node_obj("plain", registered=False)]
    async with running_env(apiserver, nodes) as e:
        yield e


def patches(env) -> int:
    return env.client.total_requests(verb="patch", resource="nodes")


async def test_first_sight_writes_once_per_hami_node_and_never_plain_nodes(env):
    await eventually(lambda: env.sched.handshaker.writes == 2)
    for name in ("fresh", "also"):
        value = env.store.get("nodes", "", name)["metadata"]["annotations"][HANDSHAKE_KEY]
        assert value.startswith("Requesting_")
    assert HANDSHAKE_KEY not in env.store.get("nodes", "", "plain")["metadata"]["annotations"]
    assert env.sched.state.usable == {"fresh", "also"}


async def test_steady_state_sends_no_request_per_node(env):
    await eventually(lambda: env.sched.handshaker.writes == 2)
    cached = env.sched.state.nodes.store
    # Settled: the cache holds both writes (their watch events are judged) and the writer is idle.
    await eventually(lambda: all(HANDSHAKE_KEY in cached[n]["metadata"].get("annotations", {})
                                 for n in ("fresh", "also"))
                     and env.sched.handshakes_done == env.sched.handshakes_queued)
    queued, before = env.sched.handshakes_queued, patches(env)
    for _ in range(5):
        env.sched.state.recheck()  # what the 15 s ticker does
    env.store.patch("nodes", "", "fresh", b'{"metadata":{"labels":{"unrelated":"change"}}}',
                    "application/merge-patch+json")
    # The cache has judged the changed node (its watch event is in): no write was decided, none made.
    await eventually(lambda: (env.sched.state.nodes.store["fresh"]["metadata"].get("labels") or {}).get("unrelated"))
    assert env.sched.handshakes_queued == queued
    await eventually(lambda: env.sched.handshakes_done == env.sched.handshakes_queued)
    assert patches(env) == before


async def test_dead_node_is_cleaned_once_then_left_alone(apiserver):
    dead = node_obj("dead", handshake=req(300, time.time()), allocatable=0)
    e = await start_env(apiserver, [dead])
    try:
        await eventually(lambda: HANDSHAKE_KEY not in e.store.get("nodes", "", "dead")["metadata"]["annotations"])
        assert "dead" not in e.sched.state.usable
        await eventually(lambda: e.sched.handshakes_done == e.sched.handshakes_queued)
        n, queued = patches(e), e.sched.handshakes_queued
        for _ in range(3):
            e.sched.state.recheck()
        assert e.sched.handshakes_queued == queued  # the rechecks decided no write (they are synchronous)
        assert patches(e) == n
    finally:
        await stop_env(e)


async def test_no_writes_when_not_leader(apiserver, monkeypatch):
    e = await start_env(apiserver)
    try:
        e.sched.handshaker.is_leader = lambda: False
        e.store.create("nodes", "", node_obj("late"))
        await eventually(lambda: "late" in e.sched.state.usable)
        # The first sight decided a write; the writer has handled it without writing.
        await eventually(lambda: e.sched.handshakes_queued >= 1
                         and e.sched.handshakes_done == e.sched.handshakes_queued)
        assert e.sched.handshaker.writes == 0 and patches(e) == 0
    finally:
        await stop_env(e)


async def test_stale_resource_version_conflict_is_harmless(env):
    hs = Handshaker(env.client)
    stale = env.store.get("nodes", "", "plain")
    stale = {**stale, "metadata": {**stale["metadata"], "resourceVersion": "1"}}
    from hami.scheduler.cache.handshake import Verdict

    await hs.apply(stale, Verdict(True, "request"))
    assert hs.conflicts == 1 and hs.writes == 0


def _count_judged(state) -> list[str]:
    judged: list[str] = []
    refresh = state.refresh_node

    def counting(node: dict) -> None:
        judged.append(node["metadata"]["name"])
        refresh(node)

    state.refresh_node = counting
    return judged


async def test_recheck_rejudges_only_nodes_whose_verdict_can_change(env):
    state = env.sched.state
    await eventually(lambda: env.sched.handshaker.writes == 2)

    def settled() -> bool:
        state.recheck()
        return not env.sched.handshaker.due

    await eventually(settled)  # first sight's writes came back through the watch
    judged = _count_judged(state)
    for _ in range(3):
        state.recheck()
    assert judged == []  # steady nodes cost the 15 s ticker nothing
    state.recheck(everything=True)  # becoming leader re-judges every HAMi node
    assert sorted(judged) == ["also", "fresh"]


async def test_recheck_drops_a_node_when_its_requesting_window_ends(apiserver):
    e = await start_env(apiserver, [node_obj("gone", handshake=req(0, time.time()), allocatable=0), node_obj("ok")])
    try:
        hs, state = e.sched.handshaker, e.sched.state

        def window_open() -> bool:
            state.recheck()
            return "gone" in state.usable and hs.due.get("gone", 0) > time.time()

        await eventually(window_open, timeout=30)  # the first sight can take a while on a loaded machine
        judged = _count_judged(state)
        state.recheck()
        assert "gone" not in judged and "gone" in state.usable  # window still open: not due
        hs.clock = lambda: time.time() + 61
        state.recheck()
        assert "gone" in judged and "gone" not in state.usable
        await eventually(lambda: HANDSHAKE_KEY not in e.store.get("nodes", "", "gone")["metadata"]["annotations"])
    finally:
        await stop_env(e)
