"""Wake parked pending pods when GPU capacity frees up (issue: pods wait for kube-scheduler's
5-minute flush after the devices they need were released).

kube-scheduler moves a pod out of its unschedulable pool when the pod itself is updated with more
than a status change (`isPodUpdated` in scheduling_queue.go). So the waker writes one annotation,
`hami.io/requeue-at` (RFC 3339 time of the wake), on each pod that the change could now place, and
only on those (`hami.io.scheduler.requeue.wake_list`: its last failure reasons could be removed by
the change and it now fits on a changed node).

Off the hot path, on the client's background lane (hami.kube.lanes): /filter and the informers only note failures and
changes (dict writes); a background task coalesces changes for `debounce` seconds, computes the wake list, and sends the
patches under its own token bucket (`rate` per second, `burst`), so a flood of frees never floods
the API server. Each recorded failure gets at most one wake. Counters: `wakes` (patches sent),
`bound_after_wake` (woken pods later bound), `wake_to_bound` (seconds, the last 256).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping

from hami.device import codec
from hami.device.codec.keys import REQUEUE_AT_ANNOTATION
from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import background
from hami.kubesched.nodeaffinity import required_terms
from hami.obs.log import get_logger
from hami.scheduler.cache import requeue
from hami.scheduler.placement.fit import PodRequest
from hami.scheduler.placement.usage import UsageIndex

log = get_logger(__name__)

REQUEUE_ANNOTATION = REQUEUE_AT_ANNOTATION
# The loop time one turn of a wake pass may take judging pods before it yields (requeue.wakes).
WAKE_BUDGET = 0.002


class Waker:
    def __init__(self, client: KubeClient | None, index: UsageIndex | Callable[[], UsageIndex], *,
                 rate: float = 20.0, burst: int = 20, debounce: float = 0.02, clock: Callable[[], float] = time.time,
                 labels_of: Callable[[str], Mapping[str, str] | None] | None = None):
        self.client = client
        self.labels_of = labels_of  # node -> labels, for the pods' own node constraints
        # the live index (ClusterState replaces it when it rebuilds after a handler failure)
        self.index_of = index if callable(index) else (lambda: index)
        self.rate, self.burst, self.debounce = rate, burst, debounce
        self.clock = clock
        self.book = requeue.PendingBook()
        self.idle = False  # run() waits with no capacity change left to judge (every wake it chose is sent)
        self.changes: dict[tuple[str, str], set[str]] = {}
        self.wakes = 0
        self.wake_failures = 0
        self.bound_after_wake = 0
        self.wake_to_bound: deque[float] = deque(maxlen=256)
        self.sent: deque[float] = deque(maxlen=4096)  # monotonic send times (tests check the rate)
        self._woken: dict[str, float] = {}  # uid -> wake time, until bound or gone
        self._wake = asyncio.Event()
        self._tokens = float(burst)
        self._last = time.monotonic()

    # ------------------------------------------------------------------ notes (hot path: cheap)

    def note_failure(self, pod: dict, request: PodRequest, node_names, failed: dict) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name", "")
        spec = pod.get("spec") or {}
        self.book.record(meta.get("uid") or f"{ns}/{name}", ns, name, request, node_names, failed, self.clock(),
                         node_selector=spec.get("nodeSelector"), affinity_terms=required_terms(pod))

    def capacity_changed(self, node: str | None, kind: str, namespace: str = "") -> None:
        if not self.book.pods:
            return
        self.changes.setdefault((kind, node or ""), set()).add(namespace)
        self.idle = False
        self._wake.set()

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        """Pod informer handler: forget pods that got bound or went away; count binds after a wake."""
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        if new is not None and not (new.get("spec") or {}).get("nodeName") and not meta.get("deletionTimestamp"):
            return
        self.book.forget(uid)
        woken = self._woken.pop(uid, None)
        if woken is not None and new is not None and (new.get("spec") or {}).get("nodeName"):
            self.bound_after_wake += 1
            self.wake_to_bound.append(max(0.0, self.clock() - woken))

    # ------------------------------------------------------------------ background

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._wake.clear()
            if not self.changes:
                self.idle = True
                stopper = asyncio.ensure_future(stop.wait())
                waiter = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({stopper, waiter}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                waiter.cancel()
                continue
            self.idle = False
            await asyncio.sleep(self.debounce)  # coalesce a burst of frees into one pass
            changes, self.changes = self.changes, {}
            began = time.perf_counter()
            for pending, node in requeue.wakes(self.book, changes, self.index_of().nodes, self.labels_of):
                if stop.is_set():
                    return
                if node is not None:
                    await self._take_token()
                    await self._send(pending, node)
                elif time.perf_counter() - began < WAKE_BUDGET:
                    continue
                else:
                    await asyncio.sleep(0)  # a long pass (a re-list freed thousands of nodes) must not hold /filter
                began = time.perf_counter()

    async def _take_token(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
            await asyncio.sleep((1.0 - self._tokens) / self.rate)

    async def _send(self, pending: requeue.Pending, node: str) -> None:
        now = self.clock()
        self.book.woken(pending.uid, now)
        if self.client is None:
            return
        patch = {"metadata": {"annotations": {REQUEUE_ANNOTATION: codec.format_micro_time(now)}}}
        try:
            with background():  # housekeeping: never ahead of a pending pod's lock, patch or binding
                await self.client.patch_pod(pending.namespace, pending.name, patch)
        except ApiError as exc:
            self.wake_failures += 1
            log.v(2).info("Requeue wake failed", pod=f"{pending.namespace}/{pending.name}", error=str(exc))
            return
        self.wakes += 1
        self.sent.append(time.monotonic())
        self._woken[pending.uid] = now
        log.v(3).info("Woke pending pod", pod=f"{pending.namespace}/{pending.name}", fits_on=node)
