"""Pods the webhook never saw: created while it was down (`failurePolicy: Ignore`), they keep
`default-scheduler` and wait forever, and `spec.schedulerName` cannot be changed afterwards.

Why a reconciler and not `failurePolicy: Fail`: the chart supports Kubernetes 1.26+, where a
webhook's `matchConditions` (to fail closed for GPU pods only) are not available everywhere; failing
closed for every pod of every selected namespace would stop all pod creation while hami is down.

So the scheduler watches for them (its pod informer, no extra API reads in steady state): a pod that
is Pending, unbound, asks for a device hami schedules (the same request reading /filter uses), and
has a scheduler the webhook would have replaced (`default-scheduler` with
--force-overwrite-default-scheduler, or none) is a missed pod. After `grace` seconds (it may still be
bound by someone else) nothing is done until a pod this webhook admitted has been seen in the API
since the pod was created (the webhook is reachable again: recreating a pod while it is still down
would only loop, and with the webhook disabled nothing ever happens). The creation time comes from
the cache (the projection keeps an unbound pod's creationTimestamp), so waiting costs no API read;
once the webhook is shown reachable, one GET reads the pod fresh before acting on it. A review
received proves nothing (anyone who reaches /webhook can send one): the evidence is a pod carrying
the mark the webhook put in its answer (hami.scheduler.admission.admitted). Then:
- owned by a controller (ReplicaSet, Job, StatefulSet, ...): the pod is evicted (pods/eviction: a
  graceful delete that respects PodDisruptionBudgets; the scheduler holds no pod delete right), the
  controller creates it again, and this time the webhook sees it (Normal Event `MissedWebhook`);
- a bare pod: a Warning Event `MissedWebhook` says to delete and recreate it; nothing else is done.
Only the leader acts (with --leader-elect). --recreate-missed-pods=false turns deletion off (Events only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, WARNING, EventRecorder
from hami.obs.log import get_logger

log = get_logger(__name__)

DEFAULT_SCHEDULER = "default-scheduler"
REASON = "MissedWebhook"


def missed(pod: dict, *, scheduler_name: str, force_overwrite_default: bool, asks_for_devices: bool) -> bool:
    """Pure: would the webhook have handed this pod to hami, and is it still waiting?"""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if ((pod.get("status") or {}).get("phase") or "Pending") != "Pending":
        return False
    sched = spec.get("schedulerName") or ""
    if sched == scheduler_name:
        return False
    if sched and not (sched == DEFAULT_SCHEDULER and force_overwrite_default):
        return False  # another scheduler's pod: the webhook leaves those alone too
    return asks_for_devices


def created_at(pod: dict) -> float | None:
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() if text else None
    except ValueError:
        return None


def controller_of(pod: dict) -> dict | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


class MissedPods:
    def __init__(self, client: KubeClient, events: EventRecorder, *, scheduler_name: str,
                 force_overwrite_default: bool, asks_for_devices: Callable[[dict], bool],
                 webhook_answered: Callable[[], float], grace: float = 30.0, recreate: bool = True,
                 is_leader: Callable[[], bool] = lambda: True):
        self.client = client
        self.events = events
        self.scheduler_name = scheduler_name
        self.force_overwrite_default = force_overwrite_default
        self.asks_for_devices = asks_for_devices
        self.grace = grace
        self.recreate = recreate
        self.is_leader = is_leader
        self.webhook_answered = webhook_answered  # unix time a pod this webhook admitted was last seen in the API
        self.seen: dict[str, float] = {}  # "ns/name" -> loop time first seen missed
        self.noted = asyncio.Event()  # a pod was newly seen missed: the watcher's next wake may be sooner
        self.wakes = 0  # times run() woke (idle: none)
        # "ns/name" -> the pod's creation time (from the cache, else from the one GET): while the
        # webhook is not shown reachable since, the watcher waits again without reading the pod, so an
        # idle cluster with a missed pod sees no pod GETs
        self.created: dict[str, float] = {}
        self.done: set[str] = set()  # uids handled (a Warning is said once)
        self.deleted = 0
        self.warned = 0
        self.judged = 0  # missed pods handled past their grace (acted on, or left to wait again)

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        """Informer handler: note missed pods, forget the ones that left or got bound."""
        pod = new or old or {}
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        if new is None or meta.get("uid") in self.done:
            self.seen.pop(key, None)
            self.created.pop(key, None)
            return
        # the cheap checks first: reading the request runs only for unbound pods of the default scheduler
        is_missed = missed(new, scheduler_name=self.scheduler_name,
                           force_overwrite_default=self.force_overwrite_default, asks_for_devices=True)
        if is_missed:
            try:
                is_missed = self.asks_for_devices(new)
            except ValueError:  # a request /filter would refuse: not ours to recreate
                is_missed = False
        if is_missed:
            created = created_at(new)
            if created is not None:
                self.created[key] = created
            if key not in self.seen:
                self.seen[key] = asyncio.get_running_loop().time()
                self.noted.set()
        else:
            self.seen.pop(key, None)
            self.created.pop(key, None)

    async def handle(self, key: str) -> None:
        ns, name = key.split("/", 1)
        known = self.created.get(key)
        if known is not None and known + 1.0 >= self.webhook_answered():
            self.seen[key] = asyncio.get_running_loop().time()  # the webhook not shown reachable since: later
            return
        try:
            pod = await self.client.get_pod(ns, name)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("Cannot read a pod the webhook missed", pod=key, error=str(exc))
            return
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid in self.done or not missed(pod, scheduler_name=self.scheduler_name,
                                          force_overwrite_default=self.force_overwrite_default,
                                          asks_for_devices=True):
            return
        created = created_at(pod)
        if created is not None:
            self.created[key] = created
        if created is None or created + 1.0 >= self.webhook_answered():
            self.seen[key] = asyncio.get_running_loop().time()  # the webhook not shown reachable since: later
            return
        self.done.add(uid)
        owner = controller_of(pod)
        if owner is not None and self.recreate:
            try:
                await self.client.evict_pod(ns, name, uid)
            except ApiError as exc:
                self.done.discard(uid)
                log.warning("Cannot recreate a pod the webhook missed", pod=key, error=str(exc))
                return
            self.deleted += 1
            self.events.record(pod, NORMAL, REASON, f"created while hami's webhook was unavailable (scheduler "
                               f"{(pod.get('spec') or {}).get('schedulerName') or 'unset'}); evicted so its "
                               f"{owner.get('kind', 'controller')} {owner.get('name', '')} creates it again "
                               f"through the webhook")
            log.info("Evicted a pod the webhook missed; its controller recreates it", pod=key,
                     owner=f"{owner.get('kind')}/{owner.get('name')}")
            return
        self.warned += 1
        self.events.record(pod, WARNING, REASON, "created while hami's webhook was unavailable, so it keeps "
                           f"schedulerName {(pod.get('spec') or {}).get('schedulerName') or 'unset'} and will "
                           f"not get its GPU: delete and create it again")
        log.warning("A pod the webhook missed waits; its creator must recreate it", pod=key)

    async def run(self, stop: asyncio.Event, tick: float = 1.0) -> None:
        """Handle each missed pod once its grace is over. Asleep until the earliest is due or a pod is
        newly seen (no wake while nothing is missed); `tick` is the retry while another replica leads."""
        loop = asyncio.get_running_loop()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                now = loop.time()
                due_at = min(self.seen.values(), default=None)
                timeout = None if due_at is None else max(0.0, due_at + self.grace - now)
                if timeout is not None and not self.is_leader():
                    timeout = max(timeout, tick)
                self.noted.clear()
                noted = asyncio.ensure_future(self.noted.wait())
                await asyncio.wait([stopped, noted], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                noted.cancel()
                self.wakes += 1
                if stop.is_set() or not self.is_leader():
                    continue
                now = loop.time()
                due = [k for k, t in self.seen.items() if now - t >= self.grace]
                for key in due:
                    self.seen.pop(key, None)
                    await self.handle(key)
                    self.judged += 1
        finally:
            stopped.cancel()
