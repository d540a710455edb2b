"""`--gpu-preemption`: the leader evicts lower-priority pods for a pending pod short only of GPU shares.

kube-scheduler's preemption never sees a GPU-share shortage (docs/kube-scheduler.md), so this
controller does what DefaultPreemption would, with HAMi's fit. The decision is pure
(hami.scheduler.preemption.plan); this module is its I/O:

1. /filter's no-fit hook (`note_failure`, chained beside the requeue waker) queues the pod when its
   failure was GPU shares only on some node. Only the leader acts.
2. `_consider`: the pod is still pending and unplaced; kube-scheduler's `PodEligibleToPreemptOthers`
   holds (not `preemptionPolicy: Never`; no lower-priority pod still terminating on the node it is
   already nominated to: that preemption is under way, perhaps by a leader that died); a plan.
3. The room is held first: a record under the preemptor's UID on the chosen node in the usage index
   (the devices it will get there), so no /filter of another pod takes the shares while the victims
   terminate; /filter drops a pod's own record before fitting it, so the preemptor itself is never
   blocked, and a failed /filter of the preemptor puts the hold back (`note_failure`).
   `status.nominatedNodeName` is set, then each victim is evicted through policy/v1 Eviction (the
   API server enforces PodDisruptionBudgets: a 429 is counted as a failed eviction and the hold is
   given up), never deleted.
4. Events: `Preempted` (Normal) on each victim naming the preemptor; `GPUPreemption` (Normal) on the
   preemptor naming its victims. Counters: preemptions, victims, failed evictions.
5. When every victim is gone the preemptor is woken as the requeue waker wakes pods
   (`hami.io/requeue-at`). The hold ends when the preemptor is placed (its own placement replaces
   the record), deleted, leadership is lost, the controller stops, or `hold_timeout` passes.

Several replicas (hami.scheduler.preemption.share): the leader publishes each hold on its Node and
takes it back when the hold ends (a stopping or demoted leader takes back all of its holds); every
replica counts the published holds in its own usage index (`HoldMirror`), so a /filter served by any
replica leaves the room to the preemptor. The leader also learns of failures it did not serve from
kube-scheduler's PodScheduled condition (`failed_on_shares`), refitting the pod itself
(`share_failures`). Its successor neither re-evicts (victims already terminating are never
candidates, and a nominated preemptor waits for them) nor holds anything it did not decide; a
leader killed before taking its holds back leaves them counted for at most the hold timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from hami.device import codec
from hami.device.codec.keys import REQUEUE_AT_ANNOTATION
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.events import NORMAL, WARNING, EventRecorder
from hami.kube.informer import Informer
from hami.kubesched import nodeaffinity, taints
from hami.obs.log import get_logger
from hami.scheduler.cache.state import VGPU_NODE, ClusterState
from hami.scheduler.placement.fit import PodRequest
from hami.scheduler.placer import Placer
from hami.scheduler.preemption import plan as gpupreempt
from hami.scheduler.preemption.share import (
    HOLDS_ANNOTATION,
    HoldMirror,
    decode_holds,
    encode_hold,
    failed_on_shares,
)

log = get_logger(__name__)

PREEMPTED = "Preempted"
GPU_PREEMPTION = "GPUPreemption"
GPU_PREEMPTION_FAILED = "GPUPreemptionFailed"
TICK_S = 0.2
# A pending pod is refit or decided again only after the cluster changed in a way that could help it
# (`cluster_changed`), and no sooner than its backoff: 1 s doubling to kube-scheduler's default
# podMaxBackoffSeconds. At most DECISIONS_PER_TICK pods a tick, highest priority first, the loop
# given back between two: /filter, /bind and the webhook share this loop.
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 10.0
DECISIONS_PER_TICK = 8
NODES_PER_STEP = 32  # a refit or a plan looks at this many nodes, then gives the loop back
HEARD_S = 3.0  # a pod whose failure this replica's /filter saw this recently is queued by note_failure


@dataclass
class Failure:
    pod: dict
    request: PodRequest
    failed: dict[str, str]


@dataclass
class Watch:
    """A pending pod the leader decides for, and when it may be looked at again."""
    namespace: str
    name: str
    seen: int = -1          # the cluster generation of its last decision (-1: none yet)
    next_at: float = 0.0    # not again before (its backoff)
    backoff: float = 0.0
    refit: bool = False     # its failure was another replica's: refit it here before deciding


@dataclass
class Hold:
    node: str
    namespace: str
    name: str
    devices: tuple
    mig: tuple
    num_init: int
    victims: dict[str, str]            # uid -> namespace/name
    expires: float
    woken: bool = False
    at: float = field(default=0.0)
    until: float = 0.0                 # `expires` in wall-clock seconds, as published (3 decimals)


def _key(pod: dict) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name", "")
    return ns, name, meta.get("uid") or f"{ns}/{name}"


class PreemptController:
    """`placer`: the decisions this replica's /filter holds (`held`) and the fit without a decision
    (`share_failures`). /filter's no-fit notices reach `note_failure` (role.py connects it to the
    Placer's Relay); the room held here stays counted through a cache resync or rebuild
    (`state.held_placements`, added in the constructor)."""

    def __init__(self, client: KubeClient | None, state: ClusterState, events: EventRecorder, placer: Placer, *,
                 pdbs: Informer | None = None, classes: Informer | None = None, hold_timeout: float = 120.0,
                 is_leader: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 scheduler_names: frozenset[str] = frozenset()):
        self.client = client
        self.state = state
        self.events = events
        self.pdbs = pdbs
        self.classes = classes
        self.hold_timeout = hold_timeout
        self.is_leader = is_leader
        self.held_decisions = placer.held  # this replica's /filter decisions (uid -> Assumed), read only
        self.clock = clock
        self.pending: dict[str, Failure] = {}
        self.holds: dict[str, Hold] = {}
        self.preemptions = 0
        self.victims = 0
        self.failed_evictions = 0
        self.refusals: dict[str, str] = {}  # uid -> why no preemption (last decision), for logs and tests
        self._wake = asyncio.Event()
        self.wall = wall
        self.share_failures = placer.share_failures  # the fit without a decision (other replicas' failures)
        self.scheduler_names = scheduler_names  # the schedulerNames this scheduler serves (empty: any)
        # a pod this replica's /filter placed (assumed) is no longer held here, whatever the Node says
        self.mirror = HoldMirror(state, lambda: self.holds.keys() | self.held_decisions.keys(), wall,
                                 retired=lambda: self._retired)
        self.watched: dict[str, Watch] = {}  # uid -> pending, refused on shares somewhere, and its backoff
        self._unpublish: set[str] = set()               # nodes whose published holds must be rewritten
        self._retired: dict[str, float] = {}            # uid -> `until` of a hold this leader ended (not to rewrite)
        self._heard: dict[str, float] = {}              # uid -> when this replica's /filter last refused it
        state.held_placements.add(lambda: self.holds.keys() | self.mirror.mirrored.keys())
        # bumped by every change that could help a pending pod: room freed, a node (re)registered or
        # its labels, taints or schedulability changed, a pod placed (a new possible victim), a
        # PodDisruptionBudget or PriorityClass changed, a hold ended
        self.generation = 0
        self.refits = 0      # another replica's failures refit here (a fit over every node)
        self.decisions = 0   # plans computed
        self.ticks = 0
        self.yields = 0      # the loop given back between two pods
        # CPU seconds the loop was held between two yields of a decision (thread time: a process
        # descheduled by a busy machine is not the controller holding the loop): the longest, the last
        self.longest_step = 0.0
        self.steps: deque[float] = deque(maxlen=4096)
        self._resumed = 0.0

    # ------------------------------------------------------------------ hot path (sync)

    def note_failure(self, pod: dict, request: PodRequest, node_names, failed: dict) -> None:
        """/filter found no node for `pod`: keep its hold, or queue it for a decision."""
        ns, name, uid = _key(pod)
        hold = self.holds.get(uid)
        if hold is not None:
            self._apply(uid, hold)  # /filter dropped the pod's own record (the hold) before fitting it
            return
        if self.mirror.apply(uid):  # another replica's leader holds the room for it: keep counting it
            return
        self._heard[uid] = self.clock()  # its failure came here: no refit from its condition needed
        if not self.is_leader() or not any(gpupreempt.share_only(r) for r in (failed or {}).values()):
            return
        watch = self.watched.get(uid)
        if watch is not None and watch.seen == self.generation:
            return  # decided already, and nothing changed since that could help it
        if watch is None:
            self.watched[uid] = Watch(ns, name)
        self.pending[uid] = Failure(pod, request, dict(failed))
        self._wake.set()

    def cluster_changed(self, *_args) -> None:
        """Something changed that could help a pending pod (module docstring): look at them again.
        role.py connects the usage index's capacity events (room freed, a node's devices or cordon)."""
        self.generation += 1

    def watch_cluster(self) -> None:
        """The other changes that could help a pending pod: Nodes whose labels, taints or
        schedulability changed, PodDisruptionBudgets and PriorityClasses. A node's heartbeat
        annotations are not among them: with nothing changing, no pending pod is looked at again."""
        def on_node(etype: str, old: dict | None, new: dict | None) -> None:
            if old is None or new is None or _schedulable_view(old) != _schedulable_view(new):
                self.cluster_changed()
        if self.state.nodes is not None:
            self.state.nodes.add_handler(on_node)
        for informer in (self.pdbs, self.classes):
            if informer is not None:
                informer.add_handler(self.cluster_changed)

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        """Pod informer handler: a victim gone may free a held room; look at once. A pending pod whose
        PodScheduled condition names a GPU-share reason is watched (the leader refits it)."""
        if new is not None:
            meta, spec = new.get("metadata") or {}, new.get("spec") or {}
            uid = meta.get("uid")
            if spec.get("nodeName") and not ((old or {}).get("spec") or {}).get("nodeName"):
                self.cluster_changed()  # a pod placed: a victim a pending preemptor may now take
            if uid and not spec.get("nodeName") and not meta.get("deletionTimestamp") and failed_on_shares(new) \
                    and (not self.scheduler_names or spec.get("schedulerName") in self.scheduler_names):
                watch = self.watched.get(uid)
                if watch is None:  # a new refusal: look at it on the next tick
                    self.watched[uid] = Watch(meta.get("namespace") or "default", meta.get("name", ""), refit=True)
                    self._wake.set()
                else:  # its condition is rewritten at each of kube-scheduler's retries: not a change by itself
                    watch.refit = True
            elif spec.get("nodeName") or meta.get("deletionTimestamp") or (
                    self.scheduler_names and spec.get("schedulerName") not in self.scheduler_names):
                self.watched.pop(uid, None)
                self._heard.pop(uid, None)
            elif (watch := self.watched.get(uid)) is not None:
                watch.refit = False  # no share failure recorded (yet): only this replica's /filter queues it
            return
        if new is None:
            uid = ((old or {}).get("metadata") or {}).get("uid")
            self.refusals.pop(uid, None)
            self.watched.pop(uid, None)
            self._heard.pop(uid, None)
            if uid and any(uid in h.victims for h in self.holds.values()):
                self._wake.set()

    def held(self) -> set[str]:
        return set(self.holds) | set(self.mirror.mirrored)

    def _apply(self, uid: str, hold: Hold) -> None:
        self.state.index.add_pod(uid, hold.node, hold.devices, namespace=hold.namespace, num_init=hold.num_init,
                                 mig=hold.mig)

    # ------------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                self._wake.clear()
                if not self.is_leader():
                    self.pending.clear()
                    self.release_all("leadership lost")
                else:
                    await self._decide_due()
                await self._tend_holds()
                await self._publish_ended()
                self.mirror.sync()
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK_S)
                except TimeoutError:
                    pass
        finally:
            self.release_all("controller stopped")
            try:  # take the published holds back while the client still works
                await asyncio.wait_for(self._publish_ended(), 5)
            except Exception as exc:  # noqa: BLE001 - they expire on their own
                log.v(2).info("Could not take back the published GPU preemption holds", error=str(exc))

    def release_all(self, why: str) -> None:
        for uid in list(self.holds):
            self._end(uid, why)

    def _end(self, uid: str, why: str) -> None:
        hold = self.holds.pop(uid, None)
        if hold is None:
            return
        self.cluster_changed()  # its victims are no longer taken: another preemptor may choose them
        self._retired[uid] = hold.until
        self._unpublish.add(hold.node)
        rec = self.state.index.pod(uid)
        placed = uid in self.held_decisions or self._placed(hold.namespace, hold.name)
        if rec is not None and not placed:
            self.state.index.remove_pod(uid)
            self.state.placement_dropped(hold.node, hold.namespace)  # the shares are free for others now
        log.v(2).info("GPU preemption hold ended", pod=f"{hold.namespace}/{hold.name}", node=hold.node, reason=why)

    def _placed(self, ns: str, name: str) -> bool:
        pod = self.state.pod(ns, name) or {}
        return bool((pod.get("spec") or {}).get("nodeName")
                    or ((pod.get("metadata") or {}).get("annotations") or {}).get(VGPU_NODE))

    async def _tend_holds(self) -> None:
        now = self.clock()
        for uid, hold in list(self.holds.items()):
            pod = self.state.pod(hold.namespace, hold.name)
            if pod is None or ((pod.get("metadata") or {}).get("uid") not in (None, uid)):
                self._end(uid, "preemptor deleted")
            elif uid in self.held_decisions or self._placed(hold.namespace, hold.name):
                self._end(uid, "preemptor placed")
            elif now >= hold.expires:
                self._end(uid, "timeout")
            elif not hold.woken and all(self.state.pod_by_uid(v) is None for v in hold.victims):
                hold.woken = True
                await self._wake_preemptor(hold)

    # ------------------------------------------------------------------ holds shared with the other replicas

    async def _decide_due(self) -> None:
        """Decide for at most DECISIONS_PER_TICK due pods, highest priority first, giving the loop
        back between two and every NODES_PER_STEP nodes. Due: this replica's /filter just refused it
        (`pending`), or another replica's did (`watched`, refit here); either way only when the
        cluster changed since its last decision and, for a refit, its backoff has passed."""
        self.ticks += 1
        self._resumed = time.thread_time()
        now, gen = self.clock(), self.generation
        classes = self.class_map()
        due: list[tuple[int, float, str]] = []
        for uid, watch in list(self.watched.items()):
            if uid in self.pending:
                due.append((-gpupreempt.priority_of(self.pending[uid].pod, classes), 0.0, uid))
            elif watch.refit and watch.seen != gen and now >= watch.next_at and self.share_failures is not None \
                    and now - self._heard.get(uid, -1e9) >= HEARD_S:  # else its /filter is here: note_failure
                pod = self.state.pod(watch.namespace, watch.name)
                if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
                    self.watched.pop(uid, None)
                    continue
                if uid in self.holds or self.state.index.pod(uid) is not None:
                    continue  # held (here or by a predecessor still counted), or placed
                due.append((-gpupreempt.priority_of(pod, classes), watch.next_at, uid))
        for uid in [u for u in self.pending if u not in self.watched]:  # its watch ended: no decision
            self.pending.pop(uid, None)
        due.sort()
        for i, (_, _, uid) in enumerate(due[:DECISIONS_PER_TICK]):
            if i:
                await self._yield()  # /filter, /bind and the webhook run between two pods
                if not self.is_leader():
                    return
            watch = self.watched.get(uid)
            if watch is None:
                self.pending.pop(uid, None)
                continue
            watch.seen = self.generation
            failure = self.pending.pop(uid, None)
            try:
                if failure is None:
                    failure = await self._refit(uid, watch)
                if failure is not None:
                    await self._consider(uid, failure)
            except Exception as exc:  # one pod's trouble never stops the controller
                self._end(uid, "error")
                log.warning("GPU preemption failed", pod=f"{watch.namespace}/{watch.name}", error=str(exc))
            if uid not in self.holds:
                watch.backoff = min(max(2 * watch.backoff, BACKOFF_MIN_S), BACKOFF_MAX_S)
                watch.next_at = self.clock() + watch.backoff
        self._held_for()

    async def _yield(self) -> None:
        """Give the loop back (and note how long it was held since it was last given back)."""
        self._held_for()
        self.yields += 1
        await asyncio.sleep(0)
        self._resumed = time.thread_time()

    def _held_for(self) -> None:
        held = time.thread_time() - self._resumed
        self.steps.append(held)
        self.longest_step = max(self.longest_step, held)

    async def _refit(self, uid: str, watch: Watch) -> Failure | None:
        """A pod another replica's /filter refused on shares, fitted here on the nodes it may use,
        NODES_PER_STEP at a time: its failure when every one of them failed on shares only."""
        pod = self.state.pod(watch.namespace, watch.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            self.watched.pop(uid, None)
            return None
        self.refits += 1
        spec = pod.get("spec") or {}
        terms = nodeaffinity.required_terms(pod)
        nodes = self.state.nodes
        preq, failed = None, {}
        all_names = list(self.state.index.nodes)
        for at in range(0, len(all_names), NODES_PER_STEP):
            if at:
                await self._yield()
            names = [n for n in all_names[at:at + NODES_PER_STEP]
                     if (o := nodes.store.get(n) if nodes is not None else None) is None
                     or (nodeaffinity.node_matches(spec.get("nodeSelector"), terms,
                                                   (o.get("metadata") or {}).get("labels") or {}, n)
                         and taints.tolerates_node(pod, o))]
            got = self.share_failures(pod, names) if names and self.share_failures is not None else None
            if got is None:
                if names:
                    return None  # its request cannot be read: nothing to decide
                continue
            preq, chunk_failed = got
            if len(chunk_failed) < len(names):
                return None  # it fits somewhere: kube-scheduler places it, no preemption
            failed.update(chunk_failed)
        if preq is not None and any(gpupreempt.share_only(r) for r in failed.values()):
            return Failure(pod, preq, failed)
        return None

    def _node_holds(self, node: str) -> dict:
        """What this leader publishes on `node`: its own holds, and others' (a predecessor's) still running."""
        obj = self.state.nodes.store.get(node) if self.state.nodes is not None else None
        text = ((((obj or {}).get("metadata") or {}).get("annotations")) or {}).get(HOLDS_ANNOTATION)
        now = self.wall()
        for u, t in list(self._retired.items()):
            if t <= now:
                del self._retired[u]
        out = {u: encode_hold(h.namespace, h.name, h.devices, h.until, h.victims)
               for u, h in decode_holds(node, text).items()
               if u not in self.holds and self._retired.get(u) != h.until and h.until > now}
        for u, h in self.holds.items():
            if h.node == node:
                out[u] = encode_hold(h.namespace, h.name, h.devices, h.until, h.victims)
        return out

    async def _publish(self, node: str) -> bool:
        if self.client is None:
            return True
        holds = self._node_holds(node)
        value = orjson.dumps(holds).decode() if holds else None
        try:
            await self.client.patch_node(node, {"metadata": {"annotations": {HOLDS_ANNOTATION: value}}})
            return True
        except ApiError as exc:
            log.warning("Could not publish the GPU preemption hold", node=node, error=str(exc))
            return False

    async def _publish_ended(self) -> None:
        while self._unpublish:
            await self._publish(self._unpublish.pop())

    async def _wake_preemptor(self, hold: Hold) -> None:
        if self.client is None:
            return
        patch = {"metadata": {"annotations": {REQUEUE_AT_ANNOTATION: codec.format_micro_time(time.time())}}}
        try:
            await self.client.patch_pod(hold.namespace, hold.name, patch)
            log.v(2).info("GPU preemption room free; preemptor woken", pod=f"{hold.namespace}/{hold.name}",
                          node=hold.node, seconds=round(self.clock() - hold.at, 3))
        except ApiError as exc:
            log.v(2).info("Could not wake the preemptor", pod=f"{hold.namespace}/{hold.name}", error=str(exc))

    # ------------------------------------------------------------------ one decision

    def facts(self, names, own: str = "") -> dict[str, gpupreempt.NodeFacts]:
        """The nodes as the cache shows them; `own`: the preemptor, whose own record is not in its way."""
        index, out = self.state.index, {}
        for n in names:
            usage, reg = index.node(n), self.state.registered.get(n)
            if usage is None or reg is None:
                continue
            on_node = {u: r for u in index.pods_on(n) if u != own and (r := index.pod(u)) is not None}
            pods = {}
            for u in on_node:
                p = self.state.pod_by_uid(u)
                if p is not None and (p.get("spec") or {}).get("nodeName") == n:
                    pods[u] = p
            out[n] = gpupreempt.NodeFacts(n, reg.devices, usage.cordoned, on_node, pods)
        return out

    def class_map(self) -> dict[str, dict]:
        return dict(self.classes.store) if self.classes is not None else {}

    def taken(self) -> frozenset[str]:
        return frozenset(v for h in self.holds.values() for v in h.victims)

    async def _consider(self, uid: str, failure: Failure) -> None:
        ns, name, _ = _key(failure.pod)
        if not self._undecided(uid, ns, name):
            return
        self.decisions += 1
        classes = self.class_map()
        priority = gpupreempt.priority_of(failure.pod, classes)
        nominated = (failure.pod.get("status") or {}).get("nominatedNodeName")
        if nominated and self._terminating_below(nominated, priority, classes):
            self.refusals[uid] = "a preemption for it is under way on its nominated node"
            return
        got = await self._plan(uid, failure, classes)
        if isinstance(got, gpupreempt.Plan):  # the loop ran meanwhile: that node's plan again, at once
            if not self._undecided(uid, ns, name):
                return
            got = self._plan_on(uid, failure, classes, {got.node: failure.failed[got.node]}, *self._pdb_view())
            if isinstance(got, gpupreempt.Refusal):
                got = gpupreempt.Refusal(f"the chosen node changed while deciding ({got.reason})")
        if isinstance(got, gpupreempt.Refusal):
            self.refusals[uid] = got.reason
            log.v(3).info("No GPU preemption", pod=f"{ns}/{name}", reason=got.reason)
            return
        self.refusals.pop(uid, None)
        await self._preempt(uid, ns, name, failure, got, self.facts([got.node], own=uid)[got.node])

    def _undecided(self, uid: str, ns: str, name: str) -> bool:
        """The pod is still there, pending, unplaced and not held."""
        cached = self.state.pod(ns, name)
        if cached is None or (cached.get("metadata") or {}).get("uid") not in (None, uid) or uid in self.holds:
            return False
        return not (self._placed(ns, name) or uid in self.held_decisions
                    or (cached.get("metadata") or {}).get("deletionTimestamp"))

    async def _plan(self, uid: str, failure: Failure, classes) -> gpupreempt.Plan | gpupreempt.Refusal:
        """hami.scheduler.preemption.plan over the failed nodes, NODES_PER_STEP at a time: the best
        of each step's best is the best of all (`plan.choose` ranks each node on its own)."""
        if gpupreempt.policy_of(failure.pod, classes) == gpupreempt.NEVER:
            return gpupreempt.Refusal(gpupreempt.POLICY_NEVER)
        names = sorted(n for n, reason in failure.failed.items() if gpupreempt.share_only(reason))
        plans, refusals = [], []
        pdbs, all_pods = self._pdb_view()
        for at in range(0, len(names), NODES_PER_STEP):
            if at:
                await self._yield()
            step = {n: failure.failed[n] for n in names[at:at + NODES_PER_STEP]}
            got = self._plan_on(uid, failure, classes, step, pdbs, all_pods)
            (plans if isinstance(got, gpupreempt.Plan) else refusals).append(got)
        start_of = {u: str(((self.state.pod_by_uid(u) or {}).get("status") or {}).get("startTime") or "")
                    for p in plans for u in p.victims}
        best = gpupreempt.choose(plans, start_of)
        if best is not None:
            return best
        reasons = {r.reason for r in refusals}
        for reason in (gpupreempt.NO_SET_HELPS, gpupreempt.NO_LOWER):
            if reason in reasons:
                return gpupreempt.Refusal(reason)
        return gpupreempt.Refusal(gpupreempt.NO_SHARE_FAILURE)

    def _pdb_view(self) -> tuple[list, list]:
        """The PodDisruptionBudgets and every pod (whose labels the budgets count), as cached now."""
        return (list(self.pdbs.store.values()) if self.pdbs is not None else [],
                list(self.state.pods.store.values()) if self.state.pods is not None else [])

    def _plan_on(self, uid: str, failure: Failure, classes, failed: dict[str, str], pdbs: list, all_pods: list
                 ) -> gpupreempt.Plan | gpupreempt.Refusal:
        nodes = self.facts(failed, own=uid)
        return gpupreempt.plan(self.state.nvidia, failure.pod, failure.request, failed, nodes, pdbs,
                               all_pods, self.taken(), classes)

    def _terminating_below(self, node: str, priority: int, classes) -> bool:
        index = self.state.index
        for u in index.pods_on(node):
            p = self.state.pod_by_uid(u)
            if p is not None and (p.get("metadata") or {}).get("deletionTimestamp") and \
                    gpupreempt.priority_of(p, classes) < priority:
                return True
        return False

    async def _preempt(self, uid: str, ns: str, name: str, failure: Failure, plan: gpupreempt.Plan,
                       facts: gpupreempt.NodeFacts) -> None:
        now = self.clock()
        victims = {u: f"{facts.pods[u]['metadata'].get('namespace')}/{facts.pods[u]['metadata'].get('name')}"
                   for u in plan.victims}
        hold = Hold(plan.node, ns, name, plan.devices, plan.mig, failure.request.num_init, victims,
                    now + self.hold_timeout, at=now, until=round(self.wall() + self.hold_timeout, 3))
        self.holds[uid] = hold
        self._apply(uid, hold)
        if not victims:  # the room freed meanwhile: nothing to evict, wake it
            hold.woken = True
            await self._wake_preemptor(hold)
            return
        if self.client is not None:
            try:
                await self.client.request(
                    "patch", "pods/status", "PATCH", resource_path("pods", ns, name, "status"),
                    body={"status": {"nominatedNodeName": plan.node}}, content_type="application/merge-patch+json")
            except ApiError as exc:  # nothing evicted yet: give the room back, the next failure decides again
                self._end(uid, "nomination failed")
                log.warning("Could not nominate the preemptor", pod=f"{ns}/{name}", error=str(exc))
                return
        if not await self._publish(plan.node):  # the other replicas must see the hold before the room frees
            self._end(uid, "hold not published")
            return
        self.preemptions += 1
        evicted = []
        for vuid, vkey in victims.items():
            vns, _, vname = vkey.partition("/")
            try:
                if self.client is not None:
                    await self.client.evict_pod(vns, vname, vuid)
            except ApiError as exc:
                if exc.code == 404:
                    continue  # already gone: its shares are free
                self.failed_evictions += 1
                log.warning("Eviction refused", victim=vkey, preemptor=f"{ns}/{name}", code=exc.code,
                            error=exc.message)
                self.events.record(failure.pod, WARNING, GPU_PREEMPTION_FAILED,
                                   f"Could not evict {vkey} on node {plan.node}: {exc.message}")
                self._end(uid, "eviction refused")
                break
            evicted.append(vkey)
            self.victims += 1
            self.events.record((vns, vname, vuid), NORMAL, PREEMPTED,
                               f"Preempted by pod {ns}/{name} ({uid}) on node {plan.node} for its GPU shares")
        if evicted:
            self.events.record(failure.pod, NORMAL, GPU_PREEMPTION,
                               f"Preempting {len(evicted)} lower-priority pod(s) on node {plan.node} for GPU "
                               f"shares: {', '.join(evicted)}")
        log.info("GPU preemption", pod=f"{ns}/{name}", node=plan.node, victims=evicted,
                 pdb_violations=plan.pdb_violations)


def gpu_preemption_counters(c) -> dict[str, float]:
    """The GPU preemption controller's counters (zeros when it is off)."""
    return {"hami_scheduler_gpu_preemptions": float(c.preemptions if c else 0),
            "hami_scheduler_gpu_preemption_victims": float(c.victims if c else 0),
            "hami_scheduler_gpu_preemption_failed_evictions": float(c.failed_evictions if c else 0)}


def _schedulable_view(node: dict) -> tuple:
    """What of a Node decides whether a pod may go there (beside its devices, which the index watches)."""
    spec = node.get("spec") or {}
    return ((node.get("metadata") or {}).get("labels"), spec.get("taints"), spec.get("unschedulable"))
