"""`--role dra`: the kubelet DRA plugin for one node, driver `hami-core-gpu.project-hami.io`.

Pieces, started here and stopped on `ctx.stop`:
* the node's GPU mode (hami.kube.nodemode): refuses to start where the device plugin serves the
  node, and marks the node `hami.io/gpu-mode=dra` so the node agent refuses to start there;
* the GPU loop: the same fake/NVML backends as the node agent (`--gpu-backend`, `--fake-gpus`),
  polled every `tick`; the devices (hami.dra.slices: whole GPUs, static MIG instances, MIG
  partitions of MIG-capable GPUs with their counters, health taints) are published as the node's
  pool of ResourceSlices, written through the background lane only when they differ from the stored
  slices (read again every `resync` seconds): a restart that sees the same GPUs writes nothing;
* the health board (hami.dra.health) kubelet's `NodeWatchResources` stream reads, updated on the
  same tick; a GPU that vanished from the driver stays published, tainted `gpu-lost`, until restart;
* `DraServer` on `<--plugin-registration-dir>/hami-core-gpu.project-hami.io-reg.sock` and
  `<--plugin-dir>/dra.sock`, preparing claims against what the slices publish (MIG partitions
  through the MIG slicer the node agent's dynamic MIG uses too, hami.gpu.migslicer).

In-process (the embedded cluster, tests):

    node = DraNode(client, node_name, backend, settings, plugin_dir=..., registration_dir=...,
                   cdi_root=..., hook_path=...)     # client: hami.kube.client.KubeClient
    await node.run(stop, ready)                     # ready is set once the sockets serve
    node.driver                                     # the DraDriver (prepare/unprepare without gRPC)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping

from hami.device.model import MigProfileAllow
from hami.device.nodeconfig import DeviceSettings, settings_for_node
from hami.dra.health import HEALTHY, UNHEALTHY, HealthBoard
from hami.dra.plugin import DEFAULT_CDI_ROOT, DEFAULT_REGISTRATION_DIR, DraDriver, default_plugin_dir
from hami.dra.pool import next_pool
from hami.dra.server import DraServer, claim_reader
from hami.dra.shares import PARTITION, published_gpus
from hami.dra.slices import (
    DRIVER,
    GpuExtras,
    GpuState,
    MigSlice,
    device_name,
    health_taints,
    layout_for,
    nvlink_domains,
)
from hami.gpu import GpuBackend, GpuInfo, make_backend
from hami.gpu.facts import FactsSource, GpuFacts
from hami.gpu.health import DEFAULT_IGNORED_XIDS, HealthSource
from hami.gpu.mig import MigControl
from hami.gpu.migslicer import MigSlicer
from hami.gpu.topology import TopologySource
from hami.kube.client import ApiError
from hami.kube.lanes import background
from hami.kube.nodemode import DRA, claim_node
from hami.obs.log import get_logger

log = get_logger(__name__)

RETRY_AFTER_ERROR = 5.0


class DraNode:
    """One node's DRA plugin, built from its parts so the embedded cluster can run several."""

    def __init__(self, client, node_name: str, backend: GpuBackend, settings: DeviceSettings, *,
                 plugin_dir: str, registration_dir: str, cdi_root: str, hook_path: str,
                 tick: float = 0.5, resync: float = 30.0, driver: str = DRIVER, withdraw_unhealthy: bool = False,
                 mig_allowlist: tuple[MigProfileAllow, ...] = (), mig_partitions: bool = True):
        self.client = client
        self.node_name = node_name
        self.backend = backend
        self.settings = settings
        self.tick = tick
        self.driver_name = driver
        self.withdraw_unhealthy = withdraw_unhealthy
        self.devices: list[dict] = []
        self.published: dict = {}
        self.withdrawn: dict[str, str] = {}
        self.node_uid = ""
        self.slice_writes = 0
        self.server_restarts = 0
        self.sync_error = ""
        self.resync = resync
        self.generation = 0
        self._stored: dict[str, dict] | None = None  # the pool's slices as last read or written
        self._read_at = 0.0
        self._seen: dict[str, tuple[GpuInfo, GpuState]] = {}  # uuid -> last seen: a GPU that vanishes is lost
        self._sync_lock = asyncio.Lock()  # one sync at a time: the loop's tick and any direct call
        self.mig = MigSlicer(backend, mig_allowlist) if isinstance(backend, MigControl) else None
        # MIG partitions are made at prepare, which needs the GPU's MIG config capability (a privileged
        # container); without them the plugin publishes whole GPUs, shares and static MIG instances.
        self.mig_partitions = mig_partitions
        self.health = HealthBoard(node_name)
        self.driver = DraDriver(node=node_name, cdi_root=cdi_root, plugin_dir=plugin_dir, hook_path=hook_path,
                                read_claim=claim_reader(client), published=lambda: self.published,
                                withdrawn=lambda: self.withdrawn,
                                settings=lambda: self.settings, driver=driver, mig=self.mig)
        self.server = DraServer(self.driver, plugin_dir=plugin_dir, registration_dir=registration_dir,
                                health=self.health)

    async def _call(self, fn, *args):
        """Backend call: NVML in a thread (it blocks), the fake inline."""
        if self.backend.name == "nvml":
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    def _own_partitions(self) -> set[tuple[str, str, int]]:
        """(GPU uuid, profile, start) of the MIG instances this plugin made for claims."""
        return {(d["uuid"], d["profile"], int(d["start"])) for e in
                [*self.driver.checkpoint.claims.values(), *self.driver.checkpoint.dropped.values()]
                for d in e.devices if d.get("kind") == PARTITION}

    async def _states(self, gpus: list[GpuInfo]) -> dict[str, GpuState]:
        """What the backend knows beyond GpuInfo: versions and bus id (facts), NVLink groups
        (topology), MIG (static instances, or the profiles of a partitionable GPU), XIDs (taints)."""
        domains: dict[int, int] = {}
        if isinstance(self.backend, TopologySource):
            index = {g.uuid: g.index for g in gpus}
            links = await self._call(self.backend.links)
            domains = nvlink_domains({(index[a], index[b]): link.nvlinks for (a, b), link in links.items()
                                      if a in index and b in index})
        facts = await self._call(self.backend.facts) if isinstance(self.backend, FactsSource) else {}
        xids = {}  # the XIDs behind an unhealthy GPU's taint (a full health read only then: NVML queries a lot)
        if isinstance(self.backend, HealthSource) and any(not g.healthy for g in gpus):
            xids = {h.uuid: {c: n for c, n in h.xid_counts.items() if c not in DEFAULT_IGNORED_XIDS and n}
                    for h in await self._call(self.backend.health)}
        own = self._own_partitions()
        out = {}
        for g in gpus:
            enabled, static, profiles = None, None, ()
            if self.mig is not None:
                with contextlib.suppress(Exception):  # a GPU that cannot say has no migEnabled
                    enabled = bool(await self._call(self.backend.mig_enabled, g.uuid))
                instances = await self._call(self.backend.mig_instances, g.uuid) if enabled else ()
                if any((i.gpu_uuid, i.profile, i.start) not in own for i in instances):
                    static = tuple(await self._mig_slices(g.uuid))  # instances someone else made: static MIG
                elif self.mig_partitions:
                    profiles = await self.mig.profiles(g)
            f = facts.get(g.uuid) or GpuFacts(g.uuid)
            extras = GpuExtras(f.compute_capability, f.driver_version, f.cuda_driver_version, bus_id=f.bus_id,
                               nvlink_domain=domains.get(g.index), mig_enabled=enabled)
            out[g.uuid] = GpuState(extras, static, tuple(profiles),
                                   tuple(health_taints(g.healthy, xids=xids.get(g.uuid))))
        return out

    async def _mig_slices(self, uuid: str) -> list[MigSlice]:
        memory = {p.name: p.memory_mib for p in await self._call(self.backend.mig_profiles, uuid)}
        return [MigSlice(i.mig_uuid, i.profile, i.start, i.size, memory.get(i.profile, 0))
                for i in await self._call(self.backend.mig_instances, uuid) if memory.get(i.profile)]

    async def _read_pool(self) -> dict[str, dict]:
        listed = await self.client.list("resourceslices",
                                        field_selector=f"spec.nodeName={self.node_name},spec.driver={self.driver_name}")
        return {s["metadata"]["name"]: s for s in listed.get("items") or []
                if ((s.get("spec") or {}).get("pool") or {}).get("name") == self.node_name}

    async def sync_once(self) -> bool:
        """Poll GPUs; publish the pool if it differs from the stored slices. True if written.
        The stored slices are read again only every `resync` seconds (or after a failed write): in
        between, what this role last read or wrote is the comparison, so an idle node costs the
        API server one LIST per `resync`, not one per tick."""
        async with self._sync_lock:
            return await self._sync()

    async def _sync(self) -> bool:
        gpus = await self._call(self.backend.list_gpus)
        states = await self._states(gpus)
        present = {g.uuid for g in gpus}
        for uuid, (g, st) in list(self._seen.items()):
            if uuid not in present:  # vanished from the driver (fell off the bus): published, tainted
                gpus.append(dataclasses.replace(g, healthy=False))
                states[uuid] = dataclasses.replace(st, taints=tuple(health_taints(False, lost=True)))
        self._seen = {g.uuid: (g, states[g.uuid]) for g in gpus}
        layout = layout_for(gpus, self.settings, states, withdraw_unhealthy=self.withdraw_unhealthy)
        devices = layout.devices()
        self.devices, self.published = devices, published_gpus(devices)
        unhealthy = {device_name(g): _why(states[g.uuid].taints, g) for g in gpus if states[g.uuid].taints}
        self.withdrawn = unhealthy if self.withdraw_unhealthy else {}
        await self.health.update(_board(devices, unhealthy, gpus))
        now = asyncio.get_running_loop().time()
        if self._stored is None or now - self._read_at >= self.resync:
            self._stored = await self._read_pool()
            self._read_at = now
        write = next_pool(self._stored, self.node_name, layout, driver=self.driver_name, node_uid=self.node_uid)
        if write is None:
            return False
        try:
            with background():  # a slice update never delays a prepare's claim read
                for body in write.put:
                    name = body["metadata"]["name"]
                    if name in self._stored:
                        self._stored[name] = await self.client.replace("resourceslices", name, body)
                    else:
                        self._stored[name] = await self.client.create("resourceslices", body)
                for name in write.delete:
                    with contextlib.suppress(ApiError):
                        await self.client.delete("resourceslices", name)
                    self._stored.pop(name, None)
        except ApiError:
            self._stored = None  # someone else changed or removed one: read them again next tick
            raise
        self.slice_writes += 1
        self.generation = write.generation
        log.info("Published ResourceSlices", node=self.node_name, slices=len(write.put), devices=len(devices),
                 generation=write.generation)
        return True

    async def device_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            delay = self.tick
            if not self.server.sockets_present():
                # kubelet discovers plugins by their socket in plugins_registry: one removed (a
                # cleanup, a kubelet reinstall) is served again, and kubelet registers it anew
                log.warning("DRA plugin socket gone: serving it again", node=self.node_name,
                            registration=self.server.registration_socket, endpoint=self.server.endpoint)
                self.server_restarts += 1
                await self.server.stop(0)
                await self.server.start()
            try:
                await self.sync_once()
                self.sync_error = ""
            except Exception as exc:  # noqa: BLE001 - keep serving prepared claims; retry later
                log.warning("DRA device sync failed, retrying", node=self.node_name, error=str(exc)[:300])
                self.sync_error = str(exc)[:300] or type(exc).__name__
                delay = max(self.tick, RETRY_AFTER_ERROR)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def readiness(self) -> list[str]:
        """Why this node's claims cannot be prepared correctly now (empty: they can)."""
        reasons = []
        status = self.server.registration_status
        if status is None:
            reasons.append("DRA plugin not registered with kubelet yet (no NotifyRegistrationStatus)")
        elif not status[0]:
            reasons.append(f"kubelet refused the DRA plugin registration: {status[1][:200]}")
        if self.sync_error:
            reasons.append(f"GPU sync or ResourceSlice update failing: {self.sync_error}")
        return reasons

    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        node = await claim_node(self.client, self.node_name, DRA)
        self.node_uid = ((node or {}).get("metadata") or {}).get("uid", "")
        await self.sync_once()  # publish before serving: kubelet's first prepare finds the devices
        await self.server.start()
        try:
            if ready is not None:
                ready.set()
            await self.device_loop(stop)
        finally:
            await self.server.stop()


def _why(taints, gpu: GpuInfo) -> str:
    t = taints[0]
    return f"GPU {gpu.uuid} is unhealthy ({t['key']}={t.get('value', '')})"


def _board(devices: list[dict], unhealthy: Mapping[str, str], gpus: list[GpuInfo]) -> dict[str, tuple[str, str]]:
    """Every device published (and every withdrawn GPU) -> (health, message) for kubelet."""
    out = {}
    for d in devices:
        taints = d.get("taints") or []
        out[d["name"]] = (UNHEALTHY, "; ".join(f"{t['key']}={t.get('value', '')}" for t in taints)) if taints \
            else (HEALTHY, "")
    for g in gpus:
        name = device_name(g)
        if name in unhealthy and name not in out:
            out[name] = (UNHEALTHY, unhealthy[name])
    return out


def _settings_dirs(cfg) -> Mapping[str, str]:
    a = cfg.agent
    return {"plugin_dir": a.dra_plugin_dir or default_plugin_dir(DRIVER),
            "registration_dir": a.dra_registration_dir or DEFAULT_REGISTRATION_DIR,
            "cdi_root": a.cdi_root or DEFAULT_CDI_ROOT}


async def run(ctx) -> None:
    from hami.config import replace
    from hami.kube.client import KubeClient

    cfg = ctx.config
    node_name = cfg.agent.node_name
    if not node_name:
        raise RuntimeError("dra: the node name is required (--node-name or NODE_NAME)")
    backend = make_backend(cfg.agent.gpu_backend, cfg.agent.fake_gpus, node_name)
    settings = settings_for_node(cfg.nvidia, cfg.node_configs, node_name)
    kube = cfg.kube
    if not kube.kubeconfig and ctx.shared.get("kubeconfig"):
        kube = replace(kube, kubeconfig=ctx.shared["kubeconfig"])
    client = await KubeClient.from_settings(kube, role="dra")
    try:
        node = DraNode(client, node_name, backend, settings, hook_path=cfg.agent.hook_path,
                       withdraw_unhealthy=cfg.agent.dra_withdraw_unhealthy,
                       mig_allowlist=cfg.nvidia.mig_profile_allowlist, mig_partitions=cfg.agent.dra_mig_partitions,
                       **_settings_dirs(cfg))
        ctx.shared.setdefault("dra", {})[node_name] = node
        # kubelet's probes: /healthz alive, /readyz registered and syncing
        from hami.httpguard import run_with_probes

        await run_with_probes(node, "dra", cfg.agent.health_bind_address, cfg.listen, ctx.stop, ctx.ready,
                              on_port=lambda port: ctx.shared.setdefault("dra-health", {}).update({node_name: port}),
                              listeners=ctx.listeners)
    finally:
        backend.close()
        await client.close()

