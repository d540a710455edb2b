"""kube-scheduler's scheduling queue (PriorityQueue), as of Kubernetes 1.31. Pure: no I/O, no clock of
its own (every call takes `now`), so tests drive it without waiting.

What is modelled, from kubernetes/pkg/scheduler/internal/queue/scheduling_queue.go:

* Three places a pending pod lives: `activeQ` (a heap, PrioritySort: higher `spec.priority` first,
  then the earlier queue timestamp), `backoffQ` (ordered by backoff expiry) and `unschedulablePods`.
* Backoff (`calculateBackoffDuration`): `initial * 2^(attempts-1)`, capped at `max_backoff`, counted
  from the time the pod last failed (`pInfo.Timestamp`, refreshed by AddUnschedulableIfNotPresent);
  none for a pod never attempted (1.33+). Tested against upstream's cases (tests/data/kubesched/).
  Defaults `podInitialBackoffSeconds=1`, `podMaxBackoffSeconds=10`.
* `flushBackoffQCompleted` (every 1 s) moves expired backoff entries to activeQ;
  `flushUnschedulablePodsLeftover` (every 30 s) moves pods parked longer than
  `podMaxInUnschedulablePodsDuration` (5 min) out of the pool (to backoffQ while still backing off,
  as `requeuePodViaQueueingHint` does, else activeQ).
* AddUnschedulableIfNotPresent with the SchedulerQueueingHints gate off (1.31's default,
  `addUnschedulableWithoutQueueingHint`): a pod goes to backoffQ when a move request arrived after
  its scheduling cycle began (`moveRequestCycle >= podSchedulingCycle`) or when no rejector is
  recorded; otherwise it is parked in unschedulablePods. With hints on
  (`determineSchedulingHintForInFlightPod`), the events seen while the pod was in flight are asked
  instead, and only one a rejector registered for sends it to backoffQ.
* Moves on cluster events (`MoveAllToActiveOrBackoffQueue` / `movePodsToActiveOrBackoffQueue`):
  a parked pod moves only when one of its rejector plugins registered for the event
  (`podMatchesEvent`; with hints, the registered hint must answer Queue). `moveRequestCycle` is set
  on every move request.
* Update of a parked pod (`Update`): when anything but status/resourceVersion/generation/
  managedFields/finalizers changed (`isPodUpdated`), it moves to backoffQ if still backing off, else
  to activeQ. This is the path an annotation such as `hami.io/requeue-at` takes. With hints on,
  upstream asks the rejectors' Pod/Update hints; for an extender-only rejection (no rejector
  upstream) that is `queueAfterBackoff`, which is what this model does for every parked pod.
* Queueing hints of the in-tree plugins the embedded loop runs (NodeUnschedulable, TaintToleration,
  NodeAffinity: Queue only when a node change makes the node pass the plugin that rejected the pod)
  live beside those filters, in `hami.sim.kubescheduler.HINTED_EVENTS`.

An extender's rejection: upstream records no plugin for it (`findNodesThatPassExtenders` writes
node statuses only), and the 1.30+ `len(rejectorPlugins) == 0` rule then backs the pod off instead of
parking it. HAMi's reports (Project-HAMi/HAMi#1368, #1875) are of pods parked until the 5-minute flush;
`extender_parks=True` (a divergence, off by default; only tests that model those reports set it)
reproduces that by counting the extender as a rejector that registered for no event, so only the
pod's own update or the flush brings it back.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

# Cluster events (framework.ClusterEvent): (resource, action).
NODE, POD, ASSIGNED_POD = "Node", "Pod", "AssignedPod"
ADD, DELETE = "Add", "Delete"
UPDATE_LABEL, UPDATE_TAINT, UPDATE_CONDITION = "UpdateNodeLabel", "UpdateNodeTaint", "UpdateNodeCondition"
UPDATE_ALLOCATABLE, UPDATE_ANNOTATION, UPDATE = "UpdateNodeAllocatable", "UpdateNodeAnnotation", "Update"

# DRA objects (the DynamicResources plugin's events)
RESOURCE_CLAIM, RESOURCE_SLICE, DEVICE_CLASS = "ResourceClaim", "ResourceSlice", "DeviceClass"

EXTENDER = "extender"  # the rejector an extender's rejection is recorded as (see module docstring)

# What each in-tree plugin the embedded loop runs registered for (EventsToRegister, 1.31).
# A hint, when given, answers whether that event can help a pod the plugin rejected.
Hint = Callable[[dict, "dict | None", "dict | None"], bool]
PLUGIN_EVENTS: dict[str, dict[tuple[str, str], Hint | None]] = {
    "NodeUnschedulable": {(NODE, ADD): None, (NODE, UPDATE_TAINT): None},
    "TaintToleration": {(NODE, ADD): None, (NODE, UPDATE_TAINT): None},
    "NodeAffinity": {(NODE, ADD): None, (NODE, UPDATE_LABEL): None},
    "NodeResourcesFit": {(ASSIGNED_POD, DELETE): None, (NODE, ADD): None, (NODE, UPDATE_ALLOCATABLE): None},
    # (ASSIGNED_POD, UPDATE) stands for UpdatePodLabel: the loop sends it only when labels changed.
    "InterPodAffinity": {(ASSIGNED_POD, ADD): None, (ASSIGNED_POD, UPDATE): None, (ASSIGNED_POD, DELETE): None,
                         (NODE, ADD): None, (NODE, UPDATE_LABEL): None},
    "PodTopologySpread": {(ASSIGNED_POD, ADD): None, (ASSIGNED_POD, UPDATE): None, (ASSIGNED_POD, DELETE): None,
                          (NODE, ADD): None, (NODE, UPDATE_LABEL): None, (NODE, UPDATE_TAINT): None},
    # A claim made, allocated or freed, devices published, a class changed, a pod gone (its claims freed).
    "DynamicResources": {(RESOURCE_CLAIM, ADD): None, (RESOURCE_CLAIM, UPDATE): None, (RESOURCE_CLAIM, DELETE): None,
                         (RESOURCE_SLICE, ADD): None, (RESOURCE_SLICE, UPDATE): None, (DEVICE_CLASS, ADD): None,
                         (DEVICE_CLASS, UPDATE): None, (ASSIGNED_POD, DELETE): None},
    EXTENDER: {},
}

ACTIVE, BACKOFF, UNSCHEDULABLE = "activeQ", "backoffQ", "unschedulablePods"


@dataclass(frozen=True)
class QueueTimings:
    """kube-scheduler's queue durations (seconds); tests inject smaller ones."""

    initial_backoff: float = 1.0           # podInitialBackoffSeconds
    max_backoff: float = 10.0              # podMaxBackoffSeconds
    max_in_unschedulable: float = 300.0    # podMaxInUnschedulablePodsDuration
    backoff_flush_interval: float = 1.0    # flushBackoffQCompleted period
    unschedulable_flush_interval: float = 30.0  # flushUnschedulablePodsLeftover period


@dataclass
class QueuedPod:
    key: str
    pod: dict
    priority: int
    timestamp: float                 # when it was last added or failed
    initial_attempt: float | None = None
    attempts: int = 0
    rejectors: frozenset[str] = frozenset()
    cycle: int = 0                   # the scheduling cycle it was popped in
    unschedulable_since: float = 0.0
    seq: int = 0
    inflight_events: list = field(default_factory=list)


def pod_priority(pod: Mapping) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


_IGNORED_META = ("resourceVersion", "generation", "managedFields")


def pod_updated(old: Mapping, new: Mapping) -> bool:
    """isPodUpdated: did anything but status, resourceVersion, generation, managedFields, finalizers change?"""
    def strip(p: Mapping) -> dict:
        meta = {k: v for k, v in (p.get("metadata") or {}).items() if k not in _IGNORED_META + ("finalizers",)}
        return {k: v for k, v in p.items() if k not in ("status", "metadata")} | {"metadata": meta}
    return strip(old) != strip(new)


class SchedulingQueue:
    def __init__(self, timings: QueueTimings = QueueTimings(), *, queueing_hints: bool = False,
                 extender_parks: bool = False,
                 plugin_events: Mapping[str, Mapping[tuple[str, str], Hint | None]] = PLUGIN_EVENTS):
        self.t = timings
        self.queueing_hints = queueing_hints
        self.extender_parks = extender_parks
        self.plugin_events = plugin_events
        self.pods: dict[str, QueuedPod] = {}     # every pod the queue knows (incl. in flight)
        self.where: dict[str, str] = {}          # key -> ACTIVE | BACKOFF | UNSCHEDULABLE (absent: in flight)
        # The parked keys (where UNSCHEDULABLE, in the order they were parked) and the keys in
        # flight: a cluster event visits these, never every queued pod (upstream's
        # unschedulablePods map and inFlightPods list), so a burst of thousands of pending pods does
        # not make each of its events cost thousands of steps.
        self._parked: dict[str, None] = {}
        self._in_flight: dict[str, None] = {}
        self._active: list[tuple[int, float, int, str]] = []
        self._seq = itertools.count()
        self.scheduling_cycle = 0
        self.move_request_cycle = -1
        self.moves: dict[str, int] = {}          # event label -> pods moved (for tests and logs)

    # ------------------------------------------------------------------ adding and removing

    def add(self, key: str, pod: dict, now: float) -> None:
        """A new pending pod (Add): straight to activeQ."""
        if key in self.pods:
            self.update(key, self.pods[key].pod, pod, now)
            return
        qp = QueuedPod(key, pod, pod_priority(pod), now, seq=next(self._seq))
        self.pods[key] = qp
        self._to_active(qp)

    def delete(self, key: str) -> None:
        self.pods.pop(key, None)
        self.where.pop(key, None)  # heap entries of removed pods are skipped lazily
        self._parked.pop(key, None)
        self._in_flight.pop(key, None)

    def update(self, key: str, old: dict, new: dict, now: float) -> str | None:
        """Update: returns the queue the pod moved to, when it moved."""
        qp = self.pods.get(key)
        if qp is None:
            self.add(key, new, now)
            return ACTIVE
        qp.pod, qp.priority = new, pod_priority(new)
        where = self.where.get(key)
        # UpdatePodGeneratedResourceClaim: the claim a DynamicResources-rejected pod waited for is recorded
        claims_before = (old.get("status") or {}).get("resourceClaimStatuses")
        generated = "DynamicResources" in qp.rejectors and \
            claims_before != (new.get("status") or {}).get("resourceClaimStatuses")
        if where != UNSCHEDULABLE or not (pod_updated(old, new) or generated):
            if where == ACTIVE:
                self._to_active(qp)  # re-heap with the new priority
            return None
        return self._requeue(qp, now, "UnscheduledPodUpdate")

    # ------------------------------------------------------------------ popping

    def pop(self, now: float) -> QueuedPod | None:
        """The next pod to schedule (None when activeQ is empty); it is then in flight."""
        while self._active:
            _, _, seq, key = heapq.heappop(self._active)
            qp = self.pods.get(key)
            if qp is None or self.where.get(key) != ACTIVE or qp.seq != seq:
                continue
            del self.where[key]
            self._in_flight[key] = None
            self.scheduling_cycle += 1
            qp.cycle = self.scheduling_cycle
            qp.attempts += 1
            qp.inflight_events = []
            if qp.initial_attempt is None:
                qp.initial_attempt = now
            return qp
        return None

    def done(self, key: str) -> None:
        """The pod was bound (or is gone): forget it."""
        self.delete(key)

    def add_unschedulable(self, qp: QueuedPod, rejectors: Iterable[str], now: float) -> str:
        """AddUnschedulableIfNotPresent after a failed cycle; returns where the pod went."""
        if qp.key not in self.pods or qp.key in self.where:
            return self.where.get(qp.key, "")
        qp.timestamp = now
        qp.rejectors = frozenset(r for r in rejectors if r != EXTENDER or self.extender_parks)
        if self.queueing_hints:
            requeue = not qp.rejectors or any(self._interested(qp, ev, old, new) for ev, old, new in qp.inflight_events)
        else:
            requeue = self.move_request_cycle >= qp.cycle or not qp.rejectors
        qp.inflight_events = []
        if requeue:
            self._to_backoff(qp)
            return BACKOFF
        qp.unschedulable_since = now
        self.where[qp.key] = UNSCHEDULABLE
        self._in_flight.pop(qp.key, None)
        self._parked[qp.key] = None
        return UNSCHEDULABLE

    def add_error(self, qp: QueuedPod, now: float) -> str:
        """A cycle that ended in an error (extender HTTP failure, bind error): no rejector, so backoffQ."""
        return self.add_unschedulable(qp, (), now)

    # ------------------------------------------------------------------ cluster events

    def move_all(self, event: tuple[str, str], now: float, old: dict | None = None, new: dict | None = None,
                 only: Callable[[QueuedPod], bool] | None = None) -> int:
        """MoveAllToActiveOrBackoffQueue for one event; returns how many parked pods moved."""
        if not self._of_interest(event):
            return 0
        moved = 0
        for key in list(self._parked):
            qp = self.pods[key]
            if only is not None and not only(qp):
                continue
            if self._interested(qp, event, old, new):
                self._requeue(qp, now, f"{event[0]}{event[1]}")
                moved += 1
        for key in self._in_flight:  # in-flight pods remember it for the hint check on failure
            self.pods[key].inflight_events.append((event, old, new))
        self.move_request_cycle = self.scheduling_cycle
        return moved

    def _of_interest(self, event: tuple[str, str]) -> bool:
        return any(event in evs for evs in self.plugin_events.values())

    def _interested(self, qp: QueuedPod, event: tuple[str, str], old, new) -> bool:
        for plugin in qp.rejectors:
            evs = self.plugin_events.get(plugin) or {}
            if event in evs:
                hint = evs[event]
                if not self.queueing_hints or hint is None or hint(qp.pod, old, new):
                    return True
        return False

    # ------------------------------------------------------------------ timers

    def backoff_duration(self, attempts: int) -> float:
        """calculateBackoffDuration: none before any attempt (1.33+), then doubling from the
        initial backoff, capped at the maximum (checked before doubling, so it never overflows)."""
        if attempts == 0:
            return 0
        d = self.t.initial_backoff
        for _ in range(1, attempts):
            if d > self.t.max_backoff - d:
                return self.t.max_backoff
            d += d
        return d

    def backoff_expiry(self, qp: QueuedPod) -> float:
        return qp.timestamp + self.backoff_duration(qp.attempts)

    def flush_backoff(self, now: float) -> int:
        """flushBackoffQCompleted."""
        moved = 0
        for key, where in list(self.where.items()):
            if where == BACKOFF and self.backoff_expiry(self.pods[key]) <= now:
                self._to_active(self.pods[key])
                moved += 1
        return moved

    def flush_unschedulable(self, now: float) -> int:
        """flushUnschedulablePodsLeftover: pods parked longer than podMaxInUnschedulablePodsDuration."""
        moved = 0
        for key, where in list(self.where.items()):
            qp = self.pods[key]
            if where == UNSCHEDULABLE and now - qp.unschedulable_since > self.t.max_in_unschedulable:
                self._requeue(qp, now, "UnschedulableTimeout")
                moved += 1
        return moved

    # ------------------------------------------------------------------ views

    def count(self, where: str) -> int:
        return sum(1 for w in self.where.values() if w == where)

    def location(self, key: str) -> str:
        """activeQ / backoffQ / unschedulablePods, "inFlight", or "" when unknown."""
        if key not in self.pods:
            return ""
        return self.where.get(key, "inFlight")

    # ------------------------------------------------------------------ moves

    def _requeue(self, qp: QueuedPod, now: float, label: str) -> str:
        self.moves[label] = self.moves.get(label, 0) + 1
        if self.backoff_expiry(qp) > now:
            self._to_backoff(qp)
            return BACKOFF
        self._to_active(qp)
        return ACTIVE

    def _to_backoff(self, qp: QueuedPod) -> None:
        self.where[qp.key] = BACKOFF
        self._parked.pop(qp.key, None)
        self._in_flight.pop(qp.key, None)

    def _to_active(self, qp: QueuedPod) -> None:
        qp.seq = next(self._seq)
        self.where[qp.key] = ACTIVE
        self._parked.pop(qp.key, None)
        self._in_flight.pop(qp.key, None)
        heapq.heappush(self._active, (-qp.priority, qp.timestamp, qp.seq, qp.key))
