"""The kube-scheduler extender HTTP API (spec scheduler.md §3): /filter, /bind, /webhook, probes.

* Listeners by trust (hami.scheduler.role): /filter and /bind only where kube-scheduler reaches
  them (loopback, or mTLS with --client-ca-file); /webhook on its own TLS listener when
  --webhook-bind-address is set; /healthz and /readyz on every listener.
* /filter never re-places a pod that is already bound (its devices are in use): it answers an Error.

* JSON of k8s.io/kube-scheduler/extender/v1: PascalCase keys, read case-insensitively; every
  answer is HTTP 200 with the error in `Error`, as HAMi answers. Bodies above
  `max_request_bytes` are refused by aiohttp (413).
* Every decision is the Placer's (hami.scheduler.placer): this module decodes and checks the
  bodies, asks it, records the events and encodes the answers.
* NodeNames mode (nodeCacheCapable): the node usage comes from the watch-fed cache; on success
  the Placer commits the decision (node, devices, every vendor's annotations) to the usage cache
  and holds it in this replica; nothing is written and no API round trip delays the answer. /bind
  writes it with bind-phase in the Binding after taking the node lock (bind.py). HAMi's flow (patch
  at /filter) is a subclass apart (hamiflow.py), for the benchmark's model of it and the tests of
  placements it leaves behind.
* Full-Nodes mode: the nodes come in the request; their registrations (NVIDIA's and every other
  vendor's, as the node watch reads them) are decoded by the Placer through the same text-keyed
  cache, usage from the pod cache; nothing is patched or held (as in HAMi).
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
from typing import Any

import orjson
from aiohttp import web

from hami.config import Config, ListenSettings
from hami.device import codec
from hami.device.allocation import allocation_keys
from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner
from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, WARNING, EventRecorder
from hami.obs.log import get_logger
from hami.scheduler.cache.state import VGPU_NODE, ClusterState
from hami.scheduler.extender.extargs import ArgsDecoder, BadArgs, lower_keys
from hami.scheduler.extender.nodescan import NodeScanner
from hami.scheduler.metrics import SchedulerMetrics, split_bind
from hami.scheduler.placement import messages
from hami.scheduler.placer import Choice, Placer

log = get_logger(__name__)

JSON = "application/json"

# AdmissionReviews from this size on are judged on a worker thread: decoding a big one on the event
# loop would stall every /filter and /bind behind it.
WEBHOOK_OFFLOOP_BYTES = 64 * 1024

# Bodies from this size on are first scanned as full-Nodes requests (nodescan.py).
SCAN_MIN_BYTES = 16384


def _bad(field: str, want: str, value: Any) -> str:
    return f"extender args: {field}: expected {want}, got {type(value).__name__}"


def _shape_error(pod: dict, node_names: Any, nodes: Any) -> str:
    """Kubernetes validates every Pod; a body not shaped like one is refused here, naming the field."""
    bad = _bad
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


class Extender:
    """The extender's HTTP: /filter and /bind bodies decoded and checked, the Placer asked,
    events recorded, the answers encoded; the writes HAMi's flow makes at /filter."""

    def __init__(self, config: Config, state: ClusterState, placer: Placer, client: KubeClient | None,
                 events: EventRecorder, *, metrics: SchedulerMetrics | None = None, binder: Any = None,
                 verbs: Any = None, webhook: Callable[[bytes], Any] | None = None):
        self.config = config
        self.cfg = config.scheduler
        self.state = state
        self.placer = placer
        self.client = client
        self.events = events
        self.metrics = metrics
        self.binder = binder
        self.verbs = verbs  # hami.scheduler.extender.verbs.ExtraVerbs: /prioritize, /preempt
        self.webhook = webhook
        self._webhook_pool: ThreadPoolExecutor | None = None  # big admissions, one at a time, off the loop
        self.filters = 0
        self._filter_timers: dict[str, Any] = {}  # result label -> filter_seconds' child
        self.args = ArgsDecoder()  # /filter bodies, the node name list cached (extargs.py)
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
            timer = self._filter_timers.get(result)
            if timer is None:  # each result's labelled child, looked up once
                timer = self._filter_timers[result] = self.metrics.filter_seconds.labels(result)
            timer.observe(time.perf_counter() - started)

    def _filter(self, body: bytes) -> dict | Coroutine[Any, Any, dict]:
        """The decision; a coroutine where it must wait on the API server (filter_now)."""
        # (a NodeNames body ending in a name list seen before is scanned only up to the list)
        scanned = self.nodescan.scan(body, self.args.cached_at(body)) if len(body) >= SCAN_MIN_BYTES else None
        if scanned is not None:
            args, scanned = scanned
            names = None
        else:
            try:
                args, names = self.args.decode(body)
            except (orjson.JSONDecodeError, BadArgs) as exc:
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
            requests, num_init = self.placer.requests_fn(pod)
        except ValueError as exc:
            return {"Error": str(exc)}
        if self.placer.dra is not None and (pod.get("spec") or {}).get("schedulerName") not in (
                None, "", self.cfg.scheduler_name):
            # --dra: a pod another scheduler places (kube-scheduler's DynamicResources) is not HAMi's to
            # fit, even when it asks nvidia.com/gpu (KEP-5004: a DeviceClass's extendedResourceName
            # serves it from DRA nodes); only its claims are ranked.
            requests = ()
        if not any(r is not None and (r.__class__ is tuple or r.nums > 0) for r in requests):
            if self.placer.serves_claims(pod):
                if scanned is not None:
                    nodes = {"items": [n.node() for n in scanned]}
                return self._filter_claims(pod, node_names if names is None else list(names.names), nodes)
            log.v(5).info("Pod asks for no HAMi device, passing through", pod=f"{ns}/{name}")
            return {"NodeNames": node_names if names is None else list(names.names), "FailedNodes": None, "Error": ""}
        if log.enabled(5):
            full = nodes is not None and node_names is None
            count = (len(scanned) if scanned is not None else len((nodes or {}).get("items") or [])) \
                if full and isinstance(nodes, dict) else len(node_names or [])
            log.v(5).info("Filter request", pod=f"{ns}/{name}", uid=uid, nodes=count,
                          mode="Nodes" if full else "NodeNames")
        if nodes is not None and node_names is None:
            return self._filter_nodes_mode(pod, ns, name, annos, requests, num_init, nodes, scanned)
        node_names = names.names if names is not None else list(node_names or [])
        choice = self.place(pod, uid, ns, name, annos, requests, num_init, names, node_names)
        if isinstance(choice, str):  # HAMi records the calcScore error as a FilteringFailed event too
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, choice)
            return {"Error": choice}
        sel = choice.selection
        if choice.decision is None:
            self._record_no_fit(pod, node_names, sel.failed_nodes)
            answer = {"NodeNames": None, "FailedNodes": sel.failed_nodes, "Error": ""}
            if self._stale_placement(pod, ns, name):
                return self._no_fit_after_clearing(pod, ns, name, choice.dropped, answer)
            if choice.dropped is not None:  # its devices are free now: wake pods parked behind them
                self.state.placement_dropped(choice.dropped.node, choice.dropped.namespace)
            return answer
        return self.placed(pod, ns, name, uid, choice, node_names)

    def place(self, pod, uid, ns, name, annos, requests, num_init, names, node_names) -> Choice | str:
        """The Placer's choice; the decision is held here for /bind to write."""
        return self.placer.place(pod, uid, ns, name, annos, requests, num_init, names, node_names)

    def placed(self, pod, ns, name, uid, choice: Choice, node_names) -> dict | Coroutine[Any, Any, dict]:
        """/filter's answer for a pod placed on `choice`'s node."""
        return self.filter_succeeded(pod, ns, name, choice, node_names)

    def _filter_claims(self, pod: dict, node_names: list | None, nodes: Any) -> dict | Coroutine[Any, Any, dict]:
        """A pod with DRA claims (--dra): its node policy over the nodes its claims fit (the Placer's)."""
        if node_names is None:  # full-Nodes mode: answer the same Node objects, in the chosen order
            items = {(n.get("metadata") or {}).get("name", ""): n for n in (nodes or {}).get("items") or []
                     if isinstance(n, dict)}
            out = self.placer.filter_claims(pod, list(items))
            if out.__class__ is not dict:
                return self._nodes_answer(out, items)
            return _as_nodes(out, items)
        return self.placer.filter_claims(pod, list(node_names))

    async def _nodes_answer(self, answer: Coroutine[Any, Any, dict], items: dict) -> dict:
        return _as_nodes(await answer, items)

    def filter_succeeded(self, pod, ns, name, choice: Choice, node_names) -> dict:
        sel, fit_scores, node = choice.selection, choice.fit_scores, choice.decision.node
        self.events.record(pod, NORMAL, messages.FILTERING_SUCCEED,
                           messages.filtering_succeed_message(node, fit_scores, len(node_names)))
        if log.enabled(4):  # (its fields are not worked out for a log line nobody keeps)
            log.v(4).info("Pod filtered", pod=f"{ns}/{name}", node=node,
                          devices=choice.decision.annotations.get(codec.ALLOCATED_ANNOTATION, ""),
                          score=round(sel.score, 2), tried=sel.tried)
        if self.cfg.extender_prioritize:  # every fitting node, best first: kube-scheduler's scoring picks
            return {"NodeNames": [n for n, _ in fit_scores], "FailedNodes": sel.failed_nodes or None, "Error": ""}
        return {"NodeNames": [node], "FailedNodes": None, "Error": ""}

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
        # every vendor's allocation keys, not only NVIDIA's: a stale Ascend placement holds its NPUs too
        keys = {VGPU_NODE, codec.VGPU_TIME_ANNOTATION, *allocation_keys(self.config.vendors)}
        patch = {"metadata": {"annotations": dict.fromkeys(sorted(keys)), "labels": {VGPU_NODE: None}}}
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

    # ------------------------------------------------------------------ full-Nodes mode

    def _filter_nodes_mode(self, pod, ns, name, annos, requests, num_init, nodes, scanned=None) -> dict:
        """`scanned`: the Nodes as nodescan.NodeScanner read them (then `nodes` has no items)."""
        if not isinstance(nodes, dict):
            return {"Error": "json: cannot unmarshal Nodes into Go value of type v1.NodeList"}
        preq = self.placer.pod_request(requests, num_init, annos, ns, name)
        if isinstance(preq, str):  # HAMi records the calcScore error as a FilteringFailed event too
            self.events.record(pod, WARNING, messages.FILTERING_FAILED, preq)
            return {"Error": preq}
        sel, names, by_name = self.placer.select_in_nodes(preq, scanned, nodes.get("items") or [])
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
            except (orjson.JSONDecodeError, BadArgs) as exc:
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
            err = await self.binder.bind(ns, name, uid, node)
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


def _as_nodes(answer: dict, items: dict) -> dict:
    """A NodeNames answer as the full-Nodes one."""
    if answer.get("Error"):
        return answer
    chosen = [items[n] for n in answer.get("NodeNames") or [] if n in items]
    return {"Nodes": {"items": chosen} if chosen else None, "FailedNodes": answer.get("FailedNodes"), "Error": ""}


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
    for address in runner.addresses:
        return address[1]
    raise RuntimeError("server not started")
