"""`--role node-agent`: the HAMi device plugin for one node.

Pieces, all started here and stopped on `ctx.stop`:
* the node's GPU mode (hami.kube.nodemode): refuse to start where `--role dra` marked the node,
  else mark it `hami.io/gpu-mode=device-plugin`;
* a node informer (`metadata.name=<node>`) and a pod informer (`spec.nodeName=<node>`);
* `DevicePluginServer` on `<kubelet-socket-dir>/nvidia-gpu.sock`, registered with kubelet;
* the device loop: poll the GPU backend (fake file edits, NVML XID health), push the kubelet
  device list when it changes, and patch `hami.io/node-nvidia-register` only when the decoded
  registration differs from what the Node carries (checked every tick against the node cache);
* with `--report-node-capacity`, the healthy GPUs' memory and cores in the Node's `status.capacity`
  and `status.allocatable` (hami.agent.capacityreport), kept current on every tick; without it, the
  first tick removes what an earlier run with the flag left there.
The agent never writes `hami.io/node-handshake` (HAMi v2.10's plugin does not either).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

from hami.agent import hamicore
from hami.agent.capacityreport import CapacityReporter
from hami.agent.deviceplugin import DevicePluginServer, PodAllocator
from hami.agent.mig import with_mig_profiles
from hami.agent.migmgr import MigManager
from hami.agent.register import build_devices, filtered, plugin_devices, same_devices
from hami.agent.staticmig import GPU_RESOURCE, StaticMig, StaticMigRouter, advertised
from hami.device import codec
from hami.device.model import MODE_MIG, DeviceInfo, MigProfileAllow
from hami.device.nodeconfig import DeviceSettings, settings_for_node
from hami.gpu import GpuBackend, GpuInfo, make_backend
from hami.gpu.mig import MigControl
from hami.gpu.topology import TopologySource, asymmetric_pairs, pair_scores
from hami.kube.lanes import background
from hami.kube.nodeevents import REASON_ASYMMETRIC_P2P, asymmetric_link_message, emit_node_warning
from hami.kube.nodemode import DEVICE_PLUGIN, claim_node
from hami.obs.log import get_logger

log = get_logger(__name__)

REGISTER_ANNOTATION = codec.REGISTER_ANNOTATION
PAIR_SCORE_ANNOTATION = codec.PAIR_SCORE_ANNOTATION
RETRY_AFTER_ERROR = 5.0


def _same_scores(text: str | None, want: str) -> bool:
    """Equal as pair scores (entry order free): only a changed value is patched."""
    if text is None:
        return False
    try:
        return set(codec.decode_pair_scores(text)) == set(codec.decode_pair_scores(want))
    except codec.CodecError:
        return False


class Agent:
    """One node's agent, built from its parts so the embedded cluster can run several."""

    def __init__(self, client, node_name: str, backend: GpuBackend, settings: DeviceSettings, *,
                 socket_dir: str, hook_path: str, register_interval: float = 30.0,
                 tick: float = 0.5, lib_version: str = "", topology_score: bool = False,
                 mig_allowlist: Sequence[MigProfileAllow] = (),
                 vgpu_lib: str = "", vgpu_lib_version: str = "",
                 device_list_strategy: tuple[str, ...] = ("envvar",), device_id_strategy: str = "uuid",
                 report_node_capacity: bool = False,
                 capacity_resources: tuple[str, str] = ("nvidia.com/gpumem", "nvidia.com/gpucores")):
        from hami.kube.informer import Informer
        from hami.kube.nodelock import NodeLocker

        self.client = client
        self.node_name = node_name
        self.backend = backend
        self.settings = settings
        self.register_interval = register_interval
        self.tick = tick
        self.nodes = Informer(client, "nodes", field_selector=f"metadata.name={node_name}")
        self.pods = Informer(client, "pods", field_selector=f"spec.nodeName={node_name}")
        self.locker = NodeLocker(client, self.nodes, lambda ns, name: self.pods.store.get(f"{ns}/{name}"))
        # Dynamic MIG (operating mode "mig"): the agent creates and destroys the slices.
        self.mig = MigManager(backend, mig_allowlist) \
            if settings.mode == MODE_MIG and isinstance(backend, MigControl) else None
        self.gpus: tuple[GpuInfo, ...] = ()
        self.allocator = PodAllocator(
            client, node_name, lambda: self.pods.store, lambda: self.nodes.store, lambda: self.settings,
            hook_path,
            locker=self.locker, lib_version=lib_version, mig=self.mig, gpus=lambda: self.gpus,
            device_list_strategy=device_list_strategy, device_id_strategy=device_id_strategy,
            index_of=self._gpu_index,
        )
        self.hook_path = hook_path
        self.vgpu_lib, self.vgpu_lib_version = vgpu_lib, vgpu_lib_version
        self.hamicore = hamicore.HamiCoreState(False)
        # Static MIG (migstrategy single|mixed, NVIDIA's device plugin): existing MIG devices.
        self.static_mig = settings.mig_strategy in ("single", "mixed") and settings.mode != MODE_MIG \
            and isinstance(backend, MigControl)
        self._mig_ids: frozenset[str] = frozenset()
        self._mig_servers: dict[str, tuple[DevicePluginServer, asyncio.Task]] = {}
        self._stop: asyncio.Event | None = None
        self.socket_dir = socket_dir
        self._naming = (device_list_strategy, device_id_strategy)
        handler = StaticMigRouter(self.allocator, lambda: self._mig_ids, *self._naming) \
            if self.static_mig else self.allocator
        self.plugin = DevicePluginServer(socket_dir, handler,
                                         preferred_allocation=settings.enable_get_preferred_allocation)
        self.registered: tuple[DeviceInfo, ...] | None = None
        self.register_patches = 0
        self.sync_error = ""  # the last device sync's failure, "" once one works again
        self.topology_score = topology_score  # HAMi: ENABLE_TOPOLOGY_SCORE=true
        self._links_cache: tuple[tuple[str, ...], str] | None = None
        self._asymmetric_reported: frozenset[tuple[str, str]] = frozenset()
        self._seen_annotation: str | None = None
        self._seen_devices: tuple[DeviceInfo, ...] | None = None
        self.capacity = CapacityReporter(client, node_name, report_node_capacity, capacity_resources,
                                         retry_after=max(tick, min(RETRY_AFTER_ERROR, register_interval)))
        self.syncs = 0  # device-loop passes finished (ok or failed): what "nothing changed over N passes" counts

    # ------------------------------------------------------------------ registration

    def _node_devices(self) -> tuple[DeviceInfo, ...] | None:
        """Decoded registration on the cached Node; None when absent or unreadable."""
        node = self.nodes.store.get(self.node_name)
        text = ((node or {}).get("metadata") or {}).get("annotations", {}).get(REGISTER_ANNOTATION)
        if text is None:
            self._seen_annotation, self._seen_devices = None, None
            return None
        if text != self._seen_annotation:
            try:
                self._seen_devices = tuple(codec.decode_node_devices(text))
            except codec.CodecError:
                self._seen_devices = None
            self._seen_annotation = text
        return self._seen_devices

    async def _call(self, fn, *args):
        """Backend call: NVML in a thread (it blocks), the fake inline."""
        if self.backend.name == "nvml":
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def _pair_scores(self, devices: tuple[DeviceInfo, ...]) -> str | None:
        """The `hami.io/node-nvidia-score` value for the registered GPUs, or None when the node
        does not need one (topology scoring off, backend without link facts, no GPU)."""
        if not self.topology_score or not devices or not isinstance(self.backend, TopologySource):
            return None
        uuids = tuple(d.id for d in sorted(devices, key=lambda d: d.index))
        if self._links_cache is None or self._links_cache[0] != uuids or self.backend.name == "fake":
            links = await self._call(self.backend.links)
            await self._report_asymmetric(asymmetric_pairs(uuids, links))
            text = codec.encode_pair_scores(
                codec.DevicePairScore(u, scores) for u, scores in pair_scores(uuids, links))
            self._links_cache = (uuids, text)
        return self._links_cache[1]

    async def _report_asymmetric(self, pairs: list[tuple[str, str]]) -> None:
        """Log and raise a Node Warning Event (HAMi's AsymmetricGPUP2PLink) once per pair while it lasts."""
        for a, b in pairs:
            if (a, b) in self._asymmetric_reported:
                continue
            log.warning("Asymmetric GPU P2P link data: pair scored 0", node=self.node_name, gpu_a=a, gpu_b=b)
            node = self.nodes.store.get(self.node_name) or {"metadata": {"name": self.node_name}}
            await emit_node_warning(self.client, node, REASON_ASYMMETRIC_P2P, asymmetric_link_message(a, b))
        self._asymmetric_reported = frozenset(pairs)

    def _node_annotation(self, key: str) -> str | None:
        node = self.nodes.store.get(self.node_name)
        return ((node or {}).get("metadata") or {}).get("annotations", {}).get(key)

    def _gpu_index(self, uuid: str) -> int | None:
        return next((d.index for d in self.registered or () if d.id == uuid), None)

    # ------------------------------------------------------------------ HAMi-core

    async def install_hamicore(self) -> hamicore.HamiCoreState:
        """Put the image's libvgpu.so and ld.so.preload under <hook>/vgpu (only what differs).
        Raises LibraryError / HookPathError: the agent does not start half-able to limit GPUs."""
        if self.vgpu_lib:
            state = await asyncio.to_thread(hamicore.install, self.vgpu_lib, self.hook_path, self.vgpu_lib_version)
            log.info("HAMi-core installed" if state.changed else "HAMi-core already up to date",
                     node=self.node_name, version=state.version, path=state.lib_path, written=",".join(state.changed))
        else:
            state = await asyncio.to_thread(hamicore.installed_state, self.hook_path)
            if not state.installed:
                log.warning("HAMi-core is not installed and no --vgpu-lib is given: Allocate refuses GPU pods",
                            node=self.node_name, path=state.lib_path)
        self.hamicore = state
        return state

    def _hamicore_now(self) -> hamicore.HamiCoreState:
        """Re-read the host state only when the files appeared or vanished since last seen."""
        d = hamicore.vgpu_dir(self.hook_path)
        present = all(os.path.isfile(os.path.join(d, n)) for n in (hamicore.LIB_NAME, hamicore.PRELOAD_NAME))
        if present != self.hamicore.installed:
            self.hamicore = hamicore.installed_state(self.hook_path)
        return self.hamicore

    async def sync_once(self) -> bool:
        """Poll GPUs, update kubelet's list, patch the registration (and pair scores) where they
        differ from what the Node carries. True if patched."""
        gpus = await self._call(self.backend.list_gpus)
        self.gpus = tuple(gpus)
        static = await self._static_mig(gpus) if self.static_mig else None
        whole = [g for g in gpus if static is None or g.uuid not in static.mig_parents]
        kubelet = plugin_devices(whole, self.settings)
        if static is not None:
            kubelet = kubelet + static.resources.get(GPU_RESOURCE, ())
            await self._serve_mig_resources(static)
        await self.plugin.set_devices(kubelet)
        devices = build_devices(whole, self.settings)
        if self.mig is not None:
            await self.mig.reconcile(filtered(gpus, self.settings), self.pods.store.values())
            devices = with_mig_profiles(devices, await self.mig.register_profiles(filtered(gpus, self.settings)))
        annotations: dict[str, str] = {}
        current = self._node_devices()
        if current is None or not same_devices(current, devices):
            annotations[REGISTER_ANNOTATION] = codec.encode_node_devices(devices)
        scores = await self._pair_scores(devices)
        if scores is not None and not _same_scores(self._node_annotation(PAIR_SCORE_ANNOTATION), scores):
            annotations[PAIR_SCORE_ANNOTATION] = scores
        core = self._hamicore_now().annotation
        if self._node_annotation(hamicore.ANNOTATION) != core:
            annotations[hamicore.ANNOTATION] = core
        await self.capacity.sync(self.nodes.store.get(self.node_name), devices)
        if not annotations:
            self.registered = devices
            return False
        if self.node_name not in self.nodes.store:
            return False  # node not seen yet (or deleted): nothing to annotate
        with background():  # a registration never delays an Allocate patch or an unlock
            await self.client.patch_node(self.node_name, {"metadata": {"annotations": annotations}})
        self.registered = devices
        self.register_patches += 1
        log.info("Registered devices on node", node=self.node_name, devices=len(devices),
                 healthy=sum(d.health for d in devices), pair_scores=PAIR_SCORE_ANNOTATION in annotations)
        return True

    async def _static_mig(self, gpus) -> StaticMig:
        instances = {}
        for g in filtered(gpus, self.settings):
            if await self._call(self.backend.mig_enabled, g.uuid):
                instances[g.uuid] = await self._call(self.backend.mig_instances, g.uuid)
        static = advertised(self.settings.mig_strategy, filtered(gpus, self.settings), instances)
        for w in static.warnings:
            log.v(2).warning("Static MIG", node=self.node_name, warning=w)
        self._mig_ids = frozenset(d.id for devs in static.resources.values() for d in devs)
        return static

    async def _serve_mig_resources(self, static: StaticMig) -> None:
        """mixed: one plugin per `nvidia.com/mig-<profile>`; a profile that vanished lists nothing."""
        for res in sorted(set(static.resources) | set(self._mig_servers)):
            if res == GPU_RESOURCE:
                continue
            if res not in self._mig_servers:
                if self._stop is None:
                    continue  # not running (a direct sync_once): nothing to serve from
                router = StaticMigRouter(None, lambda: self._mig_ids, *self._naming)
                server = DevicePluginServer(self.socket_dir, router, resource_name=res)
                task = asyncio.create_task(server.run(self._stop), name=f"agent-{self.node_name}-{res}")
                self._mig_servers[res] = (server, task)
            await self._mig_servers[res][0].set_devices(static.resources.get(res, ()))

    async def device_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            delay = self.tick
            try:
                await self.sync_once()
                self.sync_error = ""
            except Exception as exc:  # noqa: BLE001 - keep the node agent alive, retry later
                log.warning("Device sync failed, retrying", node=self.node_name, error=str(exc)[:300])
                self.sync_error = str(exc)[:300] or type(exc).__name__
                delay = max(self.tick, min(RETRY_AFTER_ERROR, self.register_interval))
            self.syncs += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def readiness(self) -> list[str]:
        """Why this node's GPUs cannot be handed out correctly now (empty: they can)."""
        reasons = [r for r in (self.nodes.health(), self.pods.health()) if r]
        if not self.plugin.registered.is_set():
            reasons.append("device plugin not registered with kubelet")
        if self.sync_error:
            reasons.append(f"GPU sync failing: {self.sync_error}")
        if not self.hamicore.installed:
            reasons.append(f"HAMi-core not installed: {self.hamicore.lib_path or self.hook_path} missing")
        return reasons

    # ------------------------------------------------------------------ run

    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None,
                  sync_timeout: float = 30.0) -> None:
        self._stop = stop
        await self.install_hamicore()
        # Never beside `--role dra` on one node (HAMi's rule): refuse where it registered, mark ours.
        await claim_node(self.client, self.node_name, DEVICE_PLUGIN)
        tasks = [
            asyncio.create_task(self.nodes.run(stop), name=f"agent-{self.node_name}-nodes"),
            asyncio.create_task(self.pods.run(stop), name=f"agent-{self.node_name}-pods"),
        ]
        try:
            await self.nodes.wait_synced(sync_timeout)
            await self.pods.wait_synced(sync_timeout)
            tasks.append(asyncio.create_task(self.plugin.run(stop), name=f"agent-{self.node_name}-plugin"))
            tasks.append(asyncio.create_task(self.device_loop(stop), name=f"agent-{self.node_name}-devices"))
            if ready is not None:
                ready.set()
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
        finally:
            stop.set()
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.plugin.stop()
            for server, task in self._mig_servers.values():
                await asyncio.gather(task, return_exceptions=True)
                await server.stop()
            self._mig_servers.clear()


async def run(ctx) -> None:
    from hami.config import replace
    from hami.kube.client import KubeClient

    cfg = ctx.config
    node_name = cfg.agent.node_name
    if not node_name:
        raise RuntimeError("node-agent: the node name is required (--node-name or NODE_NAME)")
    backend = make_backend(cfg.agent.gpu_backend, cfg.agent.fake_gpus, node_name)
    settings = settings_for_node(cfg.nvidia, cfg.node_configs, node_name)
    kube = cfg.kube
    if not kube.kubeconfig and ctx.shared.get("kubeconfig"):
        kube = replace(kube, kubeconfig=ctx.shared["kubeconfig"])
    client = await KubeClient.from_settings(kube, role="node-agent")
    try:
        agent = Agent(client, node_name, backend, settings, socket_dir=cfg.agent.kubelet_socket_dir,
                      hook_path=cfg.agent.hook_path, register_interval=cfg.agent.register_interval,
                      topology_score=os.environ.get("ENABLE_TOPOLOGY_SCORE") == "true",
                      mig_allowlist=cfg.nvidia.mig_profile_allowlist,
                      vgpu_lib=cfg.agent.vgpu_lib, vgpu_lib_version=cfg.agent.vgpu_lib_version,
                      device_list_strategy=cfg.agent.device_list_strategy,
                      device_id_strategy=cfg.agent.device_id_strategy,
                      report_node_capacity=cfg.agent.report_node_capacity,
                      capacity_resources=(cfg.nvidia.resource_memory_name, cfg.nvidia.resource_core_name))
        ctx.shared.setdefault("node-agent", {})[node_name] = agent
        # kubelet's probes: /healthz alive, /readyz serving
        from hami.httpguard import run_with_probes

        health_ports = ctx.shared.setdefault("node-agent-health", {})
        await run_with_probes(agent, "node-agent", cfg.agent.health_bind_address, cfg.listen, ctx.stop, ctx.ready,
                              on_port=lambda port: health_ports.update({node_name: port}), listeners=ctx.listeners)
    finally:
        backend.close()
        await client.close()


async def serve_health(agent: Agent, address: str, limits=None):
    """/healthz and /readyz on `--health-bind-address` (hami.httpguard.serve_probes)."""
    from hami.httpguard import serve_probes

    runner, bound = await serve_probes("node-agent", agent.readiness, address, limits)
    log.info("Node agent health listening", address=address, port=bound)
    return runner, bound
