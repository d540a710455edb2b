"""A simulated node in DRA mode: hami's kubelet DRA plugin on the fake GPUs, and its kubelet side.

Per node, instead of the device-plugin agent: `hami.dra.plugin.DraDriver` + `DraServer` (the real
gRPC sockets: registration and the DRA service, with its CDI root and checkpoint under the node's
dir), the node's ResourceSlice from `hami.dra.slices` (written when the GPUs change, checked every
`resync` seconds), and a `hami.sim.drakubelet.DraKubelet` that registers the plugin as kubelet's
plugin watcher does. The pod runner prepares claims through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass

from hami.device.nodeconfig import DeviceSettings
from hami.dra import slices
from hami.dra.plugin import DraDriver, DraServer, claim_reader
from hami.dra.shares import published_gpus
from hami.gpu.backend import GpuBackend
from hami.kube.client import ApiError, KubeClient
from hami.obs.log import get_logger
from hami.sim.drakubelet import DraKubelet

log = get_logger(__name__)


@dataclass
class DraNode:
    name: str
    driver: DraDriver
    server: DraServer
    kubelet: DraKubelet
    cdi_root: str
    current: dict  # {"devices": the slice's devices}, read by the driver's `published`


async def publish_slice(client: KubeClient, node: str, devices: list[dict]) -> bool:
    """Write the node's slice when its devices differ from the stored one; True when written."""
    name = slices.slice_name(node)
    try:
        current = await client.get("resourceslices", name)
    except ApiError as exc:
        if not exc.not_found:
            raise
        current = None
    want = slices.next_slice(current, node, devices)
    if want is None:
        return False
    if current is None:
        await client.create("resourceslices", want)
    else:
        want["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await client.replace("resourceslices", name, want)
    return True


async def start_dra_node(client: KubeClient, name: str, node_dir: str, backend: GpuBackend,
                         settings: DeviceSettings, hook_path: str, vgpu_lib: str) -> DraNode:
    devices = slices.devices_for(backend.list_gpus(), settings)
    cdi_root = os.path.join(node_dir, "cdi")
    plugin_dir = os.path.join(node_dir, "plugin")
    current = {"devices": devices}
    kubelet = DraKubelet(os.path.join(node_dir, "reg"))
    driver = DraDriver(node=name, cdi_root=cdi_root, plugin_dir=plugin_dir, hook_path=hook_path,
                       read_claim=claim_reader(client), published=lambda: published_gpus(current["devices"]),
                       settings=lambda: settings, lib_path=lambda: vgpu_lib)
    node = DraNode(name, driver, DraServer(driver, plugin_dir=plugin_dir, registration_dir=kubelet.registration_dir),
                   kubelet, cdi_root, current)
    await node.server.start()
    await node.kubelet.register()
    await publish_slice(client, name, devices)
    return node


async def keep_slice(client: KubeClient, node: DraNode, backend: GpuBackend, settings: DeviceSettings,
                     stop: asyncio.Event, resync: float = 5.0) -> None:
    """Follow GPU changes (health, the fake file) into the node's slice."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=resync)
        if stop.is_set():
            return
        try:
            node.current["devices"] = slices.devices_for(backend.list_gpus(), settings)
            await publish_slice(client, node.name, node.current["devices"])
        except (ApiError, OSError, ValueError) as exc:
            log.warning("Could not publish the node's ResourceSlice", node=node.name, error=str(exc))


async def stop_dra_node(node: DraNode) -> None:
    await node.kubelet.close()
    await node.server.stop(0.2)
