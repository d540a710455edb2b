"""A Kubernetes-API-compatible HTTP server over a `Store`, for kubectl and kubernetes-asyncio.

Serves the real REST paths (`/api/v1/...`, `/apis/<group>/<version>/...`, legacy `/api/v1/watch/...`),
discovery (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>[/<version>]`), LIST with label and
field selectors, WATCH (chunked JSON lines, bookmarks, timeoutSeconds, 410 Gone as an ERROR event),
create / get / update / patch / delete, `/status` and `pods/<name>/binding`, `pods/<name>/eviction`
(hami.sim.apiserver.eviction: PDB-checked graceful deletion), kube-apiserver's Priority admission on pod
CREATE from scheduling.k8s.io/v1 PriorityClasses (hami.sim.apiserver.priority), its pod update
validation (hami.sim.apiserver.podupdate, the pods row's hooks: immutable spec fields), the mutating
webhook on pod CREATE, UPDATE and pods/binding (hami.sim.apiserver.admission), ResourceQuota admission of a pod
CREATE after it and the quota controller's `status.used` (hami.sim.apiserver.quota, in the store), and
SelfSubjectAccessReviews answered by `authz` (hami.sim.apiserver.authz: allow-all unless a test denies rules,
which then also answer those requests 403). Every error is a Kubernetes `Status`. Plain HTTP, meant
for loopback.

`ApiServer.stop()` / `start()` / `restart()` cycle the HTTP listener on the same port while the
`Store` (objects, resourceVersion, event window) stays, so clients see a real reconnect.
`Faults` lets tests slow answers, fail writes with 429/500, or make watches go silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from hami.config import ListenSettings
from hami.httpaccept import BACKLOG, GuardedSite
from hami.httpguard import guarded_runner
from hami.netaddr import url_host
from hami.obs.log import get_logger
from hami.sim.apiserver.authn import Authenticator
from hami.sim.apiserver.authz import Attributes, Authorizer, review
from hami.sim.apiserver.eviction import evict
from hami.sim.apiserver.patch import PatchError, apply_patch
from hami.sim.apiserver.priority import admit_pod, validate_class
from hami.sim.apiserver.resources import (
    GROUPS,
    RESOURCES,
    Resource,
    group_list,
    openapi_v3,
    openapi_v3_index,
    resource_list,
)
from hami.sim.apiserver.selectors import SelectorError, parse_field_selector, parse_label_selector
from hami.sim.apiserver.store import ApiError, Store, bookmark_line, event_line
from hami.sim.apiserver.tables import table, wants_table

log = get_logger(__name__)

MAX_BODY = 3 * 1024 * 1024
SERVER_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "gitCommit": "hami-sim",
                  "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
                  "compiler": "gc", "platform": "linux/amd64"}
_JSON = "application/json"
_WRITE_CHUNK = 1 << 20
_TRUE = frozenset({"true", "1", "yes", "t"})


@dataclass
class Faults:
    """Knobs for reliability tests and a realistic server; all off by default. Change them at any time.

    `read_delay`/`write_delay` model an etcd-backed server (e.g. 1 ms / 5 ms); `max_inflight`
    models API Priority and Fairness: a non-watch request arriving while that many are being
    served is answered 429 with `Retry-After: retry_after` (counted in `throttled`).
    """

    delay: float = 0.0  # seconds added before answering every request
    read_delay: float = 0.0  # seconds added before answering reads (GET, not watches)
    write_delay: float = 0.0  # seconds added before answering writes (POST/PUT/PATCH/DELETE)
    max_inflight: int = 0  # concurrent non-watch requests served; more get 429 (0 = no limit)
    retry_after: int = 1  # the Retry-After (seconds) of those 429s
    fail_writes: int = 0  # the next N writes answer `fail_status` without changing anything
    fail_status: int = 500  # 429 (with Retry-After: 1) or 500, or any other code
    silent_watch: bool = False  # new watches answer 200 and then never send a byte
    # The latest latency-knob delays as they were served (bounded: a long benchmark keeps only the tail).
    applied: deque[float] = field(default_factory=lambda: deque(maxlen=64))


    def fail_next_writes(self, n: int, status: int = 500) -> None:
        self.fail_writes, self.fail_status = n, status

    def reset(self) -> None:
        self.delay = self.read_delay = self.write_delay = 0.0
        self.max_inflight, self.retry_after = 0, 1
        self.fail_writes, self.fail_status, self.silent_watch = 0, 500, False
        self.applied.clear()


def _verb(method: str, name: str, watch: bool) -> str:
    """The authorization verb of a request (kube-apiserver's RequestInfo)."""
    if method == "GET":
        return "watch" if watch else ("get" if name else "list")
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _json(body: dict | bytes, status: int = 200, headers: dict | None = None) -> web.Response:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return web.Response(body=raw, status=status, content_type=_JSON, headers=headers)


def _error(exc: ApiError, headers: dict | None = None) -> web.Response:
    return _json(exc.status_object(), exc.code, headers)


_REFUSAL_REASONS = {408: "Timeout", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}


def _refusal(status: int, text: str) -> web.Response:
    """hami.httpguard's refusals as kube-apiserver says them: a Status."""
    return _error(ApiError(status, _REFUSAL_REASONS.get(status, "BadRequest"), text))


# kube-apiserver's watch cache sends an idle watch a BOOKMARK every minute (cacher.go
# defaultBookmarkFrequency) and one more just before the watch's deadline: clients are tuned to that
# rhythm, and a faster one would make every informer of an idle cluster wake for nothing.
BOOKMARK_INTERVAL_S = 60.0
BOOKMARK_BEFORE_DEADLINE_S = 2.0


class ApiServer:
    """The HTTP face of a Store; `url` is valid after `start()`."""

    def __init__(self, store: Store | None = None, host: str = "127.0.0.1", port: int = 0, *,
                 faults: Faults | None = None, bookmark_interval: float = BOOKMARK_INTERVAL_S, max_body: int = MAX_BODY,
                 listen: ListenSettings | None = None):
        self.store = store if store is not None else Store()
        self.host, self.port = host, port
        self.faults = faults if faults is not None else Faults()
        self.bookmark_interval = bookmark_interval
        self.max_body = max_body
        # hami.httpguard's limits; every informer of the embedded cluster holds a watch connection
        self.listen = listen or ListenSettings(max_connections=1024)
        self.kubeconfig = ""
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self._silent: set[asyncio.Event] = set()
        self.inflight = 0  # non-watch requests being served now
        self.throttled = 0  # 429s answered by the max_inflight limit
        # Who may do what (allow-all unless a test denies rules) and the SelfSubjectAccessReview answer.
        self.authz = Authorizer()
        # Who is calling (bearer tokens; everyone is system:admin until a token is issued): hami.sim.apiserver.authn.
        self.authn = Authenticator()
        self._static = self._discovery_docs()
        # Admission of pod CREATE (and UPDATE where it says so): hami.sim.apiserver.admission.WebhookAdmission.
        self.admission: Callable[..., Awaitable[dict]] | None = None
        # `pods/<name>/log`: (namespace, name) -> log lines, for pods the process itself plays.
        self.pod_logs: Callable[[str, str], list[str] | None] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"

    @property
    def runner(self) -> web.AppRunner | None:
        """The aiohttp runner serving the API (hami.httpguard's guarded one), None before start."""
        return self._runner

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        if self._runner is not None:
            return
        if self._sock is None:
            sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, self.port))
                sock.listen(BACKLOG)
            except OSError:
                sock.close()
                raise
            self._sock = sock
            self.port = sock.getsockname()[1]
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = guarded_runner(app, self.listen, answer=_refusal, access_log=None, handler_cancellation=True,
                                shutdown_timeout=1.0)
        await runner.setup()
        # The site gets a duplicate: closing it leaves our socket listening, so connections made
        # during a restart wait in the backlog instead of being refused.
        site = GuardedSite(runner, sock=self._sock.dup())
        await site.start()
        self._runner = runner
        log.info("Embedded API server listening", url=self.url, rv=self.store.rv)

    async def stop(self, *, keep_port: bool = False) -> None:
        """End every watch and close every connection; the store stays. With `keep_port` the
        listening socket stays open (new connections queue until `start()`)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            self.store.end_watchers()
            for ev in list(self._silent):
                ev.set()
            await runner.cleanup()
            log.info("Embedded API server stopped", url=self.url)
        if not keep_port and self._sock is not None:
            self._sock.close()
            self._sock = None

    async def restart(self, downtime: float = 0.0) -> None:
        """Stop and start again on the same port, keeping the store. With `downtime` > 0 the port
        is closed for that many seconds (clients get connection refused); else connections made
        meanwhile wait in the listen backlog."""
        await self.stop(keep_port=downtime <= 0)
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start()

    def write_kubeconfig(self, path: str, token: str = "hami-sim", *, primary: bool = True) -> str:
        """Write a kubeconfig for this server that kubectl and kubernetes-asyncio use as is (`token`:
        one `authn.issue` gave, where the server authenticates; `primary`: it becomes `self.kubeconfig`)."""
        text = kubeconfig_text(self.url, token=token)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
        if primary:
            self.kubeconfig = path
        return path

    # ------------------------------------------------------------------ dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        f = self.faults
        method = request.method
        write = method in ("POST", "PUT", "PATCH", "DELETE")
        watch = not write and request.query.get("watch", "").lower() in _TRUE
        if watch:
            return await self._serve(request, method, write)
        if f.max_inflight and self.inflight >= f.max_inflight:
            self.throttled += 1
            return _error(ApiError(429, "TooManyRequests", "too many requests, please try again later",
                                   {"retryAfterSeconds": f.retry_after}), {"Retry-After": str(f.retry_after)})
        self.inflight += 1
        try:
            return await self._serve(request, method, write)
        finally:
            self.inflight -= 1

    async def _serve(self, request: web.Request, method: str, write: bool) -> web.StreamResponse:
        f = self.faults
        if f.delay:
            f.applied.append(f.delay)
            await asyncio.sleep(f.delay)
        if write:
            if f.write_delay:
                f.applied.append(f.write_delay)
                await asyncio.sleep(f.write_delay)
            if f.fail_writes > 0:
                f.fail_writes -= 1
                return self._injected(f.fail_status)
        elif f.read_delay and method == "GET":
            f.applied.append(f.read_delay)
            await asyncio.sleep(f.read_delay)
        try:
            return await self._dispatch(request, method)
        except ApiError as exc:
            log.v(4).info("API request failed", method=method, path=request.path, code=exc.code, reason=exc.reason)
            return _error(exc)
        except SelectorError as exc:
            return _error(ApiError(400, "BadRequest", f"unable to parse requirement: {exc}"))

    @staticmethod
    def _injected(code: int) -> web.Response:
        if code == 429:
            return _error(ApiError(429, "TooManyRequests", "injected fault: too many requests, please try again later",
                                   {"retryAfterSeconds": 1}), {"Retry-After": "1"})
        reasons = {403: "Forbidden", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
        return _error(ApiError(code, reasons.get(code, "InternalError"), f"injected fault: status {code}"))

    def _discovery_docs(self) -> dict[str, bytes]:
        docs = {
            "/version": SERVER_VERSION,
            "/api": {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
            "/api/v1": resource_list("", "v1"),
            "/apis": group_list(),
            "/healthz": b"ok", "/livez": b"ok", "/readyz": b"ok",
            "/openapi/v3": openapi_v3_index(),
            "/openapi/v3/api/v1": openapi_v3("", "v1"),
        }
        for g in group_list()["groups"]:
            docs[f"/apis/{g['name']}"] = {"kind": "APIGroup", "apiVersion": "v1", **g}
            for v in GROUPS[g["name"]]:
                docs[f"/apis/{g['name']}/{v}"] = resource_list(g["name"], v)
                docs[f"/openapi/v3/apis/{g['name']}/{v}"] = openapi_v3(g["name"], v)
        return {k: (v if isinstance(v, bytes) else orjson.dumps(v)) for k, v in docs.items()}

    async def _dispatch(self, request: web.Request, method: str) -> web.StreamResponse:
        """Static documents, then the route's authorization, reviews, and the verb on the resource."""
        path = request.path.rstrip("/") or "/"
        static = self._static.get(path)
        if static is not None:
            return self._static_document(path, static, method)
        res, ns, name, sub, watch_path = self._route(path)
        user = self.authn.user(request.headers.get("Authorization"))
        q = request.query
        if self.authz.denied:
            self.authz.check(Attributes(_verb(method, name, watch_path or q.get("watch", "").lower() in _TRUE),
                                        res.group, res.plural, sub, ns, name))
        if res.verbs:  # a review: answered from the authorizer, not stored
            if method != "POST" or name:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.plural}")
            return _json(review(self.authz, await self._read_json(request)), 201)
        if method == "GET":
            return await self._get(request, res, ns, name, sub, watch_path)
        if watch_path:
            raise ApiError(405, "MethodNotAllowed", "watch paths support GET only")
        dry = bool(q.get("dryRun"))
        if method == "POST":
            return await self._post(request, res, ns, name, sub, user, dry)
        if not name:
            if method == "DELETE":
                return self._delete_collection(res, ns, q)
            raise ApiError(405, "MethodNotAllowed", f"{method} needs an object name")
        if sub not in ("", "status"):
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.plural}/{sub}")
        if method == "PUT":
            obj = await self._read_json(request)
            if self.admission is not None:
                await self._admit_update(res.key, ns, name, obj, user, subresource=sub)
            return _json(self.store.update(res.key, ns, name, obj, subresource=sub, owned=True, dry_run=dry).raw)
        if method == "PATCH":
            return await self._patch(request, res, ns, name, sub, user, dry)
        if method == "DELETE":
            return await self._delete(request, res, ns, name, dry)
        raise ApiError(405, "MethodNotAllowed", f"method {method} is not supported")

    @staticmethod
    def _static_document(path: str, body: bytes, method: str) -> web.Response:
        """/version, discovery, OpenAPI and the health paths: GET only."""
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {path}")
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(body=body, content_type="text/plain")
        return _json(body)

    async def _get(self, request: web.Request, res: Resource, ns: str, name: str, sub: str,
                   watch_path: bool) -> web.StreamResponse:
        """A watch, an object (or its table row, or a pod's log), or a list."""
        q = request.query
        if watch_path or (not name and q.get("watch", "").lower() in _TRUE):
            if name:
                raise ApiError(405, "MethodNotAllowed", "watch a single object with a metadata.name field selector")
            return await self._watch(request, res, ns, q)
        if not name:
            return self._list(request, res, ns, q)
        if sub == "log" and res.key == "pods":
            return self._pod_log(ns, name, q)
        if sub not in ("", "status"):
            raise ApiError(405, "MethodNotAllowed", f"GET is not supported on {res.plural}/{sub}")
        entry = self.store.entry(res.key, ns, name)
        if wants_table(request.headers.get("Accept", "")):
            return _json(table(res.key, [entry.obj], self.store.rv, q.get("includeObject", "Metadata"),
                               now=time.time()))
        return _json(entry.raw)

    async def _post(self, request: web.Request, res: Resource, ns: str, name: str, sub: str, user: dict,
                    dry: bool) -> web.Response:
        """A create (built-in admission, then the webhooks), a pod's binding or its eviction."""
        if name and sub == "binding" and res.key == "pods":
            binding = await self._read_json(request)
            if self.admission is not None:  # a Binding's annotations land on the pod: admitted as such
                binding = await self.admission(res.key, ns, binding, self._ns_labels(ns), user=user,
                                               subresource="binding")
            self.store.bind(ns, name, binding, dry_run=dry)
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         201)
        if name and sub == "eviction" and res.key == "pods":
            return _json(evict(self.store, ns, name, await self._read_json(request)), 201)
        if name:
            raise ApiError(405, "MethodNotAllowed", f"POST is not supported on {res.plural}/{name}")
        if res.namespaced and not ns:
            raise ApiError(404, "NotFound", f"a namespace is required to create {res.plural}")
        obj = await self._read_json(request)
        if res.key == "pods":  # built-in admission plugins run before the webhooks
            admit_pod(obj, (e.obj for e in self.store.list("priorityclasses.scheduling.k8s.io")[1]))
        elif res.key == "priorityclasses.scheduling.k8s.io":
            validate_class(obj)
        if self.admission is not None:
            obj = await self.admission(res.key, ns, obj, self._ns_labels(ns), user=user)
        if res.key == "pods":  # ResourceQuota: a validating plugin, after the mutating webhooks
            self.store.admit_pod_quota(ns, obj)  # no await until the create: judged and counted at once
        return _json(self.store.create(res.key, ns, obj, owned=True, dry_run=dry).raw, 201)

    async def _patch(self, request: web.Request, res: Resource, ns: str, name: str, sub: str, user: dict,
                     dry: bool) -> web.Response:
        """A patch; the webhooks judge the patched object (a patch that does not apply is the store's error)."""
        body = await self._read_body(request)
        ctype = request.headers.get("Content-Type", "")
        if self.admission is not None:
            old = self.store.entry(res.key, ns, name).obj
            try:
                patched = apply_patch(old, body, ctype)
            except PatchError:
                patched = None  # store.patch answers the error
            if patched is not None:
                await self._admit_update(res.key, ns, name, patched, user, old, subresource=sub)
        return _json(self.store.patch(res.key, ns, name, body, ctype, subresource=sub, dry_run=dry).raw)

    async def _delete(self, request: web.Request, res: Resource, ns: str, name: str, dry: bool) -> web.Response:
        """A delete with its DeleteOptions: preconditions on uid and resourceVersion, dryRun."""
        opts = await self._read_body(request)
        uid = rv = None
        if opts.strip():
            try:
                doc = orjson.loads(opts)
            except orjson.JSONDecodeError as exc:
                raise ApiError(400, "BadRequest", f"invalid DeleteOptions: {exc}") from None
            if not isinstance(doc, dict):
                raise ApiError(400, "BadRequest", "DeleteOptions must be a JSON object")
            pre = doc.get("preconditions") or {}
            uid, rv = pre.get("uid"), pre.get("resourceVersion")
            dry = dry or bool(doc.get("dryRun"))
        return _json(self.store.delete(res.key, ns, name, uid=uid, resource_version=rv, dry_run=dry).raw)

    async def _admit_update(self, key: str, ns: str, name: str, obj: dict, user: dict, old: dict | None = None,
                            subresource: str = "") -> None:
        """Validating admission of an UPDATE (the webhook never mutates one): raises its denial."""
        if old is None:
            old = self.store.entry(key, ns, name).obj
        await self.admission(key, ns, obj, self._ns_labels(ns), user=user, operation="UPDATE", old=old,
                             subresource=subresource)

    def _ns_labels(self, ns: str) -> dict:
        if not ns:
            return {}
        try:
            return (self.store.entry("namespaces", "", ns).obj.get("metadata") or {}).get("labels") or {}
        except ApiError:
            return {}

    def _pod_log(self, ns: str, name: str, q) -> web.Response:
        self.store.entry("pods", ns, name)  # 404 for a pod that does not exist
        lines = self.pod_logs(ns, name) if self.pod_logs is not None else None
        if lines is None:
            raise ApiError(400, "BadRequest", f"pod {name} has no logs on this server: its containers are simulated")
        tail = q.get("tailLines")
        if tail is not None:
            try:
                n = int(tail)
            except ValueError:
                raise ApiError(400, "BadRequest", f"tailLines: {tail!r} is not an integer") from None
            lines = lines[-n:] if n > 0 else []
        return web.Response(body="".join(line if line.endswith("\n") else line + "\n" for line in lines).encode(),
                            content_type="text/plain")

    @staticmethod
    def _route(path: str) -> tuple[Resource, str, str, str, bool]:
        """(resource, namespace, name, subresource, legacy watch path) or 404."""
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = RESOURCES.get((group, version, rest[2]))
            if inner is not None and inner.namespaced:
                ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = RESOURCES.get((group, version, rest[0]))
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in res.subresources:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return res, ns, name, sub, watch_path

    async def _read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > self.max_body:
            raise ApiError(413, "RequestEntityTooLarge",
                           f"the request body of {request.content_length} bytes is over the {self.max_body} byte limit")
        try:
            data = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, "RequestEntityTooLarge",
                           f"the request body is over the {self.max_body} byte limit") from None
        return data

    async def _read_json(self, request: web.Request) -> dict:
        body = await self._read_body(request)
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ApiError(400, "BadRequest", f"the request body must be a JSON object, got {type(doc).__name__}")
        return doc

    @staticmethod
    def _selectors(res: Resource, q) -> tuple:
        return (parse_label_selector(q.get("labelSelector")),
                parse_field_selector(q.get("fieldSelector"), res.fields))

    def _list(self, request: web.Request, res: Resource, ns: str, q) -> web.Response:
        labels, fields = self._selectors(res, q)
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid limit {q.get('limit')!r}") from None
        token = ""
        if limit > 0 or q.get("continue"):
            rv, entries, token = self.store.list_page(res.key, ns, labels, fields, limit, q.get("continue", ""))
        else:
            rv, entries = self.store.list(res.key, ns, labels, fields)
        if wants_table(request.headers.get("Accept", "")):
            doc = table(res.key, (e.obj for e in entries), rv, q.get("includeObject", "Metadata"), now=time.time())
            if token:
                doc["metadata"]["continue"] = token
            return _json(doc)
        return self._list_body(res, entries, rv, token)

    def _delete_collection(self, res: Resource, ns: str, q) -> web.Response:
        labels, fields = self._selectors(res, q)
        _, entries = self.store.list(res.key, ns, labels, fields)
        gone = [self.store.delete(res.key, e.obj["metadata"].get("namespace", ""), e.obj["metadata"]["name"],
                                  dry_run=bool(q.get("dryRun"))) for e in entries]
        return self._list_body(res, gone, self.store.rv)

    @staticmethod
    def _list_body(res: Resource, entries, rv: int, token: str = "") -> web.Response:
        cont = b',"continue":"' + token.encode() + b'"' if token else b""
        head = b'{"kind":"' + res.list_kind.encode() + b'","apiVersion":"' + res.api_version.encode() + \
            b'","metadata":{"resourceVersion":"' + str(rv).encode() + b'"' + cont + b'},"items":['
        return web.Response(body=b"".join((head, b",".join(e.raw for e in entries), b"]}")), content_type=_JSON)

    # ------------------------------------------------------------------ watch

    async def _watch(self, request: web.Request, res: Resource, ns: str, q) -> web.StreamResponse:
        labels, fields = self._selectors(res, q)
        bookmarks = q.get("allowWatchBookmarks", "").lower() in _TRUE
        try:
            timeout = float(q.get("timeoutSeconds") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid timeoutSeconds {q.get('timeoutSeconds')!r}") from None
        resp = web.StreamResponse(headers={"Content-Type": _JSON, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        if self.faults.silent_watch:
            await resp.prepare(request)
            release = asyncio.Event()
            self._silent.add(release)
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout or None):
                        await release.wait()
            finally:
                self._silent.discard(release)
            return resp
        try:
            watcher = self.store.watch(res.key, ns, labels, fields, q.get("resourceVersion"))
        except ApiError as exc:
            if exc.code != 410:
                raise
            await resp.prepare(request)
            await resp.write(event_line("ERROR", orjson.dumps(exc.status_object())))
            return resp
        transport = request.transport
        if transport is not None:
            watcher.on_drop = transport.abort
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None
        try:
            await resp.prepare(request)
            send_initial_bookmark = bookmarks and q.get("sendInitialEvents", "").lower() in _TRUE
            as_table = wants_table(request.headers.get("Accept", ""))
            include = q.get("includeObject", "Metadata")
            while not watcher.dropped and not watcher.ended:
                batch = watcher.take()
                if batch:
                    if as_table:
                        batch = [self._table_line(res, line, include) for line in batch]
                    await self._write_lines(resp, batch)
                    continue
                if send_initial_bookmark:
                    send_initial_bookmark = False
                    await resp.write(bookmark_line(res, self.store.rv, {"k8s.io/initial-events-end": "true"}))
                    continue
                wait = self.bookmark_interval if bookmarks else 3600.0
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    ahead = left - BOOKMARK_BEFORE_DEADLINE_S  # the last bookmark, before the deadline
                    wait = min(wait, ahead if bookmarks and ahead > 0 else left)
                try:
                    if bookmarks or deadline is not None:
                        async with asyncio.timeout(wait):
                            await watcher.wakeup.wait()
                    else:
                        await watcher.wakeup.wait()
                except TimeoutError:
                    if bookmarks and not watcher.dropped and (deadline is None or loop.time() < deadline):
                        await resp.write(bookmark_line(res, self.store.rv))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            watcher.close()
        if watcher.dropped:
            log.v(2).info("Watch dropped", resource=res.key, namespace=ns, reason=watcher.drop_reason)
        return resp

    def _table_line(self, res: Resource, line: bytes, include: str) -> bytes:
        """A watch event for `kubectl get -w`: its object as a one-row Table."""
        ev = orjson.loads(line)
        if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            obj = ev["object"]
            rv = int(obj.get("metadata", {}).get("resourceVersion") or self.store.rv)
            ev["object"] = table(res.key, [obj], rv, include, now=time.time())
        return orjson.dumps(ev) + b"\n"

    @staticmethod
    async def _write_lines(resp: web.StreamResponse, lines: list[bytes]) -> None:
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            chunk.append(line)
            size += len(line)
            if size >= _WRITE_CHUNK:
                await resp.write(b"".join(chunk))
                chunk, size = [], 0
        if chunk:
            await resp.write(b"".join(chunk))


def kubeconfig_text(url: str, name: str = "hami-sim", token: str = "hami-sim") -> str:
    """A kubeconfig (YAML, written as JSON which YAML accepts) for an insecure loopback server."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
