"""The one owner of a placement decision (no HTTP, no API writes): which node and devices a pod gets.

The extender (hami.scheduler.extender.server) decodes /filter, asks the Placer and encodes the
answer; the binder (hami.scheduler.extender.bind) receives the Placer in its constructor and asks it
for the re-check under the node lock and for a placement on kube-scheduler's node; /prioritize and
/preempt (verbs.py), the GPU preemption controller and the cache read `held`. What a decision needs
lives here and nowhere else:

* the PodRequest memo (a burst's pods share a template: one PodRequest each, podshape.py);
* the held decisions (`held`, uid -> `Assumed`: decided by /filter, not yet written by /bind),
  counted per node, the binds in flight per node (`bind_started` / `bind_ended`) and the locks our
  binds took (`lock_taken`): the pending work that lets a burst leave the policy's best node
  (contention.py);
* the choice of node and devices in both /filter modes (NodeNames from the watch-fed usage index,
  full Nodes from the request's registrations);
* the re-check before binding (`recheck`, recheck.py: the fit /filter ran, under the lock) and the
  placement on a node kube-scheduler chose (`place_on`);
* the share-failure refit the preemption controller asks for (`share_failures`: the fit without a
  decision) and the no-fit notices (`no_fit`, the requeue waker and the controller listen);
* the decisions for pods with DRA claims (`--dra`, `filter_claims` / `claim_scores`): the pod's
  node policy by GPU fill over the nodes its claims fit (placement.claimwalk, from the watches of
  cache/drawatch.py), and the allocation answered on the chosen node held (`held.claims`, claim key
  -> HeldClaim) until kube-scheduler writes the claim, so the next pod's fill counts it;
* `commit`: the only function that makes a placement. It writes the annotations of every vendor
  row through the vendor table (`allocation_annotations`: each vendor's own keys), counts the
  devices in the usage index, remembers the QoS policy MetaX sGPU cards switch to, and holds the
  decision. /filter, the re-check's re-fit and kube-scheduler's node under --extender-prioritize all
  commit through it, so each vendor keeps its keys on every path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from hami.config import Config
from hami.device import codec
from hami.device.allocation import allocation_annotations
from hami.device.model import ContainerDeviceRequest
from hami.device.vendorhooks import HOOKS
from hami.device.vendorregister import registration_signature
from hami.device.vendorrequest import flat_requests
from hami.dra import podclaims
from hami.kubesched.allocator import Allocator, Usage
from hami.obs.log import get_logger
from hami.scheduler.cache.drawatch import DraWatch
from hami.scheduler.cache.state import VGPU_NODE, ClusterState
from hami.scheduler.placement import (
    METAX_APP_CLASS,
    METAX_QOS,
    Contention,
    Held,
    HeldView,
    NodeUsage,
    PodRequest,
    PolicyError,
    Selection,
    ShapeMemo,
    UsageIndex,
    choose,
    chosen_ids,
    claimfit,
    claimwalk,
    evaluate_nodes,
    first_fit,
    ignored_policies,
    memory_need,
    node_order_descending,
    only_devices,
    own_pending,
    pod_request,
    rank,
    same_placement,
    select_node,
    try_pod,
)
from hami.scheduler.placement.claimwalk import HeldClaim
from hami.scheduler.placement.contention import FOREIGN_HOLDS, OTHERS_SEEN_S
from hami.scheduler.placement.policy import node_policy_for
from hami.scheduler.relay import Relay

log = get_logger(__name__)

# Up to this many candidate nodes /filter evaluates them all, as HAMi does, so the FilteringSucceed
# event counts every fitting node; beyond it, it stops at the first fit in score order (same choice).
FULL_EVALUATION_MAX_NODES = 64

# A decision /filter holds in memory and /bind has not written after this long is dropped (the
# pod was deleted, or kube-scheduler bound it elsewhere); it never reached the API server.
ASSUME_TTL = 60.0

RequestsFn = Callable[[dict], "tuple[list[ContainerDeviceRequest | None], int]"]


@dataclass(frozen=True, slots=True)
class Assumed:
    """A placement decision held in this replica until /bind writes it: node, devices and the
    annotations to write (None: already written on the pod, HAMi's flow of a patch at /filter)."""

    node: str
    namespace: str
    name: str
    devices: tuple
    at: float
    annotations: dict | None = None


class Choice(NamedTuple):
    """/filter's decision in NodeNames mode: the selection (node None: no fit), the (node, score)
    pairs its FilteringSucceed text lists, the committed decision, the PodRequest, and the usage
    record of an earlier decision for the pod that this one dropped (None: there was none)."""

    selection: Selection
    fit_scores: list
    decision: Assumed | None
    request: PodRequest
    dropped: Any = None


class Placer:
    def __init__(self, config: Config, state: ClusterState, *, requests_fn: RequestsFn,
                 no_fit: Relay | None = None, clock: Callable[[], float] = time.time, identity: str = "",
                 lane_rate: float = 0.0, dra: DraWatch | None = None, allocator: Allocator | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 work_clock: Callable[[], float] = time.thread_time):
        self.config = config
        self.cfg = config.scheduler
        self.state = state
        self.requests_fn = requests_fn
        self.clock = clock
        self._no_fit = no_fit if no_fit is not None else Relay()  # (pod, PodRequest, candidates, failed)
        # MetaX sGPU rows: a placement on them remembers the QoS policy its cards switch to.
        self._sgpu_types = frozenset(v.name for v in (config.vendors.others if config.vendors else ())
                                     if HOOKS[v.hook].sgpu)
        # uid -> decision held until its /bind; counted per node (pending work that contends for
        # its node in a burst, contention.py)
        self._held = Held()
        # claim key -> the allocation /filter answered for a pod with DRA claims, until kube-scheduler
        # writes the claim (`--dra`): read as `held.claims`
        self._held_claims: dict[str, HeldClaim] = {}
        self.held = HeldView(self._held, self._held_claims)
        self.dra = dra  # the DRA watches (--dra): slices, claims, classes; None without DRA
        self.allocator = allocator or Allocator()  # kube-scheduler's structured allocator, run per candidate
        if dra is not None:
            dra.claims.add_handler(self.claim_event)
        # node -> binds in flight there (the binder reports them: pending work, as held decisions)
        self._binds: dict[str, int] = {}
        self.binds_in_flight: Mapping[str, int] = MappingProxyType(self._binds)
        # node -> "ns/name" of the last pod our binder locked it for: the lock the watch shows is ours
        self._locked_for: dict[str, str] = {}
        # node -> "ns/name" our binder is writing the lock for now: the watch can show that write
        # before its answer returns, and it is ours, not another scheduler's.
        self._locking: dict[str, str] = {}
        # In a burst, send a pod past the policy's best node when our own pending work contends
        # for it (contention.py); False: always the policy's best (HAMi's flow).
        self.avoid_locked = True
        # The burst's width (`lane_rate`: binds/s the critical lane sustains, 0 = unlimited) and this
        # replica's order among nodes of equal score when it leaves a contended one (contention.rank).
        self.contention = Contention(self.cfg.burst_spread, lane_rate)
        self.identity = identity
        self._ranks: dict[str, int] = {}  # node -> rank(identity, node) (_tie_rank)
        self.monotonic = monotonic  # the burst's (contention.py: decisions within a hold) and the DRA holds' clock
        # The claim walk's budget bounds the work a tenant's claim makes this thread do, so it runs on the
        # thread's CPU clock: a busy machine that deschedules the process does not cut an honest walk short
        # (which would hand the nodes to kube-scheduler's own scoring and lose the pod's node policy).
        self.work_clock = work_clock
        self._others_checked = self._others_seen = -OTHERS_SEEN_S  # another scheduler's lock last seen
        self._swept = 0.0
        self._decoded: dict[str, tuple] = {}  # register text -> devices (full-Nodes mode)
        self._warned: set[str] = set()
        self.requests = ShapeMemo()  # a burst's pods share a template: one PodRequest each (podshape.py)
        state.held_placements.add(self._held.keys)  # a resync or rebuild keeps /filter's decisions

    # ------------------------------------------------------------------ what the pod asks

    def pod_request(self, requests, num_init: int, annos, ns: str, name: str) -> PodRequest | str:
        """What the fit needs of the pod; bad scoring weights give HAMi's error text."""
        gpu_policy, node_policy = self.cfg.gpu_scheduler_policy, self.cfg.node_scheduler_policy
        for warning in ignored_policies(annos, ns, name, node_policy, gpu_policy):
            self._warn_once(warning)
        quota = self.state.index.quota_view(ns)
        key = None
        if quota is None:  # a quota's usage changes with every placement: such a request is not kept
            try:
                key = (tuple(requests), num_init, orjson.dumps(annos), ns, gpu_policy, node_policy)
                preq = self.requests.get(key)
            except (orjson.JSONEncodeError, TypeError):  # not encodable or not hashable: worked out each time
                key = preq = None
            if preq is not None:
                return preq
        try:
            preq = pod_request(
                requests, num_init, annos, gpu_policy=gpu_policy, node_policy=node_policy, namespace=ns,
                quota=quota, vendors=self.config.vendors,
            )
        except PolicyError as exc:
            return f"calcScore failed {exc} for pod {name}"
        if key is not None:
            self.requests.put(key, preq)
        return preq

    def request_of(self, pod: dict) -> PodRequest | None | str:
        """The pod's PodRequest, None when it asks for no HAMi device, or an error text."""
        try:
            requests, num_init = self.requests_fn(pod)
        except ValueError as exc:
            return str(exc)
        if not any(r is not None and (r.__class__ is tuple or r.nums > 0) for r in requests):
            return None
        meta = pod.get("metadata") or {}
        return self.pod_request(requests, num_init, meta.get("annotations") or {},
                                meta.get("namespace") or "default", meta.get("name", ""))

    def _warn_once(self, text: str) -> None:
        """HAMi's klog warning for an ignored annotation, once per distinct text (kube-scheduler retries)."""
        if text in self._warned:
            return
        if len(self._warned) > 4096:
            self._warned.clear()
        self._warned.add(text)
        log.warning(text)

    # ------------------------------------------------------------------ /filter, NodeNames mode

    def place(self, pod: dict, uid: str, ns: str, name: str, annos: dict, requests, num_init: int,
              names, node_names: list, *, written: bool = False) -> Choice | str:
        """/filter's decision from the watch-fed usage index: the pod's earlier decision is dropped
        (HAMi re-places a retried filter), the node chosen, the placement committed (`written`:
        the caller patches it on the pod at once, HAMi's flow). An error text when the pod's
        scoring annotations are bad. `names`: the candidates' NameList (nodeorder.py) or None."""
        index = self.state.index
        dropped = index.pod(uid)
        if dropped is not None:
            index.remove_pod(uid)
        self._held.pop(uid, None)
        preq = self.pod_request(requests, num_init, annos, ns, name)
        if isinstance(preq, str):
            return preq
        sel, fit_scores = self._choose(names, node_names, preq, index, ns, name)
        if sel.node is None:
            self._no_fit(pod, preq, node_names, sel.failed_nodes)
            return Choice(sel, fit_scores, None, preq, dropped)
        decision = self.commit(pod, uid, sel.node, sel.devices, sel.mig, written=written)
        self.contention.decided(sel.node, self.monotonic())
        return Choice(sel, fit_scores, decision, preq, dropped)

    def _choose(self, names, node_names, preq: PodRequest, index: UsageIndex,
                ns: str, name: str) -> tuple[Selection, list[tuple[str, float]]]:
        """The node for the pod and the (node, score) pairs the FilteringSucceed text lists: the
        policy's best, unless this replica's burst contends for it (contention.py)."""
        verbose = log.enabled(2)
        prioritize = self.cfg.extender_prioritize  # every fitting node: kube-scheduler's scoring picks
        contended = None if prioritize else self._contended()
        if (names is not None and len(node_names) > FULL_EVALUATION_MAX_NODES and not verbose and not prioritize
                and not preq.scored):  # (a vendor score term needs every node fitted: select_node)
            sel = self._first_fit(names, preq, index, contended)
            return sel, [(sel.node, sel.score)] if sel.node else []
        if verbose or prioritize or contended is not None or len(node_names) <= FULL_EVALUATION_MAX_NODES:
            # HAMi fits every node; its FilteringSucceed text counts them all. Small candidate lists
            # cost little, so they get HAMi's exact message; big ones stop at the first fit.
            fits, failed = evaluate_nodes(index.nodes, node_names, preq)
            if verbose:
                self._log_decisions(ns, name, preq, node_names, fits, failed, index)
            if fits:
                best = choose(fits, contended, self._tie_rank)
                sel = Selection(best.node, best.devices, best.score, best.mig, failed, len(fits))
            else:
                sel = Selection(None, (), 0.0, (), failed, 0)
            return sel, [(r.node, r.score) for r in fits]
        sel = select_node(index.nodes, node_names, preq)
        return sel, [(sel.node, sel.score)] if sel.node else []

    def _first_fit(self, names, preq: PodRequest, index: UsageIndex,
                   contended: Callable[[str], int] | None) -> Selection:
        """select_node's answer from the candidate order kept between requests (nodeorder.py); a node
        contended by this replica's burst only when no other node fits (contention.py): the walk
        passes such nodes by and fits them, least contended first, only when no other node fits."""
        walk = first_fit(names, index.nodes, index.changes, node_order_descending(preq.node_policy),
                         lambda n: try_pod(n, preq), need=memory_need(preq), pending=contended,
                         tie_rank=self._tie_rank if contended is not None else None)
        if walk.node is None:
            return Selection(None, (), 0.0, (), walk.failed, walk.tried)
        devices, mig = walk.fit
        return Selection(walk.node, devices, walk.usage.score_value, mig, walk.failed, walk.tried)

    def _contended(self) -> Callable[[str], int] | None:
        """The contention key of each node for this decision (contention.py); None: this replica has
        no burst pending, so nothing bends the policy."""
        if not self.avoid_locked:
            return None
        now = self.monotonic()
        others = self._others_active(now)
        self.contention.observe(self.state.lock_hold.seconds, now, others)
        if not (self._held.per_node or self._binds or any(self.own_lock(n) for n in self.state.locked)):
            return None
        pending = own_pending(self._held.per_node, self._binds, self.own_lock)
        if not others:
            # No other scheduler's lock seen (OTHERS_SEEN_S; the node watch looked within 0.1 s):
            # only our own burst contends, and a table of its nodes (the window of its latest
            # decisions, kept from decision to decision) answers the walk with a dict read per node
            # instead of a key worked out per node (docs/performance.md).
            table = self.contention.latest(pending, self._held.per_node)
            if table is not None:
                return table.get
        return self.contention.keyer(pending, self._foreign_active(now))

    def _others_active(self, now: float) -> bool:
        """Whether another scheduler's lock was seen within OTHERS_SEEN_S (the node watch, looked
        at most every 0.1 s): then a burst is not packed (contention.py)."""
        if now - self._others_checked >= 0.1 or now < self._others_checked:
            self._others_checked = now
            if any(not self.own_lock(n) for n in self.state.locked):
                self._others_seen = now
        return now - self._others_seen < OTHERS_SEEN_S

    def own_lock(self, node: str) -> bool:
        """Whether the lock the node watch shows on `node` is one our binder took (until the device
        plugin releases it at Allocate)."""
        held = self.state.lock_holders.get(node)
        if held is None:
            return False
        key = f"{held[0]}/{held[1]}"
        return self._locked_for.get(node) == key or self._locking.get(node) == key

    def _foreign_active(self, now: float) -> Callable[[str], bool]:
        """Nodes another scheduler is binding to: its lock on them now, or released within
        FOREIGN_HOLDS holds (its next bind there is near); this replica's burst leaves them to it."""
        locked, holders, hold = self.state.locked, self.state.lock_holders, self.state.lock_hold
        ours = self._locked_for
        window = FOREIGN_HOLDS * hold.seconds

        def active(node: str) -> bool:
            if node in locked:
                held = holders.get(node)
                return held is not None and ours.get(node) != f"{held[0]}/{held[1]}"
            last = hold.released.get(node)
            return last is not None and now - last[0] < window and last[1] != ours.get(node, "")

        return active

    def _tie_rank(self, node: str) -> int:
        """contention.rank, kept per node (fixed for this replica): the walk ranks every node of a
        tie, and hashing one is most of a rank's cost."""
        r = self._ranks.get(node)
        if r is None:
            if len(self._ranks) > 4 * len(self.state.index.nodes) + 1024:  # nodes that went away
                self._ranks.clear()
            r = self._ranks[node] = rank(self.identity, node)
        return r

    def _log_decisions(self, ns, name, preq, node_names, fits, failed, index: UsageIndex) -> None:
        pod = f"{ns}/{name}"
        for r in fits:
            log.v(2).info("Node score", pod=pod, node=r.node, score=round(r.score, 2))
        if not log.enabled(4):
            return
        wanted = [
            f"{r.nums}x(mem={r.memreq or (str(r.mempercentagereq) + '%')},cores={r.coresreq})"
            for r in (x for e in preq.requests for x in flat_requests(e))
        ]
        for r in fits:
            log.v(4).info("Node fits", pod=pod, node=r.node, requested=wanted,
                          available=available(index.node(r.node)))
        for node, reason in failed.items():
            log.v(4).info("Node filtered out", pod=pod, node=node, reason=reason, requested=wanted,
                          available=available(index.node(node)))

    # ------------------------------------------------------------------ /filter, full-Nodes mode

    def select_in_nodes(self, preq: PodRequest, scanned, items: list) -> tuple[Selection,
                                                                                    list[str], dict[str, Any]]:
        """HAMi's choice among the Nodes a full-Nodes /filter carries (nothing is held or written,
        as in HAMi): the selection, the candidates' names and name -> the Node (a nodescan.py
        ScannedNode when `scanned`, the body's Node objects `items` otherwise)."""
        index = self.state.index
        usages: dict[str, NodeUsage] = {}
        by_name: dict[str, Any] = {}
        names = []
        if scanned is not None:
            registered, known = self.state.registered, index.nodes
            for sn in scanned:
                nname = sn.name
                names.append(nname)
                by_name[nname] = sn
                reg = registered.get(nname)
                # The common case inline: the watch already knows this registration and its usage
                # (sn.known: the registration this same Node text was last found equal to).
                if reg is not None and nname in known:
                    if sn.known is reg:
                        usages[nname] = known[nname]
                        continue
                    text = sn.register
                    if text is not None and reg.register == text:
                        sn.known = reg
                        usages[nname] = known[nname]
                        continue
                u = self.node_usage(sn.node(), index)  # decoded here only for nodes the cache lacks
                if u is not None:
                    usages[nname] = u
        else:
            for node in items:
                nname = (node.get("metadata") or {}).get("name", "")
                names.append(nname)
                by_name[nname] = node
                u = self.node_usage(node, index)
                if u is not None:
                    usages[nname] = u
        return select_node(usages, names, preq), names, by_name

    def node_usage(self, node: dict, index: UsageIndex) -> NodeUsage | None:
        """The usage of a Node object a full-Nodes request carries: the cache's when it knows the
        same registration, else decoded here (once per registration text) with the pod cache's usage."""
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        annos = meta.get("annotations") or {}
        text = annos.get(codec.REGISTER_ANNOTATION)
        reg = self.state.registered.get(name)
        if text is not None and reg is not None and reg.register == text:  # NVIDIA only, known to the cache
            cached = index.node(name)
            if cached is not None:
                return cached
            devices = reg.devices
        else:
            vendors = self.config.vendors
            extra = ""
            if vendors is not None and vendors.others:
                extra = registration_signature(annos, (node.get("status") or {}).get("capacity") or {}, vendors,
                                               meta.get("labels"))
            if not extra and text is None:
                return None
            # NVIDIA only: keyed by the register text; with other vendors (annotations, capacity,
            # labels) by the same signature the node watch uses, decoded as it does.
            sig = text if not extra else f"{text or ''}\x00{extra}"
            if extra and reg is not None and reg.register == sig:
                cached = index.node(name)
                if cached is not None:
                    return cached
            cache_key = sig if not extra else f"{name}\x00{sig}"  # capacity cards are named after the node
            devices = self._decoded.get(cache_key)
            if devices is None:
                if extra:
                    _sig, dec = self.state.registration_of(node)
                    devices = dec.devices if dec is not None and not dec.error else ()
                else:
                    try:
                        devices = tuple(codec.decode_node_devices(text))
                    except codec.CodecError:
                        devices = ()
                if len(self._decoded) > 16384:
                    self._decoded.clear()
                self._decoded[cache_key] = devices
        if not devices:
            return None
        # A node the cache does not know as usable: build its usage from the pod cache.
        tmp = UsageIndex(self.config.nvidia, self.config.vendors)
        usage = tmp.set_node(name, devices, codec.decode_device_cordon(
            (meta.get("annotations") or {}).get(codec.CORDON_ANNOTATION)))
        for key in index.pods_on(name):
            rec = index.pod(key)
            if rec is not None:
                tmp.add_pod(key, name, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                            init_released=rec.init_released, mig=rec.mig, app_class=rec.app_class)
        return usage

    # ------------------------------------------------------------------ the commit

    def commit(self, pod: dict, uid: str, node: str, devices, mig, *, written: bool = False) -> Assumed:
        """Make a placement: its annotations (every vendor's own keys, vgpu-node, vgpu-time, MIG),
        the devices counted in the usage index (a concurrent /filter sees them taken), the QoS
        policy MetaX sGPU cards switch to, the decision held for /bind. `written`: the caller
        writes the annotations on the pod itself now (HAMi's flow), so /bind does not carry them."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name", "")
        annos = meta.get("annotations") or {}
        index = self.state.index
        now = self.clock()
        usage = index.node(node)
        annotations = {
            VGPU_NODE: node,
            codec.VGPU_TIME_ANNOTATION: codec.encode_unix_seconds(now),
            **allocation_annotations(devices, self.config.vendors, now, node, pod,
                                     drs=getattr(usage, "drs", None), node_usage=usage),
        }
        if mig:
            annotations[codec.MIG_ALLOCATIONS_ANNOTATION] = codec.encode_mig_allocations(
                codec.MigAllocation(c, d, u, p, pl) for c, d, u, p, pl in mig)
        index.remove_pod(uid)  # a re-fit moves the pod's record (none left after /filter's drop: a no-op)
        num_init = len((pod.get("spec") or {}).get("initContainers") or [])
        index.add_pod(uid, node, devices, namespace=ns, num_init=num_init,
                      mig=tuple([(u, pl) for _, _, u, _, pl in mig]) if mig else (),
                      app_class=annos.get(METAX_APP_CLASS, ""))
        sgpu = self._sgpu_types
        if sgpu and not sgpu.isdisjoint([cd.type for ctr in devices for cd in ctr]):
            index.expect_qos(node, devices, annos.get(METAX_QOS, ""), sgpu)
        self.sweep(now)
        decision = Assumed(node, ns, name, devices, now, None if written else annotations)
        self._held[uid] = decision
        if written:
            return Assumed(node, ns, name, devices, now, annotations)  # the caller's copy to patch
        return decision

    def drop(self, uid: str) -> None:
        """Undo a commit whose write failed: the devices are free, nothing is held."""
        self.state.index.remove_pod(uid)
        self._held.pop(uid, None)

    def forget(self, uid: str) -> None:
        """/bind wrote the decision (or the pod is gone): it is no longer held here."""
        self._held.pop(uid, None)

    def sweep(self, now: float) -> None:
        """Forget decisions /bind never wrote (at most every few seconds; O(held decisions))."""
        if now - self._swept < 5.0:
            return
        self._swept = now
        for uid, a in list(self._held.items()):
            if now - a.at > ASSUME_TTL and a.annotations is not None:
                cached = self.state.pod(a.namespace, a.name)
                if VGPU_NODE not in (((cached or {}).get("metadata") or {}).get("annotations") or {}):
                    self.state.index.remove_pod(uid)
                self._held.pop(uid, None)

    # ------------------------------------------------------------------ /bind

    def bind_started(self, node: str) -> None:
        self._binds[node] = self._binds.get(node, 0) + 1

    def lock_writing(self, node: str, key: str | None) -> None:
        """Our binder is taking `node`'s lock for pod `key` ("ns/name"; None: it gave up): a lock
        the watch shows for that pod is ours before lock_taken."""
        if key is None:
            self._locking.pop(node, None)
        else:
            self._locking[node] = key

    def lock_taken(self, node: str, key: str) -> None:
        """Our binder holds `node`'s lock for pod `key` ("ns/name") until the device plugin releases it."""
        self._locked_for[node] = key
        self._locking.pop(node, None)

    def bind_ended(self, node: str) -> None:
        left = self._binds.get(node, 1) - 1
        if left > 0:
            self._binds[node] = left
        else:
            self._binds.pop(node, None)

    def place_on(self, pod: dict, node: str) -> Assumed | str:
        """Fit `pod` on `node` now and commit it (a /bind without this replica's /filter decision
        for that node: another replica filtered, or kube-scheduler chose another of the fitting
        nodes under --extender-prioritize); the fit's reason when it does not fit."""
        _kept, placed, reason = self._place(pod, node, None, ())
        return placed if placed is not None else (reason or "no placement fits")

    def recheck(self, pod: dict, node: str, devices) -> tuple[bool, Assumed | None, str]:
        """/bind's re-check under the node lock: the fit /filter runs (`try_pod`, the same
        PodRequest, this index without the pod), first on the devices /filter chose alone
        (recheck.py). (True, None, "") when it gives them back; else the pod fitted on the whole
        node again and committed: (False, placement to write, ""), or (False, None, the fit's reason)."""
        return self._place(pod, node, chosen_ids(devices), devices)

    def _place(self, pod: dict, node: str, keep_ids: frozenset[str] | None,
               keep) -> tuple[bool, Assumed | None, str]:
        """(the kept devices still fit, else a new placement on `node` or None, the fit's reason)."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name", "")
        uid = meta.get("uid") or f"{ns}/{name}"
        try:
            requests, num_init = self.requests_fn(pod)
        except ValueError as exc:
            return False, None, str(exc)
        index = self.state.index
        held = index.pod(uid)
        index.remove_pod(uid)
        try:
            preq = self.pod_request(requests, num_init, meta.get("annotations") or {}, ns, name)
            if isinstance(preq, str):
                return False, None, preq
            usage = index.node(node)
            if keep_ids is not None and usage is not None:
                got = try_pod(only_devices(usage, keep_ids), preq)
                if got.__class__ is not str and same_placement(got[0], keep):
                    return True, None, ""
            fits, failed = evaluate_nodes(index.nodes, [node], preq)
        finally:
            if held is not None:
                index.add_pod(uid, held.node, held.devices, namespace=held.namespace, num_init=held.num_init,
                              init_released=held.init_released, mig=held.mig, app_class=held.app_class)
        if not fits:
            return False, None, failed.get(node, "")
        best = fits[0]
        return False, self.commit(pod, uid, node, best.devices, best.mig), ""

    # ------------------------------------------------------------------ pods with DRA claims (--dra)

    def serves_claims(self, pod: dict) -> bool:
        """A pod whose devices DRA allocates (claims, or extended resources a DeviceClass maps) under --dra."""
        return self.dra is not None and self.dra.serves(pod)

    def filter_claims(self, pod: dict, names: list[str]) -> dict | Coroutine[Any, Any, dict]:
        """/filter for a pod with claims: the answer, or, before the watches list or the pod's claims
        are cached, a coroutine that waits for them (bounded) and answers."""
        if self.dra.waits(pod):
            return self._filter_claims_when_ready(pod, names)
        return self.place_claims(pod, names, self.dra.claims_of(pod)[0])

    async def _filter_claims_when_ready(self, pod: dict, names: list[str]) -> dict:
        error = await self.dra.ready(pod)
        return {"Error": error} if error else self.place_claims(pod, names, self.dra.claims_of(pod)[0])

    def claim_usage(self) -> Usage:
        """The DRA devices taken: allocated claims and the held allocations not written yet (expired dropped)."""
        now = self.monotonic()
        for key in [k for k, h in self._held_claims.items() if h.until <= now]:
            del self._held_claims[key]
        store = self.dra.claims.store
        return claimwalk.usage_with(store.values(), self._held_claims, store)

    def claim_fills(self, names: list[str], usage: Usage) -> dict[str, float]:
        """Each node's GPU fill from the slices and `usage` (claimfit.node_fill)."""
        inv = self.dra.devices()
        return {n: claimfit.node_fill(inv.pools_for(self.state.node(n) or n), usage) for n in names}

    def claim_policy(self, pod: dict) -> str:
        return node_policy_for((pod.get("metadata") or {}).get("annotations"), self.cfg.node_scheduler_policy)

    def place_claims(self, pod: dict, names: list[str], claims: list[dict]) -> dict:
        """The pod's node policy over the nodes its claims fit (placement.claimwalk), the allocation on
        the answered node held until kube-scheduler writes the claim."""
        dra = self.dra
        usage = self.claim_usage()
        fills = self.claim_fills(names, usage)
        policy = self.claim_policy(pod)
        mapping = dra.class_mapping()
        stored = dra.claims.store
        out = claimwalk.walk(
            claimfit.order(names, fills, policy),
            lambda n: claimwalk.claims_on_node(pod, claims, mapping, self.state.node(n) or {}),
            lambda n: self.state.node(n) or n, dra.devices(), usage, dict(dra.classes.store), self.allocator,
            self.work_clock, prioritize=self.cfg.extender_prioritize, known=stored.__contains__)
        key = podclaims.pod_key(pod)
        if out.undecided:
            log.v(2).info("The pod's claims were not worked out within /filter's bounds; kube-scheduler's "
                          "allocator decides on the nodes left", pod=key, nodes=out.undecided,
                          seconds=claimwalk.FILTER_BUDGET_SECONDS, steps=claimwalk.FILTER_MAX_STEPS)
        elif out.node is None:
            log.v(2).info("No node fits the pod's claims", pod=key, nodes=len(names))
        else:
            until = self.monotonic() + claimwalk.ASSUME_SECONDS
            for claim_key, allocation in out.hold.items():
                self._held_claims[claim_key] = HeldClaim(allocation, until, out.node)
            log.v(4).info("Claims placed", pod=key, node=out.node, fill=round(fills[out.node], 2), policy=policy)
        return out.answer

    def claim_event(self, etype: str, old, new) -> None:
        """The claim informer: a held allocation ends when its claim shows one (kube-scheduler wrote it) or goes."""
        key = podclaims.pod_key(new or old or {})
        if key in self._held_claims and (new is None or (new.get("status") or {}).get("allocation")):
            del self._held_claims[key]

    def claim_scores(self, pod: dict, names: list[str]) -> list[dict]:
        """/prioritize for a pod with claims: 0..10 by fill, per its node policy."""
        return claimfit.scores(names, self.claim_fills(names, self.claim_usage()), self.claim_policy(pod))

    # ------------------------------------------------------------------ /prioritize, GPU preemption

    def fits_without(self, uid: str, names, preq: PodRequest) -> list:
        """The nodes of `names` the pod fits, best first, scored as they are without the pod's own
        held placement (/prioritize: kube-scheduler weighs HAMi's score of every candidate)."""
        index = self.state.index
        own = index.pod(uid)
        if own is not None:
            index.remove_pod(uid)
        try:
            return evaluate_nodes(index.nodes, names, preq)[0]
        finally:
            if own is not None:
                index.add_pod(uid, own.node, own.devices, namespace=own.namespace, num_init=own.num_init,
                              init_released=own.init_released, mig=own.mig, app_class=own.app_class)


    def share_failures(self, pod: dict, node_names) -> tuple[PodRequest, dict[str, str]] | None:
        """/filter's fit of `pod` on `node_names` without deciding anything (GPU preemption on the
        leader, for a pod another replica's /filter refused): its request and the failed nodes' reasons."""
        preq = self.request_of(pod)
        if not isinstance(preq, PodRequest):
            return None
        return preq, evaluate_nodes(self.state.index.nodes, list(node_names), preq)[1]


def available(node: NodeUsage | None) -> list[str]:
    """A node's free share of each device, for the verbose decision logs."""
    if node is None:
        return []
    return [
        f"{d.id}:slots={d.count - d.used}/{d.count},mem={d.totalmem - d.usedmem}/{d.totalmem},"
        f"cores={d.totalcore - d.usedcores}/{d.totalcore}"
        for d in node.devices
    ]
