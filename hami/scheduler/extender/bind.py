"""/bind (spec scheduler.md §3.3): node lock, then POST pods/<name>/binding: two writes.

The Binding carries, in its metadata.annotations, the placement /filter decided (held in memory,
`Assumed.annotations`: vgpu-node, vgpu-time, devices-to-allocate, devices-allocated, MIG) with
bind-phase=allocating and bind-time; kube-apiserver merges them into the pod in the same write
that sets spec.nodeName (BindingREST.setPodHostAndAnnotations), so HAMi's device plugin, which
only looks for the pod once it is bound, finds all of it at Allocate, and a replica dying between
/filter and /bind (or between lock and binding) leaves nothing on the pod. The label
`hami.io/vgpu-node` cannot travel in a Binding; only HAMi's vGPU monitor reads it, for pods
already running, so it is written off the critical path (labeler.py; our node agent sets it in
its Allocate patch, leaving the labeler nothing to do). A /bind without this replica's decision
(the other replica filtered) places the pod on the node from the cache (`place`). A node locked
by another pod's allocation is waited for (up to `lock_queue` seconds, watching the node) instead
of failing the bind into kube-scheduler's back-off; the wait costs no write.

No API reads: the pod and node come from the informers (or from what /filter decided).
Two replicas stay correct: after taking the node lock (a compare-and-swap), the binder waits
(bounded) until its pod cache holds every placement committed on the node before the lock
(lockhistory.py: the last holder's pod seen placed there, or the pod watch past the lock's
release), then re-checks the pod's devices with the fit /filter runs (`Placer.recheck`,
recheck.py): a pod placed on the same GPU by another replica's concurrent /filter is re-fitted on
the node's other devices (the Binding carries that placement instead: no extra write), or fails
here (the lock is released and kube-scheduler re-filters it), and no GPU is ever over-committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from hami.device import codec
from hami.device.allocation import allocated_devices, allocation_keys, own_node_locks, takes_node_lock
from hami.device.request import pod_requests_devices
from hami.device.vendorrequest import flat_requests, pod_vendor_requests
from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, WARNING, EventRecorder, clip_message
from hami.kube.lanes import urgent
from hami.kube.nodelock import NodeLocker, NodeLockError
from hami.obs.log import get_logger
from hami.scheduler.cache.lockhistory import LockHistory
from hami.scheduler.cache.state import VGPU_NODE, ClusterState
from hami.scheduler.placement import messages
from hami.scheduler.placement.recheck import taken_message
from hami.scheduler.placer import Placer

log = get_logger(__name__)

# Cambricon's LockNode: a lock younger than this refuses the bind (pkg/device/cambricon).
OWN_LOCK_EXPIRE_S = 120.0

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _annos(obj: dict | None) -> dict:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _lock_value(node: dict | None) -> str:
    return _annos(node).get(codec.NODE_LOCK_ANNOTATION, "")


def _lock_holder(node: dict | None) -> str:
    """"ns/name" of the pod holding the node lock ("" if none, legacy or unreadable)."""
    value = _lock_value(node)
    if not value:
        return ""
    try:
        held = codec.decode_node_lock(value)
    except codec.CodecError:
        return ""
    return "" if held.legacy else f"{held.namespace}/{held.name}"


def _uses_claims(pod: dict | None) -> bool:
    return bool(((pod or {}).get("spec") or {}).get("resourceClaims"))


def _in_pod_group(pod: dict | None) -> bool:
    if pod is None:
        return False
    if ((pod.get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL):
        return True
    return bool(((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"))


# How long a /bind waits for another pod's node lock before failing (pod groups: retry_timeout).
# Well inside kube-scheduler's extender HTTP timeout; one Allocate holds a lock ~0.2-1 s.
LOCK_QUEUE_SECONDS = 10.0
# A lock another replica's pod held, once released, is left that long to that replica's next
# bind there (its lock write and the watch event) before ours writes (bind.Binder._lock).
HANDOVER_GRACE_S = 0.05


class Binder:
    """`placer`: the decisions /filter holds, the re-check under the lock and a placement on a node
    /filter did not choose (hami.scheduler.placer); `history`: who held each node's lock last (the
    node watch), when the re-check may trust the pod cache; `on_bound(ns, name, node)`: called after
    a binding that carried a placement (the label writer)."""

    def __init__(self, client: KubeClient, state: ClusterState, locker: NodeLocker, events: EventRecorder,
                 placer: Placer, *, history: LockHistory | None = None,
                 on_bound: Callable[[str, str, str], None] | None = None,
                 retry_timeout: float = 28.0, catch_up: float = 1.0, clock: Callable[[], float] = time.time,
                 lock_queue: float = LOCK_QUEUE_SECONDS):
        self.client = client
        self.state = state
        self.locker = locker
        self.events = events
        self.placer = placer
        self.history = history
        self.on_bound = on_bound
        self.retry_timeout = retry_timeout
        self.catch_up = catch_up
        self.clock = clock
        self.lock_queue = lock_queue
        self.overcommit_refusals = 0
        self.refits = 0
        self.already_bound = 0  # retried binds of a pod bound meanwhile (answered without a write)
        self.lock_waits = 0  # times a bind found the node locked by another pod and began waiting
        self.handovers = 0  # times a woken bind left a released node to the other replica first
        # node -> FIFO of our binds waiting for its lock: only the head swaps, so a release wakes
        # one bind, not a herd of compare-and-swaps that all but one lose (409, a wasted write).
        self._node_queues: dict[str, asyncio.Lock] = {}
        # node -> "ns/name" of the last pod this binder locked it for (its placement is in our index).
        self._own_holder: dict[str, str] = {}

    def _fail(self, ref, msg: str) -> str:
        self.events.record(ref, WARNING, messages.BINDING_FAILED, msg)
        log.warning("Binding failed", pod=f"{ref[0]}/{ref[1]}", error=clip_message(msg))
        return msg

    async def bind(self, ns: str, name: str, uid: str, node: str) -> str:
        """Returns "" on success, else the error text for ExtenderBindingResult.Error. The decision
        this replica's /filter holds for the pod is written when it is for `node`; for another node
        (kube-scheduler chose among the fitting ones, --extender-prioritize) the pod is placed on
        `node` as a bind without a decision is."""
        key = uid or f"{ns}/{name}"
        assumed = self.placer.held.get(key)
        if assumed is not None and assumed.node != node:
            assumed = None
        err = await self._bind_pod(ns, name, uid, node, assumed)
        if not err:
            self.placer.forget(key)
        return err

    async def _bind_pod(self, ns: str, name: str, uid: str, node: str, assumed) -> str:
        pod = self.state.pod(ns, name)
        if pod is None and assumed is None and self.state.pods is not None:
            # Just created: give the watch a moment rather than reading the API.
            await self.state.pods.wait_for(lambda: self.state.pod(ns, name) is not None, self.catch_up)
            pod = self.state.pod(ns, name)
        ref = (ns, name, uid or ((pod or {}).get("metadata") or {}).get("uid", ""))
        if pod is None and assumed is None:
            return self._fail(ref, f'pods "{name}" not found')
        settled = self._already_bound(ns, name, ref[2], node)
        if settled is not None:
            return settled
        if self.state.node(node) is None:
            return self._fail(ref, f'nodes "{node}" not found')
        self.placer.bind_started(node)
        try:
            return await self._bind(ns, name, node, ref, pod, assumed)
        finally:
            self.placer.bind_ended(node)

    def _already_bound(self, ns: str, name: str, uid: str, node: str) -> str | None:
        """A bind for a pod the cache shows bound writes nothing. kube-scheduler retries a bind its
        extender timeout cut off, while the first one may have finished: to the same node that is a
        success (rewriting bind-phase on a running pod would undo the agent's `success`), to
        another node an error. None: not bound, go on."""
        pod = self.state.pod(ns, name)
        bound = ((pod or {}).get("spec") or {}).get("nodeName")
        if not bound or (uid and ((pod.get("metadata") or {}).get("uid") or uid) != uid):
            return None
        if bound == node:
            self.already_bound += 1
            if self.on_bound is not None:  # the attempt that bound it may have ended in an error
                self.on_bound(ns, name, node)
            log.v(2).info("Bind of a pod already bound to that node: nothing to do", pod=f"{ns}/{name}", node=node)
            return ""
        # The text kube-apiserver gives the binding it would refuse: the same whichever of us sees it.
        return self._fail((ns, name, uid), f'409 Conflict: Operation cannot be fulfilled on pods "{name}": '
                                           f'pod {name} is already assigned to node "{bound}"')

    def _placement(self, node: str, pod: dict | None, assumed) -> tuple[tuple, dict, str]:
        """(devices, annotations to write, why none fit) for this bind: this replica's /filter
        decision, else a placement already on the pod (HAMi's flow), else a fit on the node now."""
        if assumed is not None and assumed.node == node:
            return assumed.devices, dict(getattr(assumed, "annotations", None) or {}), ""
        annos = _annos(pod)
        if annos.get(VGPU_NODE) == node:
            try:
                return allocated_devices(annos, self.state.vendors), {}, ""  # every vendor's devices
            except codec.CodecError as exc:
                return (), {}, str(exc)
        if pod is not None:
            placed = self.placer.place_on(pod, node)
            if placed.__class__ is not str:
                return placed.devices, dict(placed.annotations or {}), ""
            return (), {}, placed
        return (), {}, ""

    def _stale_keys(self, ns: str, name: str, pod: dict | None, placement: dict) -> list[str]:
        """The allocation keys the pod carries from a placement on another node (written at /filter,
        HAMi's flow) that the placement this Binding writes does not set."""
        if not placement:
            return []
        annos = _annos(self.state.pod(ns, name) or pod)
        if not annos.get(VGPU_NODE) or annos.get(VGPU_NODE) == placement.get(VGPU_NODE):
            return []
        return sorted(k for k in allocation_keys(self.state.vendors) if k in annos and k not in placement)

    def _asks_for_devices(self, pod: dict | None) -> bool:
        if pod is None:
            return False
        if self.state.vendors is not None:
            return any(flat_requests(e) for e in pod_vendor_requests(pod, self.state.vendors, self.state.nvidia))
        return pod_requests_devices(pod, self.state.nvidia)

    async def _bind(self, ns: str, name: str, node: str, ref, pod: dict | None, assumed) -> str:
        devices, placement, reason = self._placement(node, pod, assumed)
        if not any(devices) and self._asks_for_devices(pod):
            # Binding it would start a GPU pod with no devices: Allocate fails and the pod is Failed
            # after its start. Nothing is written; kube-scheduler retries the pod elsewhere.
            return self._fail(ref, f"pod {ns}/{name} asks for devices but no placement fits node {node}"
                                   f"{': ' + reason if reason else ''}: nothing bound")
        # Each vendor's LockNode: only those whose plugin releases hami.io/mutex.lock take it.
        uses_devices = bool(devices) and any(devices) and takes_node_lock(devices, self.state.vendors)
        locked = False
        if uses_devices:
            queue = self._node_queues.setdefault(node, asyncio.Lock())
            async with queue:
                err = await self._lock(node, ns, name, pod)
            if not queue.locked() and self._node_queues.get(node) is queue \
                    and not self.placer.binds_in_flight.get(node, 0) > 1:
                self._node_queues.pop(node, None)
            if err:
                return self._fail(ref, err)
            locked = True
            log.v(5).info("Node locked", pod=f"{ns}/{name}", node=node)
            # While this bind queued for the lock, an earlier attempt at this same pod may have
            # finished (the lock it held is the one just released): check before any write.
            settled = self._already_bound(ns, name, ref[2], node)
            if settled is not None:
                # Our lock is a fresh one unless it was that attempt's own (re-entrant) lock still
                # waiting for Allocate: that one the agent releases, never us.
                if _annos(self.state.pod(ns, name)).get(codec.BIND_PHASE_ANNOTATION) != "allocating":
                    await self._release(node, ns, name)
                return settled
        own = own_node_locks(devices, self.state.vendors) if devices else ()
        # Every write made while a lock is held goes ahead of other binds' lock writes
        # (lanes.urgent): in a burst the lock is then held for this pod's own writes, not for
        # the time the whole burst's writes take to drain through the lane.
        with urgent() if (locked or own) else contextlib.nullcontext():
            return await self._bind_locked(ns, name, node, ref, pod, devices, placement, locked, own)

    async def _bind_locked(self, ns: str, name: str, node: str, ref, pod: dict | None, devices, placement: dict,
                           locked: bool, own) -> str:
        for i, key in enumerate(own):
            err = await self._own_lock(node, key)
            if err:
                for taken in own[:i]:
                    await self._own_release(node, taken)
                if locked:
                    await self._release(node, ns, name)
                return self._fail(ref, err)
        try:
            if locked:
                err, placed = await self._recheck(node, ns, name, devices, pod)
                if placed is not None:
                    # Taken by a concurrent placement (another replica): the fit found the pod
                    # other devices on this node, under the lock, with every committed pod counted.
                    self.refits += 1
                    placement = dict(placed.annotations or {})
                if err:
                    await self._release(node, ns, name)
                    return self._fail(ref, err)
            stale = self._stale_keys(ns, name, pod, placement)
            if stale:  # a placement elsewhere left keys the new one lacks: a Binding cannot remove them
                await self.client.patch_pod(ns, name, {"metadata": {"annotations": dict.fromkeys(stale)}})
            # HAMi marks every pod it binds as allocating until its device plugin's Allocate; a pod whose
            # GPUs are DRA claims (kube-scheduler allocated them) never gets one, so it is bound unmarked
            marks = {} if not placement and _uses_claims(pod) else {
                **placement, codec.BIND_PHASE_ANNOTATION: "allocating",
                codec.BIND_TIME_ANNOTATION: codec.encode_unix_seconds(self.clock())}
            log.v(5).info("Binding with the placement", pod=f"{ns}/{name}", node=node, checked=locked)
            await self.client.bind_pod(ns, name, ref[2], node, annotations=marks)
        except ApiError as exc:
            if locked:
                await self._release(node, ns, name)
            for key in own:
                await self._own_release(node, key)
            return self._fail(ref, str(exc))
        if placement and self.on_bound is not None:
            self.on_bound(ns, name, node)
        self.events.record(ref, NORMAL, messages.BINDING_SUCCEED, messages.binding_succeed_message(node, ns, name))
        log.v(2).info("Bound pod", pod=f"{ns}/{name}", node=node)
        return ""

    async def _lock(self, node: str, ns: str, name: str, pod: dict | None) -> str:
        """Take the node lock, queueing behind another pod's lock (watching the node, no write).

        Two replicas can each have a bind queued on one node; both wake at its release and both
        write, and the loser's 409 is a wasted critical write. So the replica whose pod held the
        lock goes first, the other leaves the node to it for `HANDOVER_GRACE_S` after each release
        (no write while anyone takes it), and a bind that lost such a race once always does."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.lock_queue, self.retry_timeout if _in_pod_group(pod) else 0.0)
        nodes = self.locker.nodes
        polite = False
        self.placer.lock_writing(node, f"{ns}/{name}")  # the watch may show our lock before its answer
        while True:
            try:
                await self.locker.lock(node, ns, name)
                return ""
            except NodeLockError as exc:
                polite = polite or exc.lost_race
                left = deadline - loop.time()
                if left <= 0 or "contention" not in str(exc):
                    self.placer.lock_writing(node, None)
                if left <= 0:
                    return str(exc)
                if "contention" not in str(exc):
                    return str(exc)  # not contention (the API refused the write, no node): fail at once
                # Wake when the node watch shows the lock released; our own lock write may be
                # newer than the watch, so never spin faster than every 20 ms.
                holder = _lock_holder(nodes.store.get(node))
                self.lock_waits += 1
                woke = loop.time()
                released = await nodes.wait_for(lambda: not _lock_value(nodes.store.get(node)), min(left, 1.0))
                if loop.time() - woke < 0.02:
                    await asyncio.sleep(0.02)
                if released and (polite or (holder and holder != self._own_holder.get(node))):
                    # Another replica's pod held it: its next bind here, woken by the same release,
                    # takes it first (its lock write and the watch event); if none does, we do.
                    self.handovers += 1
                    await nodes.wait_for(lambda: bool(_lock_value(nodes.store.get(node))),
                                         max(0.0, min(deadline - loop.time(), HANDOVER_GRACE_S)))

    async def _own_lock(self, node: str, key: str) -> str:
        """A vendor's own node lock (Cambricon `cambricon.com/dsmlu.lock`: RFC3339 of the lock
        time, no owner, 2 minutes), set with the cached resourceVersion as precondition."""
        obj = self.state.node(node) or {}
        meta = obj.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(key)
        now = self.clock()
        if value is not None:
            try:
                held = codec.parse_rfc3339(value, field=key)
            except codec.CodecError as exc:
                return str(exc)
            if now - held <= OWN_LOCK_EXPIRE_S:
                return f"node {node} has been locked within 2 minutes"
        try:
            await self.client.patch_node(node, {"metadata": {"annotations": {key: codec.format_rfc3339(now)},
                                                             "resourceVersion": meta.get("resourceVersion", "")}})
        except ApiError as exc:
            return f"setNodeLock exceeds retry count 5: {exc}"
        return ""

    async def _own_release(self, node: str, key: str) -> None:
        try:
            await self.client.patch_node(node, {"metadata": {"annotations": {key: None}}})
        except ApiError as exc:
            log.warning("Vendor node lock release failed", node=node, key=key, error=str(exc))

    async def _release(self, node: str, ns: str, name: str) -> None:
        try:
            await self.locker.release(node, ns, name)
        except NodeLockError as exc:
            log.warning("Node lock release failed", node=node, pod=f"{ns}/{name}", error=str(exc))

    async def _recheck(self, node: str, ns: str, name: str, devices,
                       pod: dict | None) -> tuple[str, object | None]:
        """Under the node lock: do the devices /filter chose still fit? The same fit /filter ran
        (`Placer.recheck`, hami/scheduler/placement/recheck.py), never a second rendering of it.
        ("", None): they do; ("", placement): they were taken but the pod fits the node on others
        (bind with that instead); (error, None): the pod no longer fits the node.
        """
        await self._caught_up(node, f"{ns}/{name}")
        pods = self.state.pods
        if self.state.pod(ns, name) is None and pod is None and pods is not None:
            await pods.wait_for(lambda: self.state.pod(ns, name) is not None, self.catch_up)
        pod = self.state.pod(ns, name) or pod
        if pod is None:
            return f'pods "{name}" not found', None
        kept, placed, reason = self.placer.recheck(pod, node, devices)
        if kept:
            return "", None
        self.overcommit_refusals += 1
        if placed is not None:
            return "", placed
        return taken_message(node, reason), None

    async def _caught_up(self, node: str, key: str) -> None:
        """Wait (bounded by `catch_up`) until the pod cache holds every placement committed on
        `node` before our lock: every earlier holder bound its pod before its lock was released,
        and the watch delivers in order, so the last holder's pod seen there (or placed by us:
        our index counts it) or the watch past the release is enough (lockhistory.py)."""
        pods = self.state.pods
        if pods is None:
            return
        basis = self.history.basis(node) if self.history is not None else None
        if basis is None:  # no history kept: the watch must reach our own lock write
            rv = self.locker.own_write_rv(node)
            holder = ""
        else:
            rv, holder = basis.rv, basis.holder
        own = self._own_holder.get(node)
        self._own_holder[node] = key
        self.placer.lock_taken(node, key)

        def ready() -> bool:
            if holder and (holder == own or holder == key or self._placed_on(holder, node)):
                return True
            return not rv or pods.rv_at_least(rv)

        if not ready():
            await pods.wait_for(ready, self.catch_up)

    def _placed_on(self, key: str, node: str) -> bool:
        ns, _, name = key.partition("/")
        pod = self.state.pod(ns, name)
        return pod is not None and ((pod.get("spec") or {}).get("nodeName") == node
                                    or bool((pod.get("metadata") or {}).get("deletionTimestamp")))
