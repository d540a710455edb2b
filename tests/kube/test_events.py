"""EventRecorder against the embedded API server: record() is synchronous and never touches the
network, events carry the scheduler name as source component, repeats are coalesced into one
Event whose count grows (a PATCH, like client-go), the per-object spam filter and the pending
bound drop floods, and run() drains the queue in the background; a ranked reason (the scheduler's
BindingSucceed) supersedes the same pod's pending FilteringSucceed and, the queue full, evicts the
oldest pending FilteringSucceed instead of being dropped, each drop reason logged once."""

from __future__ import annotations

import asyncio

from hami.kube.events import NORMAL, WARNING, EventRecorder
from tests.kube.helpers import eventually

POD = ("default", "p1", "uid-1")


def events(apiserver):
    return [e.obj for e in apiserver.store.list("events", "default")[1]]


async def test_record_is_queued_without_any_request(client):
    rec = EventRecorder(client, "hami-scheduler")
    rec.record(POD, NORMAL, "BindingSucceed", "Successfully binding node [n1] to default/p1")
    assert rec.pending == 1
    assert client.requests == {}


async def test_event_fields_follow_kubernetes_and_hami(apiserver, client):
    rec = EventRecorder(client, "my-scheduler")
    rec.record(POD, WARNING, "FilteringFailed", "no available node, 3 nodes do not meet")
    await rec.flush()
    [ev] = events(apiserver)
    assert ev["type"] == "Warning" and ev["reason"] == "FilteringFailed"
    assert ev["source"] == {"component": "my-scheduler"}
    assert ev["involvedObject"]["kind"] == "Pod" and ev["involvedObject"]["name"] == "p1"
    assert ev["involvedObject"]["uid"] == "uid-1"
    assert ev["count"] == 1 and ev["message"] == "no available node, 3 nodes do not meet"


async def test_repeats_are_coalesced_and_count_grows(apiserver, client):
    rec = EventRecorder(client, "hami-scheduler")
    for _ in range(3):
        rec.record(POD, WARNING, "FilteringFailed", "same text")
    await rec.flush()
    rec.record(POD, WARNING, "FilteringFailed", "same text")
    await rec.flush()
    [ev] = events(apiserver)
    assert ev["count"] == 4
    assert rec.created == 1 and rec.patched == 1


async def test_pending_events_coalesce_per_pod_and_reason(apiserver, client):
    rec = EventRecorder(client, "hami-scheduler")
    for _ in range(3):
        rec.record(POD, WARNING, "FilteringFailed", "a")
        rec.record(POD, WARNING, "FilteringFailed", "b")
    rec.record(POD, NORMAL, "FilteringSucceed", "c")
    assert rec.pending == 2  # one slot per pod and reason
    await rec.flush()
    got = sorted((e["reason"], e["message"], e["count"]) for e in events(apiserver))
    assert got == [("FilteringFailed", "a", 3), ("FilteringFailed", "b", 3), ("FilteringSucceed", "c", 1)]


async def test_a_flood_of_distinct_messages_keeps_the_newest_few(apiserver, client):
    from hami.kube.events import MESSAGES_PER_REASON

    rec = EventRecorder(client, "hami-scheduler", per_object_burst=100)
    for i in range(10):
        rec.record(POD, NORMAL, "FilteringSucceed", f"m{i}")
    assert rec.pending == 1 and rec.dropped == 10 - MESSAGES_PER_REASON
    await rec.flush()
    assert sorted(e["message"] for e in events(apiserver)) == [f"m{i}" for i in range(10 - MESSAGES_PER_REASON, 10)]


async def test_written_events_with_a_new_message_are_new_events(apiserver, client):
    rec = EventRecorder(client, "hami-scheduler")
    rec.record(POD, WARNING, "FilteringFailed", "a")
    await rec.flush()
    rec.record(POD, WARNING, "FilteringFailed", "b")
    await rec.flush()
    assert sorted(e["message"] for e in events(apiserver)) == ["a", "b"]


async def test_events_over_the_background_lane_budget_are_dropped_never_sent(client):
    # The background lane absorbs what it can write in 30 s; more pending events are dropped.
    lane_client = client
    rec = EventRecorder(lane_client, "hami-scheduler")
    lane = lane_client.budgets["background"]
    assert rec.max_pending == max(64, lane.burst, int(lane.qps * 30))
    for i in range(rec.max_pending + 30):
        rec.record(("default", f"p{i}", f"uid-{i}"), NORMAL, "FilteringSucceed", "x")
    assert rec.pending == rec.max_pending and rec.dropped == 30
    assert client.requests == {}  # recording never sends, never waits


async def test_spam_filter_limits_events_about_one_object(apiserver, client):
    clock = [1000.0]
    rec = EventRecorder(client, "hami-scheduler", per_object_burst=3, clock=lambda: clock[0])
    for i in range(10):
        rec.record(POD, NORMAL, "R", f"m{i}")
        await rec.flush()  # one at a time: pending messages of one pod and reason are capped
    assert len(events(apiserver)) == 3 and rec.dropped == 7
    clock[0] += 300  # one token back after the refill period
    rec.record(POD, NORMAL, "R", "late")
    await rec.flush()
    assert len(events(apiserver)) == 4


async def test_pending_bound_drops_new_events(client):
    rec = EventRecorder(client, "hami-scheduler", max_pending=2)
    for i in range(5):
        rec.record(("default", f"p{i}", ""), NORMAL, "R", "m")
    assert rec.pending == 2 and rec.dropped == 3


async def test_run_drains_in_background(apiserver, client):
    rec = EventRecorder(client, "hami-scheduler", qps=100)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))
    try:
        rec.record(POD, NORMAL, "BindingSucceed", "x")
        await eventually(lambda: len(events(apiserver)) == 1)
    finally:
        stop.set()
        await task


async def test_a_huge_message_is_clipped_to_1024_characters_and_says_how_much_went(apiserver, client):
    # an error that quotes a request (a bind naming a 100,000-character UID) must not become a 100 KB Event
    rec = EventRecorder(client, "hami-scheduler")
    rec.record(POD, WARNING, "BindingFailed", "409 Conflict: UID in precondition: " + "x" * 100_000)
    await rec.flush()
    [ev] = events(apiserver)
    assert ev["message"].startswith("409 Conflict: UID in precondition: xxx")
    assert ev["message"].endswith(f"... ({35 + 100_000 - 1024} more characters)")
    assert len(ev["message"]) < 1100
    rec.record(POD, WARNING, "BindingFailed", "short")
    await rec.flush()
    assert {e["message"] for e in events(apiserver)} >= {"short"}


RANKED = {"BindingSucceed": ("FilteringSucceed",)}


async def test_a_bind_event_supersedes_the_pods_pending_filter_event(apiserver, client):
    rec = EventRecorder(client, "hami-scheduler", supersedes=RANKED)
    rec.record(POD, NORMAL, "FilteringSucceed", "Successfully filtered to node n1")
    rec.record(("default", "p2", "uid-2"), NORMAL, "FilteringSucceed", "Successfully filtered to node n1")
    rec.record(POD, NORMAL, "BindingSucceed", "Successfully binding node [n1] to default/p1")
    assert (rec.pending, rec.superseded, rec.dropped) == (2, 1, 0)
    await rec.flush()
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in events(apiserver)) == [
        ("p1", "BindingSucceed"), ("p2", "FilteringSucceed")]


async def test_a_full_queue_evicts_a_filter_event_for_a_bind_event_never_the_reverse(client, caplog):
    rec = EventRecorder(client, "hami-scheduler", max_pending=2, supersedes=RANKED)
    rec.record(("default", "a", "ua"), NORMAL, "FilteringSucceed", "filtered a")
    rec.record(("default", "b", "ub"), WARNING, "FilteringFailed", "no node for b")
    rec.record(("default", "c", "uc"), NORMAL, "BindingSucceed", "bound c")  # evicts a's FilteringSucceed
    assert rec.pending == 2 and rec.dropped == 1
    rec.record(("default", "d", "ud"), NORMAL, "BindingSucceed", "bound d")  # nothing evictable: dropped
    rec.record(("default", "e", "ue"), NORMAL, "FilteringSucceed", "filtered e")  # dropped
    assert rec.pending == 2 and rec.dropped == 3
    kept = [k[1] for k in rec.pending_keys]
    assert kept == ["b", "c"]
