"""`hami.agent.role.run` as the process runs it: a RoleContext with a Config (fake GPU backend,
node config entry matched by glob, kubeconfig handed over in ctx.shared by the embedded API server),
serving until ctx.stop; clear errors for a missing node name and for NVML that cannot load."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import aiohttp
import pytest

from hami.agent import role
from hami.app import RoleContext
from hami.config import AgentSettings, Config
from hami.device.model import NodeDeviceConfig, NvidiaConfig
from hami.gpu import GpuBackendError
from hami.kube.client import KubeClient
from hami.sim.apiserver.server import ApiServer
from hami.sim.kubelet.devicemanager import Kubelet
from hami.sim.kubelet.libstub import write_stub_library

pytestmark = pytest.mark.timeout(60)


def write_text(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


async def test_role_registers_with_kubelet_and_node_then_stops_cleanly():
    root = tempfile.mkdtemp(prefix="hami-", dir="/tmp")
    server = ApiServer()
    await server.start()
    kubeconfig = server.write_kubeconfig(os.path.join(root, "kubeconfig"))
    gpus = os.path.join(root, "gpus.yaml")
    write_text(gpus,
               "gpus:\n  - {uuid: GPU-aaaaaaaa-0000-4000-8000-000000000001, model: Tesla T4, memory_mib: 15360}\n")
    sockets = os.path.join(root, "dp")
    cfg = Config(
        roles=("node-agent",),
        nvidia=NvidiaConfig(device_split_count=10),
        node_configs=(NodeDeviceConfig(name="gpu-*", devicesplitcount=3, devicememoryscaling=2.0),),
        agent=AgentSettings(node_name="gpu-1", kubelet_socket_dir=sockets, hook_path=os.path.join(root, "hook"),
                            gpu_backend="fake", fake_gpus=gpus, health_bind_address="127.0.0.1:0",
                            vgpu_lib=write_stub_library(os.path.join(root, "image", "libvgpu.so"))),
    )
    ctx = RoleContext(name="node-agent", config=cfg, stop=asyncio.Event(), shared={"kubeconfig": kubeconfig})
    from hami.config import KubeSettings

    client = await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig))
    await client.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}})
    kubelet = Kubelet(sockets)
    await kubelet.start()
    task = asyncio.create_task(role.run(ctx))
    try:
        await asyncio.wait_for(ctx.ready.wait(), 20)
        assert await kubelet.wait_for(lambda: kubelet.healthy_count() == 3, 10)
        text = ""
        for _ in range(200):
            node = await client.get_node("gpu-1")
            text = (node["metadata"].get("annotations") or {}).get("hami.io/node-nvidia-register", "")
            if text:
                break
            await asyncio.sleep(0.05)
        assert text == ('[{"id":"GPU-aaaaaaaa-0000-4000-8000-000000000001","count":3,"devmem":30720,'
                        '"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true}]')
        port = ctx.shared["node-agent-health"]["gpu-1"]
        async with aiohttp.ClientSession() as http:
            for path in ("/healthz", "/readyz"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as r:
                    assert (r.status, await r.text()) == (200, "ok\n"), path
            # the node watch broken past its bound (60 s in the role, shortened here): unready, says why
            agent = ctx.shared["node-agent"]["gpu-1"]
            for inf in (agent.nodes, agent.pods):
                inf.backoff_max, inf.unready_after = 0.2, 0.5
            await client.close()
            await server.stop()
            text = ""
            for _ in range(100):
                async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                    status, text = r.status, await r.text()
                if status == 503 and "nodes: watch broken for" in text:
                    break
                await asyncio.sleep(0.05)
            assert status == 503 and text.startswith("node-agent not ready:\n- nodes: watch broken for "), text
            await server.start()
            for _ in range(100):
                async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                    status = r.status
                if status == 200:
                    break
                await asyncio.sleep(0.05)
            assert status == 200
            client = await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig))
    finally:
        ctx.stop.set()
        await asyncio.wait_for(task, 20)
        await kubelet.stop()
        await client.close()
        await server.stop()
    assert [n for n in os.listdir(sockets) if n.endswith(".sock")] == []
    shutil.rmtree(root, ignore_errors=True)


async def test_role_without_node_name_fails_clearly():
    ctx = RoleContext(name="node-agent", config=Config(agent=AgentSettings(gpu_backend="fake")), stop=asyncio.Event())
    with pytest.raises(RuntimeError, match="node name is required"):
        await role.run(ctx)


async def test_role_with_nvml_unavailable_fails_clearly(monkeypatch):
    import pynvml

    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    ctx = RoleContext(name="node-agent", config=Config(agent=AgentSettings(node_name="n", gpu_backend="nvml")),
                      stop=asyncio.Event())
    with pytest.raises(GpuBackendError, match="cannot load NVML"):
        await role.run(ctx)


async def test_agent_is_unready_until_synced_and_registered_and_while_gpu_sync_fails():
    from hami.agent.role import Agent
    from hami.config import KubeSettings
    from hami.device.nodeconfig import effective_device_settings

    root = tempfile.mkdtemp(prefix="hami-", dir="/tmp")
    server = ApiServer()
    await server.start()
    client = await KubeClient.from_settings(KubeSettings(kubeconfig=server.write_kubeconfig(
        os.path.join(root, "kubeconfig"))))
    try:
        agent = Agent(client, "gpu-1", None, effective_device_settings(NvidiaConfig(), None),
                      socket_dir=os.path.join(root, "dp"), hook_path=root,
                      vgpu_lib=write_stub_library(os.path.join(root, "image", "libvgpu.so")))
        assert agent.readiness() == ["nodes: initial list not done", "pods: initial list not done",
                                     "device plugin not registered with kubelet",
                                     f"HAMi-core not installed: {root} missing"]
        await agent.install_hamicore()
        agent.nodes.synced.set()
        agent.pods.synced.set()
        agent.plugin.registered.set()
        assert agent.readiness() == []
        agent.sync_error = "nvml: listing GPUs failed: GPU is lost"
        assert agent.readiness() == ["GPU sync failing: nvml: listing GPUs failed: GPU is lost"]
    finally:
        await client.close()
        await server.stop()
        shutil.rmtree(root, ignore_errors=True)
