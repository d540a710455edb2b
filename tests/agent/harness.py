"""One node of a real cluster for agent tests: embedded API server over HTTP, KubeClient, the test
kubelet on unix sockets in a short temp dir, fake GPUs from a YAML file, and the Agent."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import yaml

from hami.agent.role import Agent
from hami.device.model import NvidiaConfig
from hami.device.nodeconfig import DeviceSettings, effective_device_settings
from hami.gpu.fake import FakeBackend
from hami.kube.client import KubeClient
from hami.sim.apiserver.server import ApiServer
from hami.sim.kubelet.devicemanager import Kubelet
from hami.sim.kubelet.libstub import write_stub_library

NODE = "n1"
U1 = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
U2 = "GPU-91ab03c4-77de-4c0a-8b21-222222222222"
LOCK = "hami.io/mutex.lock"


def gpu_doc(healthy=(True, True)):
    return {"gpus": [
        {"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 0, "healthy": healthy[0]},
        {"uuid": U2, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 1, "healthy": healthy[1]},
    ]}


class NodeHarness:
    def __init__(self, settings: DeviceSettings | None = None, kube_qps: float = 1000.0, *,
                 gpus: dict | None = None, **agent_kwargs):
        self.initial_gpus = gpus or gpu_doc()
        self.agent_kwargs = agent_kwargs
        self.backend: FakeBackend | None = None
        self.settings = settings or effective_device_settings(NvidiaConfig(lib_cuda_log_level="1"), None)
        self.kube_qps = kube_qps
        self.dir = tempfile.mkdtemp(prefix="hami-", dir="/tmp")
        self.sockets = os.path.join(self.dir, "dp")
        self.hook = os.path.join(self.dir, "hook")
        self.gpu_file = os.path.join(self.dir, "gpus.yaml")
        # The image's HAMi-core (a stand-in ELF): the agent installs it under the hook path at start.
        self.agent_kwargs.setdefault("vgpu_lib", write_stub_library(os.path.join(self.dir, "image", "libvgpu.so")))
        self.stop = asyncio.Event()

    def write_gpus(self, doc) -> None:
        tmp = self.gpu_file + ".tmp"
        with open(tmp, "w") as fh:
            yaml.safe_dump(doc, fh)
        os.replace(tmp, self.gpu_file)

    async def __aenter__(self) -> NodeHarness:
        from hami.config import KubeSettings

        self.server = ApiServer()
        await self.server.start()
        kubeconfig = self.server.write_kubeconfig(os.path.join(self.dir, "kubeconfig"))
        self.client = await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig, qps=self.kube_qps,
                                                           burst=int(self.kube_qps)))
        await self.client.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        self.write_gpus(self.initial_gpus)
        self.kubelet = Kubelet(self.sockets, client=self.client, node_name=NODE)
        await self.kubelet.start()
        await self.start_agent()
        return self

    async def start_agent(self, *, new_backend: bool = False) -> None:
        """A fresh Agent on this node (also after a simulated crash), running until `self.stop`.
        The fake backend (the node's hardware, MIG state included) outlives agent restarts."""
        self.stop = asyncio.Event()
        if self.backend is None or new_backend:
            self.backend = FakeBackend(self.gpu_file, node_name=NODE)
        self.agent = Agent(self.client, NODE, self.backend, self.settings,
                           socket_dir=self.sockets, hook_path=self.hook, tick=0.05, **self.agent_kwargs)
        self.agent.plugin.poll_interval = 0.05
        ready = asyncio.Event()
        seen = len(self.kubelet.registrations)
        self.task = asyncio.create_task(self.agent.run(self.stop, ready))
        await asyncio.wait_for(ready.wait(), 20)
        # `ready` comes before the plugin registers; until the kubelet has taken the new registration,
        # its view (devices, channel) is the dead agent's, and the registration then cancels calls on it.
        await self.kubelet.wait_for(lambda: len(self.kubelet.registrations) > seen, 10)

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 20)
        await self.kubelet.stop()
        self.leftover_sockets = [n for n in os.listdir(self.sockets) if n.endswith(".sock")]
        await self.client.close()
        await self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers

    async def passes(self, n: int, timeout: float = 30.0) -> None:
        """Wait until the agent's device loop has finished `n` more passes: what a check that nothing
        changed waits for (each pass is a chance to change it), not a time that is short under load."""
        want = self.agent.syncs + n
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.agent.syncs < want:
            if loop.time() > deadline:
                raise AssertionError(f"the device loop finished {self.agent.syncs} of {want} passes in time")
            await asyncio.sleep(0.01)

    async def node(self) -> dict:
        return await self.client.get_node(NODE)

    async def lock_node(self, namespace: str, name: str) -> None:
        from hami.device import codec

        await self.client.patch_node(NODE, {"metadata": {"annotations": {
            LOCK: codec.encode_node_lock(1_790_000_000, namespace, name)}}})
        await self.agent.nodes.wait_for(
            lambda: LOCK in (self.agent.nodes.store.get(NODE, {}).get("metadata", {}).get("annotations") or {}), 10)

    async def create_pod(self, name: str, containers: dict[str, int], to_allocate: str, *,
                         init: dict[str, int] | None = None, env: dict | None = None, bind_time: int = 100,
                         lock: bool = True, annotations: dict | None = None) -> dict:
        def ctr(n, gpus):
            c = {"name": n, "image": "cuda"}
            if gpus:
                c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
            if env and n in env:
                c["env"] = [{"name": k, "value": v} for k, v in env[n].items()]
            return c

        spec = {"nodeName": NODE, "containers": [ctr(n, g) for n, g in containers.items()]}
        if init:
            spec["initContainers"] = [ctr(n, g) for n, g in init.items()]
        pod = await self.client.create("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": {
                "hami.io/vgpu-devices-to-allocate": to_allocate,
                "hami.io/vgpu-devices-allocated": to_allocate,
                "hami.io/vgpu-node": NODE, "hami.io/bind-phase": "allocating",
                "hami.io/bind-time": str(bind_time), **(annotations or {})}},
            "spec": spec}, "default")
        if lock:
            await self.lock_node("default", name)
        await self.agent.pods.wait_for(lambda: f"default/{name}" in self.agent.pods.store, 10)
        return pod

    async def pod(self, name: str) -> dict:
        return await self.client.get_pod("default", name)
