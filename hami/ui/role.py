"""`hami --role ui`: serves the pages of hami.ui.render from informers, the monitors' metrics and, on
demand, `hami whatif --suggest` and `hami doctor pod` run in-process. Read-only: it makes no write.

Listens on `--ui-bind-address` (default 127.0.0.1:8080; in a cluster a ClusterIP Service reached with
kubectl port-forward). With `--ui-readonly-token[-file]` every request must carry the token (Bearer
header, or `?token=` once, which sets an HttpOnly SameSite=Strict cookie); without one, only loopback
peers are answered unless `--ui-allow-anonymous`. The Host header must name the UI (loopback names,
its bound address, `--ui-allowed-hosts`), and a POST must carry its form's token from the UI's own
origin (hami.ui.gate). Pages carry a Content-Security-Policy that allows no inline script and no
other origin. What-if runs are one at a time, at most one per `--ui-whatif-interval`, and abandoned
after 20 s; a pending pod's diagnosis is kept 15 s and new ones run at most one a second (burst 5),
off the event loop (hami.doctor.pod.off_loop).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import hmac
import os
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from hami.config import Config
from hami.doctor.gather import node_facts
from hami.doctor.tree import node_health, requested_hami_resources
from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner
from hami.kube.client import ApiError, KubeClient
from hami.kube.informer import Informer
from hami.netaddr import split_host_port
from hami.obs.log import get_logger
from hami.ui import gate, render
from hami.ui.draview import dra_devices
from hami.ui.metrics import Figures, MetricsError, parse_exposition, parse_query
from hami.ui.view import NodeView, ViewMemo, cluster_view, quota_rows

log = get_logger(__name__)

COOKIE = "hami_ui_token"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
}
FIGURES_EVERY = 5.0  # seconds between scrapes of the monitors (pages never wait on a scrape)


def _event_summary(ev: dict) -> dict:
    """What the UI keeps of an Event (informer transform): who it is about, why, when."""
    meta = ev.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion", "creationTimestamp")},
            "involvedObject": {k: (ev.get("involvedObject") or {}).get(k) for k in ("kind", "namespace", "name")},
            "reason": ev.get("reason", ""), "message": str(ev.get("message", ""))[:2048], "type": ev.get("type", ""),
            "lastTimestamp": ev.get("lastTimestamp"), "eventTime": ev.get("eventTime"), "count": ev.get("count")}


def read_token(cfg) -> str:
    if cfg.readonly_token_file:
        with open(cfg.readonly_token_file, encoding="utf-8") as fh:
            token = fh.read().strip()
        if not token:
            raise ValueError(f"--ui-readonly-token-file {cfg.readonly_token_file}: the file is empty")
        return token
    return cfg.readonly_token


def _memory(result) -> tuple[int, int, int]:
    """(allocated, stranded, free) MiB of registered GPU memory: the HTML report's memory plot."""
    t = result.totals()
    return (int(t["mem_allocated"]), int(t["stranded_mem"]),
            max(0, int(t["mem_registered"] - t["mem_allocated"] - t["stranded_mem"])))


def _fill(result, rows: int = 60) -> list[tuple[str, list[float | None]]]:
    """Per node (sampled evenly beyond `rows`): each card's memory fill 0..1, None when not usable."""
    nodes = list(result.nodes)
    if len(nodes) > rows:
        nodes = [nodes[int(i * len(nodes) / rows)] for i in range(rows)]
    return [(n.name, [c.mem_used / c.mem if c.usable and c.mem else None for c in n.cards]) for n in nodes]


class Ui:
    def __init__(self, config: Config, client: KubeClient, *, token: str = "", clock=time.monotonic):
        self.config = config
        self.client = client
        self.token = token
        self.clock = clock
        self.nodes = Informer(client, "nodes")
        self.pods = Informer(client, "pods")
        self.quotas = Informer(client, "resourcequotas")
        self.events = Informer(client, "events", transform=_event_summary)
        # DRA (resource.k8s.io/v1, Kubernetes 1.34+): started only where the API server serves it.
        self.slices = Informer(client, "resourceslices")
        self.claims = Informer(client, "resourceclaims")
        self.dra_served = False
        self.figures = Figures()
        self.whatif_result: dict | None = None
        self.whatif_running = False
        self.whatif_last = -1e9
        self.http: aiohttp.ClientSession | None = None
        self.allow_anonymous = config.ui.allow_anonymous
        bind_host = config.ui.bind_address.rpartition(":")[0]
        self.hosts = gate.allowed_hosts(bind_host, config.ui.allowed_hosts)
        self.form = gate.FormToken(os.urandom(32))
        self.diagnoses = gate.DiagnosisBudget()
        self._view = None
        self._view_key: tuple | None = None
        # A rebuild reads only the objects that changed and formats only the changed nodes' rows.
        self.view_memo = ViewMemo()
        self.node_rows = render.NodeRows()
        # Counters for tests and diagnostics: cluster views built, cluster pages rendered (once per view).
        self.view_builds = 0
        self.page_renders = 0
        self._page = ""
        self._page_key: tuple | None = None

    # ------------------------------------------------------------------ data

    def _events(self) -> list[dict]:
        return [ev for ev in self.events.store.values() if ev.get("reason") in ("FilteringFailed", "FilteringSucceed")]

    def view(self, node: str | None = None):
        """The whole cluster's view (cached until an informer or the figures move), or one node's."""
        cfg = self.config
        if node is not None:
            obj = self.nodes.store.get(node)
            pods = [p for p in self.pods.store.values() if (p.get("spec") or {}).get("nodeName") == node]
            return cluster_view([obj] if obj else [], pods, (), self.figures.usage, self.figures.health, time.time(),
                                cfg.nvidia.resource_count_name, cfg.scheduler.node_lock_timeout)
        key = (self.nodes.resource_version, self.pods.resource_version, self.events.resource_version,
               id(self.figures), int(time.time() // 5))  # ages in the view move: at most 5 s old
        if self._view_key != key:
            self._view = cluster_view(list(self.nodes.store.values()), list(self.pods.store.values()),
                                      self._events(), self.figures.usage, self.figures.health, time.time(),
                                      cfg.nvidia.resource_count_name, cfg.scheduler.node_lock_timeout,
                                      memo=self.view_memo)
            self._view_key = key
            self.view_builds += 1
        return self._view

    def forget_view(self) -> None:
        """Drop the cached cluster view: the next request builds it again, as after a change in the cluster."""
        self._view_key = None

    def cluster_html(self) -> str:
        """The cluster page, rendered once per cluster view and DRA state: at 5,000 nodes it is a
        2.4 MB page that took 150-200 ms to render on every request while nothing had changed."""
        view = self.view()
        key = (self.view_builds, self.slices.resource_version, self.claims.resource_version, self.dra_served)
        if key != self._page_key:
            self._page = render.cluster_page(view, self.dra(), node_rows=self.node_rows, **self.foot())
            self._page_key = key
            self.page_renders += 1
        return self._page

    async def freeze_caches(self) -> None:
        """Once every informer has synced, move the caches out of the cyclic collector's sight: each
        rebuild of the cluster view allocates hundreds of thousands of objects, and the full collections
        they trigger otherwise walk every cached pod (a third of a rebuild at 5,000 nodes). The caches
        are JSON trees, freed by reference counting all the same."""
        for informer in self.informers():
            await informer.synced.wait()
        gc.collect()
        gc.freeze()

    async def refresh_figures(self, stop: asyncio.Event) -> None:
        ui = self.config.ui
        while not stop.is_set():
            figs = Figures()
            if ui.prometheus_url:
                query_url = ui.prometheus_url.rstrip("/") + "/api/v1/query?query=hami_vgpu_memory_used_bytes"
                await self._scrape(figs, query_url, query=True)
            for url in filter(None, (u.strip() for u in ui.metrics_urls.split(","))):
                await self._scrape(figs, url)
            self.figures = figs
            try:
                await asyncio.wait_for(stop.wait(), timeout=FIGURES_EVERY)
            except TimeoutError:
                pass

    async def _scrape(self, figs: Figures, url: str, query: bool = False) -> None:
        try:
            async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=3)) as resp:
                if resp.status != 200:
                    raise MetricsError(f"{url}: HTTP {resp.status}")
                body = await resp.read()
            text = body.decode("utf-8", "replace")
            figs.merge(parse_query(orjson.loads(body), url) if query else parse_exposition(text, url))
        except (aiohttp.ClientError, TimeoutError, MetricsError, orjson.JSONDecodeError, UnicodeError) as exc:
            figs.errors.append(f"{url}: {exc}"[:300])

    def dra(self, node: str | None = None):
        if not self.dra_served:
            return ()
        devices = dra_devices(self.slices.store.values(), self.claims.store.values())
        return devices if node is None else tuple(d for d in devices if d.node == node)

    async def probe_dra(self) -> bool:
        try:
            await self.client.request("get", "discovery", "GET", "/apis/resource.k8s.io/v1")
        except ApiError:
            return False
        self.dra_served = True
        return True

    def foot(self) -> dict:
        return {"sources": self.figures.sources, "errors": self.figures.errors,
                "generated": time.strftime("%Y-%m-%d %H:%M:%S")}

    # ------------------------------------------------------------------ handlers

    @web.middleware
    async def guard(self, request: web.Request, handler):
        if request.path != "/healthz":  # kubelet's probe names the pod's address, and reads nothing
            refused = self._refusal(request)
            if refused is not None:
                return refused
        if self.token:
            given = request.query.get("token")
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                resp = web.HTTPSeeOther(request.path)
                resp.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
                raise resp
            auth = request.headers.get("Authorization", "")
            cookie = request.cookies.get(COOKIE, "")
            ok = (auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), self.token.encode())) or \
                (cookie and hmac.compare_digest(cookie.encode(), self.token.encode()))
            if not ok and request.path not in ("/healthz",):
                return web.Response(status=401, text="hami ui: a read-only token is required "
                                    "(Authorization: Bearer <token>, or open /?token=<token> once)\n",
                                    headers={"WWW-Authenticate": 'Bearer realm="hami-ui"', **HEADERS})
        resp = await handler(request)
        resp.headers.update(HEADERS)
        return resp

    def _refusal(self, request: web.Request) -> web.Response | None:
        """Why this request is not answered (hami.ui.gate), or None."""
        def refuse(status: int, text: str) -> web.Response:
            return web.Response(status=status, text=f"hami ui: {text}\n", headers=HEADERS)
        if not gate.host_allowed(request.headers.get("Host"), self.hosts):
            return refuse(403, f"Host {gate.host_name(request.headers.get('Host'))[:100]!r} is not this UI's name "
                               "(a rebound DNS name?); add it with --ui-allowed-hosts (chart: ui.allowedHosts)")
        if not gate.peer_may_enter(request.remote, token_set=bool(self.token), allow_anonymous=self.allow_anonymous):
            return refuse(403, "requests from other hosts need a read-only token (--ui-readonly-token-file; chart: "
                               "ui.readonlyTokenSecret), or anonymous reading allowed (--ui-allow-anonymous; "
                               "chart: ui.allowAnonymous)")
        return None

    async def form_checked(self, request: web.Request) -> bool:
        """A POST carries its form's token, from the UI's own origin (cross-site request forgery)."""
        form = await request.post()
        given = form.get("form_token")
        return self.form.accepts(given if isinstance(given, str) else None, request.headers.get("Origin"),
                                 request.headers.get("Host"))

    def _html(self, text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")

    async def h_cluster(self, request: web.Request) -> web.Response:
        return self._html(self.cluster_html())

    async def h_node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        node = next((n for n in self.view(name).nodes if n.name == name), None)
        dra = self.dra(name)
        if node is None and dra and name in self.nodes.store:  # a DRA node registers no device plugin GPUs
            facts = node_facts(self.nodes.store[name], self.config.nvidia.resource_count_name)
            node = NodeView(name, (), node_health(facts, time.time(), self.config.scheduler.node_lock_timeout))
        if node is None:
            return self._html(render.not_found(f"node {name}", **self.foot()), 404)
        return self._html(render.node_page(node, dra, **self.foot()))

    async def h_pod(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        pod = self.pods.store.get(f"{ns}/{name}")
        if pod is None:
            return self._html(render.not_found(f"pod {ns}/{name}", **self.foot()), 404)
        node = (pod.get("spec") or {}).get("nodeName")
        view = self.view(node) if node else None
        slices = [(c, s) for c in (view.cards if view else []) for s in c.slices if (s.namespace, s.pod) == (ns, name)]
        events = sorted((ev for ev in self.events.store.values()
                         if (ev["involvedObject"].get("namespace"), ev["involvedObject"].get("name")) == (ns, name)),
                        key=lambda ev: str(ev.get("lastTimestamp") or ev.get("eventTime") or ""))[-20:]
        diagnosis = None
        if not (pod.get("spec") or {}).get("nodeName"):
            diagnosis = await self._diagnose_kept(ns, name, (pod.get("metadata") or {}).get("resourceVersion", ""))
        requested = requested_hami_resources(pod, self.config.nvidia, self.config.vendors)
        return self._html(render.pod_page(pod, slices, events, diagnosis, requested, **self.foot()))

    async def _diagnose_kept(self, ns: str, name: str, rv: str):
        """The pod's diagnosis: kept a while per resourceVersion, new ones rate-limited (hami.ui.gate)."""
        key, now = (ns, name, rv), self.clock()
        hit, kept = self.diagnoses.cached(key, now)
        if hit:
            return kept
        if not self.diagnoses.take(now):
            log.v(2).info("UI: diagnosis rate-limited", pod=f"{ns}/{name}")
            return None
        diagnosis = await self._diagnose(ns, name)
        self.diagnoses.keep(key, self.clock(), diagnosis)
        return diagnosis

    async def _diagnose(self, ns: str, name: str):
        from hami.doctor.pod import DIAGNOSIS_DEADLINE_S, diagnose

        args = argparse.Namespace(pod=f"{ns}/{name}", scheduler_name=self.config.scheduler.scheduler_name,
                                  scheduler_url="", hami_namespace=self.config.kube.pod_namespace or "",
                                  scheduler_namespace="", lease_name="hami-scheduler",
                                  node_lock_timeout=f"{int(self.config.scheduler.node_lock_timeout)}s", json=False)
        try:
            # the diagnosis stops its own selectors at its deadline; this bounds its API calls too
            return await asyncio.wait_for(diagnose(self.client, args), timeout=DIAGNOSIS_DEADLINE_S + 2.0)
        except (ApiError, TimeoutError) as exc:
            log.info("UI: doctor could not diagnose the pod", pod=f"{ns}/{name}", error=str(exc))
            return None

    async def h_quotas(self, request: web.Request) -> web.Response:
        cfg = self.config.nvidia
        rows = quota_rows(self.quotas.store.values(), cfg.resource_memory_name, cfg.resource_core_name)
        return self._html(render.quotas_page(rows, **self.foot()))

    def _wait(self) -> float:
        return max(0.0, self.whatif_last + self.config.ui.whatif_interval - self.clock())

    async def h_whatif(self, request: web.Request) -> web.Response:
        return self._html(render.whatif_page(self.whatif_result, running=self.whatif_running, wait=self._wait(),
                                             form_token=self.form.value, **self.foot()))

    async def h_whatif_run(self, request: web.Request) -> web.Response:
        if not await self.form_checked(request):
            return web.Response(status=403, text="hami ui: this form was not sent from the UI's own page (its form "
                                                 "token or origin is missing or wrong)\n", headers=HEADERS)
        if self.whatif_running or self._wait() > 0:
            return self._html(render.whatif_page(self.whatif_result, running=self.whatif_running, wait=self._wait(),
                                                 form_token=self.form.value, **self.foot()), 429)
        self.whatif_running, self.whatif_last = True, self.clock()
        asyncio.get_running_loop().create_task(self._run_whatif())
        raise web.HTTPSeeOther("/whatif")

    async def _run_whatif(self) -> None:
        from hami.doctor.pod import off_loop
        from hami.whatif.cluster import SnapshotError, parse_snapshot
        from hami.whatif.engine import SchedulerDefaults, run_plan
        from hami.whatif.scenario import Plan, Scenario
        from hami.whatif.snapshot import take_with
        from hami.whatif.suggest import suggest

        started = time.monotonic()
        sc = self.config.scheduler
        defaults = SchedulerDefaults(node_policy=sc.node_scheduler_policy, gpu_policy=sc.gpu_scheduler_policy,
                                     scheduler_name=sc.scheduler_name)
        try:
            cluster = parse_snapshot(await take_with(self.client), "live cluster")
            plan = Plan(scenarios=(Scenario("baseline"),))

            def work():
                base = run_plan(cluster, plan, defaults)[0]
                return base, suggest(cluster, plan, defaults, baseline=base)

            limit = self.config.ui.whatif_timeout  # off_loop: tenants' DRA selectors stop at it too
            base, found = await asyncio.wait_for(off_loop(work, seconds=limit), timeout=limit)
            t = base.totals()
            best = found[0] if found and found[0].gained > 0 else None
            self.whatif_result = {"at": time.strftime("%H:%M:%S"), "seconds": time.monotonic() - started,
                                  "baseline": {"placed": t["placed"], "pending": t["pending"], "memory": _memory(base)},
                                  "suggestions": [{**s.as_dict(), "memory": _memory(s.result)} for s in found],
                                  "heatmaps": [("baseline", _fill(base))]
                                  + ([(best.label, _fill(best.result))] if best else [])}
        except (SnapshotError, ApiError) as exc:
            self.whatif_result = {"error": f"could not read the cluster: {exc}"}
        except TimeoutError:
            self.whatif_result = {"error": f"the run took longer than {self.config.ui.whatif_timeout:.0f} s and "
                                           "was abandoned"}
        finally:
            self.whatif_running = False

    async def h_script(self, request: web.Request) -> web.Response:
        return web.Response(text=render.SCRIPT, content_type="application/javascript")

    async def h_health(self, request: web.Request) -> web.Response:
        ok = all(i.synced.is_set() for i in (self.nodes, self.pods))
        return web.Response(text="ok\n" if ok else "informers not synced\n", status=200 if ok else 503)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard], client_max_size=64 * 1024)
        app.router.add_get("/", self.h_cluster)
        app.router.add_get("/node/{name}", self.h_node)
        app.router.add_get("/pod/{ns}/{name}", self.h_pod)
        app.router.add_get("/quotas", self.h_quotas)
        app.router.add_get("/whatif", self.h_whatif)
        app.router.add_post("/whatif", self.h_whatif_run)
        app.router.add_get("/static/ui.js", self.h_script)
        app.router.add_get("/healthz", self.h_health)
        return app

    def informers(self) -> list[Informer]:
        dra = [self.slices, self.claims] if self.dra_served else []
        return [self.nodes, self.pods, self.quotas, self.events] + dra


async def run(ctx: Any) -> None:
    from hami.listeners import with_bound_addresses

    # the monitor of this process on port 0: its /metrics is scraped where it bound
    config: Config | None = await with_bound_addresses(ctx.config, ctx.listeners, ctx.stop, ("monitor-metrics",))
    if config is None:  # stopped first
        return
    kube = config.kube
    if not kube.kubeconfig and ctx.shared.get("kubeconfig"):
        kube = dataclasses.replace(kube, kubeconfig=ctx.shared["kubeconfig"])
    token = read_token(config.ui)
    host, port = split_host_port(config.ui.bind_address, flag="--ui-bind-address", default_host="127.0.0.1")
    client = await KubeClient.from_settings(kube, role="ui")
    ui = Ui(config, client, token=token)
    ui.http = aiohttp.ClientSession()
    await ui.probe_dra()
    runner = guarded_runner(ui.app(), config.listen, access_log=None)
    await runner.setup()
    tasks = [asyncio.create_task(i.run(ctx.stop), name=f"ui:{i.kind}-informer") for i in ui.informers()]
    tasks.append(asyncio.create_task(ui.refresh_figures(ctx.stop), name="ui:figures"))
    tasks.append(asyncio.create_task(ui.freeze_caches(), name="ui:freeze-caches"))
    try:
        site = GuardedSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0] if runner.addresses else (host, port)
        ctx.shared["ui"] = {"address": f"{bound[0]}:{bound[1]}", "ui": ui}
        ctx.listeners.add("ui", bound[0], bound[1])
        log.info("Web UI serving", url=f"http://{bound[0]}:{bound[1]}/", token=bool(token))
        ctx.ready.set()
        await ctx.stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await ui.http.close()
        await client.close()
