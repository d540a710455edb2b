"""The kube-scheduler extender HTTP API (spec scheduler.md §3): /filter, /bind, /webhook, probes.

* Listeners by trust (hami.scheduler.role): /filter and /bind only where kube-scheduler reaches
  them (loopback, or mTLS with --client-ca-file); /webhook on its own TLS listener when
  --webhook-bind-address is set; /healthz and /readyz on every listener.
* /filter never re-places a pod that is already bound (its devices are in use): it answers an Error.

* JSON of k8s.io/kube-scheduler/extender/v1: PascalCase keys, read case-insensitively; every
  answer is HTTP 200 with the error in `Error`, as HAMi answers. Bodies above
  `max_request_bytes` are refused by aiohttp (413).
* NodeNames mode (nodeCacheCapable): the node usage comes from the watch-fed cache; on success
  the decision (node, devices, the annotations vgpu-node, vgpu-time, devices-to-allocate,
  devices-allocated, MIG allocations) is counted in the usage cache and held in this replica
  (`assumed`); nothing is written and no API round trip delays the answer. /bind writes it with
  bind-phase in the Binding after taking the node lock (bind.py). Nodes with more pending (decisions
  held, binds in flight, a lock) than the least busy candidate are skipped while another node fits
  (busy.py). `write_at_filter` keeps
  HAMi's flow (patch at /filter) for the benchmark's model of it.
* Full-Nodes mode: the nodes come in the request; their registrations (NVIDIA's and every other
  vendor's, as the node watch reads them) are decoded through the
  same text-keyed cache, usage from the pod cache; nothing is patched (as in HAMi).
* No API reads, ever. Events go to the EventRecorder queue and are written later.
* TLS with --cert_file/--key_file, the certificate re-read when either file changes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import ssl
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from hami.config import Config, ListenSettings
from hami.device import codec
from hami.device.allocation import allocation_annotations
from hami.device.model import ContainerDeviceRequest
from hami.device.vendorregister import registration_signature
from hami.device.vendorrequest import flat_requests
from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner
from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, WARNING, EventRecorder
from hami.obs.log import get_logger
from hami.scheduler.cache.state import VGPU_NODE, ClusterState
from hami.scheduler.extender.extargs import ArgsDecoder, BadArgs, lower_keys
from hami.scheduler.extender.nodeorder import first_fit
from hami.scheduler.extender.nodescan import NodeScanner
from hami.scheduler.metrics import SchedulerMetrics, split_bind
from hami.scheduler.placement import fit as fitmod
from hami.scheduler.placement import messages
from hami.scheduler.placement import policy as policymod
from hami.scheduler.placement import recheck as recheckmod
from hami.scheduler.placement import score as scoremod
from hami.scheduler.placement import spread as spreadmod
from hami.scheduler.placement.busy import Busy, Held
from hami.scheduler.placement.fit import try_pod
from hami.scheduler.placement.podshape import ShapeMemo
from hami.scheduler.placement.policy import PolicyError
from hami.scheduler.placement.usage import NodeUsage, UsageIndex
from hami.scheduler.placement.vendorrules import METAX_APP_CLASS, METAX_QOS

log = get_logger(__name__)

# Up to this many candidate nodes /filter evaluates them all, as HAMi does, so the FilteringSucceed
# event counts every fitting node; beyond it, it stops at the first fit in score order (same choice).
FULL_EVALUATION_MAX_NODES = 64

JSON = "application/json"

# AdmissionReviews from this size on are judged on a worker thread, not on the event loop (issue 27 §2).
WEBHOOK_OFFLOOP_BYTES = 64 * 1024

# Bodies from this size on are first scanned as full-Nodes requests (nodescan.py).
SCAN_MIN_BYTES = 16384


BadRequest = BadArgs


# A decision /filter holds in memory and /bind has not written after this long is dropped (the
# pod was deleted, or kube-scheduler bound it elsewhere); it never reached the API server.
ASSUME_TTL = 60.0


@dataclass(frozen=True, slots=True)
class Assumed:
    """What /filter decided for a pod, for /bind (node, devices, the annotations to write) without
    reading the API. Held only in this replica until /bind writes it in one patch."""

    node: str
    namespace: str
    name: str
    devices: tuple
    at: float
    annotations: dict | None = None  # placement annotations (vgpu-node, devices, MIG); None = written at filter


def _shape_error(pod: dict, node_names: Any, nodes: Any) -> str:
    """Kubernetes validates every Pod; a body not shaped like one is refused here, naming the field."""
    def bad(field: str, want: str, value: Any) -> str:
        return f"extender args: {field}: expected {want}, got {type(value).__name__}"

    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        return bad("Pod.metadata", "an object", meta)
    for key in ("name", "namespace", "uid"):
        v = (meta or {}).get(key)
        if v is not None and not isinstance(v, str):
            return bad(f"Pod.metadata.{key}", "a string", v)
    for key in ("annotations", "labels"):
        v = (meta or {}).get(key)
        if v is not None and not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
            return bad(f"Pod.metadata.{key}", "an object of strings", v)
    spec = pod.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return bad("Pod.spec", "an object", spec)
    for group in ("containers", "initContainers"):
        ctrs = (spec or {}).get(group)
        if ctrs is not None and not isinstance(ctrs, list):
            return bad(f"Pod.spec.{group}", "an array", ctrs)
        for i, c in enumerate(ctrs or ()):
            if not isinstance(c, dict):
                return bad(f"Pod.spec.{group}[{i}]", "an object", c)
            res = c.get("resources")
            if res is not None and not isinstance(res, dict):
                return bad(f"Pod.spec.{group}[{i}].resources", "an object", res)
            for part in ("limits", "requests"):
                v = (res or {}).get(part)
                if v is not None and not isinstance(v, dict):
                    return bad(f"Pod.spec.{group}[{i}].resources.{part}", "an object", v)
    if node_names is not None and not (isinstance(node_names, list) and all(isinstance(n, str) for n in node_names)):
        return bad("NodeNames", "an array of strings", node_names)
    if isinstance(nodes, dict):
        items = nodes.get("items")
        if items is not None and not (isinstance(items, list) and all(isinstance(n, dict) for n in items)):
            return bad("Nodes.items", "an array of objects", items)
        for i, node in enumerate(items or ()):
            nmeta = node.get("metadata")
            if nmeta is not None and not isinstance(nmeta, dict):
                return bad(f"Nodes.items[{i}].metadata", "an object", nmeta)
            if not isinstance((nmeta or {}).get("name", ""), str):
                return bad(f"Nodes.items[{i}].metadata.name", "a string", nmeta["name"])
            v = (nmeta or {}).get("annotations")
            if v is not None and not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
                return bad(f"Nodes.items[{i}].metadata.annotations", "an object of strings", v)
    return ""


def _encode(data: Any) -> bytes:
    try:
        return orjson.dumps(data)
    except TypeError as exc:  # an echoed object nested deeper than orjson writes (a hostile body)
        return orjson.dumps({"Error": f"cannot encode the answer: {exc}"})


def _json(data: Any) -> web.Response:
    return web.Response(body=_encode(data), content_type=JSON)


RequestsFn = Callable[[dict], "tuple[list[ContainerDeviceRequest | None], int]"]


class Extender:
    def __init__(self, config: Config, state: ClusterState, client: KubeClient | None,
                 events: EventRecorder, *, requests_fn: RequestsFn, metrics: SchedulerMetrics | None = None,
                 binder: Any = None, webhook: Callable[[bytes], Any] | None = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self.cfg = config.scheduler
        # MetaX sGPU rows: a placement on them remembers the QoS policy its cards switch to.
        self._sgpu_types = frozenset(v.name for v in (config.vendors.others if config.vendors else ())
                                     if v.hook == "metax")
        self.state = state
        self.client = client
        self.events = events
        self.metrics = metrics
        self.binder = binder
        self.webhook = webhook
        self._webhook_pool: ThreadPoolExecutor | None = None  # big admissions, one at a time, off the loop
        self.requests_fn = requests_fn
        self.clock = clock
        # uid -> decision held until its /bind; counted per node (a node with decisions pending
        # is busy for the funnel avoidance, busy.py)
        self.assumed: Held = Held()
        # HAMi's flow patches the placement at /filter (one more write per pod, a round trip before
        # answering, and annotations left behind by a replica that dies before /bind). Ours holds
        # it here and /bind writes it with bind-phase in one patch, re-checking the fit under the lock.
        self.write_at_filter = False
        # Send pods away from nodes mid-allocation (locked) when another node fits.
        self.avoid_locked = True
        # This replica's rank of nodes for spreading a burst away from another replica's choices.
        self.replica_salt = spreadmod.new_salt()
        self._swept = 0.0
        self._decoded: dict[str, tuple] = {}  # register text -> devices (full-Nodes mode)
        self.filters = 0
        self.patch_failures = 0
        self.on_no_fit: Callable[[dict, Any, list, dict], None] | None = None  # the requeue waker
        self.verbs: Any = None  # hami.scheduler.extender.verbs.ExtraVerbs: /prioritize, /preempt
        self._warned: set[str] = set()
        self.args = ArgsDecoder()  # /filter bodies, the node name list cached (extargs.py)
        self._pod_requests = ShapeMemo()  # a burst's pods share a template: one PodRequest each (podshape.py)
        self.nodescan = NodeScanner()  # full-Nodes bodies, each Node decoded once per change (nodescan.py)

    # ------------------------------------------------------------------ /filter

    async def filter(self, body: bytes) -> dict:
        out = self.filter_now(body)
        return out if out.__class__ is dict else await out

    def filter_now(self, body: bytes) -> dict | Coroutine[Any, Any, dict]:
        """/filter's answer, decided without waiting when it can be: the answer itself, or, when the
        request needs I/O first (the cache not synced yet, a stale placement to clear, HAMi's
        placement patch at /filter), a coroutine that gives it. kube-scheduler's /filter for a pod
        that fits is decided from the cache alone, so the fast lane answers it from its read
        callback (hami.httpguard)."""
        started = time.perf_counter()
        if not self.state.synced:
            return self._timed(self._filter_once_synced(body), started)
        try:
            out = self._filter(body)
        except BaseException:
            self._observe(started, "error")
            raise
        if out.__class__ is dict:
            self._observe(started, _result(out))
            return out
        return self._timed(out, started)

    async def _filter_once_synced(self, body: bytes) -> dict:
        if not await self.state.wait_synced(self.cfg.sync_timeout):
            return {"Error": "context cancelled"}
        out = self._filter(body)
        return out if out.__class__ is dict else await out

    async def _timed(self, answer: Coroutine[Any, Any, dict], started: float) -> dict:
        result = "error"
        try:
            out = await answer
            result = _result(out)
            return out
        finally:
            self._observe(started, result)

    def _observe(self, started: float, result: str) -> None:
        self.filters += 1
        if self.metrics is not None:
            self.metrics.filter_seconds.labels(result).observe(time.perf_counter() - started)

    def _filter(self, body: bytes) -> dict | Coroutine[Any, Any, dict]:
        """The decision; a coroutine where it must wait on the API server (filter_now)."""
        scanned = self.nodescan.scan(body) if len(body) >= SCAN_MIN_BYTES else None
        if scanned is not None:
            args, scanned = scanned
            names = None
        else:
            try:
                args, names = self.args.decode(body)
            except (orjson.JSONDecodeError, BadRequest) as exc:
                return {"Error": _decode_error(exc)}
        pod = args.get("pod")
        if not isinstance(pod, dict):
            return {"Error": "extender args missing pod"}
        node_names = args.get("nodenames")
        nodes = args.get("nodes")
        # A decoded NameList is already checked (every member a string).
        shape = _shape_error(pod, node_names if names is None else None, nodes)
        if shape:
            return {"Error": shape}
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        name = meta.get("name", "")
        uid = meta.get("uid") or f"{ns}/{name}"
        annos = meta.get("annotations") or {}
        cached = self.state.pod(ns, name) or {}
        same = ((cached.get("metadata") or {}).get("uid") or f"{ns}/{name}") == uid
        bound = _bound_node(pod) or (_bound_node(cached) if same else "")
        if bound:
            return {"Error": f"pod {ns}/{name} is already bound to node {bound}; its devices are not re-placed"}
        try:
            requests, num_init = self.requests_fn(pod)
        except ValueError as exc:
            return {"Error": str(exc)}
        if not any(r is not None and (r.__class__ is tuple or r.nums > 0) for r in requests):
            log.v(5).info("Pod asks for no HAMi device, passing through", pod=f"{ns}/{name}")
            return {"NodeNames": node_names if names is None else list(names.names), "FailedNodes": None, "Error": ""}
        index = self.state.index
        if log.enabled(5):
            full = nodes is not None and node_names is None
            count = (len(scanned) if scanned is not None else len((nodes or {}).get("items") or [])) \
                if full and isinstance(nodes, dict) else len(node_names or [])
            log.v(5).info("Filter request", pod=f"{ns}/{name}", uid=uid, nodes=count,
                          mode="Nodes" if full else "NodeNames")
        if nodes is not None and node_names is None:
            return self._filter_nodes_mode(pod, ns, name, annos, requests, num_init, nodes, scanned)
        node_names = names.names if names is not None else list(node_names or [])
        # HAMi drops any cached allocation of this pod first (a retried filter re-places it).
        held = index.pod(uid)
        index.remove_pod(uid)
        self._forget(uid)
        preq = self._pod_request(requests, num_init, annos, ns, name, index)
        if isinstance(preq, str):  # HAMi records the calcScore error as a FilteringFailed event too
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, preq)
            return {"Error": preq}
        sel, fit_scores = self._choose(names, node_names, preq, index, ns, name)
        if sel.node is None:
            self._record_no_fit(pod, node_names, sel.failed_nodes)
            if self.on_no_fit is not None:
                self.on_no_fit(pod, preq, node_names, sel.failed_nodes)
            answer = {"NodeNames": None, "FailedNodes": sel.failed_nodes, "Error": ""}
            if self._stale_placement(pod, ns, name):
                return self._no_fit_after_clearing(pod, ns, name, held, answer)
            if held is not None:  # its devices are free now: wake pods parked behind them
                self.state.placement_dropped(held.node, held.namespace)
            return answer
        node = sel.node
        now = self.clock()
        annotations = {
            VGPU_NODE: node,
            codec.VGPU_TIME_ANNOTATION: codec.encode_unix_seconds(now),
            **allocation_annotations(sel.devices, self.config.vendors, now, node, pod,
                                     drs=getattr(index.nodes.get(node), "drs", None),
                                     node_usage=index.nodes.get(node)),
        }
        devices_text = annotations.get(codec.ALLOCATED_ANNOTATION, "")
        if sel.mig:
            annotations[codec.MIG_ALLOCATIONS_ANNOTATION] = codec.encode_mig_allocations(
                codec.MigAllocation(c, d, u, p, pl) for c, d, u, p, pl in sel.mig)
        # Count the pod before answering, so a concurrent filter sees these devices as taken.
        index.add_pod(uid, node, sel.devices, namespace=ns, num_init=num_init,
                      mig=tuple((u, pl) for _, _, u, _, pl in sel.mig), app_class=annos.get(METAX_APP_CLASS, ""))
        sgpu = self._sgpu_types
        if sgpu and any(cd.type in sgpu for ctr in sel.devices for cd in ctr):
            index.expect_qos(node, sel.devices, annos.get(METAX_QOS, ""), sgpu)
        self._sweep_assumed(now)
        self.assumed[uid] = Assumed(node, ns, name, sel.devices, now,
                                    None if self.write_at_filter else annotations)

        if self.client is not None and self.write_at_filter:
            return self._patch_then_answer(pod, ns, name, uid, node, annotations, fit_scores, node_names, sel,
                                           devices_text)
        return self._filter_succeeded(pod, ns, name, node, fit_scores, node_names, sel, devices_text)

    async def _patch_then_answer(self, pod, ns, name, uid, node, annotations, fit_scores, node_names, sel,
                                 devices_text) -> dict:
        """HAMi's flow (write_at_filter): the placement is patched on the pod before the answer."""
        patch = {"metadata": {"annotations": annotations, "labels": {VGPU_NODE: node}}}
        try:
            await self.client.patch_pod(ns, name, patch)
        except ApiError as exc:
            self.state.index.remove_pod(uid)
            self._forget(uid)
            self.patch_failures += 1
            log.warning("Pod annotation patch failed", pod=f"{ns}/{name}", node=node, error=str(exc))
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, str(exc))
            return {"Error": str(exc)}
        return self._filter_succeeded(pod, ns, name, node, fit_scores, node_names, sel, devices_text)

    def _filter_succeeded(self, pod, ns, name, node, fit_scores, node_names, sel, devices_text) -> dict:
        self.events.record(pod, NORMAL, messages.FILTERING_SUCCEED,
                           messages.filtering_succeed_message(node, fit_scores, len(node_names)))
        log.v(4).info("Pod filtered", pod=f"{ns}/{name}", node=node, devices=devices_text,
                      score=round(sel.score, 2), tried=sel.tried)
        if self.cfg.extender_prioritize:  # every fitting node, best first: kube-scheduler's scoring picks
            return {"NodeNames": [n for n, _ in fit_scores], "FailedNodes": sel.failed_nodes or None, "Error": ""}
        return {"NodeNames": [node], "FailedNodes": None, "Error": ""}

    def _choose(self, names, node_names, preq: fitmod.PodRequest, index: UsageIndex,
                ns: str, name: str) -> tuple[scoremod.Selection, list[tuple[str, float]]]:
        """The node for the pod and the (node, score) pairs the FilteringSucceed text lists."""
        verbose = log.enabled(2)
        prioritize = self.cfg.extender_prioritize  # every fitting node: kube-scheduler's scoring picks
        if (names is not None and len(node_names) > FULL_EVALUATION_MAX_NODES and not verbose and not prioritize
                and not preq.scored):  # (a vendor score term needs every node fitted: select_node)
            sel = self._first_fit(names, preq, index)
            return sel, [(sel.node, sel.score)] if sel.node else []
        spread = False  # a burst pending here: take the fit this replica's salt ranks highest (spread.py)
        if self.avoid_locked and not prioritize:
            busy = self._busy_nodes(node_names)
            if busy:
                # only this replica's own decisions and binds make a burst: a lock seen on some node
                # (another scheduler's, an Allocate in progress) leaves binpack's best fit first
                spread = bool(self.assumed.per_node or getattr(self.binder, "in_flight", None))
                free = [n for n in node_names if n not in busy]
                if free and len(free) < len(node_names):
                    fits, failed = scoremod.evaluate_nodes(index.nodes, free, preq)
                    if fits:  # another node fits: leave the locked ones to their pods
                        best = spreadmod.pick(fits, self.replica_salt) if spread else fits[0]
                        return (scoremod.Selection(best.node, best.devices, best.score, best.mig, failed, len(free)),
                                [(best.node, best.score)])
        if verbose or prioritize or len(node_names) <= FULL_EVALUATION_MAX_NODES:
            # HAMi fits every node; its FilteringSucceed text counts them all. Small candidate lists
            # cost little, so they get HAMi's exact message; big ones stop at the first fit.
            fits, failed = scoremod.evaluate_nodes(index.nodes, node_names, preq)
            if verbose:
                self._log_decisions(ns, name, preq, node_names, fits, failed, index)
            if fits:
                best = spreadmod.pick(fits, self.replica_salt) if spread else fits[0]
                sel = scoremod.Selection(best.node, best.devices, best.score, best.mig, failed, len(fits))
            else:
                sel = scoremod.Selection(None, (), 0.0, (), failed, 0)
            return sel, [(r.node, r.score) for r in fits]
        sel = scoremod.select_node(index.nodes, node_names, preq)
        return sel, [(sel.node, sel.score)] if sel.node else []

    def _first_fit(self, names, preq: fitmod.PodRequest, index: UsageIndex) -> scoremod.Selection:
        """select_node's answer from the candidate order kept between requests (nodeorder.py),
        with the avoid-locked rule: a busy node only when no other node fits."""
        inflight = getattr(self.binder, "in_flight", None) or {}
        busy = self.avoid_locked and (self.assumed.per_node or inflight or self.state.locked)
        # The walk passes by nodes with anything pending and fits them, least pending first, only
        # when no idle node fits (busy.py; no table of every node is built).
        pending = Busy(self.assumed.per_node, inflight, self.state.locked, ()).pending if busy else None
        walk = first_fit(names, index.nodes, index.changes, policymod.node_order_descending(preq.node_policy),
                         lambda n: try_pod(n, preq), need=fitmod.memory_need(preq), pending=pending)
        if walk.node is None:
            return scoremod.Selection(None, (), 0.0, (), walk.failed, walk.tried)
        devices, mig = walk.fit
        return scoremod.Selection(walk.node, devices, walk.usage.score_value, mig, walk.failed, walk.tried)

    def _forget(self, uid: str) -> None:
        self.assumed.pop(uid, None)

    def _busy_nodes(self, candidates) -> Busy:
        """Nodes to try last (busy.py): more pending on them than on the least busy candidate, in
        held decisions, our binds in flight and a lock seen by the node watch."""
        return Busy(self.assumed.per_node, getattr(self.binder, "in_flight", None) or {}, self.state.locked,
                    candidates)

    def _sweep_assumed(self, now: float) -> None:
        """Forget decisions /bind never wrote (at most every few seconds; O(held decisions))."""
        if now - self._swept < 5.0:
            return
        self._swept = now
        for uid, a in list(self.assumed.items()):
            if now - a.at > ASSUME_TTL and a.annotations is not None:
                cached = self.state.pod(a.namespace, a.name)
                if VGPU_NODE not in (((cached or {}).get("metadata") or {}).get("annotations") or {}):
                    self.state.index.remove_pod(uid)
                self._forget(uid)

    def share_failures(self, pod: dict, node_names) -> tuple[fitmod.PodRequest, dict[str, str]] | None:
        """/filter's fit of `pod` on `node_names` without deciding anything (GPU preemption on the
        leader, for a pod another replica's /filter refused): its request and the failed nodes' reasons."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name", "")
        try:
            requests, num_init = self.requests_fn(pod)
        except ValueError:
            return None
        preq = self._pod_request(requests, num_init, meta.get("annotations") or {}, ns, name, self.state.index)
        if isinstance(preq, str):
            return None
        return preq, scoremod.evaluate_nodes(self.state.index.nodes, list(node_names), preq)[1]

    def place_on(self, pod: dict, node: str) -> Assumed | None:
        """Fit `pod` on `node` now, from this replica's cache (a /bind without this replica's
        /filter decision, or one whose devices were taken meanwhile); None when it does not fit."""
        return self._place(pod, node, None, ())[1]

    def recheck(self, pod: dict, node: str, devices) -> tuple[bool, Assumed | None, str]:
        """/bind's re-check under the node lock: the fit /filter runs (`try_pod`, the same
        PodRequest, this index without the pod), first on the devices /filter chose alone
        (recheck.py). (True, None, "") when it gives them back; else the pod fitted on the whole
        node again: (False, placement to write, ""), or (False, None, the fit's reason)."""
        return self._place(pod, node, recheckmod.chosen_ids(devices), devices)

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
            preq = self._pod_request(requests, num_init, meta.get("annotations") or {}, ns, name, index)
            if isinstance(preq, str):
                return False, None, preq
            usage = index.node(node)
            if keep_ids is not None and usage is not None:
                got = try_pod(recheckmod.only_devices(usage, keep_ids), preq)
                if got.__class__ is not str and recheckmod.same_placement(got[0], keep):
                    return True, None, ""
            fits, failed = scoremod.evaluate_nodes(index.nodes, [node], preq)
        finally:
            if held is not None:
                index.add_pod(uid, held.node, held.devices, namespace=held.namespace, num_init=held.num_init,
                              init_released=held.init_released, mig=held.mig, app_class=held.app_class)
        if not fits:
            return False, None, failed.get(node, "")
        best = fits[0]
        now = self.clock()
        annotations = {VGPU_NODE: node, codec.VGPU_TIME_ANNOTATION: codec.encode_unix_seconds(now),
                       **allocation_annotations(best.devices, self.config.vendors, now, node, pod,
                                                drs=getattr(index.node(node), "drs", None),
                                                node_usage=index.node(node))}
        if best.mig:
            annotations[codec.MIG_ALLOCATIONS_ANNOTATION] = codec.encode_mig_allocations(
                codec.MigAllocation(c, d, u, p, pl) for c, d, u, p, pl in best.mig)
        index.remove_pod(uid)
        index.add_pod(uid, node, best.devices, namespace=ns, num_init=num_init,
                      mig=tuple((u, pl) for _, _, u, _, pl in best.mig),
                      app_class=(meta.get("annotations") or {}).get(METAX_APP_CLASS, ""))
        return False, Assumed(node, ns, name, best.devices, now, annotations), ""

    def _pod_request(self, requests, num_init, annos, ns: str, name: str,
                     index: UsageIndex) -> fitmod.PodRequest | str:
        """What the fit needs of the pod, for both /filter modes; bad scoring weights give HAMi's error text."""
        gpu_policy, node_policy = self.cfg.gpu_scheduler_policy, self.cfg.node_scheduler_policy
        for warning in policymod.ignored_policies(annos, ns, name, node_policy, gpu_policy):
            self._warn_once(warning)
        quota = index.quota_view(ns)
        key = None
        if quota is None:  # a quota's usage changes with every placement: such a request is not kept
            try:
                key = (tuple(requests), num_init, orjson.dumps(annos), ns, gpu_policy, node_policy)
                preq = self._pod_requests.get(key)
            except (orjson.JSONEncodeError, TypeError):  # not encodable or not hashable: worked out each time
                key = preq = None
            if preq is not None:
                return preq
        try:
            preq = fitmod.pod_request(
                requests, num_init, annos, gpu_policy=gpu_policy, node_policy=node_policy, namespace=ns,
                quota=quota, vendors=self.config.vendors,
            )
        except PolicyError as exc:
            return f"calcScore failed {exc} for pod {name}"
        if key is not None:
            self._pod_requests.put(key, preq)
        return preq

    def _warn_once(self, text: str) -> None:
        """HAMi's klog warning for an ignored annotation, once per distinct text (kube-scheduler retries)."""
        if text in self._warned:
            return
        if len(self._warned) > 4096:
            self._warned.clear()
        self._warned.add(text)
        log.warning(text)

    def _stale_placement(self, pod: dict, ns: str, name: str) -> bool:
        """A pending pod that no longer fits anywhere has a placement an earlier filter wrote.

        HAMi leaves it, and every scheduler replica keeps counting those devices as used; two
        such pods can then block each other forever. Bound pods are never touched.
        """
        cached = self.state.pod(ns, name) or pod
        if (cached.get("spec") or {}).get("nodeName") or self.client is None:
            return False
        return VGPU_NODE in ((cached.get("metadata") or {}).get("annotations") or {})

    async def _no_fit_after_clearing(self, pod: dict, ns: str, name: str, held, answer: dict) -> dict:
        """Drop the stale placement (_stale_placement), then answer that no node fits."""
        keys = (VGPU_NODE, codec.VGPU_TIME_ANNOTATION, codec.TO_ALLOCATE_ANNOTATION,
                codec.ALLOCATED_ANNOTATION, codec.MIG_ALLOCATIONS_ANNOTATION)
        patch = {"metadata": {"annotations": dict.fromkeys(keys), "labels": {VGPU_NODE: None}}}
        try:
            await self.client.patch_pod(ns, name, patch)
        except ApiError as exc:
            log.v(2).info("Could not clear stale placement", pod=f"{ns}/{name}", error=str(exc))
        if held is not None:  # its devices are free now: wake pods parked behind them
            self.state.placement_dropped(held.node, held.namespace)
        return answer

    def _record_no_fit(self, pod: dict, node_names: list, failed: dict) -> None:
        for msg in messages.filtering_failed_messages(failed):
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, msg)
        self.events.record(pod, WARNING, messages.FILTERING_FAILED, messages.no_available_node_message(len(node_names)))
        meta = pod.get("metadata") or {}
        log.v(2).info("No node fits pod", pod=f"{meta.get('namespace')}/{meta.get('name')}",
                      nodes=len(node_names), failed=len(failed))

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
                          available=_available(index.node(r.node)))
        for node, reason in failed.items():
            log.v(4).info("Node filtered out", pod=pod, node=node, reason=reason, requested=wanted,
                          available=_available(index.node(node)))

    # ------------------------------------------------------------------ full-Nodes mode

    def _node_usage(self, node: dict, index: UsageIndex) -> NodeUsage | None:
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

    def _filter_nodes_mode(self, pod, ns, name, annos, requests, num_init, nodes, scanned=None) -> dict:
        """`scanned`: the Nodes as nodescan.NodeScanner read them (then `nodes` has no items)."""
        if not isinstance(nodes, dict):
            return {"Error": "json: cannot unmarshal Nodes into Go value of type v1.NodeList"}
        index = self.state.index
        items = nodes.get("items") or []
        preq = self._pod_request(requests, num_init, annos, ns, name, index)
        if isinstance(preq, str):  # HAMi records the calcScore error as a FilteringFailed event too
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, preq)
            return {"Error": preq}
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
                u = self._node_usage(sn.node(), index)  # decoded here only for nodes the cache lacks
                if u is not None:
                    usages[nname] = u
        else:
            for node in items:
                nname = (node.get("metadata") or {}).get("name", "")
                names.append(nname)
                by_name[nname] = node
                u = self._node_usage(node, index)
                if u is not None:
                    usages[nname] = u
        sel = scoremod.select_node(usages, names, preq)
        if sel.node is None:
            self._record_no_fit(pod, names, sel.failed_nodes)
            return {"Nodes": None, "FailedNodes": sel.failed_nodes, "Error": ""}
        chosen = by_name[sel.node]
        if scanned is not None:
            chosen = chosen.node()
        return {"Nodes": {"items": [chosen]}, "FailedNodes": sel.failed_nodes, "Error": ""}

    # ------------------------------------------------------------------ /bind

    async def bind(self, body: bytes) -> dict:
        started = time.perf_counter()
        err = "bad request"
        try:
            try:
                args = lower_keys(orjson.loads(body))
            except (orjson.JSONDecodeError, BadRequest) as exc:
                err = _decode_error(exc)
                return {"Error": err}
            ns = args.get("podnamespace") or "default"
            name = args.get("podname") or ""
            uid = args.get("poduid") or ""
            node = args.get("node") or ""
            for field, value in (("PodName", name), ("PodNamespace", ns), ("PodUID", uid), ("Node", node)):
                if not isinstance(value, str):
                    err = f"extender binding args: {field}: expected a string, got {type(value).__name__}"
                    return {"Error": err}
            if not name or not node:
                err = "extender binding args missing PodName or Node"
                return {"Error": err}
            if self.binder is None:
                err = "binding is not available"
                return {"Error": err}
            if self.verbs is not None and self.cfg.extender_prioritize:
                err = await self.verbs.place_on(ns, name, uid, node)
                if err:
                    return {"Error": err}
            err = await self.binder.bind(ns, name, uid, node, self.assumed.get(uid))
            if not err:
                self._forget(uid)
            return {"Error": err}
        finally:
            if self.metrics is not None:
                self.metrics.bind_seconds.labels("error" if err else "ok").observe(time.perf_counter() - started)

    # ------------------------------------------------------------------ HTTP

    async def _h_filter(self, request: web.Request) -> web.Response:
        return _json(await self.filter(await request.read()))

    async def _h_bind(self, request: web.Request) -> web.Response:
        return _json(await self.bind(await request.read()))

    def fast_routes(self) -> dict:
        """The extender verbs as hami.httpguard's fast routes: path -> body -> the answer's bytes,
        the same bytes as the aiohttp routes answer with status 200."""
        def filter_(body: bytes) -> bytes | Coroutine[Any, Any, bytes]:
            out = self.filter_now(body)
            return _encode(out) if out.__class__ is dict else _encoded(out)

        async def bind(body: bytes) -> bytes:
            return _encode(await self.bind(body))

        return {b"/filter": filter_, b"/bind": bind}

    def close(self) -> None:
        """Stop the webhook's worker thread (queued admissions are dropped: the listener is closed)."""
        if self._webhook_pool is not None:
            self._webhook_pool.shutdown(wait=False, cancel_futures=True)

    async def _h_webhook(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.webhook is None:
            return web.Response(status=500, text="webhook not available")
        try:
            if len(body) >= WEBHOOK_OFFLOOP_BYTES:
                # A big pod (thousands of containers) costs ~0.1 ms a container: on one worker thread
                # the loop keeps the GIL every switch interval, so /filter and the probes go on answering.
                if self._webhook_pool is None:
                    self._webhook_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hami-webhook")
                out = await asyncio.get_running_loop().run_in_executor(self._webhook_pool, self.webhook, body)
            else:
                out = self.webhook(body)
        except ValueError as exc:
            return web.Response(status=400, text=str(exc))
        if inspect.isawaitable(out):  # --dra: the answer waits for the pod's claim templates
            out = await out
        if isinstance(out, (bytes, bytearray)):
            return web.Response(body=out, content_type=JSON)
        return _json(out)

    def make_app(self, *, extender: bool = True, webhook: bool = True, health: Any = None) -> web.Application:
        """One listener's routes: the extender verbs, the webhook, or both; probes on each."""
        app = web.Application(client_max_size=self.cfg.max_request_bytes)
        if extender:
            app.router.add_post("/filter", self._h_filter)
            app.router.add_post("/bind", self._h_bind)
            if self.verbs is not None:  # /prioritize, /preempt: extender verbs, on the extender listener
                self.verbs.mount(app)
        if webhook:
            app.router.add_post("/webhook", self._h_webhook)
        if health is not None:
            health.add_routes(app)
        return app

    def readiness(self) -> list[str]:
        """Why /filter or /bind cannot be served correctly now (empty: they can)."""
        reasons = list(self.state.health())
        if self.binder is None or self.client is None:
            reasons.append("no API client: /bind cannot write bindings")
        return reasons


def _result(out: dict) -> str:
    """The filter_seconds label of an answer."""
    return "error" if out.get("Error") else ("fit" if out.get("NodeNames") or out.get("Nodes") else "nofit")


async def _encoded(answer: Coroutine[Any, Any, dict]) -> bytes:
    return _encode(await answer)


def _bound_node(pod: dict) -> str:
    node = (pod.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) else ""


def _decode_error(exc: Exception) -> str:
    """Go's json.Decoder words for a body that ends early: `EOF` (nothing but whitespace, as
    HAMi's route_test TestMaxRequestSize expects) and `unexpected EOF` (cut off mid-value)."""
    text = str(exc)
    if isinstance(exc, orjson.JSONDecodeError):
        if text.startswith(("input data is empty", "Input is a zero-length")):
            return "EOF"
        if text.startswith("unexpected end of data"):
            return "unexpected EOF"
    return text


def _available(node: NodeUsage | None) -> list[str]:
    if node is None:
        return []
    return [
        f"{d.id}:slots={d.count - d.used}/{d.count},mem={d.totalmem - d.usedmem}/{d.totalmem},"
        f"cores={d.totalcore - d.usedcores}/{d.totalcore}"
        for d in node.devices
    ]


# ---------------------------------------------------------------------- serving


class CertReloader:
    """An SSLContext whose certificate is re-read when the cert or key file changes."""

    def __init__(self, cert_file: str, key_file: str, interval: float = 2.0, client_ca_file: str = ""):
        self.cert_file, self.key_file, self.interval = cert_file, key_file, interval
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._stamp = self._mtimes()
        self.context.load_cert_chain(cert_file, key_file)
        if client_ca_file:  # mTLS: a client without a certificate from this CA fails the handshake
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(cafile=client_ca_file)
        self.reloads = 0

    def _mtimes(self) -> tuple:
        try:
            return (os.stat(self.cert_file).st_mtime_ns, os.stat(self.key_file).st_mtime_ns)
        except OSError:
            return ()

    def check(self) -> bool:
        stamp = self._mtimes()
        if stamp and stamp != self._stamp:
            try:
                self.context.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                log.warning("TLS certificate reload failed", cert=self.cert_file, error=str(exc))
                return False
            self._stamp = stamp
            self.reloads += 1
            log.info("TLS certificate reloaded", cert=self.cert_file)
            return True
        return False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                self.check()


# The webhook's request body: kube-apiserver's 3 MiB request limit (etcd's 1.5 MiB object, JSON-escaped,
# in an AdmissionReview with old and new objects) with room for the envelope; 64 MiB stalled admission.
WEBHOOK_MAX_BODY = 3 * 1024 * 1024


async def serve(app: web.Application, address: str, ssl_context: ssl.SSLContext | None = None,
                limits: ListenSettings | None = None, fast: dict | None = None) -> web.AppRunner:
    """The extender and/or webhook listener, with hami.httpguard's limits; /webhook bodies at most 3 MiB;
    `fast` routes (Extender.fast_routes) answered without aiohttp's request layer."""
    runner = guarded_runner(app, limits, body_limits={"/webhook": WEBHOOK_MAX_BODY}, access_log=None, fast=fast)
    await runner.setup()
    host, port = split_bind(address, default_host="0.0.0.0")
    await GuardedSite(runner, host, port, ssl_context=ssl_context).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return server.sockets[0].getsockname()[1]
    raise RuntimeError("server not started")
