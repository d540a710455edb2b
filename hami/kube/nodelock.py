"""The node lock `hami.io/mutex.lock`, taken by compare-and-swap, read from the informer cache.

HAMi (`pkg/util/nodelock/nodelock.go`) GETs the node and the holder pod on every attempt. Here the
node and pod come from the scheduler's informers, and every write is a merge patch carrying
`metadata.resourceVersion`, so the API server refuses it (409) if the node changed since we read
it. On 409 we wait (bounded) for the node informer to deliver the newer node and decide again:
no GET ever.

Value format (HAMi's, via hami.device.codec): `<RFC3339>,<namespace>,<pod>`; legacy bare
timestamps are understood. Fixed HAMi bugs:
* the owner is compared exactly (namespace and name parsed), never by suffix/substring;
* a lock whose owner pod is gone, terminal (Succeeded/Failed) or already past allocation
  (bind-phase success/failed) is taken over at once instead of waiting for the expiry;
* a lock whose owner was never bound (no bind-phase, or `allocating` without `spec.nodeName`) and
  is older than `orphan_timeout` (the longest possible /bind: kube-scheduler's 30 s extender
  timeout plus margin) belongs to a binder that died between lock and binding: taken over then,
  not after the 5-minute expiry;
* before taking over an expired lock whose owner is still `bind-phase=allocating`, the owner is
  marked `bind-phase=failed`, so a late Allocate on the node can never read the wrong pod.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from hami.device import codec
from hami.device.model import NodeLock
from hami.kube.client import ApiError, KubeClient
from hami.kube.informer import Informer
from hami.obs.log import get_logger

log = get_logger(__name__)

LOCK_KEY = codec.NODE_LOCK_ANNOTATION
BIND_PHASE = codec.BIND_PHASE_ANNOTATION


class NodeLockError(Exception):
    """The lock could not be taken or released (contention, unknown node, API failure).
    `lost_race`: this call's compare-and-swap got a 409 before the contention was seen."""

    lost_race = False


class _Write:
    """A decision of `NodeLocker._swap_lock`: write the lock annotation as `value` (None removes it)."""

    __slots__ = ("value",)

    def __init__(self, value: str | None):
        self.value = value


PodLookup = Callable[[str, str], "dict | None"]


def _rv(obj: dict | None) -> str:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion", "")


def _newer(a: dict | None, b: dict | None) -> dict | None:
    """The more recent of two copies of one object (numeric RVs; else prefer `a`)."""
    if a is None:
        return b
    if b is None:
        return a
    try:
        return b if int(_rv(b)) > int(_rv(a)) else a
    except ValueError:
        return a


class NodeLocker:
    def __init__(self, client: KubeClient, nodes: Informer, pod_lookup: PodLookup, *,
                 timeout: float = 300.0, clock: Callable[[], float] = time.time,
                 conflict_wait: float = 2.0, attempts: int = 6, orphan_timeout: float = 45.0):
        self.client = client
        self.nodes = nodes
        self.pod_lookup = pod_lookup
        self.timeout = timeout
        self.orphan_timeout = orphan_timeout
        self.clock = clock
        self.conflict_wait = conflict_wait
        self.attempts = attempts
        # Node copies returned by our own patches: newer than the informer until it catches up.
        self._fresh: dict[str, dict] = {}
        self.conflicts = 0
        self.takeovers = 0

    def own_write_rv(self, name: str) -> str:
        """The resourceVersion of node `name` as our last lock write returned it ("" when the
        informer has caught up with it, or we wrote none): how far the node watch must get."""
        return ((self._fresh.get(name) or {}).get("metadata") or {}).get("resourceVersion", "")

    # ------------------------------------------------------------------ helpers

    def _node(self, name: str) -> dict | None:
        node = _newer(self.nodes.store.get(name), self._fresh.get(name))
        if node is not None and self._fresh.get(name) is not None and node is not self._fresh[name]:
            self._fresh.pop(name, None)  # informer caught up
        return node

    async def _await_change(self, name: str, seen_rv: str) -> None:
        await self.nodes.wait_for(lambda: _rv(self.nodes.store.get(name)) != seen_rv, self.conflict_wait)

    async def _patch_lock(self, name: str, rv: str, value: str | None) -> dict:
        patch = {"metadata": {"annotations": {LOCK_KEY: value}, "resourceVersion": rv}}
        obj = await self.client.patch_node(name, patch)
        self._fresh[name] = obj
        return obj

    def _holder_state(self, lock: NodeLock) -> str:
        """'gone' | 'done' | 'allocating' | 'unbound' | 'pending' for the pod that owns a lock
        ('unbound': no bind-phase, or allocating, and no spec.nodeName yet: its binder has not finished)."""
        if lock.legacy:
            return "pending"
        pod = self.pod_lookup(lock.namespace, lock.name)
        if pod is None:
            return "gone"
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase", "")
        if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            return "done"
        bind_phase = (meta.get("annotations") or {}).get(BIND_PHASE, "")
        if bind_phase in ("success", "failed"):
            return "done"
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        if bind_phase == "allocating":
            return "allocating" if bound else "unbound-allocating"
        return "pending" if bound else "unbound"

    # ------------------------------------------------------------------ API

    async def _swap_lock(self, node_name: str, decide: Callable[[dict | None], Awaitable[object]], *,
                         node_gone: Callable[[], bool], failed: str, exhausted: str) -> object:
        """The compare-and-swap loop of lock and release.

        `decide(node)` reads the cached node and answers `_Write(value)` to set the lock to `value`
        (None removes it), or anything else to return that without writing. The write carries the
        node's resourceVersion; on 409 the informer's newer node is awaited and decided on again,
        `attempts` times at most. A node deleted under the write gives `node_gone()`; any other API
        error a NodeLockError `"{failed}: {error}"`.
        """
        lost = False
        for _attempt in range(self.attempts):
            node = self._node(node_name)
            try:
                decision = await decide(node)
            except NodeLockError as exc:
                exc.lost_race = lost
                raise
            if not isinstance(decision, _Write):
                return decision
            rv = _rv(node)
            try:
                await self._patch_lock(node_name, rv, decision.value)
                return True
            except ApiError as exc:
                if exc.conflict:
                    self.conflicts += 1
                    lost = True
                    await self._await_change(node_name, rv)
                    continue
                if exc.not_found:
                    return node_gone()
                raise NodeLockError(f"{failed}: {exc}") from None
        raise NodeLockError(exhausted)

    async def lock(self, node_name: str, namespace: str, pod_name: str) -> None:
        """Take the lock for namespace/pod on node_name, or raise NodeLockError."""
        value = codec.encode_node_lock(self.clock(), namespace, pod_name)

        async def decide(node: dict | None) -> object:
            if node is None:
                raise NodeLockError(f"node {node_name} not found")
            current = ((node.get("metadata") or {}).get("annotations") or {}).get(LOCK_KEY)
            if current:
                try:
                    held = codec.decode_node_lock(current)
                except codec.CodecError as exc:
                    raise NodeLockError(f"node {node_name}: {exc}") from None
                if held.owned_by(namespace, pod_name):
                    return None  # re-entrant
                state = self._holder_state(held)
                age = self.clock() - held.timestamp
                expired = age > self.timeout or (state.startswith("unbound") and age > self.orphan_timeout)
                if state not in ("gone", "done") and not expired:
                    raise NodeLockError(
                        f"node {node_name} has been locked within {_go_duration(self.timeout)}: "
                        f"node lock contention (held by {held.namespace}/{held.name})"
                        if not held.legacy else
                        f"node {node_name} has been locked within {_go_duration(self.timeout)}: node lock contention"
                    )
                if state.endswith("allocating"):
                    await self._fail_owner(held)
                log.info("Taking over node lock", node=node_name, holder=f"{held.namespace}/{held.name}",
                         holder_state=state, expired=expired)
                self.takeovers += 1
            return _Write(value)

        def node_gone() -> bool:
            raise NodeLockError(f"node {node_name} not found")

        await self._swap_lock(node_name, decide, node_gone=node_gone, failed=f"lock node {node_name}",
                              exhausted=f"node {node_name}: node lock contention (resourceVersion kept changing)")

    async def release(self, node_name: str, namespace: str, pod_name: str) -> bool:
        """Remove our lock; True if removed, False if it was not ours (left alone)."""

        async def decide(node: dict | None) -> object:
            if node is None:
                return False
            current = ((node.get("metadata") or {}).get("annotations") or {}).get(LOCK_KEY)
            if not current:
                return False
            try:
                held = codec.decode_node_lock(current)
            except codec.CodecError:
                return False
            if not held.owned_by(namespace, pod_name):
                return False
            return _Write(None)

        return bool(await self._swap_lock(
            node_name, decide, node_gone=lambda: False, failed=f"release lock on node {node_name}",
            exhausted=f"release lock on node {node_name}: resourceVersion kept changing"))

    async def _fail_owner(self, held: NodeLock) -> None:
        pod = self.pod_lookup(held.namespace, held.name)
        patch: dict = {"metadata": {"annotations": {BIND_PHASE: "failed"}}}
        if pod is not None and _rv(pod):
            patch["metadata"]["resourceVersion"] = _rv(pod)
        try:
            await self.client.patch_pod(held.namespace, held.name, patch)
            log.warning("Marked stale lock holder failed", pod=f"{held.namespace}/{held.name}")
        except ApiError as exc:
            if exc.not_found:
                return
            # A conflict means the holder moved on (e.g. its Allocate finished): re-decide.
            raise NodeLockError(
                f"cannot mark lock holder {held.namespace}/{held.name} failed: {exc}"
            ) from None


def _go_duration(seconds: float) -> str:
    """Format like Go's time.Duration.String() for whole seconds: 5m0s, 28s, 1h0m0s."""
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"

