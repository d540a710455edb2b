"""`hami --role scheduler`: the extender, its watches, the handshake, leases and metrics, wired.

Tasks (all named, all stopped by ctx.stop): node and pod informers -> ClusterState; the event
writer; the handshake writer (leader only with --leader-elect); a 15 s re-judge of the nodes whose
handshake verdict may change with time (no API calls, nothing when none is due); the lease elector; the TLS certificate
watchers.

Listeners, by who may reach them: /filter and /bind on --http_bind (loopback, where kube-scheduler
runs as a sidecar, or mTLS with --client-ca-file); /webhook on --webhook-bind-address (TLS, behind
the Service), or on the extender listener when that flag is empty; /metrics on
--metrics-bind-address. /healthz and /readyz on each. Profiling only on the loopback debug
listener (hami.app), never here.
"""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from hami.config import Config, SchedulerSettings, check_listener_trust, replace
from hami.device import codec
from hami.device.vendorrequest import pod_vendor_requests
from hami.dra.claims import DEVICE_CLASS
from hami.dra.templates import TemplateMaker, TemplateReconciler
from hami.kube.access import AccessProbe
from hami.kube.client import KubeClient
from hami.kube.events import EventRecorder
from hami.kube.informer import Informer
from hami.kube.lanes import CRITICAL
from hami.kube.leader import LeaderElector
from hami.kube.listgc import GcAroundLists
from hami.kube.liveness import ApiLiveness
from hami.kube.nodelock import NodeLocker
from hami.obs.health import Health
from hami.obs.log import get_logger
from hami.scheduler.admission import draquota
from hami.scheduler.admission import webhook as webhookmod
from hami.scheduler.admission.admitted import AdmissionMarks
from hami.scheduler.admission.missed import MissedPods
from hami.scheduler.admission.quotaledger import QuotaLedger
from hami.scheduler.cache.drawatch import DraWatch
from hami.scheduler.cache.handshake import Handshaker, Verdict
from hami.scheduler.cache.lockhistory import LockHistory
from hami.scheduler.cache.state import ClusterState
from hami.scheduler.cache.waker import Waker
from hami.scheduler.extender.bind import Binder
from hami.scheduler.extender.labeler import PodLabeler
from hami.scheduler.extender.server import CertReloader, Extender, bound_port, serve
from hami.scheduler.extender.verbs import ExtraVerbs
from hami.scheduler.metrics import MigInstance, PodAlloc, QuotaUse, SchedulerMetrics, Snapshot, serve_metrics
from hami.scheduler.placement import WRITES_PER_BIND, messages
from hami.scheduler.placement.podshape import RequestMemo
from hami.scheduler.placement.usage import Quota, QuotaView
from hami.scheduler.placer import Placer
from hami.scheduler.preemption.controller import PreemptController, gpu_preemption_counters
from hami.scheduler.relay import Relay

log = get_logger(__name__)

RECHECK_S = 15.0


def node_selector_text(pairs: tuple[tuple[str, str], ...]) -> str | None:
    return ",".join(f"{k}={v}" for k, v in pairs) or None


def make_requests_fn(config: Config):
    nvidia = config.nvidia
    vendors = config.vendors
    # a burst's pods share a template: their requests are read once (podshape.py)
    memo = RequestMemo(lambda pod: pod_vendor_requests(pod, vendors, nvidia))

    def requests_fn(pod: dict):
        reqs = memo(pod)
        n_init = len((pod.get("spec") or {}).get("initContainers") or [])
        return list(reqs), n_init

    return requests_fn


def usage_snapshot(state: ClusterState) -> Snapshot:
    index = state.index
    devices = []
    for name in sorted(index.nodes):
        for d in index.nodes[name].devices:
            devices.append((name, d))
    pods = []
    for uid, key in state.uid_keys.items():
        rec = index.pod(uid)
        if rec is None:
            continue
        ns, _, pname = key.partition("/")
        spec = ((state.pods.store.get(key) if state.pods is not None else None) or {}).get("spec") or {}
        names = [str(c.get("name", "")) for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                 if isinstance(c, dict)]
        for cidx, ctr in enumerate(rec.devices):
            for dev in ctr:
                pods.append(PodAlloc(ns, rec.node, pname, cidx, dev.uuid, dev.usedmem, dev.usedcores, dev.type,
                                     names[cidx] if cidx < len(names) else ""))
    migs = []
    for uid, key in state.uid_keys.items():
        pod = state.pods.store.get(key) if state.pods is not None else None
        text = ((pod or {}).get("metadata") or {}).get("annotations", {}).get(codec.MIG_ALLOCATIONS_ANNOTATION)
        rec = index.pod(uid)
        if not text or rec is None:
            continue
        try:
            allocations = codec.decode_mig_allocations(text)
        except codec.CodecError:
            continue  # a damaged annotation is reported where it is used, not by the metrics scrape
        node = index.nodes.get(rec.node)
        card_index = {d.id: d.index for d in node.devices} if node is not None else {}
        for a in allocations:
            migs.append(MigInstance(
                rec.node, a.gpu_uuid, card_index.get(a.gpu_uuid, a.device_index), a.mig_uuid, a.profile,
                "" if a.gpu_instance_id is None else str(a.gpu_instance_id),
                "" if a.compute_instance_id is None else str(a.compute_instance_id),
                a.placement.start, a.placement.size))
    quotas = []
    for ns in sorted(index.quota_namespaces()):
        for resource, (used, limit) in sorted(index.quota_used(ns).items()):
            quotas.append(QuotaUse(ns, resource, used, limit))  # usage without a limit too, as HAMi's
    return Snapshot(tuple(devices), tuple(pods), tuple(quotas), tuple(migs))


@dataclass
class Scheduler:
    """Everything the role builds; tests build it the same way through `start_scheduler`."""

    config: Config
    client: KubeClient
    state: ClusterState
    events: EventRecorder
    extender: Extender
    placer: Placer
    binder: Binder
    locker: NodeLocker
    handshaker: Handshaker
    metrics: SchedulerMetrics
    leader: LeaderElector | None = None
    waker: Waker | None = None
    pdbs: Informer | None = None
    access: AccessProbe | None = None  # RBAC for the writes /bind needs (SelfSubjectAccessReviews)
    preempter: Any = None  # hami.scheduler.preemption.controller.PreemptController with --gpu-preemption
    labeler: PodLabeler | None = None  # hami.io/vgpu-node after the binding (labeler.py)
    runners: list = field(default_factory=list)
    listeners: list = field(default_factory=list)  # (name, runner) of each listener (hami.listeners' names)
    tasks: list = field(default_factory=list)
    port: int = 0
    metrics_port: int = 0
    webhook_port: int = 0
    health: Health = field(default_factory=lambda: Health("scheduler"))
    liveness: ApiLiveness | None = None  # is the API server answering (a /readyz check)
    missed: MissedPods | None = None  # pods created while the webhook was down
    templates: TemplateReconciler | None = None  # --dra: claim templates of admitted pods
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _hs_pending: dict = field(default_factory=dict)
    handshakes_queued: int = 0  # handshake writes the cache decided on (queued for the writer)
    handshakes_done: int = 0  # of those, the ones the writer has handled (written, refused, or not leader)
    _hs_wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        scheme = "https" if self.config.scheduler.cert_file and self.config.scheduler.key_file else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def webhook_url(self) -> str:
        """Where /webhook is served: its own listener when configured, else the extender's."""
        if not self.webhook_port:
            return self.url
        scheme = "https" if self.config.scheduler.cert_file and self.config.scheduler.key_file else "http"
        return f"{scheme}://127.0.0.1:{self.webhook_port}"

    def readiness(self) -> list[str]:
        reasons = self.extender.readiness()
        if self.access is not None:
            reasons.extend(self.access.reasons())
        if not self.state.synced:
            reasons.insert(0, "caches not synced yet")
        return reasons

    def queue_handshake(self, node: dict, verdict: Verdict) -> None:
        key = ((node.get("metadata") or {}).get("name", ""), verdict.key)
        if key not in self._hs_pending:  # a newer verdict for a queued node replaces it: one handling
            self.handshakes_queued += 1
        self._hs_pending[key] = (node, verdict)
        self._hs_wake.set()

    async def handshake_writer(self) -> None:
        while not self.stop.is_set():
            if not self._hs_pending:
                self._hs_wake.clear()
                await _wait_either(self._hs_wake, self.stop)
                continue
            name, (node, verdict) = next(iter(self._hs_pending.items()))
            del self._hs_pending[name]
            try:
                await self.state.handshaker_for(verdict.key).apply(node, verdict)
            finally:
                self.handshakes_done += 1

    async def rechecker(self) -> None:
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), RECHECK_S)
            except TimeoutError:
                self.state.recheck()

    async def wait_synced(self, timeout: float | None) -> bool:
        """Wait for the first LIST of every informer, then move what it built out of the GC's way.

        The cache holds hundreds of thousands of dicts; a full collection walking them costs tens
        of milliseconds and lands on some /filter call (the p99). Freezing them once after the
        initial sync removes that work; they are still freed by reference counting.
        """
        ok = await self.state.wait_synced(timeout)
        if ok:
            gc.collect()
            gc.freeze()
        return ok

    async def close(self) -> None:
        self.stop.set()
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for r in self.runners:
            await r.cleanup()
        self.extender.close()
        await self.client.close()


def _node_labels(state: ClusterState, name: str) -> dict | None:
    node = state.node(name)
    return None if node is None else ((node.get("metadata") or {}).get("labels") or {})



def quota_ledger(client: KubeClient, config: Config, state: ClusterState, dra: DraWatch) -> QuotaLedger:
    """--dra: the namespace quotas the webhook keeps against claims (admission.draquota, quotaledger)."""
    nv = config.nvidia

    def in_ns(store: dict, ns: str) -> list:
        return [o for o in store.values() if (o.get("metadata") or {}).get("namespace") == ns]

    def quotas_of(ns: str) -> list:
        return in_ns(state.quotas.store if state.quotas is not None else {}, ns)

    def device_plugin_pods(ns: str) -> draquota.Amounts:
        view = state.index.quota_view(ns)
        return draquota.device_plugin_usage(quotas_of(ns), nv.resource_count_name,
                                            view.mem.used if view is not None and view.mem else 0,
                                            view.cores.used if view is not None and view.cores else 0)

    return QuotaLedger(
        client,
        claims_of=lambda ns: in_ns(dra.claims.store, ns),
        pods_of=lambda ns: in_ns(state.pods.store if state.pods is not None else {}, ns),
        claim_exists=lambda key: key in dra.claims.store,
        quotas_of=quotas_of,
        device_class=DEVICE_CLASS,
        names=(nv.resource_count_name, nv.resource_memory_name, nv.resource_core_name),
        memory_factor=nv.memory_factor, others_of=device_plugin_pods)


def with_claims(view: QuotaView | None, held: draquota.Amounts) -> QuotaView | None:
    """HAMi's quota view of a namespace with what its claims hold added (a mixed namespace, --dra)."""
    if view is None or not (held.mem or held.cores):
        return view
    return QuotaView(Quota(view.mem.used + held.mem, view.mem.limit) if view.mem else None,
                     Quota(view.cores.used + held.cores, view.cores.limit) if view.cores else None,
                     view.memory_factor)


async def reserve_then_answer(ledger: QuotaLedger, out: dict, ns: str, rid: str, want: draquota.Amounts) -> dict:
    """The webhook's answer once the pod's quota reservation is written, or its refusal."""
    response = out.get("response") or {}
    if not response.get("allowed"):
        return out
    try:
        why = await ledger.reserve(ns, rid, want, webhookmod.RESERVATION_ANNOTATION)
    except Exception as exc:  # noqa: BLE001 - refuse rather than answer 500 (a failing webhook admits unchecked)
        log.warning("DRA quota reservation failed", namespace=ns, error=str(exc))
        why = f"{draquota.EXCEEDING}: could not reserve: {exc}"
    if why:
        response.pop("patch", None)
        response.pop("patchType", None)
        response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": why})
    return out

async def _wait_either(a: asyncio.Event, b: asyncio.Event) -> None:
    ta, tb = asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())
    try:
        await asyncio.wait({ta, tb}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ta.cancel()
        tb.cancel()


async def start_scheduler(config: Config, *, client: KubeClient | None = None, serve_metrics_too: bool = True,
                          clock: Any = None, identity: str | None = None) -> Scheduler:
    """Build and start every piece; returns once the servers listen (informers still syncing).

    In order: the cache and its informers, placement and binding, the background controllers
    (requeue waker, GPU preemption), the metrics, admission (the webhook and its quotas), the
    extender and the controllers that watch admission (missed pods, claim templates); then the
    listeners and the tasks.
    """
    import time as _time

    clock = clock or _time.time
    sc = config.scheduler
    check_listener_trust(sc, config.debug)  # also for configs built in code, not only from flags
    client = client or await KubeClient.from_settings(config.kube, role="scheduler")
    identity = identity or config.kube.pod_name or f"{socket.gethostname()}-{os.getpid()}"
    events = EventRecorder(client, sc.scheduler_name, instance=identity, clock=clock,  # bound pods' events first
                           supersedes={messages.BINDING_SUCCEED: (messages.FILTERING_SUCCEED,)})
    # Calls made before who answers them exists (relay.py): leadership -> the cache's re-judge,
    # handshake verdicts -> the writer, capacity -> the requeue waker, /filter's no-fit -> the waker
    # and the GPU preemption controller.
    leadership, handshake_writes, capacity, no_fit = Relay(), Relay(), Relay(), Relay()
    leader = lease_elector(client, config, identity, leadership) if sc.leader_elect else None
    is_leader = leader_check(leader)
    handshaker = Handshaker(client, resource=config.nvidia.resource_count_name, clock=clock, is_leader=is_leader)
    state = cluster_cache(client, config, handshaker, leadership=leadership, handshake_writes=handshake_writes,
                          capacity=capacity)
    assert state.nodes is not None and state.pods is not None
    locker = NodeLocker(client, state.nodes, state.pod, timeout=sc.node_lock_timeout, clock=clock,
                        orphan_timeout=sc.node_lock_orphan_timeout)
    # --dra: the watches of slices, claims and classes the Placer ranks pods with claims from (cache/drawatch.py)
    dra = DraWatch(client, sync_timeout=sc.sync_timeout) if sc.dra else None
    placer = Placer(config, state, requests_fn=make_requests_fn(config), no_fit=no_fit, clock=clock,
                    identity=identity, lane_rate=client.budgets[CRITICAL].qps / WRITES_PER_BIND, dra=dra)
    history = LockHistory()  # who held each node's lock last: when /bind's re-check trusts the cache
    state.nodes.add_handler(history.on_node)
    labeler = PodLabeler(client, state.pod)  # hami.io/vgpu-node, off the critical path
    binder = Binder(client, state, locker, events, placer, history=history, on_bound=labeler.bound,
                    retry_timeout=sc.node_lock_retry_timeout, clock=clock)
    waker = requeue_waker(client, state, sc, capacity=capacity, no_fit=no_fit)
    pdbs = Informer(client, "poddisruptionbudgets")  # /preempt counts victims' PDBs
    preempter = None
    if sc.gpu_preemption:
        preempter = gpu_preempter(client, state, events, placer, pdbs, sc, is_leader, capacity=capacity,
                                  no_fit=no_fit)
    metrics = scheduler_metrics(client, state, sc, events=events, labeler=labeler, handshaker=handshaker,
                                waker=waker, preempter=preempter)
    wh_settings = webhookmod.WebhookSettings.from_config(config)
    # Reachability is judged from pods the API server admitted with this webhook's mark, never from
    # reviews received (anyone who reaches /webhook can send one): hami.scheduler.admission.admitted.
    marks = AdmissionMarks(clock=clock)
    state.pods.add_handler(marks.on_pod)
    ledger = namespaces = None
    if dra is not None:
        namespaces = Informer(client, "namespaces")  # the GPU mode per namespace (admission.gpumode)
        ledger = quota_ledger(client, config, state, dra)  # the namespace quotas the webhook keeps against claims
    webhook = admission_webhook(wh_settings, state, marks, dra=dra, ledger=ledger, namespaces=namespaces)
    ext = Extender(config, state, placer, client, events, metrics=metrics, binder=binder,
                   verbs=ExtraVerbs(placer, pdbs), webhook=webhook)
    liveness = api_liveness(client, config, state)
    missed = missed_pods(client, events, sc, placer, marks, is_leader)
    templates = None
    if wh_settings.dra:  # --dra: the claim templates of pods that exist, in their own namespaces (hami.dra.templates)
        templates = TemplateReconciler(TemplateMaker(client), is_leader=is_leader)
    s = Scheduler(config, client, state, events, ext, placer, binder, locker, handshaker, metrics, leader, waker,
                  pdbs, AccessProbe(client), labeler=labeler, preempter=preempter, liveness=liveness, missed=missed,
                  templates=templates)
    handshake_writes.connect(s.queue_handshake)
    s.health.add(s.readiness)
    s.health.add(liveness.reasons)
    reloaders = await listen(s, serve_metrics_too=serve_metrics_too)
    spawn_tasks(s, namespaces=namespaces, dra=dra, reloaders=reloaders)
    log.info("Scheduler extender listening", address=sc.http_bind, port=s.port, mtls=bool(sc.client_ca_file),
             webhook=sc.webhook_bind_address or sc.http_bind, metrics=sc.metrics_bind_address,
             scheduler_name=sc.scheduler_name, leader_elect=sc.leader_elect)
    return s


def lease_elector(client: KubeClient, config: Config, identity: str, leadership: Relay) -> LeaderElector:
    """--leader-elect: the lease this replica competes for; `leadership` hears each change."""
    sc = config.scheduler
    return LeaderElector(client, sc.leader_elect_resource_namespace or config.kube.pod_namespace,
                         sc.leader_elect_resource_name or "hami-scheduler", identity, on_change=leadership)


def leader_check(leader: LeaderElector | None) -> Callable[[], bool]:
    """Whether this replica may write now: the lease holder with --leader-elect, always without."""
    return (lambda: leader.is_leader) if leader is not None else (lambda: True)


def cluster_cache(client: KubeClient, config: Config, handshaker: Handshaker, *, leadership: Relay,
                  handshake_writes: Relay, capacity: Relay) -> ClusterState:
    """The informers' cache: nodes, pods and quotas, re-judged in full when this replica becomes leader."""
    state = ClusterState(client, config.nvidia,
                         node_label_selector=node_selector_text(config.scheduler.node_label_selector),
                         handshaker=handshaker, vendors=config.vendors, on_handshake_write=handshake_writes,
                         on_capacity=capacity)
    leadership.connect(lambda is_leader: state.recheck(everything=True) if is_leader else None)
    gc_around_lists = GcAroundLists()  # a re-list must not hold /filter behind full collections (listgc.py)
    for informer in state.informers():
        informer.on_list = gc_around_lists
    return state


def requeue_waker(client: KubeClient, state: ClusterState, sc: SchedulerSettings, *, capacity: Relay,
                  no_fit: Relay) -> Waker:
    """Wakes of parked pods when GPU capacity frees (background, rate-limited): hami.scheduler.cache.waker."""
    waker = Waker(client, lambda: state.index, rate=sc.requeue_wakes_per_second,
                  burst=max(1, int(sc.requeue_wakes_per_second)), labels_of=lambda n: _node_labels(state, n))
    capacity.connect(waker.capacity_changed)
    no_fit.connect(waker.note_failure)
    assert state.pods is not None
    state.pods.add_handler(waker.on_pod)
    return waker


def gpu_preempter(client: KubeClient, state: ClusterState, events: EventRecorder, placer: Placer, pdbs: Informer,
                  sc: SchedulerSettings, is_leader: Callable[[], bool], *, capacity: Relay,
                  no_fit: Relay) -> PreemptController:
    """--gpu-preemption (hami.scheduler.preemption.controller): evictions for GPU-share-short pods."""
    preempter = PreemptController(
        client, state, events, placer, pdbs=pdbs, classes=Informer(client, "priorityclasses"),
        hold_timeout=sc.gpu_preemption_hold_timeout, is_leader=is_leader,
        scheduler_names=frozenset({sc.scheduler_name}) if sc.scheduler_name else frozenset())
    no_fit.connect(preempter.note_failure)
    assert state.pods is not None
    state.pods.add_handler(preempter.on_pod)
    capacity.connect(preempter.cluster_changed)  # what could help a pending pod: look at it again
    preempter.watch_cluster()
    return preempter


def scheduler_metrics(client: KubeClient, state: ClusterState, sc: SchedulerSettings, *, events: EventRecorder,
                      labeler: PodLabeler, handshaker: Handshaker, waker: Waker,
                      preempter: PreemptController | None) -> SchedulerMetrics:
    """/metrics: the cache's usage snapshot, the client's requests and every piece's counters."""
    return SchedulerMetrics(
        lambda: usage_snapshot(state), lambda: client.requests, legacy=sc.legacy_metrics,
        device_uuids=sc.metrics_device_uuids,
        extra=lambda: {"hami_scheduler_events_dropped": float(events.dropped),
                       "hami_scheduler_events_superseded": float(events.superseded),
                       "hami_scheduler_labels_written": float(labeler.writes),
                       "hami_scheduler_handshake_writes": float(handshaker.writes),
                       "hami_scheduler_informer_handler_failures": float(state.handler_failures),
                       "hami_scheduler_index_rebuilds": float(state.rebuilds),
                       "hami_scheduler_informer_object_resyncs": float(state.object_resyncs),
                       "hami_scheduler_requeue_wakes": float(waker.wakes),
                       "hami_scheduler_requeue_bound_after_wake": float(waker.bound_after_wake),
                       **gpu_preemption_counters(preempter)},
        lanes=client.lane_report,
    )


def admission_webhook(wh_settings: webhookmod.WebhookSettings, state: ClusterState, marks: AdmissionMarks, *,
                      dra: DraWatch | None, ledger: QuotaLedger | None,
                      namespaces: Informer | None) -> Callable[[bytes], Any]:
    """/webhook: an AdmissionReview body -> its answer; with --dra the quota counts claims and reserves."""

    def namespace_labels(ns: str) -> dict | None:
        got = namespaces.store.get(ns) if namespaces is not None else None
        return None if got is None else (got.get("metadata") or {}).get("labels") or {}

    def quota_view(ns: str) -> QuotaView | None:
        """A device-plugin pod's quota check; with --dra it counts the namespace's claims too."""
        view = state.index.quota_view(ns)
        if dra is None or view is None:
            return view
        return with_claims(view, draquota.namespace_usage(
            [c for c in dra.claims.store.values() if (c.get("metadata") or {}).get("namespace") == ns],
            DEVICE_CLASS))

    def webhook(body: bytes) -> Any:
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"AdmissionReview: {exc}") from None
        reserved: list = []
        rid = secrets.token_hex(16) if ledger is not None else None
        out = webhookmod.mutate(review, wh_settings, quota=quota_view,
                                vendor_quota=state.index.vendor_quota_view, mark=marks.issue(),
                                dra_reservation=rid, reserved=reserved,
                                namespace_labels=namespace_labels if namespaces is not None else None)
        if not reserved or ledger is None or rid is None:
            return out
        ns = (review.get("request") or {}).get("namespace") or ""
        return reserve_then_answer(ledger, out, ns, rid, draquota.Amounts(*reserved[0]))

    return webhook


def api_liveness(client: KubeClient, config: Config, state: ClusterState) -> ApiLiveness:
    """A frozen or failing API server makes /readyz 503 within ~20 s, and 200 again a tick after it answers."""
    sc = config.scheduler
    return ApiLiveness(client, probe_after=sc.api_probe_after, unready_after=sc.api_unready_after,
                       probe_timeout=min(5.0, sc.api_probe_after),
                       heard=lambda: [i.last_heard for i in (state.nodes, state.pods, state.quotas) if i],
                       namespace=config.kube.pod_namespace or "default")


def missed_pods(client: KubeClient, events: EventRecorder, sc: SchedulerSettings, placer: Placer, marks: AdmissionMarks,
                is_leader: Callable[[], bool]) -> MissedPods:
    """Pods created while the webhook was down (hami.scheduler.admission.missed): recreated through their controller."""
    requests_fn = placer.requests_fn

    def asks_for_devices(pod: dict) -> bool:
        return any(r is not None and r.nums > 0 for r in requests_fn(pod)[0])

    return MissedPods(client, events, scheduler_name=sc.scheduler_name,
                      force_overwrite_default=sc.force_overwrite_default_scheduler,
                      asks_for_devices=asks_for_devices, webhook_answered=marks.last_admitted,
                      grace=sc.missed_webhook_grace, recreate=sc.recreate_missed_pods, is_leader=is_leader)


async def listen(s: Scheduler, *, serve_metrics_too: bool) -> list[CertReloader]:
    """The extender's listener, /webhook's own when configured, and /metrics; the TLS watchers to run."""
    sc, config, ext = s.config.scheduler, s.config, s.extender
    reloaders: list[CertReloader] = []
    ext_ssl = webhook_ssl = None
    if sc.cert_file and sc.key_file:
        reloaders.append(CertReloader(sc.cert_file, sc.key_file, client_ca_file=sc.client_ca_file))
        ext_ssl = reloaders[-1].context
        reloaders.append(CertReloader(sc.cert_file, sc.key_file))  # the API server shows no client cert
        webhook_ssl = reloaders[-1].context
    own_webhook = bool(sc.webhook_bind_address)
    app = ext.make_app(webhook=not own_webhook, health=s.health)
    runner = await serve(app, sc.http_bind, ext_ssl, config.listen,
                         fast=ext.fast_routes() if sc.extender_fast_http else None)
    s.runners.append(runner)
    s.listeners.append(("scheduler-extender", runner))
    s.port = bound_port(runner)
    if own_webhook:
        wrunner = await serve(ext.make_app(extender=False, health=s.health), sc.webhook_bind_address, webhook_ssl,
                              config.listen)
        s.runners.append(wrunner)
        s.listeners.append(("scheduler-webhook", wrunner))
        s.webhook_port = bound_port(wrunner)
    if serve_metrics_too and sc.metrics_bind_address:
        mrunner = await serve_metrics(s.metrics, sc.metrics_bind_address, s.health, config.listen)
        s.runners.append(mrunner)
        s.listeners.append(("scheduler-metrics", mrunner))
        s.metrics_port = bound_port(mrunner)
    return reloaders


def spawn_tasks(s: Scheduler, *, namespaces: Informer | None, dra: DraWatch | None,
                reloaders: list[CertReloader]) -> None:
    """Every background task, named, each stopped by `s.stop`."""
    state = s.state

    def spawn(coro, name: str) -> None:
        s.tasks.append(asyncio.create_task(coro, name=f"scheduler:{name}"))

    spawn(state.run(s.stop), "informers")
    assert s.pdbs is not None and s.access is not None and s.waker is not None
    assert s.liveness is not None and s.missed is not None and s.labeler is not None
    spawn(s.pdbs.run(s.stop), "pdb-informer")
    spawn(s.access.run(s.stop), "access-review")
    spawn(s.waker.run(s.stop), "requeue-waker")
    spawn(s.liveness.run(s.stop), "api-liveness")
    assert state.pods is not None
    state.pods.add_handler(s.missed.on_pod)
    spawn(s.missed.run(s.stop), "missed-webhook")
    if namespaces is not None:
        spawn(namespaces.run(s.stop), "namespace-informer")
    for i, informer in enumerate(dra.informers if dra is not None else ()):
        spawn(informer.run(s.stop), f"dra-informer-{i}")
    if s.templates is not None:
        state.pods.add_handler(s.templates.on_pod)
        spawn(s.templates.run(s.stop), "dra-templates")
    if s.preempter is not None:
        assert s.preempter.classes is not None
        spawn(s.preempter.classes.run(s.stop), "priorityclass-informer")
        spawn(s.preempter.run(s.stop), "gpu-preemption")
    spawn(s.events.run(s.stop), "events")
    spawn(s.labeler.run(s.stop), "labeler")
    spawn(s.handshake_writer(), "handshake")
    spawn(s.rechecker(), "recheck")
    if s.leader is not None:
        spawn(s.leader.run(s.stop), "leader")
    for i, reloader in enumerate(reloaders):
        spawn(reloader.run(s.stop), f"tls-reload-{i}")


async def run(ctx) -> None:
    config: Config = ctx.config
    if not config.kube.kubeconfig and ctx.shared.get("kubeconfig"):
        config = replace(config, kube=replace(config.kube, kubeconfig=ctx.shared["kubeconfig"]))
    s = await start_scheduler(config)
    ctx.shared["scheduler_url"] = s.url
    for name, runner in s.listeners:
        ctx.listeners.add_runner(name, runner)
    try:
        await s.wait_synced(config.scheduler.sync_timeout)
        ctx.ready.set()
        await ctx.stop.wait()
    finally:
        await s.close()

