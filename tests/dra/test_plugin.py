"""The DRA kubelet plugin against a test kubelet over real unix sockets, on dra v1 and v1beta1.

Covers: registration (GetInfo: type, driver, endpoint, both versions; NotifyRegistrationStatus);
prepare reads the ResourceClaim from the embedded API server and writes one CDI spec whose edits are
HAMi-core's contract (the same envs as the device plugin's Allocate for that share) and whose
device IDs are fully qualified; prepare and unprepare are idempotent; two claims sharing one GPU
each get their own limits; a claim that would over-commit what is already prepared is refused;
restart after a kill before the CDI write, during it (a temporary left) and between the CDI write
and the checkpoint's record answers kubelet's retry and leaks no CDI file; a restart after a reboot
emptied the CDI dir forgets the claims it lost; a kill during the very first prepare leaks nothing;
a corrupt checkpoint is moved aside and removes no spec; every bad input (claim not
allocated, allocated to another node, unknown device, capacity beyond the device, malformed
allocation, claim missing, uid mismatch, bad uid) is a per-claim error beside a claim that succeeds,
never a crash and never a CDI file, and logged once however often kubelet retries.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile

import pytest

from hami.agent.allocate import container_response  # the device plugin side of the contract
from hami.config import KubeSettings
from hami.device.model import NVIDIA, ContainerDevice
from hami.device.nodeconfig import DeviceSettings
from hami.dra import cdi
from hami.dra.plugin import ClaimRef, DraDriver
from hami.dra.server import DraServer, claim_reader
from hami.dra.shares import published_gpus
from hami.dra.slices import DRIVER, devices_for
from hami.gpu.backend import GpuInfo
from hami.kube.client import MERGE_PATCH, ApiError, KubeClient, resource_path
from hami.obs.log import configure_logging
from tests.dra.kubelet import FakeKubelet

NODE = "gpu-node-1"
GPUS = [GpuInfo("GPU-aaaa0000-0000-4000-8000-000000000000", 0, "NVIDIA A100-SXM4-40GB", 40960, minor=0),
        GpuInfo("GPU-bbbb0000-0000-4000-8000-000000000001", 1, "NVIDIA A100-SXM4-40GB", 40960, minor=1)]
MIB = 1 << 20


class Crash(BaseException):
    """What a kill looks like to the code after the crash point: nothing more runs."""


class Node:
    """One node's plugin (driver + sockets) over dirs that survive a restart."""

    def __init__(self, root, client):
        self.root = str(root)
        self.client = client
        self.plugin_dir = os.path.join(self.root, "plugins", DRIVER)
        self.reg_dir = os.path.join(self.root, "plugins_registry")
        self.cdi_root = os.path.join(self.root, "cdi")
        self.hook = os.path.join(self.root, "hook")
        self.published = published_gpus(devices_for(GPUS))
        self.crash_at = ""
        self.driver: DraDriver | None = None
        self.server: DraServer | None = None

    def _hook(self, step: str, uid: str) -> None:
        if step == self.crash_at.removeprefix("mid-write:"):
            if self.crash_at.startswith("mid-write:"):  # killed while writing the spec: a temporary stays
                write(os.path.join(self.cdi_root, "." + cdi.spec_file(DRIVER, uid) + ".tmp"),
                      '{"cdiVersion": "0.5.0", "kind": ')
            raise Crash(step)

    async def start(self) -> None:
        self.driver = DraDriver(node=NODE, cdi_root=self.cdi_root, plugin_dir=self.plugin_dir, hook_path=self.hook,
                                read_claim=claim_reader(self.client), published=lambda: self.published,
                                crash_hook=self._hook)
        self.server = DraServer(self.driver, plugin_dir=self.plugin_dir, registration_dir=self.reg_dir)
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(0)

    def cdi_files(self) -> list[str]:
        return sorted(os.listdir(self.cdi_root))


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig))
    yield c
    await c.close()


@pytest.fixture
async def node(client):
    root = tempfile.mkdtemp(prefix="hami-dra-", dir="/tmp")  # unix socket paths: at most 107 bytes
    n = Node(root, client)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()
        shutil.rmtree(root, ignore_errors=True)


def result(device: str, memory: str | None = "4000Mi", cores: str | None = "30", *, pool: str = NODE,
           request: str = "gpu", driver: str = DRIVER) -> dict:
    consumed = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    return {"request": request, "driver": driver, "pool": pool, "device": device, "consumedCapacity": consumed,
            "shareID": "5f0a3a4e-0000-4000-8000-00000000000" + device[-1]}


async def make_claim(client, name: str, results: list | None, *, ns: str = "default") -> str:
    """Create a ResourceClaim and write its allocation through /status, as the scheduler does."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}}
    created = await client.create("resourceclaims", body, ns)
    if results is not None:
        status = {"status": {"allocation": {"devices": {"results": results}}}}
        await client.request("patch", "resourceclaims", "PATCH",
                             resource_path("resourceclaims", ns, name, sub="status"),
                             body=status, content_type=MERGE_PATCH)
    return created["metadata"]["uid"]


def exists(path: str) -> bool:
    return os.path.exists(path)


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def cdi_ids(resp_claim) -> list[str]:
    return [i for d in resp_claim.devices for i in d.cdi_device_ids]


# --------------------------------------------------------------------------- registration


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_registration_answers_kubelet_with_driver_endpoint_and_both_versions(node, version):
    kubelet = FakeKubelet(node.reg_dir, version)
    info = await kubelet.register()
    assert info.type == "DRAPlugin"
    assert info.name == "hami-core-gpu.project-hami.io"
    assert info.endpoint == os.path.join(node.plugin_dir, "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]  # no health board here
    assert os.path.basename(node.server.registration_socket) == "hami-core-gpu.project-hami.io-reg.sock"
    assert node.server.registered.is_set()
    assert node.server.registration_status == (True, "")


# --------------------------------------------------------------------------- prepare / unprepare


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_prepare_writes_one_cdi_spec_with_hamicore_contract_and_unprepare_removes_it(node, client, version):
    kubelet = FakeKubelet(node.reg_dir, version)
    await kubelet.register()
    uid = await make_claim(client, "c1", [result("hami-gpu-1", "4000Mi", "30")])
    resp = await kubelet.prepare(("default", "c1", uid))
    assert resp[uid].error == ""
    [dev] = resp[uid].devices
    assert (dev.pool_name, dev.device_name, list(dev.request_names)) == (NODE, "hami-gpu-1", ["gpu"])
    assert list(dev.cdi_device_ids) == [f"k8s.hami-core-gpu.project-hami.io/claim={uid}-hami-gpu-1"]
    assert node.cdi_files() == [f"k8s.hami-core-gpu.project-hami.io-claim_{uid}.json"]

    env, mounts = cdi.resolve(node.cdi_root, cdi_ids(resp[uid]))
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPUS[1].uuid
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"{node.hook}/vgpu/{uid}.cache"
    by_path = {m["containerPath"]: m for m in mounts}
    assert by_path[f"{node.hook}/vgpu/libvgpu.so"]["options"][0] == "ro"
    assert by_path["/etc/ld.so.preload"]["hostPath"] == f"{node.hook}/vgpu/ld.so.preload"
    assert by_path["/tmp/vgpulock"]["options"][0] == "rw"
    assert by_path[f"{node.hook}/vgpu"]["hostPath"] == f"{node.hook}/vgpu/claims/{uid}"
    assert exists(f"{node.hook}/vgpu/claims/{uid}")

    # the same values the device plugin's Allocate computes for that share
    alloc = container_response((ContainerDevice(GPUS[1].uuid, NVIDIA, 4000, 30),), {"name": "c"}, "pod",
                               DeviceSettings(), node.hook, cache_name=uid)
    assert {k: v for k, v in alloc.envs.items()} == {k: v for k, v in env.items() if not k.startswith("HAMI_DRA")}

    again = await kubelet.prepare(("default", "c1", uid))  # kubelet retries: same answer, same one file
    assert cdi_ids(again[uid]) == cdi_ids(resp[uid]) and again[uid].error == ""
    assert len(node.cdi_files()) == 1

    out = await kubelet.unprepare(("default", "c1", uid))
    assert out[uid].error == ""
    assert node.cdi_files() == []
    assert not exists(f"{node.hook}/vgpu/claims/{uid}")
    assert (await kubelet.unprepare(("default", "c1", uid)))[uid].error == ""  # idempotent
    assert uid not in node.driver.checkpoint.claims


async def test_two_claims_share_one_gpu_each_with_its_limits_and_a_third_overcommit_is_refused(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    a = await make_claim(client, "a", [result("hami-gpu-0", "20000Mi", "50")])
    b = await make_claim(client, "b", [result("hami-gpu-0", "20960Mi", "50")])
    c = await make_claim(client, "c", [result("hami-gpu-0", "1Mi", "0")])
    resp = await kubelet.prepare(("default", "a", a), ("default", "b", b))
    assert resp[a].error == resp[b].error == ""
    env_a, _ = cdi.resolve(node.cdi_root, cdi_ids(resp[a]))
    env_b, _ = cdi.resolve(node.cdi_root, cdi_ids(resp[b]))
    assert (env_a["CUDA_DEVICE_MEMORY_LIMIT_0"], env_b["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("20000m", "20960m")
    assert env_a["NVIDIA_VISIBLE_DEVICES"] == env_b["NVIDIA_VISIBLE_DEVICES"] == GPUS[0].uuid
    assert env_a["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != env_b["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    third = await kubelet.prepare(("default", "c", c))
    assert "hami-gpu-0 would be over-committed" in third[c].error and "40960 MiB" in third[c].error
    assert len(node.cdi_files()) == 2
    await kubelet.unprepare(("default", "a", a))
    assert (await kubelet.prepare(("default", "c", c)))[c].error == ""  # freed by the unprepare


async def test_one_claim_on_two_gpus_and_two_requests_on_one_gpu(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1beta1")
    await kubelet.register()
    uid = await make_claim(client, "multi", [
        result("hami-gpu-0", "1000Mi", "10", request="r0"), result("hami-gpu-1", "2Gi", "20", request="r1"),
        result("hami-gpu-1", "1Gi", "5", request="r2"),
        result("other-dev", pool="elsewhere", driver="gpu.nvidia.com")])  # another driver's: not ours
    resp = await kubelet.prepare(("default", "multi", uid))
    assert resp[uid].error == ""
    assert [(d.device_name, list(d.request_names)) for d in resp[uid].devices] == \
        [("hami-gpu-0", ["r0"]), ("hami-gpu-1", ["r1", "r2"])]
    env, _ = cdi.resolve(node.cdi_root, cdi_ids(resp[uid]))
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{GPUS[0].uuid},{GPUS[1].uuid}"
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("1000m", "3072m")


# --------------------------------------------------------------------------- restart


@pytest.mark.parametrize("crash_at", ["before-cdi", "mid-write:before-cdi", "after-cdi"])
async def test_restart_after_kill_mid_prepare_answers_the_retry_and_leaks_no_cdi_file(node, client, crash_at):
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    keep = await make_claim(client, "keep", [result("hami-gpu-1", "1Gi", "10")])
    assert (await kubelet.prepare(("default", "keep", keep)))[keep].error == ""
    uid = await make_claim(client, "crash", [result("hami-gpu-0", "8Gi", "40")])
    node.crash_at = crash_at
    with pytest.raises(Crash):
        await node.driver.prepare([ClaimRef("default", uid, "crash")])
    left = node.cdi_files()
    assert len(left) == (1 if crash_at == "before-cdi" else 2)  # a spec or a temporary beside keep's
    assert uid not in read_json(os.path.join(node.plugin_dir, "checkpoint.json"))["claims"]
    await node.stop()

    node.crash_at = ""
    await node.start()  # the restarted plugin
    assert node.cdi_files() == [cdi.spec_file(DRIVER, keep)]  # half-prepared spec and temporary gone
    assert node.driver.recovered == [name for name in left if uid in name]
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    resp = await kubelet.prepare(("default", "crash", uid))  # kubelet's retry
    assert resp[uid].error == ""
    env, _ = cdi.resolve(node.cdi_root, cdi_ids(resp[uid]))
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m" and env["CUDA_DEVICE_SM_LIMIT"] == "40"
    assert sorted(node.cdi_files()) == sorted([cdi.spec_file(DRIVER, keep), cdi.spec_file(DRIVER, uid)])
    again = await kubelet.prepare(("default", "keep", keep))  # the claim prepared before the kill
    assert again[keep].error == "" and len(again[keep].devices) == 1


async def test_restart_removes_a_stray_spec_the_checkpoint_does_not_know(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    uid = await make_claim(client, "c", [result("hami-gpu-0")])
    assert (await kubelet.prepare(("default", "c", uid)))[uid].error == ""
    await node.stop()
    stray = os.path.join(node.cdi_root, cdi.spec_file(DRIVER, "deadbeef-0000"))
    write(stray, "{}")
    other_vendor = os.path.join(node.cdi_root, "nvidia.yaml")
    write(other_vendor, "cdiVersion: 0.5.0\n")
    await node.start()
    assert not exists(stray)
    assert exists(other_vendor)  # not ours: untouched
    assert exists(os.path.join(node.cdi_root, cdi.spec_file(DRIVER, uid)))


# --------------------------------------------------------------------------- bad input


BAD = {
    "not-allocated": (None, "not allocated"),
    "other-node": ([result("hami-gpu-0", pool="gpu-node-9")], "not this node's pool 'gpu-node-1'"),
    "unknown-device": ([result("hami-gpu-7")], "device 'hami-gpu-7' is not published by this node"),
    "memory-beyond": ([result("hami-gpu-0", "41Gi")], "the device has 42949672960"),
    "cores-beyond": ([result("hami-gpu-0", "1Gi", "101")], "101 cores, the device has 100"),
    "bad-quantity": ([result("hami-gpu-0", "lots")], "consumedCapacity.memory"),
    "negative": ([result("hami-gpu-0", "-1Gi")], "negative quantity"),
    "fraction-cores": ([result("hami-gpu-0", "1Gi", "0.5")], "not a whole number"),
    "unknown-capacity": ([{**result("hami-gpu-0"), "consumedCapacity": {"memory": "1Gi", "gpus": "1"}}],
                         "unknown capacity 'gpus'"),
    "results-not-list": ({"oops": 1}, "results is missing"),
    "device-not-string": ([{**result("hami-gpu-0"), "device": 3}], "device: expected str, got int"),
    "below-one-mib": ([result("hami-gpu-0", "1Ki")], "less than 1 MiB"),
    "no-device-of-ours": ([result("x", driver="gpu.nvidia.com")], "no device of driver"),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_bad_claim_gets_a_per_claim_error_and_no_cdi_file(node, client, apiserver, monkeypatch, case):
    results, message = BAD[case]
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    good = await make_claim(client, "good", [result("hami-gpu-1", "1Gi", "10")])
    try:
        uid = await make_claim(client, "bad", results)
    except ApiError as exc:
        # The embedded server validates allocations as kube-apiserver does and refused this one;
        # store it unvalidated, standing for a server that let it through (version skew): the plugin
        # must refuse it on its own.
        assert exc.status == 422
        monkeypatch.setattr(apiserver.store, "validate_kind", lambda *a, **k: None)
        stored = await client.get("resourceclaims", "bad", "default")
        stored["status"] = {"allocation": {"devices": {"results": results} if isinstance(results, list) else results}}
        await client.request("update", "resourceclaims", "PUT",
                             resource_path("resourceclaims", "default", "bad", sub="status"),
                             body=stored, content_type="application/json")
        uid = stored["metadata"]["uid"]
    resp = await kubelet.prepare(("default", "bad", uid), ("default", "good", good))
    assert message in resp[uid].error, resp[uid].error
    assert list(resp[uid].devices) == []
    assert resp[good].error == "" and len(resp[good].devices) == 1
    assert node.cdi_files() == [cdi.spec_file(DRIVER, good)]
    assert uid not in node.driver.checkpoint.claims


async def test_missing_claim_uid_mismatch_and_bad_uid_are_per_claim_errors(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1beta1")
    await kubelet.register()
    uid = await make_claim(client, "real", [result("hami-gpu-0")])
    resp = await kubelet.prepare(("default", "gone", "0f0f0f0f-0000"), ("default", "real", "11112222-3333"),
                                 ("default", "real", "../../etc/passwd"))
    assert "ResourceClaim default/gone not found" in resp["0f0f0f0f-0000"].error
    assert "has uid" in resp["11112222-3333"].error and uid in resp["11112222-3333"].error
    assert "is not a valid UID" in resp["../../etc/passwd"].error
    assert node.cdi_files() == []
    out = await kubelet.unprepare(("default", "x", "../x"))
    assert "is not a valid UID" in out["../x"].error
    # the plugin still serves
    assert (await kubelet.prepare(("default", "real", uid)))[uid].error == ""


async def test_restart_after_reboot_emptied_the_cdi_dir_forgets_the_claims_it_lost(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    big = await make_claim(client, "big", [result("hami-gpu-0", "40Gi", "100")])
    assert (await kubelet.prepare(("default", "big", big)))[big].error == ""
    await node.stop()
    shutil.rmtree(node.cdi_root)  # /var/run is tmpfs: a reboot empties it, the checkpoint stays
    await node.start()
    assert big in node.driver.recovered and big not in node.driver.checkpoint.claims
    other = await make_claim(client, "other", [result("hami-gpu-0", "1Gi", "10")])
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    assert (await kubelet.prepare(("default", "other", other)))[other].error == ""  # big holds no capacity
    again = await kubelet.prepare(("default", "big", big))  # kubelet prepares big again after the reboot
    assert "would be over-committed" in again[big].error  # and the GPU is honestly short now


async def test_kill_during_the_very_first_prepare_leaks_nothing(node, client):
    assert exists(os.path.join(node.plugin_dir, "checkpoint.json"))  # written at the first start
    uid = await make_claim(client, "first", [result("hami-gpu-0")])
    node.crash_at = "after-cdi"
    with pytest.raises(Crash):
        await node.driver.prepare([ClaimRef("default", uid, "first")])
    assert node.cdi_files() == [cdi.spec_file(DRIVER, uid)]
    await node.stop()
    node.crash_at = ""
    await node.start()
    assert node.cdi_files() == []


async def test_a_corrupt_checkpoint_is_moved_aside_and_no_spec_is_removed(node, client):
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    uid = await make_claim(client, "c", [result("hami-gpu-0")])
    assert (await kubelet.prepare(("default", "c", uid)))[uid].error == ""
    await node.stop()
    write(os.path.join(node.plugin_dir, "checkpoint.json"), '{"version": 1, "claims": {"x": ')
    await node.start()
    assert exists(os.path.join(node.plugin_dir, "checkpoint.json.corrupt"))
    assert node.cdi_files() == [cdi.spec_file(DRIVER, uid)]  # unknown owner: kept
    kubelet = FakeKubelet(node.reg_dir, "v1")
    await kubelet.register()
    assert (await kubelet.prepare(("default", "c", uid)))[uid].error == ""  # prepared again, recorded
    assert uid in node.driver.checkpoint.claims


async def test_a_failing_claim_is_logged_once_however_often_kubelet_retries(node, client):
    stream = io.StringIO()
    configure_logging(0, stream=stream)
    try:
        kubelet = FakeKubelet(node.reg_dir, "v1")
        await kubelet.register()
        uid = await make_claim(client, "far", [result("hami-gpu-0", pool="gpu-node-9")])
        for _ in range(3):  # kubelet retries a failed prepare
            assert "not this node's pool" in (await kubelet.prepare(("default", "far", uid)))[uid].error
    finally:
        configure_logging(0)
    lines = [ln for ln in stream.getvalue().splitlines() if "Cannot prepare claim" in ln]
    assert len(lines) == 1 and "default/far" in lines[0] and "gpu-node-9" in lines[0]
