"""The node agent end to end over real transports: the embedded API server over HTTP, the test
kubelet and the device plugin over unix-socket gRPC, fake GPUs from a YAML file. Covers
registration (exact annotation JSON, kubelet device counts, node allocatable, no re-patch when
unchanged, re-patch when removed), a GPU turning unhealthy in the file reaching kubelet and the
annotation, Allocate for 1 container / 1 GPU, 2 containers, 1 container / 2 GPUs and an init
container (every env var and mount, pod annotations, node lock release, cache dirs), kubelet
restart (re-registration), bad pod annotations and wrong device counts (bind-phase=failed, lock
released, clear gRPC error), Allocate with no pod, GetPreferredAllocation, PreStartContainer,
GetDevicePluginOptions, and that no socket is left behind after stop."""

from __future__ import annotations

import os

import grpc
import pytest

from hami.agent._pb import api_pb2 as pb
from hami.device.model import NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from tests.agent.harness import LOCK, NODE, U1, U2, NodeHarness, gpu_doc
from tests.kube.helpers import eventually

REGISTER = "hami.io/node-nvidia-register"
EXPECTED_JSON = (
    '[{"id":"GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111","count":10,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true},'
    '{"id":"GPU-91ab03c4-77de-4c0a-8b21-222222222222","index":1,"count":10,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA A100-SXM4-40GB","numa":1,"mode":"hami-core","health":true}]'
)

pytestmark = pytest.mark.timeout(60)


def anns(obj):
    return obj["metadata"].get("annotations") or {}


async def registered(h: NodeHarness, predicate) -> bool:
    return await h.agent.nodes.wait_for(lambda: predicate(anns(h.agent.nodes.store.get(NODE, {"metadata": {}}))), 10)


def mounts(c):
    return [(m.container_path, m.host_path, m.read_only) for m in c.mounts]


def expected_mounts(h, uid, container, preload=True):
    out = [
        (f"{h.hook}/vgpu/libvgpu.so", f"{h.hook}/vgpu/libvgpu.so", True),
        (f"{h.hook}/vgpu", f"{h.hook}/vgpu/containers/{uid}_{container}", False),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
    ]
    if preload:
        out.append(("/etc/ld.so.preload", f"{h.hook}/vgpu/ld.so.preload", True))
    return out


async def test_registration_annotation_kubelet_counts_and_allocatable():
    async with NodeHarness() as h:
        assert await registered(h, lambda a: a.get(REGISTER) == EXPECTED_JSON)
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        ids = sorted(d.ID for d in h.kubelet.devices())
        assert ids == sorted([f"{U1}-{i}" for i in range(10)] + [f"{U2}-{i}" for i in range(10)])
        reg = h.kubelet.registrations[0]
        assert (reg.version, reg.endpoint, reg.resource_name) == ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu")
        assert reg.options.get_preferred_allocation_available is False
        node = await h.node()
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "20"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "20"
        assert "hami.io/node-handshake" not in anns(node)
    assert h.leftover_sockets == []


async def test_registration_is_patched_only_on_change_and_restored_when_removed():
    async with NodeHarness() as h:
        assert await registered(h, lambda a: REGISTER in a)
        before = h.client.total_requests("patch", "nodes")
        for _ in range(10):
            await h.agent.sync_once()
        assert h.client.total_requests("patch", "nodes") == before
        assert h.agent.register_patches == 1
        await h.client.patch_node(NODE, {"metadata": {"annotations": {REGISTER: None}}})
        assert await h.agent.nodes.wait_for(lambda: h.agent.register_patches == 2, 10)
        assert await registered(h, lambda a: a.get(REGISTER) == EXPECTED_JSON)


async def test_gpu_turning_unhealthy_in_the_file_reaches_kubelet_and_annotation():
    async with NodeHarness() as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        h.write_gpus(gpu_doc(healthy=(True, False)))
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)
        bad = {d.ID for d in h.kubelet.devices() if d.health == "Unhealthy"}
        assert bad == {f"{U2}-{i}" for i in range(10)}
        assert await registered(h, lambda a: '"numa":1,"mode":"hami-core"}]' in a.get(REGISTER, ""))
        assert await h.agent.nodes.wait_for(
            lambda: (h.agent.nodes.store[NODE].get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu")
            == "10", 10)


async def test_allocate_one_container_one_gpu_sets_everything_and_releases_lock():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("p1", {"main": 1}, f"{U1},NVIDIA,3000,30:;")
        uid = pod["metadata"]["uid"]
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        envs = dict(c.envs)
        cache = envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        assert cache.startswith(f"{h.hook}/vgpu/") and cache.endswith(".cache")
        assert envs == {"NVIDIA_VISIBLE_DEVICES": U1, "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
                        "CUDA_DEVICE_SM_LIMIT": "30", "LIBCUDA_LOG_LEVEL": "1"}
        assert mounts(c) == expected_mounts(h, uid, "main")
        p = await h.pod("p1")
        assert anns(p)["hami.io/bind-phase"] == "success"
        assert anns(p)["hami.io/vgpu-devices-to-allocate"] == ";;"
        assert LOCK not in anns(await h.node())
        assert os.listdir(f"{h.hook}/vgpu/containers") == [f"{uid}_main"]
        assert h.agent.allocator.api_fallbacks == 0


async def test_allocate_two_containers_one_call_each_success_after_the_last():
    from dataclasses import replace

    settings = replace(effective_device_settings(NvidiaConfig(lib_cuda_log_level="1"), None),
                       allow_disable_control=True)  # the operator allows CUDA_DISABLE_CONTROL on this node
    async with NodeHarness(settings) as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("p2", {"a": 1, "b": 1}, f"{U1},NVIDIA,1000,10:;{U2},NVIDIA,2000,20:;",
                                 env={"b": {"CUDA_DISABLE_CONTROL": "true"}})
        uid = pod["metadata"]["uid"]
        a = await h.kubelet.allocate_container(pod, "a")
        p = await h.pod("p2")
        assert anns(p)["hami.io/bind-phase"] == "allocating"
        assert LOCK in anns(await h.node())
        b = await h.kubelet.allocate_container(pod, "b")
        assert (a.envs["NVIDIA_VISIBLE_DEVICES"], a.envs["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (U1, "1000m")
        assert (b.envs["NVIDIA_VISIBLE_DEVICES"], b.envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
                b.envs["CUDA_DEVICE_SM_LIMIT"]) == (U2, "2000m", "20")
        assert mounts(a) == expected_mounts(h, uid, "a")
        assert mounts(b) == expected_mounts(h, uid, "b", preload=False)
        assert a.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != b.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
        p = await h.pod("p2")
        assert anns(p)["hami.io/bind-phase"] == "success"
        assert LOCK not in anns(await h.node())


async def test_allocate_one_container_two_gpus_and_init_container():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("p3", {"main": 2}, f";{U1},NVIDIA,4000,25:{U2},NVIDIA,5000,25:;",
                                 init={"setup": 0})
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == f"{U1},{U2}"
        assert (c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], c.envs["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("4000m", "5000m")
        assert c.envs["CUDA_DEVICE_SM_LIMIT"] == "25"
        assert mounts(c) == expected_mounts(h, pod["metadata"]["uid"], "main")
        assert anns(await h.pod("p3"))["hami.io/bind-phase"] == "success"


async def test_lock_owner_wins_over_an_older_allocating_pod():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("older", {"main": 1}, f"{U2},NVIDIA,1,1:;", bind_time=10, lock=False)
        owner = await h.create_pod("owner", {"main": 1}, f"{U1},NVIDIA,7,7:;", bind_time=20)
        (c,) = (await h.kubelet.allocate_pod(owner)).values()
        assert c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "7m"
        assert anns(await h.pod("older"))["hami.io/bind-phase"] == "allocating"


async def test_bad_annotation_fails_pod_releases_lock_and_returns_clear_error():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("bad", {"main": 1}, f"{U1},NVIDIA,lots,30:;")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(pod)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert "default/bad" in err.value.details()
        assert "hami.io/vgpu-devices-to-allocate" in err.value.details()
        assert anns(await h.pod("bad"))["hami.io/bind-phase"] == "failed"
        assert LOCK not in anns(await h.node())


@pytest.mark.parametrize(("ids", "message"), [([f"{U1}-0", f"{U1}-1"], "device number not matched"),
                                              ([], "no devices requested")], ids=["too-many", "none"])
async def test_wrong_device_count_fails_the_pod(ids, message):
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("count", {"main": 1}, f"{U1},NVIDIA,1000,10:;")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([ids])
        assert message in err.value.details()
        assert anns(await h.pod("count"))["hami.io/bind-phase"] == "failed"
        assert LOCK not in anns(await h.node())


async def test_allocate_without_a_binding_pod_is_an_error():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([[f"{U1}-0"]])
        assert err.value.details().startswith(f"no binding pod found on node {NODE}")


async def test_allocate_with_api_403_fails_with_that_cause_and_hands_out_nothing():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        pod = await h.create_pod("denied", {"main": 1}, f"{U1},NVIDIA,1000,10:;")
        h.server.faults.fail_next_writes(1, 403)  # RBAC refuses the allocation patch
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(pod)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert err.value.details() == ("pod default/denied: cannot record the allocation: "
                                       "403 Forbidden: injected fault: status 403")
        p = anns(await h.pod("denied"))
        assert p["hami.io/bind-phase"] == "failed"  # never left half-written as allocating
        assert p["hami.io/vgpu-devices-to-allocate"] == f"{U1},NVIDIA,1000,10:;"
        assert LOCK not in anns(await h.node())
        assert h.agent.allocator.failures == 1 and h.agent.allocator.allocations == 0


async def test_allocate_when_the_api_server_is_unreachable_names_the_call():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.server.stop()  # the caches know no pod, and the fallback read gets no answer
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([[f"{U1}-0"]])
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details().startswith(f"cannot read node {NODE}: 0 ClientConnectorError")


@pytest.mark.parametrize("remove_plugin_sockets", [True, False], ids=["sockets-wiped", "kubelet-sock-only"])
async def test_kubelet_restart_leads_to_re_registration(remove_plugin_sockets):
    async with NodeHarness() as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.kubelet.restart(remove_plugin_sockets=remove_plugin_sockets)
        assert h.kubelet.devices() == []
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        # the kubelet serves the new registration before the agent's Register call returns and counts it
        await eventually(lambda: h.agent.plugin.registrations == 2, timeout=10)
        pod = await h.create_pod("after", {"main": 1}, f"{U1},NVIDIA,1000,10:;")
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U1
    assert h.leftover_sockets == []


async def test_preferred_allocation_picks_ids_on_the_annotated_gpu():
    settings = effective_device_settings(
        NvidiaConfig(), NodeDeviceConfig(name=NODE, enablegetpreferredallocation=True, devicesplitcount=2))
    async with NodeHarness(settings) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 4)
        assert h.kubelet.registrations[0].options.get_preferred_allocation_available is True
        pod = await h.create_pod("pref", {"main": 1}, f"{U2},NVIDIA,1000,10:;")
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        uid = pod["metadata"]["uid"]
        assert h.kubelet.assigned[(uid, "main")] == [f"{U2}-0"]
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U2


async def test_options_and_prestart_rpcs():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        stub = h.kubelet.plugins["nvidia.com/gpu"].stub
        opts = await stub.GetDevicePluginOptions(pb.Empty())
        assert opts.get_preferred_allocation_available is True and opts.pre_start_required is False
        assert await stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["x"])) == \
            pb.PreStartContainerResponse()


async def test_allocate_falls_back_to_the_api_when_caches_know_no_pod():
    from hami.agent.deviceplugin import PodAllocator

    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("cold", {"main": 1}, f"{U1},NVIDIA,1000,10:;")
        assert h.agent.allocator.api_fallbacks == 0
        cold = PodAllocator(h.client, NODE, lambda: {}, lambda: {}, lambda: h.settings, h.hook)
        (c,) = await cold.allocate([[f"{U1}-0"]])
        assert cold.api_fallbacks == 1 and c.envs["NVIDIA_VISIBLE_DEVICES"] == U1
        assert anns(await h.pod("cold"))["hami.io/bind-phase"] == "success"
        assert LOCK not in anns(await h.node())


async def test_lock_owner_missing_from_the_pod_cache_is_read_from_the_api():
    from hami.agent.deviceplugin import PodAllocator

    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.create_pod("stuck", {"main": 1}, f"{U2},NVIDIA,1,1:;", bind_time=1, lock=False)
        await h.create_pod("owner", {"main": 1}, f"{U1},NVIDIA,9,9:;", bind_time=2)
        pods_without_owner = lambda: {k: v for k, v in h.agent.pods.store.items() if k != "default/owner"}  # noqa: E731
        lagging = PodAllocator(h.client, NODE, pods_without_owner, lambda: h.agent.nodes.store,
                               lambda: h.settings, h.hook, locker=h.agent.locker)
        (c,) = await lagging.allocate([[f"{U1}-0"]])
        assert (c.envs["NVIDIA_VISIBLE_DEVICES"], lagging.api_fallbacks) == (U1, 1)
        assert anns(await h.pod("stuck"))["hami.io/bind-phase"] == "allocating"
        assert LOCK not in anns(await h.node())


async def test_plugin_waits_for_kubelet_and_registers_when_it_appears():
    import asyncio
    import tempfile

    from hami.agent.deviceplugin import DevicePluginServer
    from hami.agent.register import PluginDevice
    from hami.sim.kubelet.devicemanager import Kubelet

    d = tempfile.mkdtemp(prefix="hami-", dir="/tmp")
    plugin = DevicePluginServer(d, handler=None, poll_interval=0.02)
    await plugin.set_devices([PluginDevice("GPU-x-0", "Healthy")])
    stop = asyncio.Event()
    task = asyncio.create_task(plugin.run(stop))
    try:
        await eventually(lambda: plugin.polls >= 5)  # five looks at the socket directory ...
        assert plugin.registrations == 0 and plugin.register_failures == 0  # ... no kubelet.sock: no attempt
        async with Kubelet(d) as kubelet:
            assert await kubelet.wait_for(lambda: kubelet.healthy_count() == 1, 10)
            stop.set()
            await task
            assert await kubelet.wait_for(lambda: kubelet.devices() == [], 10)
    finally:
        stop.set()
        await task
    assert os.listdir(d) == []
    os.rmdir(d)
