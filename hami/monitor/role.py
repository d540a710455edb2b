"""`hami --role monitor`: HAMi's vGPU monitor (spec node.md §3).

Serves `/metrics` (Prometheus exposition from `MonitorCollector`, scanned and parsed at scrape
time in a worker thread) and `/healthz` on `--metrics-bind-address` (default `:9394`); watches
the pods of this node (field selector `spec.nodeName=<node>`); every 5 s removes the cache dirs
of pods gone for longer than `--cache-grace` (only once the pod list is synced, never a dir of an
existing pod) and, unless `--feedback=false`, runs HAMi's priority feedback loop.

grpc and pynvml are never imported here: the GPU backend (hami.gpu) loads NVML only when
`--gpu-backend nvml` is used, and a backend that cannot start only costs the host metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner
from hami.monitor import feedback
from hami.monitor.claimdirs import ClaimReaper, claims_by_uid, list_claim_dirs
from hami.monitor.metrics import MonitorCollector, MonitorStats, render
from hami.monitor.scan import list_container_dirs, load_containers, pods_by_uid, reap_candidates, remove_dir
from hami.netaddr import split_host_port
from hami.obs.health import Health
from hami.obs.log import get_logger

log = get_logger(__name__)


def split_bind(address: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """`:9394` -> ("0.0.0.0", 9394); `127.0.0.1:0` -> ("127.0.0.1", 0); `[::1]:80` too."""
    return split_host_port(address, flag="--metrics-bind-address", default_host=default_host)


class Monitor:
    """The monitor's state, independent of how pods arrive (the role feeds it from an informer)."""

    def __init__(
        self,
        *,
        cache_dir: str,
        node_name: str,
        pods: Callable[[], Iterable[dict]],
        synced: Callable[[], bool],
        backend: Any = None,
        node_backends: dict[str, Any] | None = None,
        proc_root: str = "/proc",
        legacy: bool = False,
        feedback_enabled: bool = True,
        grace: float = 300.0,
        mig_lock: str = feedback.MIG_APPLY_LOCK,
        clock: Callable[[], float] = time.time,
        readiness: Callable[[], Iterable[str]] | None = None,
        claims: Callable[[], Iterable[dict]] | None = None,
        claims_synced: Callable[[], bool] = lambda: False,
        claims_dir: str | None = None,
    ):
        self.cache_dir = cache_dir
        self.health = Health("monitor")
        # Ready once the pod cache synced and while its watch works: metrics then name the right pods.
        self.health.add(readiness or (lambda: [] if synced() else ["pods: initial list not done"]))
        self.pods = pods
        self.synced = synced
        self.feedback_enabled = feedback_enabled
        self.grace = grace
        self.mig_lock = mig_lock
        self.clock = clock
        self.claims_synced = claims_synced
        self.claim_reaper = ClaimReaper(grace)
        self.stats = MonitorStats()
        self.collector = MonitorCollector(
            cache_dir=cache_dir, node_name=node_name, pods=pods, backend=backend, node_backends=node_backends,
            proc_root=proc_root,
            legacy=legacy, stats=self.stats, warn=log.warning, clock=clock, claims=claims, claims_dir=claims_dir,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)

    def exposition(self) -> bytes:
        return render(self.registry.collect())

    def housekeeping(self) -> dict[str, int]:
        """One 5-second tick: reap dirs of vanished pods and claims, then the feedback loop. Blocking I/O."""
        dirs, skipped = list_container_dirs(self.cache_dir)
        for name in skipped:
            if self.collector.limiter.allow(("dirname", name)):
                log.warning("Ignoring cache dir whose name is not <podUID>_<container>", dir=name)
        by_uid = pods_by_uid(self.pods())
        removed = 0
        if self.synced():
            for d in reap_candidates(dirs, set(by_uid), self.clock(), self.grace):
                if remove_dir(d.path):
                    removed += 1
                    log.info("Removed cache dir of a pod that no longer exists", dir=d.name, pod_uid=d.pod_uid)
        removed += self._reap_claim_dirs()
        writes = 0
        if self.feedback_enabled and not os.path.exists(self.mig_lock):
            dirs = self.collector.dirs(by_uid)
            loaded = load_containers(dirs, by_uid, self.collector.file_error, spec_containers_only=False)
            decisions = feedback.observe(feedback.from_region(x.path, x.region) for x in loaded)
            try:
                writes = feedback.apply(((x.path, x.region) for x in loaded), decisions)
            except OSError as exc:
                log.warning("Feedback write failed", error=str(exc))
        with self.stats.lock:
            self.stats.removed_dirs += removed
            self.stats.feedback_writes += writes
        return {"removed": removed, "writes": writes}

    def _reap_claim_dirs(self) -> int:
        """Remove the dirs of DRA claims gone for --cache-grace (only with the claim list synced)."""
        if self.collector.claims is None or not self.claims_synced():
            return 0
        known = claims_by_uid(self.collector.claims())
        removed = 0
        for d in self.claim_reaper.candidates(list_claim_dirs(self.collector.claims_dir), known, self.clock()):
            if remove_dir(d.path):
                removed += 1
                log.info("Removed cache dir of a DRA claim that no longer exists", dir=d.path, claim_uid=d.uid)
        return removed

    # ------------------------------------------------------------------ HTTP

    async def handle_metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(self.exposition)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.handle_metrics)
        self.health.add_routes(app)  # /healthz alive, /readyz pod cache usable; no pprof here, ever
        return app

    async def housekeeping_loop(self, stop: asyncio.Event, interval: float = feedback.TICK_SECONDS) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            try:
                await asyncio.to_thread(self.housekeeping)
            except Exception as exc:  # keep ticking; one bad tick must not end the role
                log.error("Monitor housekeeping failed", error=f"{type(exc).__name__}: {exc}")


async def serves_dra(client: Any, attempts: int = 3, pause: float = 1.0) -> bool:
    """Whether the API serves resource.k8s.io/v1 (discovery). A 404 or 403 is a clear no; other
    failures are retried `attempts` times, then read as no (the monitor never fails on this)."""
    from hami.kube.client import ApiError

    for attempt in range(attempts):
        try:
            await client.request("get", "discovery", "GET", "/apis/resource.k8s.io/v1")
            return True
        except ApiError as exc:
            reason = str(exc)
            if exc.status in (403, 404):
                break
        if attempt < attempts - 1:
            await asyncio.sleep(pause)
    log.info("No resource.k8s.io/v1 on this cluster: DRA claims' cache dirs are not scanned", reason=reason)
    return False


def claim_summary(claim: dict) -> dict:
    """What the monitor keeps of a ResourceClaim (informer transform): identity, owners, reservedFor."""
    meta = claim.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    status = claim.get("status") or {}
    return {"metadata": keep, "status": {"reservedFor": status.get("reservedFor") or []}}


def _backends(cfg: Any, node: str) -> dict[str, Any]:
    """node -> GPU backend. Without a node name (the embedded cluster's one monitor for all its
    simulated nodes) every node of the fake GPU file's `nodes:` map gets its own fake backend."""
    from hami.gpu import GpuBackendError, make_backend

    if not os.path.isdir(cfg.cache_dir):
        log.warning("Cache dir does not exist (yet): no container metrics until it does", cache_dir=cfg.cache_dir)
    try:
        if node:
            return {node: make_backend(cfg.gpu_backend, cfg.fake_gpus, node)}
        if cfg.gpu_backend != "fake" or not cfg.fake_gpus:
            return {}
        import yaml

        with open(cfg.fake_gpus, "rb") as fh:
            doc = yaml.safe_load(fh) or {}
        names = sorted((doc.get("nodes") or {}) if isinstance(doc, dict) else {})
        return {n: make_backend("fake", cfg.fake_gpus, n) for n in names}
    except (GpuBackendError, OSError, ValueError) as exc:
        log.error("GPU backend unavailable: host GPU metrics and host-PID repair are off", error=str(exc))
        return {}


async def run(ctx: Any) -> None:
    from hami.kube.client import KubeClient
    from hami.kube.informer import Informer

    cfg = ctx.config.monitor
    node = cfg.node_name
    if not node and not ctx.config.sim.embedded:
        raise ValueError("monitor: node name is required (--node-name or $NODE_NAME)")
    # The embedded cluster shares one cache dir across its simulated nodes: watch all their pods.
    kube = ctx.config.kube
    if not kube.kubeconfig and ctx.shared.get("kubeconfig"):
        kube = dataclasses.replace(kube, kubeconfig=ctx.shared["kubeconfig"])
    host, port = split_bind(cfg.metrics_bind_address)
    backends = await asyncio.to_thread(_backends, cfg, node)
    client = await KubeClient.from_settings(kube, role="monitor")
    informer = Informer(client, kind="pods", field_selector=f"spec.nodeName={node}" if node else None)
    # DRA claims' cache dirs are keyed by claim uid: a claim informer maps them to pods, where the
    # API serves resource.k8s.io/v1 (1.34+); an older cluster just has no DRA dirs to report.
    claims = Informer(client, kind="resourceclaims", transform=claim_summary) if await serves_dra(client) else None
    mon = Monitor(
        cache_dir=cfg.cache_dir, node_name=node, pods=lambda: list(informer.store.values()),
        synced=informer.synced.is_set, node_backends=backends, proc_root=cfg.proc_root,
        legacy=cfg.legacy_metrics, feedback_enabled=cfg.feedback, grace=cfg.cache_grace,
        readiness=lambda: [informer.health()] + ([claims.health()] if claims else []),
        claims=(lambda: list(claims.store.values())) if claims else None,
        claims_synced=claims.synced.is_set if claims else (lambda: False),
    )
    app = mon.app()
    runner = guarded_runner(app, ctx.config.listen, access_log=None)
    await runner.setup()
    tasks: list[asyncio.Task] = []
    try:
        site = GuardedSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0] if runner.addresses else (host, port)
        ctx.listeners.add("monitor-metrics", bound[0], bound[1])
        ctx.shared.setdefault("monitor", {})[node or "*"] = {"address": f"{bound[0]}:{bound[1]}", "monitor": mon,
                                                             "informer": informer}
        tasks.append(asyncio.create_task(informer.run(ctx.stop), name="monitor:pod-informer"))
        if claims is not None:
            tasks.append(asyncio.create_task(claims.run(ctx.stop), name="monitor:claim-informer"))
        tasks.append(asyncio.create_task(mon.housekeeping_loop(ctx.stop), name="monitor:housekeeping"))
        log.info("Monitor serving", address=f"{bound[0]}:{bound[1]}", node=node, cache_dir=cfg.cache_dir,
                 feedback=cfg.feedback, gpu_backend=cfg.gpu_backend if backends else "none",
                 dra_claims=mon.collector.claims_dir if claims else "off (no resource.k8s.io/v1)",
                 gpu_nodes=",".join(backends))
        ctx.ready.set()
        stopper = asyncio.create_task(ctx.stop.wait())
        done, _ = await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for t in done:
            if t is not stopper and not t.cancelled() and t.exception() is not None:
                raise t.exception()
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await runner.cleanup()
        await client.close()
        for b in backends.values():
            with contextlib.suppress(Exception):
                b.close()
