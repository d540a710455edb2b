"""`--role dra`: the kubelet DRA plugin for one node, driver `hami-core-gpu.project-hami.io`.

Pieces, started here and stopped on `ctx.stop`:
* the node's GPU mode (hami.kube.nodemode): refuses to start where the device plugin serves the
  node, and marks the node `hami.io/gpu-mode=dra` so the node agent refuses to start there;
* the GPU loop: the same fake/NVML backends as the node agent (`--gpu-backend`, `--fake-gpus`),
  polled every `tick` (a GPU in MIG mode is published as its MIG instances); the devices
  (hami.dra.slices) are published as the node's ResourceSlice, written through the background
  lane only when they differ from the stored slice (read again every `resync` seconds) (a restart that
  sees the same GPUs writes nothing, the pool's generation stays);
* `DraServer` on `<--plugin-registration-dir>/hami-core-gpu.project-hami.io-reg.sock` and
  `<--plugin-dir>/dra.sock`, preparing claims against what the slice publishes.

In-process (the embedded cluster, tests):

    node = DraNode(client, node_name, backend, settings, plugin_dir=..., registration_dir=...,
                   cdi_root=..., hook_path=...)     # client: hami.kube.client.KubeClient
    await node.run(stop, ready)                     # ready is set once the sockets serve
    node.driver                                     # the DraDriver (prepare/unprepare without gRPC)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from hami.device.nodeconfig import DeviceSettings, settings_for_node
from hami.dra.plugin import (
    DEFAULT_CDI_ROOT,
    DEFAULT_REGISTRATION_DIR,
    DraDriver,
    DraServer,
    claim_reader,
    default_plugin_dir,
)
from hami.dra.shares import published_gpus
from hami.dra.slices import (
    DRIVER,
    GpuExtras,
    MigSlice,
    device_name,
    devices_for,
    next_slice,
    nvlink_domains,
    slice_name,
)
from hami.gpu import GpuBackend, GpuInfo, make_backend
from hami.gpu.facts import FactsSource, GpuFacts
from hami.gpu.mig import MigControl
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
                 tick: float = 0.5, resync: float = 30.0, driver: str = DRIVER):
        self.client = client
        self.node_name = node_name
        self.backend = backend
        self.settings = settings
        self.tick = tick
        self.driver_name = driver
        self.devices: list[dict] = []
        self.published: dict = {}
        self.withdrawn: dict[str, str] = {}
        self.node_uid = ""
        self.slice_writes = 0
        self.server_restarts = 0
        self.sync_error = ""
        self.resync = resync
        self._stored: dict | None = None  # the slice as last read or written ({}: read, none stored)
        self._read_at = 0.0
        self.driver = DraDriver(node=node_name, cdi_root=cdi_root, plugin_dir=plugin_dir, hook_path=hook_path,
                                read_claim=claim_reader(client), published=lambda: self.published,
                                withdrawn=lambda: self.withdrawn,
                                settings=lambda: self.settings, driver=driver)
        self.server = DraServer(self.driver, plugin_dir=plugin_dir, registration_dir=registration_dir)

    async def _call(self, fn, *args):
        """Backend call: NVML in a thread (it blocks), the fake inline."""
        if self.backend.name == "nvml":
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def _extras(self, gpus: list[GpuInfo]) -> tuple[dict[str, GpuExtras], dict[str, list[MigSlice]]]:
        """What the backend knows beyond GpuInfo: versions and bus id (facts), NVLink groups
        (topology), MIG mode."""
        domains: dict[int, int] = {}
        if isinstance(self.backend, TopologySource):
            index = {g.uuid: g.index for g in gpus}
            links = await self._call(self.backend.links)
            domains = nvlink_domains({(index[a], index[b]): link.nvlinks for (a, b), link in links.items()
                                      if a in index and b in index})
        facts = await self._call(self.backend.facts) if isinstance(self.backend, FactsSource) else {}
        out, migs = {}, {}
        for g in gpus:
            mig = None
            if isinstance(self.backend, MigControl):
                with contextlib.suppress(Exception):  # a GPU that cannot say has no migEnabled attribute
                    mig = bool(await self._call(self.backend.mig_enabled, g.uuid))
                if mig:
                    migs[g.uuid] = await self._mig_slices(g.uuid)
            f = facts.get(g.uuid) or GpuFacts(g.uuid)
            out[g.uuid] = GpuExtras(f.compute_capability, f.driver_version, f.cuda_driver_version, bus_id=f.bus_id,
                                    nvlink_domain=domains.get(g.index), mig_enabled=mig)
        return out, migs

    async def _mig_slices(self, uuid: str) -> list[MigSlice]:
        memory = {p.name: p.memory_mib for p in await self._call(self.backend.mig_profiles, uuid)}
        return [MigSlice(i.mig_uuid, i.profile, i.start, i.size, memory.get(i.profile, 0))
                for i in await self._call(self.backend.mig_instances, uuid) if memory.get(i.profile)]

    async def sync_once(self) -> bool:
        """Poll GPUs; publish the slice if it differs from the stored one. True if written.
        The stored slice is read again only every `resync` seconds (or after a failed write): in
        between, the slice this role last read or wrote is the comparison, so an idle node costs
        the API server one GET per `resync`, not one per tick."""
        gpus = await self._call(self.backend.list_gpus)
        extras, migs = await self._extras(gpus)
        devices = devices_for(gpus, self.settings, extras, migs)
        self.devices, self.published = devices, published_gpus(devices)
        self.withdrawn = {device_name(g): f"GPU {g.uuid} is unhealthy" for g in gpus if not g.healthy}
        name = slice_name(self.node_name, self.driver_name)
        now = asyncio.get_running_loop().time()
        if self._stored is None or now - self._read_at >= self.resync:
            try:
                self._stored = await self.client.get("resourceslices", name)
            except ApiError as exc:
                if not exc.not_found:
                    raise
                self._stored = {}  # read: there is none
            self._read_at = now
        current = self._stored or None
        body = next_slice(current, self.node_name, devices, driver=self.driver_name, node_uid=self.node_uid)
        if body is None:
            return False
        try:
            with background():  # a slice update never delays a prepare's claim read
                if current is None:
                    self._stored = await self.client.create("resourceslices", body)
                else:
                    self._stored = await self.client.replace("resourceslices", name, body)
        except ApiError:
            self._stored = None  # someone else changed or removed it: read it again next tick
            raise
        self.slice_writes += 1
        log.info("Published ResourceSlice", node=self.node_name, slice=name, devices=len(devices),
                 generation=body["spec"]["pool"]["generation"])
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
        node = DraNode(client, node_name, backend, settings, hook_path=cfg.agent.hook_path, **_settings_dirs(cfg))
        ctx.shared.setdefault("dra", {})[node_name] = node
        # kubelet's probes: /healthz alive, /readyz registered and syncing
        from hami.httpguard import run_with_probes

        await run_with_probes(node, "dra", cfg.agent.health_bind_address, cfg.listen, ctx.stop, ctx.ready,
                              on_port=lambda port: ctx.shared.setdefault("dra-health", {}).update({node_name: port}))
    finally:
        backend.close()
        await client.close()

