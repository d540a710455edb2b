"""A scheduling loop that plays kube-scheduler for the embedded cluster.

It watches Pending pods whose schedulerName is ours and, for each, calls the extender exactly as
kube-scheduler's HTTP extender client does with `nodeCacheCapable: true`: POST `<url>/filter` with
`{"Pod": pod, "NodeNames": [...]}`, then POST `<url>/bind` with `ExtenderBindingArgs`. A pod that
does not fit gets the PodScheduled=False/Unschedulable condition kube-scheduler would write, and is
retried with exponential backoff (1 s doubling to 60 s), as kube-scheduler's backoff queue does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.obs.log import get_logger

log = get_logger(__name__)

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 60.0


@dataclass
class _Backoff:
    delay: float = BACKOFF_INITIAL
    not_before: float = 0.0


@dataclass
class SchedulerStats:
    filters: int = 0
    binds: int = 0
    bound: int = 0
    unschedulable: int = 0
    errors: int = 0
    attempts: dict[str, int] = field(default_factory=dict)


def _pending_for_us(pod: dict, scheduler_name: str) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulerName") != scheduler_name:
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase", "Pending") == "Pending"


def _node_ready(node: dict) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


class KubeSchedulerLoop:
    def __init__(self, client: KubeClient, extender_url: str, scheduler_name: str,
                 *, http_timeout: float = 30.0, clock=time.monotonic):
        self.client = client
        self.url = extender_url.rstrip("/")
        self.scheduler_name = scheduler_name
        self.http_timeout = http_timeout
        self.clock = clock
        self.pods = Informer(client, "pods", handler=self._on_pod)
        self.nodes = Informer(client, "nodes", handler=self._on_node)
        self.stats = SchedulerStats()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._backoff: dict[str, _Backoff] = {}
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ events

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            self._backoff.pop(self._key(old), None)
            return
        if _pending_for_us(new, self.scheduler_name):
            self._enqueue(self._key(new))

    def _on_node(self, etype: str, old: dict | None, new: dict | None) -> None:
        # A node changing (registration, capacity) is a reason to retry unschedulable pods now,
        # as kube-scheduler moves pods back to the active queue on node events.
        if etype != "DELETED":
            for b in self._backoff.values():
                b.not_before = 0.0
            self._wake.set()

    @staticmethod
    def _key(pod: dict | None) -> str:
        meta = (pod or {}).get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    # ------------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [
            asyncio.create_task(self.nodes.run(stop), name="kube-scheduler:nodes"),
            asyncio.create_task(self.pods.run(stop), name="kube-scheduler:pods"),
        ]
        timeout = aiohttp.ClientTimeout(total=self.http_timeout)
        try:
            await self.nodes.wait_synced()
            await self.pods.wait_synced()
            async with aiohttp.ClientSession(timeout=timeout) as http:
                workers = [asyncio.create_task(self._worker(http, stop), name="kube-scheduler:worker"),
                           asyncio.create_task(self._retrier(stop), name="kube-scheduler:retry")]
                await stop.wait()
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _retrier(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=0.5)
            except TimeoutError:
                pass
            self._wake.clear()
            now = self.clock()
            for key, b in list(self._backoff.items()):
                if b.not_before <= now and key in self.pods.store:
                    if _pending_for_us(self.pods.store[key], self.scheduler_name):
                        self._enqueue(key)
                    else:
                        self._backoff.pop(key, None)

    async def _worker(self, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            key = await self._queue.get()
            self._queued.discard(key)
            pod = self.pods.store.get(key)
            if pod is None or not _pending_for_us(pod, self.scheduler_name):
                self._backoff.pop(key, None)
                continue
            b = self._backoff.get(key)
            if b and b.not_before > self.clock():
                continue  # the retrier re-queues it when its backoff ends
            try:
                ok = await self.schedule_one(http, pod)
            except Exception as exc:  # keep the loop alive; log once per attempt
                self.stats.errors += 1
                log.warning("Scheduling attempt failed", pod=key, error=str(exc))
                ok = False
            if ok:
                self._backoff.pop(key, None)
            else:
                b = self._backoff.setdefault(key, _Backoff())
                b.not_before = self.clock() + b.delay
                b.delay = min(b.delay * 2, BACKOFF_MAX)

    async def schedule_one(self, http: aiohttp.ClientSession, pod: dict) -> bool:
        """One scheduling cycle for one pod: filter, then bind. True when the pod was bound."""
        key = self._key(pod)
        self.stats.attempts[key] = self.stats.attempts.get(key, 0) + 1
        node_names = sorted(name for name, node in self.nodes.store.items() if _node_ready(node))
        self.stats.filters += 1
        result = await self._post(http, "/filter", {"Pod": pod, "NodeNames": node_names, "Nodes": None})
        chosen = result.get("NodeNames") or []
        if result.get("Error") or not chosen:
            failed = result.get("FailedNodes") or {}
            self.stats.unschedulable += 1
            message = self._unschedulable_message(len(node_names), failed, result.get("Error") or "")
            await self._mark_unschedulable(pod, message)
            log.v(2).info("Pod unschedulable", pod=key, message=message)
            return False
        meta = pod["metadata"]
        self.stats.binds += 1
        bind = await self._post(http, "/bind", {
            "PodName": meta["name"], "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""), "Node": chosen[0],
        })
        if bind.get("Error"):
            log.v(2).info("Bind failed", pod=key, node=chosen[0], error=bind["Error"])
            return False
        self.stats.bound += 1
        log.v(2).info("Pod bound", pod=key, node=chosen[0])
        return True

    async def _post(self, http: aiohttp.ClientSession, path: str, body: dict) -> dict:
        async with http.post(self.url + path, data=orjson.dumps(body),
                             headers={"Content-Type": "application/json"}, ssl=False) as resp:
            data = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"extender {path} answered HTTP {resp.status}: {data[:200]!r}")
            return orjson.loads(data) if data else {}

    @staticmethod
    def _unschedulable_message(total: int, failed: dict, error: str) -> str:
        if error:
            return f"0/{total} nodes are available: {error}."
        counts: dict[str, int] = {}
        for reason in failed.values():
            counts[reason] = counts.get(reason, 0) + 1
        parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
        return f"0/{total} nodes are available: {parts or 'no node fits'}."

    async def _mark_unschedulable(self, pod: dict, message: str) -> None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("message") == message:
                return  # unchanged: kube-scheduler does not rewrite an identical condition
        meta = pod["metadata"]
        patch = {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }]}}
        try:
            await self.client.request(
                "patch", "pods/status", "PATCH",
                resource_path("pods", meta.get("namespace", "default"), meta["name"], "status"),
                body=patch, content_type="application/strategic-merge-patch+json")
        except ApiError as exc:
            log.v(4).info("Could not record PodScheduled condition", pod=self._key(pod), error=str(exc))
