"""`hami --role dra` as kubelet sees it, over real gRPC on unix sockets, on the fake GPU backend.

Covers, each against the embedded API server and a test kubelet: the slices a node publishes (a
`shares` capacity of deviceSplitCount, memory and cores scaled, a MIG-capable GPU's CounterSet in
its own slice and its partitions consuming it, all schema-valid for 1.36 and 1.37); at most
deviceSplitCount claims prepared on one GPU; the DRAResourceHealth stream (v1alpha1 and v1): every
device Healthy, then the unhealthy GPU Unhealthy with its taint, while the slice carries the taint;
the withdrawal flag for clusters before 1.36; a claim on a MIG partition creates the GPU and
compute instance (MIG mode on), hands the container that instance alone, refuses an overlapping
partition and the whole GPU while it holds the card, and its unprepare destroys the instance (MIG
mode off); a restarted plugin answers the prepared partition from its checkpoint and still
publishes the GPU as partitions, and a kill between making the instance and recording the claim
leaks no instance; an adminAccess claim gets the GPU without HAMi-core and takes no room.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile

import kubernetes_validate
import pytest

from hami.config import KubeSettings
from hami.device.nodeconfig import DeviceSettings
from hami.dra import cdi
from hami.dra.plugin import ClaimRef
from hami.dra.role import DraNode
from hami.dra.slices import DRIVER, TAINT_GPU_LOST, TAINT_UNHEALTHY, TAINT_XID, slice_name
from hami.gpu import make_backend
from hami.kube.client import MERGE_PATCH, ApiError, KubeClient, resource_path
from tests.dra.kubelet import FakeKubelet
from tests.dra.test_plugin import make_claim, read_json, result

NODE = "gpu-node-1"
GPUS = """gpus:
  - {uuid: GPU-m0, model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, mig: {enabled: false}}
  - {uuid: GPU-w1, model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, healthy: %s}
"""
PART = "hami-gpu-0-mig-3g-20gb-4"  # 3g.20gb at memory slices 4..7 of GPU-m0


class Crash(BaseException):
    """A kill: nothing after the crash point runs."""


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig))
    await c.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    yield c
    await c.close()


class Plugin:
    """One node's `--role dra` over dirs (and a fake card) that survive its restart."""

    def __init__(self, client, root: str, **kw):
        self.client, self.root, self.kw = client, root, kw
        self.gpus = os.path.join(root, "gpus.yaml")
        write(self.gpus, GPUS % "true")
        self.backend = make_backend("fake", self.gpus, NODE)  # the card: its MIG state outlives the plugin
        self.node: DraNode | None = None
        self.task: asyncio.Task | None = None
        self.stop = asyncio.Event()

    async def start(self) -> DraNode:
        self.node = DraNode(self.client, NODE, self.backend, self.kw.get("settings", DeviceSettings(split_count=2)),
                            tick=0.05, plugin_dir=os.path.join(self.root, "p"),
                            registration_dir=os.path.join(self.root, "r"), cdi_root=os.path.join(self.root, "cdi"),
                            hook_path=os.path.join(self.root, "hook"),
                            withdraw_unhealthy=self.kw.get("withdraw", False),
                            mig_partitions=self.kw.get("mig_partitions", True))
        self.stop, ready = asyncio.Event(), asyncio.Event()
        self.task = asyncio.create_task(self.node.run(self.stop, ready))
        await asyncio.wait_for(ready.wait(), 10)
        return self.node

    async def halt(self) -> None:
        self.stop.set()
        await self.task

    async def kubelet(self) -> FakeKubelet:
        k = FakeKubelet(os.path.join(self.root, "r"), "v1")
        await k.register()
        return k

    def env(self, resp) -> tuple[dict, list]:
        return cdi.resolve(os.path.join(self.root, "cdi"), [i for d in resp.devices for i in d.cdi_device_ids])

    async def slices(self) -> dict[str, dict]:
        listed = await self.client.list("resourceslices", field_selector=f"spec.nodeName={NODE}")
        return {s["metadata"]["name"]: s for s in listed["items"]}


@pytest.fixture
async def plugin(client):
    root = tempfile.mkdtemp(prefix="hami-dra-", dir="/tmp")  # unix socket paths: at most 107 bytes
    p = Plugin(client, root)
    await p.start()
    try:
        yield p
    finally:
        if not p.stop.is_set():
            await p.halt()
        p.backend.close()
        shutil.rmtree(root, ignore_errors=True)


def part_result(device: str = PART, **extra) -> dict:
    return {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device, **extra}


ADMIN_NS = "gpu-monitoring"


async def admin_claim(client, name: str, device: str) -> str:
    """A claim asking for adminAccess in a namespace labelled for it, allocated as the scheduler does."""
    try:
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": ADMIN_NS, "labels": {"resource.kubernetes.io/admin-access": "true"}}})
    except ApiError as exc:
        assert exc.status == 409
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER,
                                                                          "adminAccess": True}}]}}}
    created = await client.create("resourceclaims", body, ADMIN_NS)
    status = {"status": {"allocation": {"devices": {"results": [part_result(device, adminAccess=True)]}}}}
    await client.request("patch", "resourceclaims", "PATCH", resource_path("resourceclaims", ADMIN_NS, name,
                                                                           sub="status"),
                         body=status, content_type=MERGE_PATCH)
    return created["metadata"]["uid"]


# --------------------------------------------------------------------------- slices


@pytest.mark.parametrize("version", ["1.36", "1.37"])
async def test_the_pool_a_node_publishes(plugin, version):
    slices = await plugin.slices()
    main = slice_name(NODE)
    assert sorted(slices) == sorted([main, f"{main}-hami-gpu-0", f"{main}-counters-0"])
    for s in slices.values():
        kubernetes_validate.validate(s, version, strict=True)
        assert s["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 3}
    [whole] = slices[main]["spec"]["devices"]
    assert whole["name"] == "hami-gpu-1" and whole["capacity"]["shares"]["value"] == "2"
    [cs] = slices[f"{main}-counters-0"]["spec"]["sharedCounters"]
    parts = {d["name"]: d for d in slices[f"{main}-hami-gpu-0"]["spec"]["devices"]}
    assert parts["hami-gpu-0"]["consumesCounters"][0]["counters"] == cs["counters"]  # whole or cut, never both
    assert parts[PART]["consumesCounters"][0]["counterSet"] == cs["name"] == "hami-gpu-0-counters"
    assert parts["hami-gpu-0"]["attributes"]["migEnabled"] == {"bool": False}


async def test_without_mig_partitions_a_mig_capable_gpu_is_published_whole(client):
    """--dra-mig-partitions=false (the chart's unprivileged plugin): no partition, no counters."""
    root = tempfile.mkdtemp(prefix="hami-dra-", dir="/tmp")
    p = Plugin(client, root, mig_partitions=False)
    await p.start()
    try:
        slices = await p.slices()
        main = slice_name(NODE)
        assert sorted(slices) == [main]
        names = {d["name"] for d in slices[main]["spec"]["devices"]}
        assert names == {"hami-gpu-0", "hami-gpu-1"} and not any("-mig-" in n for n in names)
    finally:
        await p.halt()
        p.backend.close()
        shutil.rmtree(root, ignore_errors=True)


def test_the_plugin_keeps_the_lock_dir_sticky_and_the_claim_dir_open(tmp_path):
    from hami.dra.plugin import make_shared_dirs

    lock, cache = tmp_path / "vgpulock", tmp_path / "claims" / "u1"
    make_shared_dirs(str(cache), str(lock))
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o1777  # any uid creates its lock, none removes another's
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o777


async def test_at_most_split_count_claims_share_a_gpu(plugin, client):
    kubelet = await plugin.kubelet()
    uids = [await make_claim(client, f"s{i}", [result("hami-gpu-1", "1Gi", "10")]) for i in range(3)]
    # the scheduler wrote shares: 1 (the policy's default) into none of them: the plugin counts 1 each
    resp = await kubelet.prepare(*[("default", f"s{i}", u) for i, u in enumerate(uids)])
    errors = sorted(resp[u].error for u in uids)
    assert errors[:2] == ["", ""] and "2 shares" in errors[2] and "would be over-committed" in errors[2]


# --------------------------------------------------------------------------- health


@pytest.mark.parametrize("version", ["v1alpha1", "v1"])
async def test_health_stream_reports_the_tainted_gpu_unhealthy(plugin, version):
    kubelet = await plugin.kubelet()
    assert f"{version}.DRAResourceHealth" in kubelet.info.supported_versions
    watch = kubelet.watch_health(version)
    try:
        first = await watch.next()
        assert first["hami-gpu-1"] == ("HEALTHY", "") and first[PART] == ("HEALTHY", "")
        assert watch.pools == {NODE}
        write(plugin.gpus, GPUS % "false")
        got = await watch.until(lambda h: h["hami-gpu-1"][0] == "UNHEALTHY")
        assert got["hami-gpu-1"][1] == f"{TAINT_UNHEALTHY}=true" and got["hami-gpu-0"][0] == "HEALTHY"
        [dev] = (await plugin.slices())[slice_name(NODE)]["spec"]["devices"]
        assert dev["taints"] == [{"key": TAINT_UNHEALTHY, "value": "true", "effect": "NoSchedule"}]
        write(plugin.gpus, GPUS % "true")  # the fake file is the truth: healthy again
        await watch.until(lambda h: h["hami-gpu-1"][0] == "HEALTHY")
    finally:
        await watch.close()


async def test_withdrawal_flag_leaves_an_unhealthy_gpu_out(client):
    root = tempfile.mkdtemp(prefix="hami-dra-", dir="/tmp")
    p = Plugin(client, root, withdraw=True)
    write(p.gpus, GPUS % "false")
    try:
        await p.start()
        uid = await make_claim(client, "late", [result("hami-gpu-1", "1Gi", "10")])
        main = (await p.slices())[slice_name(NODE)]
        assert main["spec"]["devices"] == []
        resp = await (await p.kubelet()).prepare(("default", "late", uid))
        assert "was withdrawn from this node's slice" in resp[uid].error and "GPU-w1" in resp[uid].error
        await p.halt()
    finally:
        p.backend.close()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- MIG partitions


async def test_a_partition_claim_makes_its_instance_and_unprepare_destroys_it(plugin, client):
    kubelet = await plugin.kubelet()
    uid = await make_claim(client, "mig", [part_result()])
    resp = await kubelet.prepare(("default", "mig", uid))
    assert resp[uid].error == ""
    [inst] = plugin.backend.mig_instances("GPU-m0")
    assert (inst.profile, inst.start, inst.size) == ("3g.20gb", 4, 4) and plugin.backend.mig_enabled("GPU-m0")
    env, mounts = plugin.env(resp[uid])
    assert env["NVIDIA_VISIBLE_DEVICES"] == inst.mig_uuid and mounts == []  # the instance alone, no HAMi-core
    # the card now holds an instance this plugin made: still published as partitions, not static MIG
    await plugin.node.sync_once()
    assert PART in {d["name"] for s in (await plugin.slices()).values() for d in s["spec"].get("devices", [])}
    overlap = await make_claim(client, "over", [part_result("hami-gpu-0-mig-4g-20gb-0")])  # slices 0..3: free
    whole = await make_claim(client, "whole", [result("hami-gpu-0", "1Gi", "10")])
    clash = await make_claim(client, "clash", [part_result("hami-gpu-0-mig-1g-5gb-5")])
    got = await kubelet.prepare(("default", "over", overlap), ("default", "whole", whole), ("default", "clash", clash))
    assert got[overlap].error == ""  # a second instance beside the first
    assert "cut into MIG instances" in got[whole].error
    assert "overlap" in got[clash].error and PART in got[clash].error
    assert len(plugin.backend.mig_instances("GPU-m0")) == 2
    out = await kubelet.unprepare(("default", "mig", uid), ("default", "over", overlap))
    assert out[uid].error == out[overlap].error == ""
    assert plugin.backend.mig_instances("GPU-m0") == () and not plugin.backend.mig_enabled("GPU-m0")
    assert (await kubelet.prepare(("default", "whole", whole)))[whole].error == ""  # the card is whole again


async def test_a_restarted_plugin_finds_its_partition_from_the_checkpoint(plugin, client):
    kubelet = await plugin.kubelet()
    uid = await make_claim(client, "mig", [part_result()])
    first = await kubelet.prepare(("default", "mig", uid))
    [inst] = plugin.backend.mig_instances("GPU-m0")
    await plugin.halt()
    await plugin.start()  # same dirs, same card
    kubelet = await plugin.kubelet()
    again = await kubelet.prepare(("default", "mig", uid))
    assert again[uid].error == "" and list(again[uid].devices[0].cdi_device_ids) == \
        list(first[uid].devices[0].cdi_device_ids)
    assert plugin.backend.mig_instances("GPU-m0") == (inst,)  # found, not made again
    assert PART in {d["name"] for s in (await plugin.slices()).values() for d in s["spec"].get("devices", [])}
    assert (await kubelet.unprepare(("default", "mig", uid)))[uid].error == ""
    assert plugin.backend.mig_instances("GPU-m0") == ()


async def test_a_kill_between_the_instance_and_the_record_leaks_no_instance(plugin, client):
    uid = await make_claim(client, "mig", [part_result()])

    def kill(step, claim_uid):
        if step == "after-mig":
            raise Crash(step)

    plugin.node.driver.crash_hook = kill
    with pytest.raises(Crash):
        await plugin.node.driver.prepare([ClaimRef("default", uid, "mig")])
    assert len(plugin.backend.mig_instances("GPU-m0")) == 1  # made, recorded only as `preparing`
    await plugin.halt()
    await plugin.start()
    assert plugin.backend.mig_instances("GPU-m0") == () and not plugin.backend.mig_enabled("GPU-m0")
    resp = await (await plugin.kubelet()).prepare(("default", "mig", uid))  # kubelet's retry
    assert resp[uid].error == "" and len(plugin.backend.mig_instances("GPU-m0")) == 1


# --------------------------------------------------------------------------- admin access


async def test_admin_access_gets_the_gpu_without_hamicore_and_takes_no_room(plugin, client):
    kubelet = await plugin.kubelet()
    admin = await admin_claim(client, "admin", "hami-gpu-1")
    forged = await make_claim(client, "forged", [part_result("hami-gpu-1", adminAccess=True)])  # spec never asked
    full = [await make_claim(client, f"f{i}", [result("hami-gpu-1", "20Gi", "50")]) for i in range(2)]
    resp = await kubelet.prepare((ADMIN_NS, "admin", admin), ("default", "forged", forged),
                                 *[("default", f"f{i}", u) for i, u in enumerate(full)])
    assert "does not ask for it" in resp[forged].error
    assert [resp[u].error for u in (admin, *full)] == ["", "", ""]  # two claims fill the GPU; admin beside them
    env, mounts = plugin.env(resp[admin])
    assert env == {"NVIDIA_VISIBLE_DEVICES": "GPU-w1", "HAMI_DRA_DEVICE_0": "GPU-w1"} and mounts == []
    spec = read_json(os.path.join(plugin.root, "cdi", cdi.spec_file(DRIVER, admin)))
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-w1"], "mounts": []}


# --------------------------------------------------------------------------- the embedded kubelet


async def test_the_embedded_kubelet_turns_the_stream_into_allocated_resources_status(plugin):
    from hami.sim.kubelet.drakubelet import DraKubelet
    from hami.sim.kubelet.drapods import resources_status

    kubelet = DraKubelet(os.path.join(plugin.root, "r"))
    await kubelet.register()
    seen: list[dict] = []

    async def on_update(update):
        seen.append(update)

    stop = asyncio.Event()
    task = asyncio.create_task(kubelet.watch_health(on_update, stop))
    try:
        async def until(pred):
            for _ in range(500):
                if seen and pred(seen[-1]):
                    return seen[-1]
                await asyncio.sleep(0.02)
            raise AssertionError(f"no such health update: {seen[-1:]}")

        await until(lambda h: h.get((NODE, "hami-gpu-1")) == ("Healthy", ""))
        write(plugin.gpus, GPUS % "false")
        health = await until(lambda h: h[(NODE, "hami-gpu-1")][0] == "Unhealthy")
    finally:
        stop.set()
        await task
        await kubelet.close()
    pod = {"spec": {"containers": [
        {"name": "a", "resources": {"claims": [{"name": "gpu"}]}},
        {"name": "b", "resources": {"claims": [{"name": "gpu", "request": "r2"}]}},
        {"name": "c"}]}}
    devices = {"gpu": [(NODE, "hami-gpu-1", ("r1",)), (NODE, "hami-gpu-0", ("r2",))]}
    got = resources_status(pod, devices, DRIVER, health)
    assert got["a"] == [{"name": "claim:gpu", "resources": [
        {"resourceID": f"{DRIVER}/{NODE}/hami-gpu-1", "health": "Unhealthy", "message": f"{TAINT_UNHEALTHY}=true"},
        {"resourceID": f"{DRIVER}/{NODE}/hami-gpu-0", "health": "Healthy"}]}]
    assert got["b"] == [{"name": "claim:gpu/r2", "resources": [
        {"resourceID": f"{DRIVER}/{NODE}/hami-gpu-0", "health": "Healthy"}]}]
    assert "c" not in got
    assert resources_status(pod, devices, DRIVER, {})["b"][0]["resources"][0]["health"] == "Unknown"


async def test_a_whole_gpu_claim_takes_an_empty_card_out_of_mig_mode(plugin, client):
    plugin.backend.set_mig_mode("GPU-m0", True)  # an operator left MIG on, with no instance
    await plugin.node.sync_once()
    assert "hami-gpu-0" in plugin.node.published  # still partitionable: no instance is someone else's
    kubelet = await plugin.kubelet()
    uid = await make_claim(client, "whole", [result("hami-gpu-0", "1Gi", "10")])
    resp = await kubelet.prepare(("default", "whole", uid))
    assert resp[uid].error == "" and not plugin.backend.mig_enabled("GPU-m0")
    assert plugin.env(resp[uid])[0]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"


async def test_an_admin_claim_on_a_partition_sees_the_parent_gpu_and_makes_no_instance(plugin, client):
    uid = await admin_claim(client, "watch", PART)
    resp = await (await plugin.kubelet()).prepare((ADMIN_NS, "watch", uid))
    assert resp[uid].error == ""
    assert plugin.env(resp[uid])[0]["NVIDIA_VISIBLE_DEVICES"] == "GPU-m0"
    assert plugin.backend.mig_instances("GPU-m0") == () and not plugin.backend.mig_enabled("GPU-m0")


async def test_the_taint_names_the_xid_and_a_vanished_gpu_is_lost(plugin):
    write(plugin.gpus, GPUS.replace("healthy: %s", "healthy: false, telemetry: {xids: {13: 9, 48: 3}}"))
    await plugin.node.sync_once()  # 13 is an application's error (HAMi ignores it): 48 is the fault
    [dev] = (await plugin.slices())[slice_name(NODE)]["spec"]["devices"]
    assert dev["taints"] == [{"key": TAINT_XID, "value": "48", "effect": "NoSchedule"}]
    write(plugin.gpus, GPUS.split("  - {uuid: GPU-w1")[0])  # GPU-w1 fell off the bus
    await plugin.node.sync_once()
    [dev] = (await plugin.slices())[slice_name(NODE)]["spec"]["devices"]
    assert dev["name"] == "hami-gpu-1" and dev["taints"] == [
        {"key": TAINT_GPU_LOST, "value": "true", "effect": "NoSchedule"}]
    assert plugin.node.health.devices["hami-gpu-1"].health == "Unhealthy"
