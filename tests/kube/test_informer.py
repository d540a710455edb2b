"""Informer (reflector) against the embedded API server: LIST then WATCH into the store, handler
order and arguments, re-LIST on 410 Gone with synthetic DELETED for vanished objects and no
event for unchanged ones (a re-LIST of thousands stepped through the loop, ending in the store a
fresh LIST gives, unchanged objects kept as they were; one broken off midway still gives a failed
handler its object again), resuming after a server restart without a re-LIST, silent-watch
reconnect, bookmarks advancing the resourceVersion, and backoff after errors. A failing handler is
counted and repaired: by the handler's per-object resync when it has one (no re-LIST), else by a
re-LIST that dispatches the object again and runs the resync callbacks; `health()` names the pending resync, a missing
first sync and a watch broken past its bound."""

from __future__ import annotations

import asyncio
import contextlib

from hami.kube.informer import Informer
from tests.kube.helpers import LoopTurns, eventually, node_obj, pod_obj


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, str | None]] = []

    def __call__(self, etype, old, new):
        name = lambda o: None if o is None else o["metadata"]["name"]  # noqa: E731
        self.events.append((etype, name(old), name(new)))


async def run_informer(inf: Informer):
    stop = asyncio.Event()
    task = asyncio.create_task(inf.run(stop))
    assert await inf.wait_synced(5)
    return stop, task



@contextlib.asynccontextmanager
async def watched_nodes(apiserver, client, handler, turns: LoopTurns):
    """A node informer with `handler`, its loop turns counted by `turns`, once its watch is open."""
    inf = Informer(client, "nodes", handler=handler)
    stop, task = await run_informer(inf)
    try:
        async with turns:
            await eventually(lambda: bool(apiserver.store.watchers()), timeout=10)
            yield inf
    finally:
        stop.set()
        await task

async def test_list_then_watch_fills_store_and_calls_handler(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    rec = Recorder()
    inf = Informer(client, "nodes", handler=rec)
    stop, task = await run_informer(inf)
    try:
        assert set(inf.store) == {"a"}
        await client.create("nodes", node_obj("b"))
        await client.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
        await client.delete("nodes", "b")
        await eventually(lambda: ("DELETED", "b", None) in rec.events)
        assert rec.events == [("ADDED", None, "a"), ("ADDED", None, "b"), ("MODIFIED", "a", "a"),
                              ("DELETED", "b", None)]
        assert inf.store["a"]["metadata"]["labels"] == {"x": "1"}
        assert inf.lists == 1
    finally:
        stop.set()
        await task


async def test_handlers_see_the_store_key_of_the_object_they_are_given(apiserver, client):
    apiserver.store.create("pods", "default", pod_obj("a"))
    inf = Informer(client, "pods")
    seen: list[tuple[str, str | None, bool]] = []

    def handler(etype, old, new) -> None:
        key = inf.dispatching_key
        seen.append((etype, key, any(k is key for k in inf.store)))  # the very string the store holds

    inf.add_handler(handler)
    stop, task = await run_informer(inf)
    try:
        apiserver.store.create("pods", "default", pod_obj("b"))
        await eventually(lambda: "default/b" in inf.store)
        apiserver.store.delete("pods", "default", "b")
        await eventually(lambda: len(seen) == 3)
        assert seen == [("ADDED", "default/a", True), ("ADDED", "default/b", True), ("DELETED", "default/b", False)]
        assert inf.dispatching_key is None
    finally:
        stop.set()
        await task


async def test_pods_are_keyed_by_namespace_and_name(apiserver, client):
    apiserver.store.create("pods", "default", pod_obj("p1"))
    inf = Informer(client, "pods")
    stop, task = await run_informer(inf)
    try:
        assert list(inf.store) == ["default/p1"]
    finally:
        stop.set()
        await task


async def test_gone_relists_with_synthetic_deletes_and_no_duplicates(apiserver, client):
    for n in ("keep", "change", "vanish"):
        apiserver.store.create("nodes", "", node_obj(n))
    rec = Recorder()
    inf = Informer(client, "nodes", handler=rec)
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: apiserver.store.watchers())
        rec.events.clear()
        await apiserver.stop()
        apiserver.store.patch("nodes", "", "change", b'{"metadata":{"labels":{"v":"2"}}}',
                              "application/merge-patch+json")
        apiserver.store.delete("nodes", "", "vanish")
        apiserver.store.create("nodes", "", node_obj("new"))
        apiserver.store.compact()
        await apiserver.start()
        await eventually(lambda: inf.relists_gone >= 1 and "new" in inf.store, timeout=10)
        assert sorted(rec.events) == sorted([("DELETED", "vanish", None), ("MODIFIED", "change", "change"),
                                             ("ADDED", None, "new")])
        assert set(inf.store) == {"keep", "change", "new"}
    finally:
        stop.set()
        await task


async def test_restart_resumes_watch_without_relist(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    inf = Informer(client, "nodes", backoff_initial=0.05)
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: apiserver.store.watchers())
        await apiserver.restart()
        await client.patch_node("a", {"metadata": {"labels": {"after": "restart"}}})
        await eventually(lambda: inf.store["a"]["metadata"].get("labels") == {"after": "restart"}, timeout=10)
        assert inf.lists == 1 and inf.watches >= 2
    finally:
        stop.set()
        await task


async def test_silent_watch_reconnects(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    apiserver.faults.silent_watch = True
    inf = Informer(client, "nodes", silent_timeout=0.3)
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: inf.silent_reconnects >= 1, timeout=5)
        apiserver.faults.silent_watch = False
        await client.patch_node("a", {"metadata": {"labels": {"k": "v"}}})
        await eventually(lambda: inf.store["a"]["metadata"].get("labels") == {"k": "v"}, timeout=5)
    finally:
        apiserver.faults.reset()
        stop.set()
        await task


async def test_bookmarks_advance_resource_version(apiserver, client):
    apiserver.bookmark_interval = 0.1
    inf = Informer(client, "nodes")
    stop, task = await run_informer(inf)
    try:
        start_rv = inf.resource_version
        apiserver.store.create("pods", "default", pod_obj("unrelated"))  # moves the global RV
        await eventually(lambda: int(inf.resource_version) > int(start_rv), timeout=5)
        assert inf.store == {}
    finally:
        stop.set()
        await task


async def test_errors_back_off_and_recover(apiserver, client):
    inf = Informer(client, "nodes", backoff_initial=0.05, backoff_max=0.2)
    await apiserver.stop()
    stop = asyncio.Event()
    task = asyncio.create_task(inf.run(stop))
    try:
        await eventually(lambda: inf.errors >= 2, timeout=5)
        assert not inf.synced.is_set()
        apiserver.store.create("nodes", "", node_obj("late"))
        await apiserver.start()
        assert await inf.wait_synced(5)
        assert "late" in inf.store
    finally:
        stop.set()
        await task


async def test_handler_exception_does_not_stop_the_watch(apiserver, client):
    seen = []

    def bad(etype, old, new):
        seen.append((etype, new["metadata"]["name"]))
        raise RuntimeError("boom")

    inf = Informer(client, "nodes", handler=bad, backoff_initial=0.05, backoff_max=0.2)
    stop, task = await run_informer(inf)
    try:
        await client.create("nodes", node_obj("a"))
        await client.create("nodes", node_obj("b"))
        await eventually(lambda: {"a", "b"} <= {n for _, n in seen})
        assert set(inf.store) == {"a", "b"}
        # A handler that never recovers keeps the informer unready, naming the failure.
        assert inf.handler_failures >= 2
        assert inf.health().startswith("nodes: resync pending after handler failure(s): RuntimeError('boom')")
    finally:
        stop.set()
        await task


async def test_handler_failure_relists_redispatches_and_runs_resync_handlers(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    rec = Recorder()
    fail = {"b"}

    def flaky(etype, old, new):
        name = (new or old)["metadata"]["name"]
        if name in fail:
            fail.discard(name)  # fails once for b, then works
            raise RuntimeError("transient")
        rec(etype, old, new)

    resynced = []
    inf = Informer(client, "nodes", handler=flaky)
    inf.resync_handlers.append(lambda: resynced.append(sorted(inf.store)))
    stop, task = await run_informer(inf)
    try:
        lists = inf.lists
        await client.create("nodes", node_obj("b"))
        await eventually(lambda: resynced == [["a", "b"]])
        assert inf.handler_failures == 1 and inf.resyncs == 1 and inf.lists == lists + 1
        # b is delivered again after the re-LIST (its resourceVersion did not change).
        assert rec.events == [("ADDED", None, "a"), ("MODIFIED", "b", "b")]
        assert inf.health() == ""
    finally:
        stop.set()
        await task


async def test_a_handler_with_a_per_object_resync_is_repaired_without_a_relist(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    rec = Recorder()
    fail = {"b"}

    def flaky(etype, old, new):
        name = (new or old)["metadata"]["name"]
        if name in fail:
            fail.discard(name)
            raise RuntimeError("transient")
        rec(etype, old, new)

    fixed, resynced = [], []
    inf = Informer(client, "nodes")
    inf.add_handler(flaky, resync_object=lambda key, obj: fixed.append((key, obj["metadata"]["name"])))
    inf.resync_handlers.append(lambda: resynced.append(1))
    stop, task = await run_informer(inf)
    try:
        lists = inf.lists
        await client.create("nodes", node_obj("b"))
        await eventually(lambda: fixed == [("b", "b")])
        await client.create("nodes", node_obj("c"))
        await eventually(lambda: ("ADDED", None, "c") in rec.events)
        assert inf.lists == lists and not resynced  # no re-LIST, no whole-cache rebuild
        assert inf.handler_failures == 1 and inf.object_resync_count == 1
        assert rec.events == [("ADDED", None, "a"), ("ADDED", None, "c")]
        assert inf.health() == ""
    finally:
        stop.set()
        await task


async def test_a_failure_during_the_initial_list_is_repaired_per_object(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    apiserver.store.create("nodes", "", node_obj("b"))
    fail = {"b"}

    def flaky(etype, old, new):
        if new and new["metadata"]["name"] in fail:
            fail.discard(new["metadata"]["name"])
            raise RuntimeError("transient")

    fixed, resynced = [], []
    inf = Informer(client, "nodes")
    inf.add_handler(flaky, resync_object=lambda key, obj: fixed.append(key))
    inf.resync_handlers.append(lambda: resynced.append(1))
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: fixed == ["b"] and inf.health() == "")
        assert inf.lists == 1 and not resynced and inf.object_resync_count == 1
    finally:
        stop.set()
        await task


async def test_a_handler_without_a_per_object_resync_still_gets_the_full_relist(apiserver, client):
    fail = {"b"}
    good = []

    def flaky(etype, old, new):
        if new and new["metadata"]["name"] in fail:
            fail.discard(new["metadata"]["name"])
            raise RuntimeError("transient")

    resynced = []
    inf = Informer(client, "nodes", handler=flaky)
    inf.add_handler(lambda *a: good.append(1), resync_object=lambda key, obj: None)
    inf.resync_handlers.append(lambda: resynced.append(1))
    stop, task = await run_informer(inf)
    try:
        await client.create("nodes", node_obj("b"))
        await eventually(lambda: resynced == [1])
        assert inf.object_resync_count == 0 and inf.health() == ""
    finally:
        stop.set()
        await task


async def test_health_names_missing_sync_and_a_watch_broken_past_its_bound(apiserver, client):
    inf = Informer(client, "nodes", unready_after=0.3, backoff_initial=0.05, backoff_max=0.1)
    assert inf.health() == "nodes: initial list not done"
    stop, task = await run_informer(inf)
    try:
        assert inf.health() == ""
        await apiserver.stop()
        await eventually(lambda: inf.broken_since is not None)
        assert inf.health() == ""  # broken, but not yet for long: still ready
        await eventually(lambda: "watch broken for" in inf.health(), timeout=5)
        assert inf.health().startswith("nodes: watch broken for ")
        await apiserver.start()
        await eventually(lambda: inf.health() == "", timeout=5)
    finally:
        stop.set()
        await task


async def test_watch_reads_in_small_chunks_and_still_delivers_big_events(apiserver, client):
    """Idle allocation: each read of a watch allocates its read size, so watches read 16 KiB at a
    time (not asyncio's 256 KiB); an event far bigger than that still arrives whole."""
    from hami.kube.informer import WATCH_READ_SIZE, small_reads

    resp = await client.open_watch("nodes", [("watch", "true"), ("resourceVersion", "0")], 10)
    try:
        transport = small_reads(resp)
        assert transport is not None and transport.max_size == WATCH_READ_SIZE
        del transport.max_size
        assert transport.max_size == type(transport).max_size > WATCH_READ_SIZE  # restored for the pool
    finally:
        resp.release()
    inf = Informer(client, "nodes")
    stop, task = await run_informer(inf)
    try:
        big = "x" * (10 * WATCH_READ_SIZE)
        await client.create("nodes", node_obj("big", annotations={"big": big}))
        await eventually(lambda: "big" in inf.store)
        assert inf.store["big"]["metadata"]["annotations"]["big"] == big
    finally:
        stop.set()
        await task


async def test_transform_projects_listed_and_watched_objects(apiserver, client):
    apiserver.store.create("nodes", "", node_obj("a"))
    seen: list = []

    def keep_meta(obj: dict) -> dict:
        return {"metadata": obj["metadata"]}

    inf = Informer(client, "nodes", transform=keep_meta, handler=lambda t, o, n: seen.append((t, n)))
    stop, task = await run_informer(inf)
    try:
        await client.create("nodes", node_obj("b"))
        await eventually(lambda: "b" in inf.store)
        assert all(set(obj) == {"metadata"} for obj in inf.store.values())
        assert all(n is None or set(n) == {"metadata"} for _, n in seen)
        await eventually(lambda: apiserver.store.watchers())
        await apiserver.stop()
        apiserver.store.create("nodes", "", node_obj("c"))
        apiserver.store.compact()  # 410 when the watch resumes: re-LIST, diffed on the projections
        await apiserver.start()
        await eventually(lambda: inf.relists_gone >= 1 and "c" in inf.store, timeout=10)
        assert set(inf.store["c"]) == {"metadata"}
        assert [t for t, _ in seen] == ["ADDED", "ADDED", "ADDED"]  # unchanged a and b stay silent
    finally:
        stop.set()
        await task


async def test_a_relist_of_thousands_gives_the_loop_turns_and_tells_on_list(apiserver, client):
    """A re-list after 410 Gone replaces the store a step at a time (REPLACE_STEP objects, the
    transform TRANSFORM_STEP at a time) so other tasks run meanwhile, and `on_list` hears it begin
    and end (hami.kube.listgc pauses the collector in between)."""
    import gc

    from hami.kube import informer as infmod
    from hami.kube.listgc import GcAroundLists

    for i in range(3 * infmod.REPLACE_STEP):
        apiserver.store.create("nodes", "", node_obj(f"n{i}"))
    inf = Informer(client, "nodes", transform=lambda o: {"metadata": o["metadata"]})
    heard: list[bool] = []
    pause = GcAroundLists()
    was_enabled = gc.isenabled()

    def on_list(starting: bool) -> None:
        heard.append(starting)
        pause(starting)
        if starting:
            assert not gc.isenabled()  # no collection while the objects arrive

    inf.on_list = on_list
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: bool(apiserver.store.watchers()), timeout=10)
        assert heard == [True, False], heard
        assert gc.isenabled() == was_enabled
        ticks = 0
        replaced = inf.replaced

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                if heard[-1]:  # counted only while the re-list runs
                    ticks += 1

        ticking = asyncio.create_task(ticker())
        await apiserver.stop()
        apiserver.store.create("nodes", "", node_obj("late"))  # past the informer's resourceVersion
        apiserver.store.compact()
        await apiserver.start()
        await eventually(lambda: inf.relists_gone >= 1 and inf.replaced > replaced, timeout=20)
        ticking.cancel()
        assert heard == [True, False, True, False] and gc.isenabled() == was_enabled
        listed = inf.store["late"]  # what the LIST built is out of the collector's way (frozen)
        assert not any(o is listed for o in gc.get_objects())
        assert ticks >= 3  # the loop turned while 3,000 objects were projected and replaced
        assert len(inf.store) == 3 * infmod.REPLACE_STEP + 1 and "late" in inf.store
    finally:
        stop.set()
        await task


async def test_a_relist_ends_with_the_store_a_fresh_list_gives_each_turn_bounded(apiserver, client):
    """Thousands vanished, changed, unchanged and new across a 410 Gone: the handlers hear exactly
    the difference, no loop turn dispatches more than REPLACE_STEP of it (deletions included: the
    scan for the vanished is stepped too), and the store ends equal to a fresh informer's."""
    from hami.kube import informer as infmod

    step = infmod.REPLACE_STEP
    for i in range(3 * step):
        apiserver.store.create("nodes", "", node_obj(f"n{i}"))
    turns = LoopTurns()
    events: list[tuple[str, str]] = []

    def handler(etype, old, new):
        events.append((etype, (new if new is not None else old)["metadata"]["name"]))
        turns.count()

    async with watched_nodes(apiserver, client, handler, turns) as inf:
        events.clear()
        turns.per_turn.clear()
        unchanged = inf.store["n3"]
        await apiserver.stop()
        for i in range(0, 3 * step, 2):  # half of them vanish
            apiserver.store.delete("nodes", "", f"n{i}")
        for i in range(1, 3 * step, 4):  # a quarter change
            apiserver.store.patch("nodes", "", f"n{i}", b'{"metadata":{"labels":{"v":"2"}}}',
                                  "application/merge-patch+json")
        for i in range(2 * step):
            apiserver.store.create("nodes", "", node_obj(f"m{i}"))
        apiserver.store.compact()
        replaced = inf.replaced
        await apiserver.start()
        await eventually(lambda: inf.relists_gone >= 1 and inf.replaced > replaced, timeout=20)
        want = ([("DELETED", f"n{i}") for i in range(0, 3 * step, 2)]
                + [("MODIFIED", f"n{i}") for i in range(1, 3 * step, 4)]
                + [("ADDED", f"m{i}") for i in range(2 * step)])
        assert sorted(events) == sorted(want)
        assert turns.most() <= step, turns.per_turn
        assert inf.store["n3"] is unchanged  # listed at the stored version: the object handlers were given
        fresh = Informer(client, "nodes")
        fresh_stop, fresh_task = await run_informer(fresh)
        try:
            assert inf.store == fresh.store and list(inf.store) != []
        finally:
            fresh_stop.set()
            await fresh_task


async def test_a_relist_whose_handlers_take_time_gives_the_loop_a_turn_within_the_budget(apiserver, client):
    """What changed while the watch was down costs its handlers' work: a turn of the re-list's
    replace ends once they took REPLACE_BUDGET, long before REPLACE_STEP objects. The handler
    here takes at least 1 ms an event, so no turn can hold more than budget / 1 ms + 1 of them
    (a slower machine only makes it fewer)."""
    import time

    from hami.kube import informer as infmod

    for i in range(40):
        apiserver.store.create("nodes", "", node_obj(f"n{i}"))
    turns = LoopTurns()
    slow = False

    def handler(etype, old, new):
        if slow:
            time.sleep(0.001)  # a handler with work to do (a registration decoded, usage recounted)
            turns.count()

    async with watched_nodes(apiserver, client, handler, turns) as inf:
        await apiserver.stop()
        for i in range(0, 40, 2):
            apiserver.store.delete("nodes", "", f"n{i}")
        for i in range(1, 40, 2):
            apiserver.store.patch("nodes", "", f"n{i}", b'{"metadata":{"labels":{"v":"2"}}}',
                                  "application/merge-patch+json")
        apiserver.store.compact()
        replaced = inf.replaced
        slow = True
        await apiserver.start()
        await eventually(lambda: inf.relists_gone >= 1 and inf.replaced > replaced, timeout=20)
        assert turns.total() == 40
        assert infmod.REPLACE_BUDGET <= 0.005  # a budget well under the 20 events a pass here has
        assert turns.most() <= int(infmod.REPLACE_BUDGET / 0.001) + 1, turns.per_turn


class PagesFailing:
    """The informer's client, with one LIST page call (counted from 1) answered 500."""

    def __init__(self, client, fail_call: int) -> None:
        self.client, self.fail_call, self.calls = client, fail_call, 0

    async def list(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.fail_call:
            from hami.apierror import ApiError

            raise ApiError(500, "InternalError", "the page was lost")
        return await self.client.list(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


async def test_a_relist_broken_off_midway_still_gives_a_failed_handler_its_object_again(apiserver, client):
    """LIST pages replace the store as they arrive; a handler that failed on an object gets it
    again from the re-LIST that follows, even when that re-LIST broke off before the object's page
    and the next one had to start over."""
    for i in range(6):
        apiserver.store.create("nodes", "", node_obj(f"n{i}"))
    seen: list[tuple[str, str]] = []
    failed_once = False

    def handler(etype, old, new):
        nonlocal failed_once
        name = (new if new is not None else old)["metadata"]["name"]
        if name == "n5" and not failed_once:
            failed_once = True
            raise RuntimeError("the handler's own trouble")
        seen.append((etype, name))

    rebuilt: list[bool] = []
    # pages of 2: the first LIST is calls 1-3 (n5 on its third page), the re-LIST breaks at call 5
    pages = PagesFailing(client, fail_call=5)
    inf = Informer(pages, "nodes", handler=handler, page_size=2, backoff_initial=0.05)
    inf.resync_handlers.append(lambda: rebuilt.append(True))
    stop, task = await run_informer(inf)
    try:
        await eventually(lambda: ("MODIFIED", "n5") in seen and inf.health() == "", timeout=10)
        assert pages.calls >= 8  # the first LIST, the broken re-LIST, the one that finished
        assert seen.count(("ADDED", "n5")) == 0 and rebuilt  # the consumers rebuilt too
        assert set(inf.store) == {f"n{i}" for i in range(6)}
    finally:
        stop.set()
        await task
