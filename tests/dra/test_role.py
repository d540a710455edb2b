"""`hami --role dra` on the embedded API server, with the fake GPU backend.

Covers: the role publishes its node's ResourceSlice (one pool named after the node, NVLink groups as
`nvlinkDomain`, the backend's versions and bus id, valid against the 1.34 schema), follows GPU
health (an unhealthy GPU is tainted NoSchedule, the generation goes up by one, a claim allocated on it
before still prepares); a restarted role with the
same GPUs writes nothing (same generation and resourceVersion); an idle node reads its slice once per
resync and re-creates one deleted behind its back; a removed registration socket is served again; the role run from a
Config prepares a claim a test kubelet sends over its sockets and is ready (/readyz) once kubelet registered it; a MIG
GPU is published as its instances, and a claim on one gets that instance alone, exclusively, without HAMi-core;
device-plugin mode and DRA mode never serve one node: the dra role refuses a node marked device-plugin or carrying a
device plugin's registration, the node agent refuses a node marked dra, each marks its node.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import aiohttp
import kubernetes_validate
import pytest

from hami.app import RoleContext
from hami.config import AgentSettings, Config, KubeSettings
from hami.device import codec
from hami.device.nodeconfig import DeviceSettings
from hami.dra import cdi
from hami.dra.plugin import ClaimRef
from hami.dra.role import DraNode
from hami.dra.slices import DRIVER, TAINT_UNHEALTHY, slice_name
from hami.gpu import make_backend
from hami.kube.client import KubeClient
from hami.kube.nodemode import LABEL, NodeModeConflict, conflict
from tests.dra.kubelet import FakeKubelet
from tests.dra.test_plugin import make_claim, result

NODE = "gpu-node-1"
GPUS = """gpus:
  - {uuid: GPU-a0, model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, numa: 0, healthy: %s, nvlinks: {1: 4},
     compute_capability: '8.0', driver_version: 580.65.06, cuda_driver_version: '13.0', bus_id: '0000:3b:00.0'}
  - {uuid: GPU-a1, model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, numa: 0}
  - {uuid: GPU-a2, model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, numa: 1}
"""


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def exists(path: str) -> bool:
    return os.path.exists(path)


@pytest.fixture
def root():
    d = tempfile.mkdtemp(prefix="hami-dra-", dir="/tmp")  # unix socket paths: at most 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig))
    await c.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    yield c
    await c.close()


def dra_node(client, root: str, gpus: str, backend=None, **kw) -> DraNode:
    return DraNode(client, NODE, backend or make_backend("fake", gpus, NODE), kw.pop("settings", DeviceSettings()),
                   tick=0.05, plugin_dir=os.path.join(root, "p"), registration_dir=os.path.join(root, "r"),
                   cdi_root=os.path.join(root, "cdi"), hook_path=os.path.join(root, "hook"), **kw)


async def wait_for(pred, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await pred():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_role_publishes_follows_health_and_a_restart_does_not_churn(client, root):
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")
    node = dra_node(client, root, gpus)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(node.run(stop, ready))
    await asyncio.wait_for(ready.wait(), 10)
    s = await client.get("resourceslices", slice_name(NODE))
    assert s["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == NODE
    assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"
    devs = {d["name"]: d for d in s["spec"]["devices"]}
    assert sorted(devs) == ["hami-gpu-0", "hami-gpu-1", "hami-gpu-2"]
    assert devs["hami-gpu-0"]["attributes"]["nvlinkDomain"] == devs["hami-gpu-1"]["attributes"]["nvlinkDomain"]
    assert "nvlinkDomain" not in devs["hami-gpu-2"]["attributes"]
    assert devs["hami-gpu-2"]["attributes"]["numa"] == {"int": 1}
    a0 = devs["hami-gpu-0"]["attributes"]
    assert (a0["cudaComputeCapability"], a0["driverVersion"], a0["cudaDriverVersion"], a0["pcieBusID"]) == (
        {"version": "8.0.0"}, {"version": "580.65.6"}, {"version": "13.0.0"}, {"string": "0000:3b:00.0"})
    kubernetes_validate.validate(s, "1.34", strict=True)  # what the role wrote is a valid v1 ResourceSlice
    assert (await client.get_node(NODE))["metadata"]["labels"][LABEL] == "dra"

    late = await make_claim(client, "late", [result("hami-gpu-0", "1Gi", "10", pool=NODE)])  # allocated before
    write(gpus, GPUS % "false")  # GPU 0 turns unhealthy: tainted NoSchedule, still published

    async def tainted():
        s = await client.get("resourceslices", slice_name(NODE))
        return [d.get("taints") for d in s["spec"]["devices"]] == [
            [{"key": TAINT_UNHEALTHY, "value": "true", "effect": "NoSchedule"}], None, None]

    await wait_for(tainted)
    s = await client.get("resourceslices", slice_name(NODE))
    assert s["spec"]["pool"]["generation"] == 2
    kubernetes_validate.validate(s, "1.36", strict=True)
    [r] = (await node.driver.prepare([ClaimRef("default", late, "late")])).values()
    assert r.error == ""  # allocated before the taint: it keeps running (NoSchedule only keeps new claims off)
    stop.set()
    await task

    again = dra_node(client, root, gpus)  # restarted with the same GPUs
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(again.run(stop, ready))
    await asyncio.wait_for(ready.wait(), 10)
    await again.sync_once()
    stop.set()
    await task
    after = await client.get("resourceslices", slice_name(NODE))
    assert again.slice_writes == 0
    assert after["metadata"]["resourceVersion"] == s["metadata"]["resourceVersion"]
    assert after["spec"]["pool"]["generation"] == 2


async def test_role_from_config_prepares_what_it_publishes(apiserver, client, root):
    from hami.dra import role
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")
    cfg = Config(roles=("dra",), agent=AgentSettings(
        node_name=NODE, gpu_backend="fake", fake_gpus=gpus, hook_path=os.path.join(root, "hook"),
        dra_plugin_dir=os.path.join(root, "plugin"), dra_registration_dir=os.path.join(root, "reg"),
        cdi_root=os.path.join(root, "cdi"), health_bind_address="127.0.0.1:0"))
    ctx = RoleContext(name="dra", config=cfg, stop=asyncio.Event(), shared={"kubeconfig": apiserver.kubeconfig})
    task = asyncio.create_task(role.run(ctx))
    try:
        await asyncio.wait_for(ctx.ready.wait(), 10)
        ready_url = f"http://127.0.0.1:{ctx.shared['dra-health'][NODE]}/readyz"
        async with aiohttp.ClientSession() as http:
            async with http.get(ready_url) as r:
                assert r.status == 503 and "not registered with kubelet" in await r.text()
            kubelet = FakeKubelet(os.path.join(root, "reg"), "v1")
            info = await kubelet.register()
            async with http.get(ready_url) as r:
                assert r.status == 200, await r.text()
        assert info.endpoint == os.path.join(root, "plugin", "dra.sock")
        uid = await make_claim(client, "c", [result("hami-gpu-2", "4000Mi", "25", pool=NODE)])
        resp = await kubelet.prepare(("default", "c", uid))
        assert resp[uid].error == ""
        env, _ = cdi.resolve(os.path.join(root, "cdi"), [i for d in resp[uid].devices for i in d.cdi_device_ids])
        assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("GPU-a2", "4000m")
        assert ctx.shared["dra"][NODE].server.registered.is_set()
    finally:
        ctx.stop.set()
        await task


# --------------------------------------------------------------------------- one mode per node


def test_conflict_rules():
    node = {"metadata": {"name": "n", "labels": {}, "annotations": {}}}
    assert conflict(node, "dra") is None and conflict(node, "device-plugin") is None
    marked = {"metadata": {"name": "n", "labels": {LABEL: "dra"}}}
    assert conflict(marked, "dra") is None
    assert "served in dra mode" in conflict(marked, "device-plugin")
    dp = {"metadata": {"name": "n", "labels": {LABEL: "device-plugin"}}}
    why = conflict(dp, "dra")
    assert "device-plugin mode" in why and f"kubectl label node n {LABEL}-" in why
    registered = {"metadata": {"name": "n", "annotations": {codec.REGISTER_ANNOTATION: "x"}}}
    assert "a device plugin registered its GPUs" in conflict(registered, "dra")
    assert conflict(registered, "device-plugin") is None


async def test_dra_role_refuses_a_device_plugin_node(client, root):
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")
    await client.patch_node(NODE, {"metadata": {"annotations": {codec.REGISTER_ANNOTATION: "GPU-a0,10,40960,100,"
                                                                "NVIDIA,0,true,0,hami-core:"}}})
    with pytest.raises(NodeModeConflict, match="a device plugin registered its GPUs"):
        await dra_node(client, root, gpus).run(asyncio.Event())
    await client.patch_node(NODE, {"metadata": {"labels": {LABEL: "device-plugin"}}})
    with pytest.raises(NodeModeConflict, match="served in device-plugin mode"):
        await dra_node(client, root, gpus).run(asyncio.Event())
    assert not exists(os.path.join(root, "r"))  # never served a socket


async def test_node_agent_refuses_a_dra_node_and_marks_its_own(apiserver, client, root):
    from hami.agent import role as agent_role
    from hami.sim.kubelet.libstub import write_stub_library

    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")

    def ctx_for(node):
        cfg = Config(roles=("node-agent",), agent=AgentSettings(
            node_name=node, gpu_backend="fake", fake_gpus=gpus, hook_path=os.path.join(root, "hook"),
            kubelet_socket_dir=os.path.join(root, "dp"),
            vgpu_lib=write_stub_library(os.path.join(root, "image", "libvgpu.so"))))
        return RoleContext(name="node-agent", config=cfg, stop=asyncio.Event(),
                           shared={"kubeconfig": apiserver.kubeconfig})

    await client.patch_node(NODE, {"metadata": {"labels": {LABEL: "dra"}}})
    with pytest.raises(NodeModeConflict, match="served in dra mode"):
        await agent_role.run(ctx_for(NODE))

    await client.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-2"}})
    ctx = ctx_for("gpu-node-2")
    task = asyncio.create_task(agent_role.run(ctx))
    try:
        await asyncio.wait_for(ctx.ready.wait(), 10)
        assert (await client.get_node("gpu-node-2"))["metadata"]["labels"][LABEL] == "device-plugin"
    finally:
        ctx.stop.set()
        await task


async def test_a_mig_gpu_is_published_as_its_instances_and_a_claim_on_one_gets_only_that_instance(client, root):
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, "gpus:\n"
                "  - {uuid: GPU-m0, model: NVIDIA A100-SXM4-80GB, memory_mib: 81920,\n"
                "     mig: {enabled: true, instances: [{profile: 1g.10gb, start: 0}, {profile: 3g.40gb, start: 4}]}}\n"
                "  - {uuid: GPU-m1, model: NVIDIA A100-SXM4-80GB, memory_mib: 81920}\n")
    node = dra_node(client, root, gpus)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(node.run(stop, ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        s = await client.get("resourceslices", slice_name(NODE))
        devs = {d["name"]: d for d in s["spec"]["devices"]}
        assert sorted(devs) == ["hami-gpu-0-mig-0-1", "hami-gpu-0-mig-4-4", "hami-gpu-1"]
        small = devs["hami-gpu-0-mig-0-1"]
        assert small["attributes"]["profile"] == {"string": "1g.10gb"} and "allowMultipleAllocations" not in small
        mig_uuid = small["attributes"]["uuid"]["string"]
        assert mig_uuid.startswith("MIG-")
        uid = await make_claim(client, "mig", [{"request": "gpu", "driver": DRIVER, "pool": NODE,
                                                "device": "hami-gpu-0-mig-0-1"}])
        kubelet = FakeKubelet(os.path.join(root, "r"), "v1")
        await kubelet.register()
        resp = await kubelet.prepare(("default", "mig", uid))
        assert resp[uid].error == ""
        env, mounts = cdi.resolve(os.path.join(root, "cdi"), [i for d in resp[uid].devices for i in d.cdi_device_ids])
        assert env["NVIDIA_VISIBLE_DEVICES"] == mig_uuid
        assert not any(k.startswith("CUDA_DEVICE_") for k in env) and mounts == []  # no HAMi-core inside MIG
        other = await make_claim(client, "mig2", [{"request": "gpu", "driver": DRIVER, "pool": NODE,
                                                   "device": "hami-gpu-0-mig-0-1"}])
        assert "MIG device another prepared claim holds" in (await kubelet.prepare(("default", "mig2",
                                                                                    other)))[other].error
    finally:
        stop.set()
        await task


async def test_an_idle_node_reads_its_slice_once_per_resync_and_repairs_a_deleted_one(client, root):
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")
    node = dra_node(client, root, gpus)
    for _ in range(5):  # five ticks, GPUs unchanged
        await node.sync_once()
    assert client.total_requests("list", "resourceslices") == 1 and node.slice_writes == 1
    await client.delete("resourceslices", slice_name(NODE))  # someone removed it
    assert not await node.sync_once()  # not seen before the next resync
    node._read_at -= node.resync  # the resync period has passed
    assert await node.sync_once()
    assert [d["name"] for d in (await client.get("resourceslices", slice_name(NODE)))["spec"]["devices"]] == [
        "hami-gpu-0", "hami-gpu-1", "hami-gpu-2"]


async def test_a_removed_registration_socket_is_served_again(client, root):
    gpus = os.path.join(root, "gpus.yaml")
    write(gpus, GPUS % "true")
    node = dra_node(client, root, gpus)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(node.run(stop, ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        os.unlink(node.server.registration_socket)  # a cleanup of plugins_registry

        async def back():
            return node.server_restarts == 1 and exists(node.server.registration_socket)

        await wait_for(back)
        info = await FakeKubelet(os.path.join(root, "r"), "v1beta1").register()  # kubelet finds it again
        assert info.name == DRIVER
    finally:
        stop.set()
        await task
