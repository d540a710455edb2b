"""A reflector: LIST, then WATCH from the list's resourceVersion, into a dict store.

kubernetes-asyncio has no informer (spec protocols.md §2), so this is ours:
* LIST (paged) records `metadata.resourceVersion`; WATCH resumes from the last RV seen, with
  `allowWatchBookmarks=true`; BOOKMARK events only advance the RV.
* 410 Gone (as HTTP status or as an ERROR event) -> re-LIST and diff against the store:
  objects that vanished get a synthetic DELETED (client-go's DeletedFinalStateUnknown), changed
  ones MODIFIED, unchanged ones nothing (no duplicate work for handlers).
* Errors back off exponentially with jitter (0.8 s doubling to 30 s), reset once a watch delivers.
* A watch reads its socket in 16 KiB chunks (asyncio's 256 KiB default allocated that much per
  bookmark on an idle watch).
* Silent watch: no event, bookmark or byte for `silent_timeout` seconds -> reconnect from the
  last RV (a half-open connection otherwise stalls the cache forever).
* `transform(obj)` (optional) projects every object before it is stored and dispatched.
* `handler(event_type, old, new)` runs synchronously in the event loop, in order; for DELETED
  `new` is None, for ADDED `old` is None; meanwhile `dispatching_key` is the object's store key
  (for ADDED the very string the store now holds). A raising handler does not stop the watch, but what it
  fed may now differ from the cluster: the failure is counted (`handler_failures`), logged once per
  object, and schedules a resync. When every handler that failed registered a per-object resync
  (`add_handler(h, resync_object=...)`), that callback is given each failed object's cached state
  (`key`, object or None when gone) right after the event (or after the LIST whose dispatch
  failed), and rebuilds only what it derived from
  that object (nothing else a consumer holds, e.g. a placement not yet seen on the watch, is
  touched). Otherwise, or when a per-object resync raises, a full re-LIST follows: the failed
  objects are dispatched again and every `resync_handlers` callback runs, so a consumer can rebuild
  what it derived. Until then `health()` names the pending resync.
* `health()` is "" while the cache is usable, else why not: never synced, a resync pending, or
  LIST/WATCH failing for longer than `unready_after` seconds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from hami.kube.client import ApiError, KubeClient
from hami.kube.readsize import set_read_size
from hami.obs.log import get_logger

log = get_logger(__name__)

Handler = Callable[[str, dict | None, dict | None], None]
ObjectResync = Callable[[str, dict | None], None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


# Objects a LIST's replace handles, and objects its transform projects, between two turns of the
# event loop (Informer._replace_page, _drop_unlisted): a re-list of 40,000 pods must not hold /filter.
REPLACE_STEP = 1000
TRANSFORM_STEP = 100
# ... and the handlers' time in one turn of the replace: what changed while the watch was down
# costs its handlers' work (a node's ADDED ~70 us at 5,000 nodes, a pod's ~20 us), so 1,000
# dispatches could hold the loop 20-70 ms where 1,000 unchanged objects take under 1 ms.
REPLACE_BUDGET = 0.002


class _TurnShare:
    """One loop turn's share of a LIST's replace: `step` objects, or REPLACE_BUDGET seconds once
    handlers were called (the clock is read only after a dispatch, which costs far more)."""

    __slots__ = ("began", "done", "step")

    def __init__(self, step: int) -> None:
        self.began = time.perf_counter()
        self.done = 0
        self.step = step

    def used(self, dispatched: bool) -> bool:
        """Count one object; True when the turn is used up."""
        self.done += 1
        return self.done >= self.step or (dispatched and time.perf_counter() - self.began >= REPLACE_BUDGET)


def object_key(kind: str, obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns and kind not in ("nodes", "namespaces") else meta.get("name", "")


class Informer:
    def __init__(self, client: KubeClient, kind: str = "pods", *, namespace: str | None = None,
                 field_selector: str | None = None, label_selector: str | None = None,
                 handler: Handler | None = None, transform: Callable[[dict], dict] | None = None,
                 silent_timeout: float = 120.0,
                 watch_timeout: float = 300.0, page_size: int = 500,
                 backoff_initial: float = 0.8, backoff_max: float = 30.0, unready_after: float = 60.0):
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.handlers: list[Handler] = [handler] if handler else []
        # Applied to every listed and watched object before it is stored and dispatched (client-go's
        # SetTransform): a consumer keeps only the fields it reads. It must keep metadata.name,
        # .namespace and .resourceVersion (keys and the re-LIST diff use them).
        self.transform = transform
        self.silent_timeout = silent_timeout
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.store: dict[str, dict] = {}
        # The store key of the object whose event the handlers are being given, None between events:
        # a handler keeping its own map by the same "ns/name" can hold this string (for ADDED the
        # store's own) instead of an equal copy.
        self.dispatching_key: str | None = None
        self.resource_version: str = ""
        self.synced = asyncio.Event()
        # Counters for tests and diagnostics.
        self.lists = 0
        self.watches = 0
        self.relists_gone = 0
        self.replaced = 0  # LISTs whose objects replaced the store (the first sync and every re-list)
        # Called with True as a LIST begins and False when it ended (hami.kube.listgc: the collector
        # paused meanwhile); None: nothing.
        self.on_list: Callable[[bool], None] | None = None
        self.silent_reconnects = 0
        self.errors = 0
        self.handler_failures = 0
        self.resyncs = 0
        self.resync_handlers: list[Callable[[], None]] = []
        # handler -> its per-object resync (key, cached object or None); see the module docstring
        self.object_resyncs: dict[Handler, ObjectResync] = {}
        self.object_resync_count = 0
        self._failed_handlers: set[Handler] = set()
        self._needs_full = False  # a per-object resync failed: the next LIST ends in resync_handlers
        self.unready_after = unready_after
        self.broken_since: float | None = None  # loop time of the first LIST/WATCH failure in a row
        self.last_heard: float | None = None  # loop time of the last watch line (event or bookmark)
        self.last_error = ""
        self._failed: dict[str, str] = {}  # object key -> first handler error, until a resync
        self._pending_resync = False
        self._resync_streak = 0
        self._waiters: list[asyncio.Future] = []

    # ------------------------------------------------------------------ public

    def add_handler(self, handler: Handler, resync_object: ObjectResync | None = None) -> None:
        self.handlers.append(handler)
        if resync_object is not None:
            self.object_resyncs[handler] = resync_object

    def health(self, now: float | None = None) -> str:
        """"" when the cache can be trusted, else the reason (for /readyz)."""
        if not self.synced.is_set():
            return f"{self.kind}: initial list not done" + (f" ({self.last_error})" if self.last_error else "")
        if self._pending_resync:
            return f"{self.kind}: resync pending after handler failure(s): {next(iter(self._failed.values()), '')}"
        if self.broken_since is not None:
            now = asyncio.get_running_loop().time() if now is None else now
            down = now - self.broken_since
            if down >= self.unready_after:
                return f"{self.kind}: watch broken for {int(down)}s: {self.last_error}"
        return ""

    def _call_failed(self, error: str) -> None:
        self.errors += 1
        self.last_error = error
        if self.broken_since is None:
            self.broken_since = asyncio.get_running_loop().time()

    def _call_worked(self) -> None:
        self.broken_since = None
        self.last_error = ""

    async def wait_synced(self, timeout: float | None = None) -> bool:
        if self.synced.is_set():
            return True
        try:
            await asyncio.wait_for(self.synced.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds after some event was applied (or now), bounded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                return False
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                return predicate()
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        return True

    def rv_at_least(self, rv: str) -> bool:
        """True if the informer has seen resourceVersion >= rv (numeric RVs only; else True)."""
        try:
            return int(self.resource_version or 0) >= int(rv)
        except ValueError:
            return True

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """LIST+WATCH until `stop` is set (or the task is cancelled)."""
        stop = stop or asyncio.Event()
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                body = asyncio.ensure_future(self._run_once())
                done, _ = await asyncio.wait({body, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if body not in done:
                    body.cancel()
                    try:
                        await body
                    except (asyncio.CancelledError, Exception):
                        pass
                    return
                body.result()
        finally:
            stopper.cancel()

    # ------------------------------------------------------------------ loop

    async def _run_once(self) -> None:
        delay = self.backoff_initial
        need_list = True
        while True:
            try:
                if need_list:
                    if self.on_list is not None:
                        self.on_list(True)
                    try:
                        await self._list()
                    finally:
                        if self.on_list is not None:
                            self.on_list(False)
                    need_list = False
                    self._after_list()
                delivered = await self._watch()
                if delivered:
                    delay = self.backoff_initial
                continue
            except _Resync:
                need_list = True
                self._resync_streak += 1
                if self._resync_streak == 1:
                    continue  # the first re-list at once; a handler failing again backs off below
                log.warning("Informer resync failed again", kind=self.kind, retry_in=round(delay, 2))
            except _Gone:
                self.relists_gone += 1
                log.v(2).info("Watch expired, re-listing", kind=self.kind, rv=self.resource_version)
                need_list = True
                continue
            except ApiError as exc:
                if exc.gone:
                    self.relists_gone += 1
                    need_list = True
                    continue
                self._call_failed(str(exc))
                log.warning("Watch failed", kind=self.kind, error=str(exc), retry_in=round(delay, 2))
            except (TimeoutError, OSError, ValueError, RuntimeError, aiohttp.ClientError) as exc:
                self._call_failed(repr(exc))
                log.warning("Watch failed", kind=self.kind, error=repr(exc), retry_in=round(delay, 2))
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, self.backoff_max)

    def _selectors(self) -> list[tuple[str, Any]]:
        q: list[tuple[str, Any]] = []
        if self.label_selector:
            q.append(("labelSelector", self.label_selector))
        if self.field_selector:
            q.append(("fieldSelector", self.field_selector))
        return q

    async def _list(self) -> None:
        """LIST page by page into the store, then delete what the LIST did not name.

        A re-list after 410 Gone brings every object again (100,000 pods at 5,000 nodes). Each
        page's objects replace their predecessors as the page arrives, so an old object is freed
        while the LIST is still being read and its memory can hold the next pages' objects (built
        whole first, the re-list's new objects all went to fresh memory: resident memory right after
        a re-list was 7-13 % higher). Meanwhile the store holds each object either as it was or as
        listed (the watch is not running, so no event comes in between; the LIST is one snapshot
        across its pages); the vanished are deleted at the end. An object listed at the version the
        store has stays as it is, the one its handlers were given; the new copy is freed at once.
        Every step gives the event loop a turn (`_TurnShare`), and nothing is copied or freed whole
        in one step."""
        cont: str | None = None
        rv = ""
        retry, self._failed = self._failed, {}  # handlers that failed get these objects again
        listed: set[str] = set()
        try:
            while True:
                page = await self.client.list(
                    self.kind, self.namespace, label_selector=self.label_selector,
                    field_selector=self.field_selector, limit=self.page_size, continue_=cont,
                )
                self.lists += 1
                page_items = page.get("items") or []
                meta = page.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                cont = meta.get("continue")
                del page
                await self._replace_page(page_items, listed, retry)
                del page_items
                if not cont:
                    break
        except BaseException:
            for key, error in retry.items():  # the next LIST gives them again
                self._failed.setdefault(key, error)
            raise
        self._call_worked()
        await self._drop_unlisted(listed)
        self.resource_version = rv
        self.replaced += 1
        self.synced.set()
        self._notify()

    async def _replace_page(self, page_items: list, listed: set[str], retry: dict[str, str]) -> None:
        """One LIST page into the store: handlers get what was added or changed. Each full object
        is let go in the step that projects it (freed with the next page's decode, a page of 500
        pods added milliseconds to that one turn)."""
        kind, store, transform = self.kind, self.store, self.transform
        turn = _TurnShare(TRANSFORM_STEP if transform is not None else REPLACE_STEP)
        for i in range(len(page_items)):
            obj, page_items[i] = page_items[i], None
            if transform is not None:
                obj = transform(obj)
            key = object_key(kind, obj)
            listed.add(key)
            old = store.get(key)
            dispatched = True
            if old is None:
                store[key] = obj
                self._dispatch(ADDED, None, obj, key)
            elif _rv(old) != _rv(obj) or key in retry:
                store[key] = obj
                self._dispatch(MODIFIED, old, obj, key)
            else:  # the same version: the store keeps the object its handlers were given
                dispatched = False
            del old, obj  # a replaced object (or an unchanged one's new copy) is freed in this step
            if turn.used(dispatched):
                await asyncio.sleep(0)
                turn = _TurnShare(turn.step)

    async def _drop_unlisted(self, listed: set[str]) -> None:
        """After the LIST: what it did not name is deleted (a synthetic DELETED to the handlers).
        Its set of names is emptied as the scan goes: a LIST key the store had an equal of is freed
        in the step that met it (100,000 strings freed at once took 2.5 ms)."""
        store = self.store
        held = list(store)  # a copy of the keys alone: a step of C, ~0.5 ms at 100,000
        await asyncio.sleep(0)
        turn = _TurnShare(REPLACE_STEP)
        for key in held:
            gone = key not in listed
            if gone:
                self._dispatch(DELETED, store.pop(key), None, key)
            else:
                listed.discard(key)
            if turn.used(gone):
                await asyncio.sleep(0)
                turn = _TurnShare(REPLACE_STEP)

    async def _watch(self) -> bool:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", self.resource_version),
                 ("timeoutSeconds", str(int(self.watch_timeout * (1 + random.random()))))]
        query += self._selectors()
        resp = await self.client.open_watch(self.kind, query, self.silent_timeout, self.namespace)
        self.watches += 1
        self._call_worked()
        delivered = False
        transport = small_reads(resp)
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except TimeoutError:  # aiohttp's ServerTimeoutError is one too: sock_read expired
                    self.silent_reconnects += 1
                    log.v(2).info("Watch silent, reconnecting", kind=self.kind, after_s=self.silent_timeout)
                    return delivered
                except aiohttp.ClientError as exc:
                    log.v(2).info("Watch stream broken, resuming", kind=self.kind, error=repr(exc))
                    return delivered
                if not line:
                    return delivered  # server closed (timeoutSeconds): resume from last RV
                self.last_heard = asyncio.get_running_loop().time()
                line = line.strip()
                if not line:
                    continue
                ev = orjson.loads(line)
                delivered = True
                self._apply(ev)
                if self._failed and not self._resync_objects():
                    self._needs_full = True
                    raise _Resync()
        finally:
            if transport is not None:
                set_read_size(transport, None)  # back to asyncio's default before the pool reuses it
            resp.release()

    def _apply(self, ev: dict) -> None:
        etype = ev.get("type")
        obj = ev.get("object") or {}
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            raise ApiError(int(code or 500), str(obj.get("reason", "")), str(obj.get("message", "")), body=obj)
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
                self._notify()
            return
        if self.transform is not None and etype in (ADDED, MODIFIED, DELETED):
            obj = self.transform(obj)
        key = object_key(self.kind, obj)
        old = self.store.get(key)
        if etype in (ADDED, MODIFIED):
            self.store[key] = obj
            self._dispatch(ADDED if old is None else MODIFIED, old, obj, key)
        elif etype == DELETED:
            self.store.pop(key, None)
            self._dispatch(DELETED, old or obj, None, key)
        if rv:
            self.resource_version = rv
        self._notify()

    def _dispatch(self, etype: str, old: dict | None, new: dict | None, key: str) -> None:
        self.dispatching_key = key
        try:
            self._call_handlers(etype, old, new, key)
        finally:
            self.dispatching_key = None

    def _call_handlers(self, etype: str, old: dict | None, new: dict | None, key: str) -> None:
        for h in self.handlers:
            try:
                h(etype, old, new)
            except Exception as exc:
                self.handler_failures += 1
                self._failed_handlers.add(h)
                self._pending_resync = True
                if key not in self._failed:  # once per object until the resync
                    self._failed[key] = repr(exc)
                    log.exception("Informer handler failed; re-listing", kind=self.kind, event_type=etype,
                                  object=key)

    def _resync_objects(self) -> bool:
        """Per-object resync of what failed on the watch; False when a full re-LIST is needed
        (a failed handler without a per-object resync, or a resync that raised)."""
        fixes = [self.object_resyncs.get(h) for h in self._failed_handlers]
        if not fixes or any(f is None for f in fixes) or "(resync)" in self._failed:
            return False
        for key in list(self._failed):
            for fix in fixes:
                assert fix is not None
                try:
                    fix(key, self.store.get(key))
                except Exception as exc:
                    self.handler_failures += 1
                    self._failed[key] = repr(exc)
                    log.exception("Per-object resync failed; re-listing", kind=self.kind, object=key)
                    return False
        log.info("Informer resynced objects after handler failure", kind=self.kind, objects=sorted(self._failed))
        self.object_resync_count += len(self._failed)
        self._failed = {}
        self._failed_handlers.clear()
        self._pending_resync = False
        return True

    def _after_list(self) -> None:
        """After a LIST: if handlers failed before it, let consumers rebuild from the fresh store."""
        if not self._pending_resync:
            return
        if not self._needs_full and self._failed and self._resync_objects():
            self._resync_streak = 0  # failures of this LIST's own dispatch, repaired per object
            return
        self.resyncs += 1
        for cb in self.resync_handlers:
            try:
                cb()
            except Exception as exc:
                self.handler_failures += 1
                self._failed.setdefault("(resync)", repr(exc))
                log.exception("Informer resync handler failed; re-listing again", kind=self.kind)
        if self._failed:
            raise _Resync()
        self._failed_handlers.clear()
        self._needs_full = False
        self._pending_resync = False
        self._resync_streak = 0
        log.info("Informer resynced after handler failure", kind=self.kind, objects=len(self.store))

    def _notify(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)


# asyncio reads a connection max_size bytes at a time, 256 KiB by default, over plain TCP and TLS
# alike (hami.kube.readsize): every bookmark on an idle watch allocated a 256 KiB buffer before
# shrinking it to a few hundred bytes (most of the idle scheduler's allocation). A watch reads events
# of a few KiB; a burst only costs more reads.
WATCH_READ_SIZE = 16 * 1024


def small_reads(resp) -> Any:
    """Read this watch in WATCH_READ_SIZE chunks; returns the transport to restore, or None (a
    transport without a read size to set)."""
    transport = getattr(getattr(resp, "connection", None), "transport", None)
    return transport if set_read_size(transport, WATCH_READ_SIZE) else None


class _Gone(Exception):
    pass


class _Resync(Exception):
    """A handler failed: re-LIST and let consumers rebuild."""


def _rv(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion", "")
