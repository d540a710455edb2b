"""The one door to the API server: `KubeClient` over one kubernetes-asyncio `ApiClient`.

Every call goes through `KubeClient.request`, which
* waits on the token bucket of its lane (`hami.kube.lanes`): `critical` for what a pending pod
  waits on (`--kube-qps`, `--kube-burst`), `background` for events, handshakes, registrations,
  leases and re-lists (`--kube-background-qps`, `--kube-background-burst`); defaults per role;
* applies the per-request deadline (`--kube-timeout`, default 10 s; never to watches);
* on 429 waits the server's Retry-After (plus jitter) and retries, at most `MAX_RETRIES` times
  and never past the deadline, taking a token of its lane again each time, like client-go;
* counts the request by verb, resource and HTTP status code (`client.requests`, a plain dict the
  scheduler's metrics exporter reads at scrape time; code "error" for transport failures);
* returns the raw JSON decoded with orjson (`_preload_content=False`: the generated models are
  never built, which is ~20x cheaper for a NodeList).

Non-2xx answers raise `ApiError(status, reason, message, body=Status)` (`hami.apierror`, shared with the
embedded server), the one error type of this package.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from hami.apierror import ApiError as ApiError  # the one API error shape (hami.apierror)
from hami.config import KubeSettings
from hami.kube.lanes import (
    BACKGROUND,
    CRITICAL,
    DEFAULT_TIMEOUT,
    MAX_RETRIES,
    LaneStats,
    TokenBucket,
    budgets_for,
    is_urgent,
    lane_for,
    retry_after_seconds,
)
from hami.kube.readsize import SizedReadRequest, reads_of

__all__ = ["ApiError", "KubeClient", "KubeConfigError", "TokenBucket", "resource_path",
           "MERGE_PATCH", "JSON_PATCH", "STRATEGIC_PATCH"]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"

_RESOURCE_PATHS = {
    "pods": ("/api/v1", True),
    "nodes": ("/api/v1", False),
    "events": ("/api/v1", True),
    "namespaces": ("/api/v1", False),
    "resourcequotas": ("/api/v1", True),
    "configmaps": ("/api/v1", True),
    "leases": ("/apis/coordination.k8s.io/v1", True),
    "poddisruptionbudgets": ("/apis/policy/v1", True),
    "resourceclaims": ("/apis/resource.k8s.io/v1", True),
    "resourceslices": ("/apis/resource.k8s.io/v1", False),
    "resourceclaimtemplates": ("/apis/resource.k8s.io/v1", True),
    "deviceclasses": ("/apis/resource.k8s.io/v1", False),
    "jobs": ("/apis/batch/v1", True),
    "priorityclasses": ("/apis/scheduling.k8s.io/v1", False),
}


class KubeConfigError(RuntimeError):
    """No usable connection settings: names the file or the missing in-cluster environment."""


def resource_path(resource: str, namespace: str | None = None, name: str | None = None,
                  sub: str | None = None) -> str:
    try:
        prefix, namespaced = _RESOURCE_PATHS[resource]
    except KeyError:
        raise ValueError(f"unknown resource {resource!r}") from None
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{resource}"
    if name:
        path += f"/{quote(name, safe='')}"
    if sub:
        path += f"/{sub}"
    return path


class KubeClient:
    """Thin async client returning plain dicts. Build with `await KubeClient.from_settings(settings)`."""

    def __init__(self, api: k8s_client.ApiClient, settings: KubeSettings,
                 clock: Callable[[], float] | None = None, *, role: str = "default"):
        self.api = api
        self.settings = settings
        self.role = role
        self.host = api.configuration.host
        crit, bg = budgets_for(role, settings.qps, settings.burst, settings.background_qps,
                               settings.background_burst)
        self.budgets = {CRITICAL: crit, BACKGROUND: bg}
        self.buckets = {CRITICAL: TokenBucket(crit.qps, crit.burst, clock),
                        BACKGROUND: TokenBucket(bg.qps, bg.burst, clock)}
        self.lane_stats = {CRITICAL: LaneStats(), BACKGROUND: LaneStats()}
        self.timeout = DEFAULT_TIMEOUT if settings.timeout is None else settings.timeout
        # (verb, resource, code) -> count; code is the HTTP status as a string, or "error".
        self.requests: dict[tuple[str, str, str], int] = {}
        self.on_request: Callable[[str, str, str, float], None] | None = None
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # the 429 back-off's wait (tests inject one)

    # ------------------------------------------------------------------ construction

    @classmethod
    async def from_settings(cls, settings: KubeSettings, clock: Callable[[], float] | None = None, *,
                            role: str = "default") -> KubeClient:
        """--kubeconfig, else $KUBECONFIG, else in-cluster service account; lane budgets of `role`."""
        cfg = k8s_client.Configuration()
        path = settings.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if path:
            if not os.path.isfile(path):  # noqa: ASYNC240 - once at start-up, before any I/O
                raise KubeConfigError(f"kubeconfig {path}: no such file (from --kubeconfig or $KUBECONFIG)")
            try:
                await k8s_config.load_kube_config(config_file=path, client_configuration=cfg)
            except k8s_config.ConfigException as exc:
                raise KubeConfigError(f"kubeconfig {path}: {exc}") from None
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)
            except k8s_config.ConfigException as exc:
                raise KubeConfigError(
                    f"no Kubernetes connection: give --kubeconfig or set $KUBECONFIG, or run in a pod ({exc}); "
                    "without a cluster, try `hami --role all --embedded`"
                ) from None
        cfg.connection_pool_maxsize = max(getattr(cfg, "connection_pool_maxsize", 0) or 0, 64)
        api = k8s_client.ApiClient(configuration=cfg)
        _own_session(api)
        return cls(api, settings, clock, role=role)

    async def close(self) -> None:
        await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ core

    def _count(self, verb: str, resource: str, code: str, seconds: float) -> None:
        key = (verb, resource, code)
        self.requests[key] = self.requests.get(key, 0) + 1
        if self.on_request is not None:
            self.on_request(verb, resource, code, seconds)

    def total_requests(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(
            n for (v, r, _), n in self.requests.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )

    async def _send(self, method: str, path: str, query: list[tuple[str, Any]] | None,
                    body: Any, content_type: str | None, timeout: Any) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        return await self.api.call_api(
            path, method, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout,
        )

    def lane_report(self) -> dict[str, dict[str, float]]:
        """Per lane: seconds waited for tokens, requests, 429s, retries (the saturation signals)."""
        return {lane: {"wait_seconds": self.buckets[lane].waited, "requests": float(s.requests),
                       "writes": float(s.writes),
                       "throttled": float(s.throttled), "retries": float(s.retries)}
                for lane, s in self.lane_stats.items()}

    @property
    def bucket(self) -> TokenBucket:
        """The critical lane's bucket (what a pending pod waits on)."""
        return self.buckets[CRITICAL]

    async def request(self, verb: str, resource: str, method: str, path: str, *,
                      query: list[tuple[str, Any]] | None = None, body: Any = None,
                      content_type: str | None = None, retry_throttled: bool = True,
                      read_size: int | None = None) -> Any:
        """One rate-limited, counted request; returns the decoded JSON body (or None if empty).
        `retry_throttled=False`: a 429 is the answer (an eviction a PodDisruptionBudget refuses), not retried.
        `read_size`: read the answer that many bytes at a time (hami.kube.readsize; for answers known
        to be small, so that each does not cost asyncio's 256 KiB read)."""
        lane = lane_for(verb, resource)
        bucket, stats = self.buckets[lane], self.lane_stats[lane]
        timeout = self.timeout if self.timeout > 0 else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        attempt = 0
        while True:
            await (bucket.acquire(urgent=True) if is_urgent() else bucket.acquire())
            stats.requests += 1
            stats.writes += method != "GET"
            started = time.perf_counter()
            left = None if deadline is None else max(0.001, deadline - loop.time())
            try:
                with reads_of(read_size):
                    resp = await self._send(method, path, query, body, content_type, left)
                try:
                    data = await resp.read()
                finally:
                    resp.release()
            except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as exc:  # RuntimeError: session closed
                self._count(verb, resource, "error", time.perf_counter() - started)
                raise ApiError(0, type(exc).__name__, str(exc) or type(exc).__name__) from exc
            self._count(verb, resource, str(resp.status), time.perf_counter() - started)
            if resp.status < 300:
                return orjson.loads(data) if data else None
            err = _api_error(resp.status, resp.reason or "", data)
            if resp.status != 429 or not retry_throttled:
                raise err
            # Too many requests: the server refused before doing anything, so any verb may retry.
            stats.throttled += 1
            wait = retry_after_seconds(resp.headers.get("Retry-After"), err.body)
            wait = (0.5 * 2 ** attempt) if wait is None else wait
            wait += random.uniform(0.0, 0.1 * wait + 0.01)  # jitter: retries of a burst spread out
            attempt += 1
            if attempt > MAX_RETRIES or (deadline is not None and loop.time() + wait >= deadline):
                raise err
            stats.retries += 1
            await self.sleep(wait)

    async def open_watch(self, resource: str, query: list[tuple[str, Any]],
                         read_timeout: float, namespace: str | None = None) -> aiohttp.ClientResponse:
        """Start a watch; returns the open response (caller reads lines and releases it).

        `read_timeout` bounds the silence between two chunks: a watch that delivers no event or
        bookmark for that long raises asyncio.TimeoutError from readline.
        """
        await self.buckets[BACKGROUND].acquire()
        self.lane_stats[BACKGROUND].requests += 1
        started = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_connect=30, sock_read=read_timeout)
        try:
            resp = await self._send("GET", resource_path(resource, namespace), query, None, None, timeout)
        except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError) as exc:  # RuntimeError: session closed
            self._count("watch", resource, "error", time.perf_counter() - started)
            raise ApiError(0, type(exc).__name__, str(exc) or type(exc).__name__) from exc
        self._count("watch", resource, str(resp.status), time.perf_counter() - started)
        if resp.status >= 300:
            try:
                data = await resp.read()
            finally:
                resp.release()
            raise _api_error(resp.status, resp.reason or "", data)
        return resp

    # ------------------------------------------------------------------ helpers

    async def get(self, resource: str, name: str, namespace: str | None = None) -> dict:
        return await self.request("get", resource, "GET", resource_path(resource, namespace, name))

    async def list(self, resource: str, namespace: str | None = None, *, label_selector: str | None = None,
                   field_selector: str | None = None, resource_version: str | None = None,
                   limit: int | None = None, continue_: str | None = None) -> dict:
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if limit:
            query.append(("limit", limit))
        if continue_:
            query.append(("continue", continue_))
        return await self.request("list", resource, "GET", resource_path(resource, namespace), query=query)

    async def patch(self, resource: str, name: str, patch: Any, namespace: str | None = None,
                    content_type: str = MERGE_PATCH) -> dict:
        return await self.request("patch", resource, "PATCH", resource_path(resource, namespace, name),
                                  body=patch, content_type=content_type)

    async def create(self, resource: str, body: dict, namespace: str | None = None) -> dict:
        return await self.request("create", resource, "POST", resource_path(resource, namespace), body=body,
                                  content_type="application/json")

    async def replace(self, resource: str, name: str, body: dict, namespace: str | None = None) -> dict:
        return await self.request("update", resource, "PUT", resource_path(resource, namespace, name),
                                  body=body, content_type="application/json")

    async def delete(self, resource: str, name: str, namespace: str | None = None) -> dict | None:
        return await self.request("delete", resource, "DELETE", resource_path(resource, namespace, name))

    # named helpers (architecture contract)

    async def get_node(self, name: str) -> dict:
        return await self.get("nodes", name)

    async def list_nodes(self, label_selector: str | None = None) -> dict:
        return await self.list("nodes", label_selector=label_selector)

    async def patch_node(self, name: str, patch: Any, content_type: str = MERGE_PATCH) -> dict:
        return await self.patch("nodes", name, patch, content_type=content_type)

    async def patch_node_status(self, name: str, patch: Any, content_type: str = STRATEGIC_PATCH) -> dict:
        """`nodes/<name>/status`: the only way to change a Node's capacity and allocatable (a patch of
        the Node itself leaves its status as it was)."""
        return await self.request("patch", "nodes/status", "PATCH", resource_path("nodes", None, name, "status"),
                                  body=patch, content_type=content_type)

    async def get_pod(self, namespace: str, name: str) -> dict:
        return await self.get("pods", name, namespace)

    async def list_pods(self, namespace: str | None = None, *, label_selector: str | None = None,
                        field_selector: str | None = None) -> dict:
        return await self.list("pods", namespace, label_selector=label_selector, field_selector=field_selector)

    async def patch_pod(self, namespace: str, name: str, patch: Any, content_type: str = MERGE_PATCH) -> dict:
        return await self.patch("pods", name, patch, namespace, content_type=content_type)

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                       annotations: dict[str, str] | None = None) -> Any:
        """POST pods/<name>/binding; `annotations` travel in the Binding's metadata and kube-apiserver
        merges them into the pod in the same write that sets spec.nodeName (BindingREST)."""
        body = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {}),
                         **({"annotations": annotations} if annotations else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self.request("create", "pods/binding", "POST",
                                  resource_path("pods", namespace, name, "binding"), body=body,
                                  content_type="application/json")

    async def evict_pod(self, namespace: str, name: str, uid: str = "") -> Any:
        """policy/v1 Eviction (pods/eviction): the server checks PodDisruptionBudgets (429, not
        retried here) and starts a graceful deletion; `uid` guards against a pod recreated by name."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                **({"deleteOptions": {"preconditions": {"uid": uid}}} if uid else {})}
        return await self.request("create", "pods/eviction", "POST", resource_path("pods", namespace, name, "eviction"),
                                  body=body, content_type="application/json", retry_throttled=False)

    async def create_event(self, namespace: str, event: dict) -> dict:
        return await self.create("events", event, namespace)

    async def patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        return await self.patch("events", name, patch, namespace)

    async def get_lease(self, namespace: str, name: str) -> dict:
        return await self.get("leases", name, namespace)

    async def create_lease(self, namespace: str, body: dict) -> dict:
        return await self.create("leases", body, namespace)

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        return await self.replace("leases", name, body, namespace)


_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _own_session(api: k8s_client.ApiClient) -> None:
    """kubernetes-asyncio's aiohttp session, opened again on the same connector (its TLS settings and
    pool) with two changes:
    * trust_env only when a proxy variable is set: with it, aiohttp looks up proxy settings and
      ~/.netrc in a worker thread on *every* request (a thread hop and GIL contention per call:
      ~1 ms under load); without proxy variables there is nothing to find;
    * its requests are `SizedReadRequest`s: one made under `readsize.reads_of` reads its answer in
      small pieces instead of asyncio's 256 KiB (the liveness probe, the RBAC review)."""
    old = getattr(api.rest_client, "pool_manager", None)
    if not isinstance(old, aiohttp.ClientSession) or old.connector is None:
        return
    api.rest_client.pool_manager = aiohttp.ClientSession(
        connector=old.connector, trust_env=any(os.environ.get(v) for v in _PROXY_VARS),
        read_bufsize=2**21,  # kubernetes-asyncio's: a watch event can be as large as etcd's 1.5 MiB limit
        request_class=SizedReadRequest)
    old.detach()  # the connector is the new session's now: closing it is that session's job


def _api_error(status: int, reason: str, data: bytes) -> ApiError:
    body: dict = {}
    message = ""
    if data:
        try:
            decoded = orjson.loads(data)
            if isinstance(decoded, dict):
                body = decoded
                message = str(decoded.get("message", ""))
                reason = str(decoded.get("reason") or reason)
        except orjson.JSONDecodeError:
            message = data[:200].decode("utf-8", "replace")
    return ApiError(status, reason, message, body=body)
