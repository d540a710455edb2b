"""Dynamic MIG end to end on the fake backend: embedded API server, real gRPC to the test kubelet,
the agent in operating mode `mig` (HAMi's migmgr semantics, hami/agent/mig.py).

Covers, for each geometry (A100-40GB, A100-80GB, H100-80GB): the card registers its migProfiles in
HAMi's format (names, memory, placements, count = largest instance count) while out of MIG mode;
Allocate of a scheduler-reserved slice puts the card in MIG mode, creates the GPU + compute
instance at exactly that placement, hands the container the MIG UUID in NVIDIA_VISIBLE_DEVICES
and CUDA_VISIBLE_DEVICES and records migUUID/gpuInstanceID/computeInstanceID in the annotation;
deleting the pod destroys the instance and takes the card out of MIG mode. Also: two slices of
two containers on one card; a restart mid-allocation keeps the held instance (and a retried
Allocate reuses it) while an unheld one is destroyed; an unheld instance with running processes
is kept until they end (HAMi's busy-GPU guard); an infeasible slice (overlap, bad placement,
profile outside migProfileAllowlist) fails with a clear error and leaves the card unchanged; a
malformed annotation is refused naming the key with the card untouched, and pauses reconcile;
a malformed allowlist or legacy `knownMigGeometries` is refused naming the key (by the config
parser and by the agent), and legacy `knownMigGeometries` become the allowlist when none is given.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from hami.agent.mig import MigRequestError
from hami.agent.migmgr import MigManager
from hami.config import ConfigError, parse_device_config
from hami.device import codec
from hami.device.model import MigPlacement, MigProfileAllow, NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from hami.gpu.fake import FakeBackend
from tests.agent.harness import NODE, NodeHarness

U = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
MIG = "hami.io/vgpu-mig-allocations"
GEOMETRIES = {
    "NVIDIA A100-SXM4-40GB": ("1g.5gb", 4864, "3g.20gb", 19968),
    "NVIDIA A100-SXM4-80GB": ("1g.10gb", 9728, "3g.40gb", 40192),
    "NVIDIA H100 80GB HBM3": ("1g.10gb", 10240, "3g.40gb", 40960),
}


def mig_settings():
    return effective_device_settings(NvidiaConfig(), NodeDeviceConfig(name=NODE, operatingmode="mig"))


def mig_doc(model):
    return {"gpus": [{"uuid": U, "model": model, "memory_mib": 40960, "mig": {"enabled": False}}]}


def mig_ann(*slices):
    """slices: (container, device, profile, start, size)."""
    return codec.encode_mig_allocations(
        codec.MigAllocation(c, d, U, p, MigPlacement(s, z)) for c, d, p, s, z in slices)


async def registered(h) -> list[dict]:
    for _ in range(200):
        text = ((await h.node())["metadata"].get("annotations") or {}).get("hami.io/node-nvidia-register")
        if text:
            return json.loads(text)
        await asyncio.sleep(0.05)
    raise AssertionError("no registration")


async def wait_until(pred, timeout=10.0):
    for _ in range(int(timeout / 0.05)):
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("model", list(GEOMETRIES))
async def test_create_allocate_destroy_round_trip(model):
    small, small_mem, _, _ = GEOMETRIES[model]
    async with NodeHarness(mig_settings(), gpus=mig_doc(model)) as h:
        (dev,) = await registered(h)
        assert dev["mode"] == "mig" and dev["count"] == 7 and dev["devcore"] == 100
        first = dev["migProfiles"][0]
        assert first["name"] == small and first["memoryMB"] == small_mem and first["sliceCount"] == 1
        assert first["placements"][6] == {"start": 6, "size": 1}
        assert not h.backend.mig_enabled(U)
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        pod = await h.create_pod("m1", {"main": 1}, f"{U},NVIDIA,{small_mem},15:;",
                                 annotations={MIG: mig_ann((0, 0, small, 6, 1))})
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        (inst,) = h.backend.mig_instances(U)
        assert h.backend.mig_enabled(U) and (inst.profile, inst.start, inst.size) == (small, 6, 1)
        assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": inst.mig_uuid, "CUDA_VISIBLE_DEVICES": inst.mig_uuid}
        assert inst.mig_uuid.startswith("MIG-")
        (a,) = codec.decode_mig_allocations((await h.pod("m1"))["metadata"]["annotations"][MIG])
        assert (a.mig_uuid, a.gpu_instance_id, a.compute_instance_id) == (inst.mig_uuid, inst.gpu_instance_id, 0)
        assert (await h.pod("m1"))["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
        await asyncio.sleep(0.3)  # ticks with the pod alive: the slice stays
        assert h.backend.mig_instances(U) == (inst,)
        await h.client.delete("pods", "m1", "default")
        await wait_until(lambda: not h.backend.mig_instances(U) and not h.backend.mig_enabled(U))
        assert h.agent.mig.destroyed == 1


async def test_two_containers_get_their_own_slices_on_one_card():
    async with NodeHarness(mig_settings(), gpus=mig_doc("NVIDIA A100-SXM4-40GB")) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        pod = await h.create_pod("two", {"a": 1, "b": 1}, f"{U},NVIDIA,19968,43:;{U},NVIDIA,4864,15:;",
                                 annotations={MIG: mig_ann((0, 0, "3g.20gb", 0, 4), (1, 0, "1g.5gb", 6, 1))})
        got = await h.kubelet.allocate_pod(pod)
        by_profile = {m.profile: m.mig_uuid for m in h.backend.mig_instances(U)}
        assert dict(got["a"].envs)["NVIDIA_VISIBLE_DEVICES"] == by_profile["3g.20gb"]
        assert dict(got["b"].envs)["CUDA_VISIBLE_DEVICES"] == by_profile["1g.5gb"]
        anns = codec.decode_mig_allocations((await h.pod("two"))["metadata"]["annotations"][MIG])
        assert {a.mig_uuid for a in anns} == set(by_profile.values())


async def test_restart_mid_allocation_keeps_the_held_instance_and_destroys_unheld_ones():
    async with NodeHarness(mig_settings(), gpus=mig_doc("NVIDIA A100-SXM4-40GB")) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        pod = await h.create_pod("held", {"main": 1}, f"{U},NVIDIA,19968,43:;",
                                 annotations={MIG: mig_ann((0, 0, "3g.20gb", 4, 4))})
        # The agent dies after creating the slice, before recording it (mid-Allocate).
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        h.backend.set_mig_mode(U, True)
        held = h.backend.create_mig(U, "3g.20gb", 4)
        stray = h.backend.create_mig(U, "2g.10gb", 0)  # nobody holds this one
        await h.start_agent()
        await wait_until(lambda: h.backend.mig_instances(U) == (held,))
        assert stray not in h.backend.mig_instances(U)
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        (c,) = (await h.kubelet.allocate_pod(pod)).values()  # kubelet retries: the slice is reused
        assert dict(c.envs)["NVIDIA_VISIBLE_DEVICES"] == held.mig_uuid
        assert h.backend.mig_instances(U) == (held,) and h.agent.mig.created == 0


async def test_unheld_instance_with_running_processes_is_kept_until_they_end():
    async with NodeHarness(mig_settings(), gpus=mig_doc("NVIDIA A100-SXM4-40GB")) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        h.backend.set_mig_mode(U, True)
        busy = h.backend.create_mig(U, "2g.10gb", 0)  # a bare process outside Kubernetes uses it
        h.backend.set_mig_busy(U, busy.gpu_instance_id, True)
        await h.start_agent()
        await h.passes(6)  # several reconcile passes
        assert h.backend.mig_instances(U) == (busy,) and h.agent.mig.destroyed == 0
        h.backend.set_mig_busy(U, busy.gpu_instance_id, False)
        await wait_until(lambda: not h.backend.mig_instances(U) and not h.backend.mig_enabled(U))


@pytest.mark.parametrize(("slices", "message"), [
    ([(0, 0, "2g.10gb", 3, 2)], "is not a placement of 2g.10gb"),
    ([(0, 0, "4g.20gb", 0, 4)], "offers no MIG profile '4g.20gb'"),
    ([(0, 0, "2g.10gb", 4, 2)], "overlaps"),
], ids=["bad-placement", "not-allowed", "overlap"])
async def test_infeasible_slice_fails_clearly_and_leaves_the_card_unchanged(slices, message):
    allow = (MigProfileAllow(("A100-SXM4-40GB",), ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")),)
    async with NodeHarness(mig_settings(), gpus=mig_doc("NVIDIA A100-SXM4-40GB"), mig_allowlist=allow) as h:
        (dev,) = await registered(h)
        assert [p["name"] for p in dev["migProfiles"]] == ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        keep = await h.create_pod("keep", {"main": 1}, f"{U},NVIDIA,19968,43:;",
                                  annotations={MIG: mig_ann((0, 0, "3g.20gb", 4, 4))}, bind_time=50)
        await h.kubelet.allocate_pod(keep)
        before = h.backend.mig_instances(U)
        pod = await h.create_pod("bad", {"main": 1}, f"{U},NVIDIA,9856,29:;", annotations={MIG: mig_ann(*slices)})
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(pod)
        assert message in err.value.details() and "default/bad" in err.value.details()
        assert h.backend.mig_instances(U) == before and h.backend.mig_enabled(U)
        assert (await h.pod("bad"))["metadata"]["annotations"]["hami.io/bind-phase"] == "failed"


async def test_malformed_annotation_is_refused_naming_the_key_and_pauses_reconcile():
    async with NodeHarness(mig_settings(), gpus=mig_doc("NVIDIA A100-SXM4-40GB")) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        pod = await h.create_pod("junk", {"main": 1}, f"{U},NVIDIA,4864,15:;",
                                 annotations={MIG: '[{"containerIndex":0,"deviceIndex":0}]'})
        h.backend.set_mig_mode(U, True)
        stray = h.backend.create_mig(U, "1g.5gb", 0)
        # A live pod's annotation does not decode: nothing is destroyed on a guess.
        await h.passes(6)
        assert h.backend.mig_instances(U) == (stray,)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(pod)
        assert MIG in err.value.details() and "incomplete" in err.value.details()
        assert h.agent.mig.created == 0
        # The pod failed and holds nothing: reconcile resumes and frees the unheld instance.
        await wait_until(lambda: not h.backend.mig_instances(U) and not h.backend.mig_enabled(U))


def test_malformed_allowlist_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(json.dumps(mig_doc("NVIDIA A100-SXM4-40GB")))
    backend = FakeBackend(str(path))
    with pytest.raises(MigRequestError, match=r"nvidia.migProfileAllowlist\[0\].profiles: invalid MIG profile '1g'"):
        MigManager(backend, (MigProfileAllow(("A100-SXM4-40GB",), ("1g",)),))
    with pytest.raises(MigRequestError, match=r"nvidia.migProfileAllowlist\[0\]: must define models and profiles"):
        MigManager(backend, (MigProfileAllow((), ("1g.5gb",)),))
    assert not backend.mig_enabled("GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111")


@pytest.mark.parametrize(("section", "key"), [
    ({"migProfileAllowlist": [{"models": ["A100-SXM4-40GB"], "profiles": ["1g"]}]},
     "nvidia.migProfileAllowlist[0].profiles"),
    ({"migProfileAllowlist": [{"profiles": ["1g.5gb"]}]}, "nvidia.migProfileAllowlist[0]"),
    ({"migProfileAllowlist": [{"models": "A100", "profiles": ["1g.5gb"]}]}, "nvidia.migProfileAllowlist[0].models"),
    ({"knownMigGeometries": [{"models": ["A100-SXM4-40GB"], "allowedGeometries": [[{"memory": 5}]]}]},
     "nvidia.knownMigGeometries[0].allowedGeometries[0][0].name"),
    ({"knownMigGeometries": {"models": []}}, "nvidia.knownMigGeometries"),
])
def test_malformed_mig_device_config_is_refused_naming_the_key(section, key):
    with pytest.raises(ConfigError) as err:
        parse_device_config({"nvidia": section}, "device-config.yaml", lambda m: None)
    assert err.value.key == key and str(err.value).startswith(f"device-config.yaml: {key}: got ")


def test_legacy_known_mig_geometries_become_the_allowlist():
    cfg = parse_device_config({"nvidia": {"knownMigGeometries": [
        {"models": ["A100-SXM4-40GB"], "allowedGeometries": [
            [{"name": "1g.5gb", "memory": 5120, "count": 7}],
            [{"name": "2g.10gb", "memory": 10240, "count": 3}, {"name": "1g.5gb", "memory": 5120, "count": 1}]]}]}},
        "device-config.yaml", lambda m: None)
    assert cfg.mig_profile_allowlist == (MigProfileAllow(("A100-SXM4-40GB",), ("1g.5gb", "2g.10gb")),)
    both = parse_device_config({"nvidia": {
        "migProfileAllowlist": [{"models": ["H100 80GB HBM3"], "profiles": ["1g.10gb"]}],
        "knownMigGeometries": [{"models": ["A100-SXM4-40GB"], "allowedGeometries": [[{"name": "7g.40gb"}]]}]}},
        "device-config.yaml", lambda m: None)
    assert both.mig_profile_allowlist == (MigProfileAllow(("H100 80GB HBM3",), ("1g.10gb",)),)
