"""EventRecorder: core/v1 Events written off the hot path, coalesced and rate-limited.

`record(pod, type, reason, message)` is synchronous and O(1): it only puts the event in a pending
map. The `run(stop)` task drains it, one write at a time, on the client's *background* lane
(`hami.kube.lanes`), so no event ever delays a filter or a bind. Like client-go's recorder:
* pending events are coalesced per pod, type and reason: one pending slot holds the distinct
  messages (at most `MESSAGES_PER_REASON`, the oldest giving way), repeats add up; a written event
  that happens again PATCHes `count` and `lastTimestamp` of the same Event;
* a per-object-and-reason spam filter (token bucket, burst 25, one token per 5 minutes) drops floods about a
  single pod;
* the pending map is bounded by what the background lane can absorb (its burst, unless
  `max_pending` is given): when the lane is over budget, new events are dropped, counted in
  `dropped` (`hami_scheduler_events_dropped`) and logged once per reason. `record` never blocks;
* `supersedes` ranks reasons: an event of a reason named there (the scheduler's BindingSucceed)
  takes the place of the same pod's still pending events of the reasons it lists (FilteringSucceed:
  the bind says where the filter put it), counted in `superseded`, and when the pending map is
  full it evicts the oldest pending event of those reasons of any pod (counted as a drop) rather
  than being dropped itself, so in a burst every pod that bound gets its event.
The source component is the scheduler name.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC

from hami.device.codec.timestamps import format_rfc3339
from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import BACKGROUND
from hami.obs.log import get_logger

log = get_logger(__name__)

NORMAL, WARNING = "Normal", "Warning"

_Key = tuple[str, str, str, str, str]  # (namespace, name, type, reason, message)
_PendingKey = tuple[str, str, str, str]  # (namespace, name, type, reason)

# Distinct messages kept pending per pod and reason: HAMi's failed filter says two things (the
# per-node reasons and "no available node"); a flood of changing messages keeps the newest few.
MESSAGES_PER_REASON = 4
MESSAGE_LIMIT = 1024


def clip_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """At most `limit` characters: an error can quote what a request sent (a 1 MiB UID), and that
    belongs neither in an Event (events.k8s.io caps a note at 1 KiB) nor in one log line."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


class _Bucket:
    __slots__ = ("tokens", "last")

    def __init__(self, tokens: float, last: float):
        self.tokens, self.last = tokens, last


class EventRecorder:
    def __init__(self, client: KubeClient | None, component: str, *, instance: str = "",
                 qps: float = 0.0, burst: int = 50, per_object_burst: int = 25,
                 per_object_refill_s: float = 300.0, max_pending: int | None = None,
                 supersedes: dict[str, tuple[str, ...]] | None = None, clock: Callable[[], float] = time.time):
        self.client = client
        self.component = component or "hami-scheduler"
        self.instance = instance
        # An optional pacing of its own (qps 0 = none: the background lane paces the writes).
        self.qps, self.burst = qps, burst
        self.per_object_burst, self.per_object_refill_s = per_object_burst, per_object_refill_s
        if max_pending is None:
            # Over budget = more pending than the background lane can write in 30 s.
            lane = getattr(client, "budgets", {}).get(BACKGROUND)
            max_pending = max(64, lane.burst, int(lane.qps * 30)) if lane is not None and lane.qps > 0 else 4096
        self.max_pending = max_pending
        self.supersedes = supersedes or {}
        self._outranked = frozenset(r for rs in self.supersedes.values() for r in rs)
        # pending keys whose reason a ranked event may take the place of, oldest first
        self._evictable: OrderedDict[_PendingKey, None] = OrderedDict()
        self.superseded = 0
        self.clock = clock
        # (ns, name, type, reason) -> (pod ref, {message: pending repeats})
        self._pending: OrderedDict[_PendingKey, tuple[tuple[str, str, str], dict[str, int]]] = OrderedDict()
        # key -> (event name, count written so far); bounded LRU like client-go's cache of 4096
        self._written: OrderedDict[_Key, tuple[str, int]] = OrderedDict()
        self._spam: dict[tuple[str, str, str, str], _Bucket] = {}
        self._wake = asyncio.Event()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.dropped = 0
        self._drop_logged: set[str] = set()  # each reason for dropping is logged once
        self.created = 0
        self.patched = 0
        self.failed = 0

    # ------------------------------------------------------------------ hot path

    def record(self, pod: dict | tuple[str, str, str], etype: str, reason: str, message: str) -> None:
        """Queue one event about `pod` (a pod dict, or (namespace, name, uid))."""
        message = clip_message(message)
        if isinstance(pod, dict):
            meta = pod.get("metadata") or {}
            ref = (meta.get("namespace") or "default", meta.get("name", ""), meta.get("uid", ""))
        else:
            ref = pod
        key = (ref[0], ref[1], etype, reason)
        entry = self._pending.get(key)
        if entry is not None:
            messages = entry[1]
            if message in messages:
                messages[message] += 1
            else:
                if len(messages) >= MESSAGES_PER_REASON:
                    del messages[next(iter(messages))]
                    self._drop("too many distinct messages for one pod and reason")
                messages[message] = 1
        else:
            ranked = self.supersedes.get(reason)
            if ranked:
                for t in (NORMAL, WARNING):
                    for r in ranked:
                        if self._take((ref[0], ref[1], t, r)):
                            self.superseded += 1
            if len(self._pending) >= self.max_pending:
                if not ranked or not self._evictable:
                    self._drop("background lane over budget")
                    return
                self._take(next(iter(self._evictable)))
                self._drop(f"background lane over budget: a {reason} event took the place of a pending "
                           f"{'/'.join(ranked)} event")
            self._pending[key] = (ref, {message: 1})
            if reason in self._outranked:
                self._evictable[key] = None
        self._wake.set()

    def _take(self, key: _PendingKey) -> bool:
        """Remove a pending slot (superseded or evicted); False if there was none."""
        if self._pending.pop(key, None) is None:
            return False
        self._evictable.pop(key, None)
        return True

    def _next(self) -> tuple[_PendingKey, tuple]:
        pkey, slot = self._pending.popitem(last=False)
        self._evictable.pop(pkey, None)
        return pkey, slot

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if why not in self._drop_logged:
            self._drop_logged.add(why)
            log.warning("Dropping events", reason=why, pending=len(self._pending), max_pending=self.max_pending,
                        metric="hami_scheduler_events_dropped")

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def pending_keys(self) -> list[tuple]:
        """The events waiting to be written, oldest first, as (namespace, name, type, reason)."""
        return list(self._pending)

    # ------------------------------------------------------------------ writer

    def _allow_object(self, ns: str, name: str, etype: str = "", reason: str = "") -> bool:
        # Keyed by object, type and reason (client-go's spam key includes type and reason), so a
        # flood of FilteringSucceed/BindingFailed retries never silences a pod's FilteringFailed.
        now = self.clock()
        skey = (ns, name, etype, reason)
        b = self._spam.get(skey)
        if b is None:
            if len(self._spam) > 8192:
                self._spam.clear()
            b = self._spam[skey] = _Bucket(float(self.per_object_burst), now)
        b.tokens = min(float(self.per_object_burst), b.tokens + (now - b.last) / self.per_object_refill_s)
        b.last = now
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True

    async def flush(self) -> None:
        """Write everything pending now (used by run() and by tests)."""
        while self._pending:
            pkey, (ref, messages) = self._next()
            await self._write_slot(pkey, ref, messages)
        await self._idle.wait()  # writes the background task already took off the queue

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        tokens, last = float(self.burst), loop.time()
        while not stop.is_set():
            if not self._pending:
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                continue
            # Token bucket: `burst` events at once after a quiet spell, then one per 1/qps,
            # each write on its own so filters interleave with them.
            now = loop.time()
            tokens = min(float(self.burst), tokens + (now - last) * self.qps) if self.qps > 0 else 1.0
            last = now
            if tokens < 1.0:
                await asyncio.sleep((1.0 - tokens) / self.qps)
                continue
            tokens -= 1.0
            pkey, (ref, messages) = self._next()
            await self._write_slot(pkey, ref, messages)
        # best effort on shutdown
        try:
            await asyncio.wait_for(self.flush(), 2.0)
        except (TimeoutError, ApiError):
            pass

    async def _write_slot(self, pkey: _PendingKey, ref: tuple[str, str, str], messages: dict[str, int]) -> None:
        for message, repeats in messages.items():
            if not self._allow_object(*pkey):
                self._drop("spam filter")
                continue
            await self._write((*pkey, message), ref, repeats)

    async def _write(self, key: _Key, ref: tuple[str, str, str], repeats: int) -> None:
        if self.client is None:
            return
        self._inflight += 1
        self._idle.clear()
        try:
            await self._write_one(key, ref, repeats)
        finally:
            self._inflight -= 1
            if not self._inflight:
                self._idle.set()

    async def _write_one(self, key: _Key, ref: tuple[str, str, str], repeats: int) -> None:
        ns, name, etype, reason, message = key
        now = format_rfc3339(self.clock(), UTC)
        written = self._written.get(key)
        try:
            if written is not None:
                ev_name, count = written
                count += repeats
                try:
                    await self.client.patch_event(ns, ev_name, {"count": count, "lastTimestamp": now})
                    self.patched += 1
                    self._written[key] = (ev_name, count)
                    self._written.move_to_end(key)
                    return
                except ApiError as exc:
                    if not exc.not_found:
                        raise
                    # The event expired (TTL): write a fresh one below.
                    repeats = count
            ev_name = f"{name}.{time.time_ns():x}"
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": ev_name, "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                                   "uid": ref[2]},
                "reason": reason, "message": message, "type": etype,
                "source": {"component": self.component},
                "firstTimestamp": now, "lastTimestamp": now, "count": repeats,
                "reportingComponent": self.component, "reportingInstance": self.instance,
            }
            await self.client.create_event(ns, body)
            self.created += 1
            self._written[key] = (ev_name, repeats)
            if len(self._written) > 4096:
                self._written.popitem(last=False)
        except ApiError as exc:
            self.failed += 1
            log.v(2).info("Event not written", pod=f"{ns}/{name}", reason=reason, error=str(exc))
