"""The scheduler's view of the cluster, fed only by watches (nodes, pods, resource quotas).

* Nodes: the register annotation is decoded once per change of its text (not per filter); the
  handshake verdict (hami.scheduler.cache.handshake) decides whether the node's devices are usable;
  usable nodes live in the `UsageIndex` (hami.scheduler.placement.usage), others are dropped from it.
* Pods: a pod counts once it carries `hami.io/vgpu-node` (whatever its bind phase, as in HAMi);
  Succeeded/Failed or deleted pods release their devices; init-container usage collapses as in
  HAMi and shrinks to app-only usage once every init container exited 0.
* /filter and /bind read only this state; they never call the API server to read.
* The pod and node caches hold projections (hami.scheduler.cache.project): the fields some reader uses.
* A failing event handler leaves what it derived from that object unknown: the informer calls the
  per-object resync (`resync_node`, `resync_pod`, `resync_quota`), which forgets what the index
  holds for that one object and judges its cached state afresh, so nothing else moves (a
  placement /filter holds for another pod stays counted). Should that fail too, the informer
  re-lists and `rebuild()` recomputes everything from the three caches, as a fresh scheduler
  would, keeping the placements /filter holds (`held_placements`); `health()` stays non-empty
  (unready) until then.
* A pod whose placement annotations are removed before it is bound (another replica's /filter
  rolled it back) releases its devices, and the requeue waker hears of it.
* A placement outlives its annotations: a pod counted while bound to the node its placement names
  (`pinned`, by UID) stays counted with the devices it was counted with, in its node's usage and
  its namespace's quota, until it ends (Succeeded/Failed, or deleted), whatever its annotations
  say later. Its container keeps the GPU whatever a tenant strips or rewrites on the pod object (the
  webhook and the chart's policy refuse that too, but not while the webhook is down). Only the
  init-container release still shrinks it, which the pod's status decides, not its annotations.
  A resync or a rebuild keeps pinned records of live bound pods too.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from hami.device import codec
from hami.device.allocation import allocated_devices
from hami.device.model import DeviceInfo, NvidiaConfig
from hami.device.request import quantity_value
from hami.device.vendorregister import decode_vendor_devices, registration_signature
from hami.device.vendors import VendorTable
from hami.kube.client import KubeClient
from hami.kube.informer import ADDED, DELETED, MODIFIED, Informer
from hami.obs.log import get_logger
from hami.scheduler.cache.handshake import REGISTER_KEY, Handshaker
from hami.scheduler.cache.project import Shared, project_node, project_pod
from hami.scheduler.placement.contention import LockHold
from hami.scheduler.placement.usage import PodRecord, UsageIndex, init_released
from hami.scheduler.placement.vendorrules import METAX_APP_CLASS

log = get_logger(__name__)

VGPU_NODE = codec.VGPU_NODE_ANNOTATION
DEVICES_ALLOCATED = codec.ALLOCATED_ANNOTATION
MIG_ALLOCATIONS = codec.MIG_ALLOCATIONS_ANNOTATION
CORDON_KEY = codec.CORDON_ANNOTATION
_NONE_CORDONED: frozenset[str] = frozenset()  # shared by every node with no cordon (200 bytes each)
SCORE_KEY = codec.PAIR_SCORE_ANNOTATION
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """Decoded registration of one node, kept while the annotation text is unchanged."""

    register: str  # the NVIDIA register text, plus every other vendor's registration (signature)
    devices: tuple[DeviceInfo, ...]
    error: str = ""
    # Other vendors: (vendor, devices) per registered vendor; errors name their annotation key.
    groups: tuple[tuple[str, tuple[DeviceInfo, ...]], ...] = ()


class HeldPlacements:
    """The uids whose placement is held in memory but no pod annotation shows yet: decisions of
    this replica's /filter (the Placer) and the room the GPU preemption controller holds. Each
    holder adds its source in its own constructor; a resync or rebuild keeps these counted."""

    __slots__ = ("_sources",)

    def __init__(self) -> None:
        self._sources: list[Callable[[], Collection[str]]] = []

    def add(self, source: Callable[[], Collection[str]]) -> None:
        self._sources.append(source)

    def __call__(self) -> Collection[str]:
        if len(self._sources) == 1:
            return self._sources[0]()
        out: set[str] = set()
        for source in self._sources:
            out.update(source())
        return out


class ClusterState:
    def __init__(self, client: KubeClient | None, nvidia: NvidiaConfig | None = None, *,
                 node_label_selector: str | None = None, handshaker: Handshaker | None = None,
                 silent_timeout: float = 120.0, vendors: VendorTable | None = None,
                 on_handshake_write: Callable[[dict, object], None] | None = None,
                 on_capacity: Callable[[str | None, str, str], None] | None = None):
        self.client = client
        self.nvidia = nvidia or NvidiaConfig()
        self.index = UsageIndex(self.nvidia, vendors)
        self.handshaker = handshaker or Handshaker(None, resource=self.nvidia.resource_count_name)
        # The other vendors of the table; those with a handshake key get their own handshaker.
        self.vendors = vendors
        self.vendor_handshakers: dict[str, Handshaker] = {}
        for v in (vendors.others if vendors is not None else ()):
            if v.handshake_key and v.register_source == "annotation":
                self.vendor_handshakers[v.name] = Handshaker(
                    self.handshaker.client, resource=v.count_resource, clock=self.handshaker.clock,
                    is_leader=self.handshaker.is_leader, register_key=v.register_key,
                    handshake_key=v.handshake_key)
        self.registered: dict[str, NodeDevices] = {}  # node -> decoded registration (all HAMi nodes)
        self.usable: set[str] = set()
        # Nodes whose `hami.io/mutex.lock` is set: mid-allocation, so /filter sends a pod elsewhere
        # when another node fits (no funnel into a locked node).
        self.locked: set[str] = set()
        # node -> (namespace, pod) holding its hami.io/mutex.lock: an unbound pod under it is being placed.
        self.lock_holders: dict[str, tuple[str, str]] = {}
        # How long locks stay: the node lock's parallelism a burst needs (placement/contention.py).
        self.lock_hold = LockHold()
        self.pod_keys: dict[str, str] = {}  # "ns/name" -> uid of counted pods
        # uids counted while bound where their placement says: kept until the pod ends (module docstring).
        # A dict used as a set: at 40,000 pods a set's table is twice a dict's (2 MiB against 1).
        self.pinned: dict[str, None] = {}
        self.uid_keys: dict[str, str] = {}  # uid -> "ns/name"
        self.on_handshake_write = on_handshake_write
        # (node or None, kind, namespace) after capacity may have grown: the requeue waker listens.
        self.on_capacity = on_capacity
        # uids whose placement is held in memory (HeldPlacements): a resync or rebuild keeps them counted.
        self.held_placements = HeldPlacements()
        self.nodes: Informer | None = None
        self.pods: Informer | None = None
        self.quotas: Informer | None = None
        # The caches keep only what the scheduler reads (hami.scheduler.cache.project), equal parts once.
        self.shared = Shared()
        if client is not None:
            self.nodes = Informer(client, "nodes", label_selector=node_label_selector, handler=self.on_node,
                                  transform=lambda o: project_node(o, self.shared), silent_timeout=silent_timeout)
            self.pods = Informer(client, "pods", handler=self.on_pod, transform=lambda o: project_pod(o, self.shared),
                                 silent_timeout=silent_timeout)
            self.quotas = Informer(client, "resourcequotas", handler=self.on_quota, silent_timeout=silent_timeout)
            for inf in (self.nodes, self.pods, self.quotas):
                inf.resync_handlers.append(self.rebuild)
            self.nodes.object_resyncs[self.on_node] = self.resync_node
            self.pods.object_resyncs[self.on_pod] = self.resync_pod
            self.quotas.object_resyncs[self.on_quota] = self.resync_quota
        self.decode_count = 0
        self.rebuilds = 0

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        assert self.nodes is not None and self.pods is not None and self.quotas is not None
        await asyncio.gather(self.nodes.run(stop), self.pods.run(stop), self.quotas.run(stop))

    async def wait_synced(self, timeout: float | None) -> bool:
        if self.nodes is None or self.pods is None:
            return True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        for inf in (self.nodes, self.pods, self.quotas):
            if inf is None:
                continue
            left = None if deadline is None else max(0.0, deadline - loop.time())
            if not await inf.wait_synced(left):
                return False
        return True

    def informers(self) -> tuple[Informer, ...]:
        return tuple(i for i in (self.nodes, self.pods, self.quotas) if i is not None)

    def health(self) -> list[str]:
        """Why the index cannot be trusted now (empty: it can)."""
        return [r for r in (i.health() for i in self.informers()) if r]

    @property
    def handler_failures(self) -> int:
        return sum(i.handler_failures for i in self.informers())

    @property
    def object_resyncs(self) -> int:
        return sum(i.object_resync_count for i in self.informers())

    def rebuild(self) -> None:
        """Recompute the usage index from the caches alone (after a handler failure)."""
        self.rebuilds += 1
        old = self.index
        self.index = UsageIndex(self.nvidia, self.vendors)
        self.registered.clear()
        self.usable.clear()
        self.pod_keys.clear()
        self.uid_keys.clear()
        pinned, self.pinned = self.pinned, {}
        if self.quotas is not None:
            for obj in list(self.quotas.store.values()):
                self.on_quota(ADDED, None, obj)
        if self.nodes is not None:
            for obj in list(self.nodes.store.values()):
                self.on_node(ADDED, None, obj)
        if self.pods is not None:
            for obj in list(self.pods.store.values()):
                self.on_pod(ADDED, None, obj)
        for uid in list(self.held_placements()):  # decided by /filter, not yet on the watch
            rec = old.pod(uid)
            if rec is not None and self.index.pod(uid) is None:
                self.index.add_pod(uid, rec.node, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                                   init_released=rec.init_released, mig=rec.mig, app_class=rec.app_class)
        lost = [uid for uid in pinned if self.index.pod(uid) is None]  # bound placements annotations no longer show
        if lost and self.pods is not None:
            by_uid = {(p.get("metadata") or {}).get("uid"): p for p in self.pods.store.values()}
            for uid in lost:
                self._repin(uid, old.pod(uid), by_uid.get(uid))
        log.info("Usage index rebuilt from the caches", nodes=len(self.index.nodes), pods=len(self.uid_keys))

    # ------------------------------------------------------------------ per-object resync

    def resync_node(self, name: str, node: dict | None) -> None:
        """Forget what was derived from node `name`, then judge its cached state afresh."""
        self.registered.pop(name, None)
        self.usable.discard(name)
        self.locked.discard(name)
        self.index.remove_node(name)  # pod records stay; set_node applies them again
        if node is None:
            self.on_node(DELETED, {"metadata": {"name": name}}, None)
        else:
            self.refresh_node(node)

    def resync_pod(self, key: str, pod: dict | None) -> None:
        """Forget what was counted for pod `key` (unless /filter holds a placement the pod does not
        show yet), then count its cached state afresh."""
        annotated = bool((((pod or {}).get("metadata") or {}).get("annotations") or {}).get(VGPU_NODE))
        uids = {self.pod_keys.pop(key, None), ((pod or {}).get("metadata") or {}).get("uid") or key}
        held = self.held_placements()
        before = {}
        pinned = set()
        for uid in uids - {None}:
            self.uid_keys.pop(uid, None)
            if uid in self.pinned:
                pinned.add(uid)
                self.pinned.pop(uid, None)
            if annotated or uid not in held:
                before[uid] = self.index.pod(uid)
                self.index.remove_pod(uid)
        if pod is not None:
            self.on_pod(ADDED, None, pod)
        for uid in pinned:
            self._repin(uid, before.get(uid), pod)
        for uid, rec in before.items():
            if rec is not None and self.index.pod(uid) != rec:
                self._capacity(rec.node, "freed", rec.namespace)

    def resync_quota(self, key: str, quota: dict | None) -> None:
        ns, _, name = key.rpartition("/")
        self.index.remove_quota(ns, name)
        self.on_quota(ADDED if quota is not None else DELETED, None, quota or {"metadata": {
            "namespace": ns, "name": name}})

    @property
    def synced(self) -> bool:
        if self.nodes is None or self.pods is None:
            return True
        return self.nodes.synced.is_set() and self.pods.synced.is_set() and (
            self.quotas is None or self.quotas.synced.is_set())

    # ------------------------------------------------------------------ lookups

    def pod(self, namespace: str, name: str) -> dict | None:
        return self.pods.store.get(f"{namespace}/{name}") if self.pods is not None else None

    def node(self, name: str) -> dict | None:
        return self.nodes.store.get(name) if self.nodes is not None else None

    def _decode(self, text: str) -> NodeDevices:
        self.decode_count += 1
        try:
            devices = tuple(codec.decode_node_devices(text))
        except codec.CodecError as exc:
            return NodeDevices(text, (), str(exc))
        return NodeDevices(text, devices)

    def registration_of(self, node: dict) -> tuple[str, NodeDevices | None]:
        """(signature, decoded registration or None) of a node object that may not be in the
        cache (full-Nodes /filter): NVIDIA's register text and, with other vendors in the table,
        their registrations, decoded as the node watch would (nothing is stored)."""
        meta = node.get("metadata") or {}
        annos = meta.get("annotations") or {}
        text = annos.get(REGISTER_KEY)
        if self.vendors is None or not self.vendors.others:
            return (text or "", self._decode(text) if text is not None else None)
        capacity = (node.get("status") or {}).get("capacity") or {}
        extra = registration_signature(annos, capacity, self.vendors, meta.get("labels"))
        if not extra:
            return (text or "", self._decode(text) if text is not None else None)
        sig = f"{text or ''}\x00{extra}"
        return sig, self._decode_all(meta.get("name", ""), text, sig, annos, capacity, meta.get("labels"))

    def _decode_all(self, name: str, text: str | None, sig: str, annos: dict, capacity: dict,
                    labels: dict | None = None) -> NodeDevices:
        """NVIDIA's registration and every other vendor's: a malformed one makes this node
        unregistered, its error naming the annotation key; other nodes are not touched."""
        nv = self._decode(text) if text is not None else NodeDevices("", ())
        assert self.vendors is not None
        groups, errors = decode_vendor_devices(name, annos, capacity, self.vendors, labels)
        error = "; ".join(e for e in ((f"{REGISTER_KEY}: {nv.error}" if nv.error else ""), *errors) if e)
        devices = nv.devices + tuple(d for _, ds in groups for d in ds)
        return NodeDevices(sig, devices if not error else (), error, groups)

    # ------------------------------------------------------------------ node events

    def on_node(self, etype: str, old: dict | None, new: dict | None) -> None:
        if etype == DELETED or new is None:
            name = ((old or {}).get("metadata") or {}).get("name", "")
            self.registered.pop(name, None)
            self.usable.discard(name)
            self.locked.discard(name)
            self.lock_hold.forget(name)
            self.index.remove_node(name)
            self.handshaker.forget(name)
            for hs in self.vendor_handshakers.values():
                hs.forget(name)
            return
        self.refresh_node(new)

    def refresh_node(self, node: dict) -> None:
        """Re-judge one cached node: decode (if changed), handshake verdict, usage index."""
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        annos = meta.get("annotations") or {}
        if annos.get(codec.NODE_LOCK_ANNOTATION):
            self.locked.add(name)
        else:
            self.locked.discard(name)
        held = self.lock_holders.get(name)
        self.lock_hold.seen(name, name in self.locked, time.monotonic(), f"{held[0]}/{held[1]}" if held else "")
        self._note_lock_holder(name, annos.get(codec.NODE_LOCK_ANNOTATION))
        text = annos.get(REGISTER_KEY)
        extra = ""
        if self.vendors is not None and self.vendors.others:
            extra = registration_signature(annos, (node.get("status") or {}).get("capacity") or {}, self.vendors,
                                           meta.get("labels"))
        if text is None and not extra:
            if name in self.registered or name in self.usable:
                self.registered.pop(name, None)
                self.usable.discard(name)
                self.index.remove_node(name)
            return
        # NVIDIA-only nodes keep the register text itself as their signature.
        sig = text if not extra else f"{text or ''}\x00{extra}"
        prev = self.registered.get(name)
        if prev is None or prev.register != sig:
            dec = self._decode(sig) if not extra else self._decode_all(
                name, text, sig, annos, (node.get("status") or {}).get("capacity") or {}, meta.get("labels"))
            self.registered[name] = dec
            if dec.error:
                log.warning("Node registration unreadable", node=name, error=dec.error)
        else:
            dec = prev
        if text is not None:
            verdict = self.handshaker.evaluate(node)
            if verdict.write is not None and self.on_handshake_write is not None:
                self.on_handshake_write(node, verdict)
            nv_healthy = verdict.healthy
        else:
            nv_healthy = True
        if dec.groups:
            dec = self._vendor_handshakes(node, dec, text is not None and nv_healthy)
            nv_healthy = True
        healthy = nv_healthy and not dec.error and bool(dec.devices)
        cordoned = codec.decode_device_cordon(annos.get(CORDON_KEY))  # the one cordon parser
        cordon = frozenset(cordoned) if cordoned else _NONE_CORDONED
        pair = pair_scores_of(annos.get(SCORE_KEY))
        existing = self.index.node(name)
        if healthy:
            if (existing is None or prev is None or prev.register != sig or name not in self.usable
                    or (dec.groups and len(existing.devices) != len(dec.devices))):
                self.index.set_node(name, dec.devices, cordon, pair)
                self._capacity(name, "devices", "")
            else:
                if existing.cordoned != cordon:
                    self.index.set_cordon(name, cordon)
                    self._capacity(name, "devices", "")
                if pair != existing.pair_scores:
                    existing.pair_scores = pair
            self.usable.add(name)
        elif name in self.usable or existing is not None:
            self.usable.discard(name)
            self.locked.discard(name)
            self.lock_hold.forget(name)
            self.index.remove_node(name)
            log.info("Node devices not usable", node=name,
                     reason=dec.error or ("no devices" if not dec.devices else "handshake"))

    def handshaker_for(self, key: str) -> Handshaker:
        """The handshaker that owns handshake annotation `key` (NVIDIA's by default)."""
        for hs in self.vendor_handshakers.values():
            if hs.handshake_key == key:
                return hs
        return self.handshaker

    def _vendor_handshakes(self, node: dict, dec: NodeDevices, nvidia_ok: bool) -> NodeDevices:
        """Each vendor's handshake decides on its own devices (HAMi drops an unhealthy vendor
        from the node, not the node): the devices of healthy vendors only."""
        keep = [d for d in dec.devices if d.vendor == "NVIDIA"] if nvidia_ok else []
        for vendor, devices in dec.groups:
            hs = self.vendor_handshakers.get(vendor)
            if hs is not None:
                verdict = hs.evaluate(node)
                if verdict.write is not None and self.on_handshake_write is not None:
                    self.on_handshake_write(node, verdict)
                if not verdict.healthy:
                    continue
            keep.extend(devices)
        return NodeDevices(dec.register, tuple(keep), dec.error, dec.groups)

    def recheck(self, everything: bool = False) -> None:
        """Re-judge the nodes whose handshake verdict may have changed with time (a Requesting
        window ending, a write to retry), or every cached HAMi node (`everything`, e.g. on
        becoming leader). No API calls; with nothing due it allocates nothing (idle cost)."""
        if self.nodes is None:
            return
        if everything:
            names = list(self.registered)
        else:
            now = self.handshaker.clock()
            names = self.handshaker.due_nodes(now)
            for hs in self.vendor_handshakers.values():
                names += hs.due_nodes(now)
            if not names:
                return
        for name in names:
            node = self.nodes.store.get(name)
            if node is not None:
                self.refresh_node(node)

    # ------------------------------------------------------------------ quota events

    def on_quota(self, etype: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if etype == DELETED or new is None:
            self.index.remove_quota(ns, name)
        else:
            self.index.set_quota(ns, name, _quota_hard(new))
        self._capacity(None, "quota", ns)

    def placement_dropped(self, node: str, namespace: str) -> None:
        """/filter rolled back a placement it counted (the pod fits nowhere now): those devices are
        free for the pods parked behind them."""
        self._capacity(node, "freed", namespace)

    def _capacity(self, node: str | None, kind: str, namespace: str) -> None:
        if self.on_capacity is not None:
            self.on_capacity(node, kind, namespace)

    def _release(self, uid: str, key: str, reason: str) -> None:
        rec = self.index.pod(uid)
        self.pinned.pop(uid, None)
        if self.index.remove_pod(uid):
            log.v(4).info("Pod released devices", pod=key, reason=reason)
            if rec is not None:
                self._capacity(rec.node, "freed", rec.namespace)

    # ------------------------------------------------------------------ pod events

    def on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        uid = meta.get("uid") or key
        known = self.uid_keys.get(uid)
        if known == key:
            key = known  # the string the maps already hold: one a pod, not one more per event
        elif self.pods is not None and self.pods.dispatching_key == key:
            key = self.pods.dispatching_key  # the informer's own: one string a pod in both
        if etype == DELETED or new is None:
            self._release(uid, key, "deleted")
            self.pod_keys.pop(key, None)
            self.uid_keys.pop(uid, None)
            return
        if (new.get("status") or {}).get("phase") in TERMINAL:
            self._release(uid, key, "terminal")
            self.pod_keys.pop(key, None)
            self.uid_keys.pop(uid, None)
            return
        annos = meta.get("annotations") or {}
        node = annos.get(VGPU_NODE)
        if uid in self.pinned and self._hold_pinned(uid, key, new):
            return
        if not node:
            was = (((old or {}).get("metadata") or {}).get("annotations") or {}).get(VGPU_NODE)
            if was and uid not in self.held_placements():  # the placement was rolled back
                self._release(uid, key, "placement cleared")
                self.pod_keys.pop(key, None)
                self.uid_keys.pop(uid, None)
            return
        if not self.placed_by_hami(uid, key, node, new):
            if self.index.pod(uid) is not None:  # e.g. bound elsewhere than its placement names
                self._release(uid, key, "not placed by hami")
                self.pod_keys.pop(key, None)
                self.uid_keys.pop(uid, None)
            else:
                log.v(4).info("Pod claims a placement hami did not make: not counted", pod=key, node=node)
            return
        self.count_pod(uid, key, node, annos, new, etype == ADDED)
        if (new.get("spec") or {}).get("nodeName") == node and self.index.pod(uid) is not None:
            self.pinned[uid] = None

    def _hold_pinned(self, uid: str, key: str, pod: dict) -> bool:
        """Keep a pinned pod counted as it was (its annotations are not read again); True when it is
        still bound where it was counted. Only the init-container release, read from status, moves it."""
        rec = self.index.pod(uid)
        if rec is None or (pod.get("spec") or {}).get("nodeName") != rec.node:
            self.pinned.pop(uid, None)
            return False
        released = init_released(pod)
        if released != rec.init_released:
            self.index.add_pod(uid, rec.node, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                               init_released=released, mig=rec.mig, app_class=rec.app_class)
            if released:
                self._capacity(rec.node, "freed", rec.namespace)
        annos = (pod.get("metadata") or {}).get("annotations") or {}
        if annos.get(VGPU_NODE) != rec.node:
            log.v(2).info("Bound pod no longer shows its placement; still counted where it was placed",
                          pod=key, node=rec.node)
        self.pod_keys[key] = uid
        self.uid_keys[uid] = key
        return True

    def _repin(self, uid: str, rec: PodRecord | None, pod: dict | None) -> None:
        """After a resync or rebuild: a pinned record whose pod is still cached, live and bound to its
        node is counted again as it was (its annotations may no longer show it)."""
        if rec is None or pod is None or (pod.get("metadata") or {}).get("uid", uid) != uid:
            return
        if (pod.get("status") or {}).get("phase") in TERMINAL or (pod.get("spec") or {}).get("nodeName") != rec.node:
            return
        if self.index.pod(uid) is None:
            self.index.add_pod(uid, rec.node, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                               init_released=init_released(pod), mig=rec.mig, app_class=rec.app_class)
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self.pod_keys[key] = uid
        self.uid_keys[uid] = key
        self.pinned[uid] = None

    def _note_lock_holder(self, node: str, lock: str | None) -> None:
        holder = None
        if lock:
            try:
                parsed = codec.decode_node_lock(lock)
                holder = None if parsed.legacy else (parsed.namespace, parsed.name)
            except codec.CodecError:
                holder = None
        if self.lock_holders.get(node) == holder:
            return
        if holder is None:
            self.lock_holders.pop(node, None)
            return
        self.lock_holders[node] = holder
        pod = self.pods.store.get(f"{holder[0]}/{holder[1]}") if self.pods is not None else None
        if pod is not None:  # its placement may have arrived before the lock did: count it now
            self.on_pod(MODIFIED, None, pod)

    def placed_by_hami(self, uid: str, key: str, node: str, pod: dict | None) -> bool:
        """Count a pod's devices only if hami placed it (else a pod could squat on devices by naming them): bound to the
        node its placement names, held by this replica's /filter decision, or holding that node's lock."""
        if ((pod or {}).get("spec") or {}).get("nodeName") == node:
            return True
        if uid in self.held_placements():
            return True
        return self.lock_holders.get(node) == tuple(key.split("/", 1))

    def count_pod(self, uid: str, key: str, node: str, annos: dict, pod: dict | None, added: bool = False) -> None:
        text = annos.get(DEVICES_ALLOCATED, "")
        try:
            if self.vendors is not None and self.vendors.other_allocated:
                devices = allocated_devices(annos, self.vendors)
            else:
                devices = codec.decode_pod_devices(text) if text else ()
        except codec.CodecError as exc:
            log.warning("Pod device annotation unreadable", pod=key, error=str(exc))
            return
        mig: tuple = ()
        mig_text = annos.get(MIG_ALLOCATIONS)
        if mig_text:
            try:
                mig = tuple((a.gpu_uuid, a.placement) for a in codec.decode_mig_allocations(mig_text))
            except codec.CodecError as exc:
                log.warning("Pod MIG allocation annotation unreadable", pod=key, error=str(exc))
        n_init = len(((pod or {}).get("spec") or {}).get("initContainers") or [])
        released = init_released(pod) if pod is not None else False
        ns = sys.intern(key.partition("/")[0])  # one string per namespace, not one per counted pod
        before = self.index.pod(uid)
        if self.index.add_pod(uid, node, devices, namespace=ns, num_init=n_init, init_released=released, mig=mig,
                              app_class=annos.get(METAX_APP_CLASS, "")):
            log.v(5).info("Pod counted", pod=key, node=node, devices=text)
            if before is not None and released and not before.init_released:
                self._capacity(node, "freed", ns)  # init containers done: the pod's usage shrank
        self.pod_keys[key] = uid
        self.uid_keys[uid] = key

    def pod_by_uid(self, uid: str) -> dict | None:
        key = self.uid_keys.get(uid)
        return self.pods.store.get(key) if key and self.pods is not None else None


def _quota_hard(obj: dict) -> dict[str, int]:
    out = {}
    for key, value in ((obj.get("spec") or {}).get("hard") or {}).items():
        n = quantity_value(value)
        if n is not None:
            out[key] = n
    return out


def pair_scores_of(text: str | None) -> dict[str, dict[str, int]]:
    if not text:
        return {}
    try:
        return {e.uuid: dict(e.scores) for e in codec.decode_pair_scores(text)}
    except codec.CodecError:
        return {}
