"""Static MIG (`migstrategy: single|mixed`, NVIDIA device plugin semantics) over real gRPC to the
test kubelet with fake GPUs whose MIG devices exist before the agent starts.

Covers: `single` advertises every MIG device as `nvidia.com/gpu` (ID = MIG UUID) next to the
slots of a non-MIG card, registers only the non-MIG card with HAMi, and Allocate of a MIG ID
returns it in NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES while whole-GPU IDs still go through
HAMi's pod allocation; `mixed` serves `nvidia.com/mig-<profile>` from one socket per profile and
leaves MIG cards out of `nvidia.com/gpu`, an unknown MIG ID is refused; a MIG device created later
shows up on the next tick; `none` advertises no MIG device; a bad strategy in the node config is
refused naming the key.
"""

from __future__ import annotations

import json

import grpc
import pytest

from hami.agent.staticmig import advertised
from hami.config import ConfigError, parse_node_configs
from hami.device.model import NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from tests.agent.harness import NODE, NodeHarness

U1 = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
U2 = "GPU-91ab03c4-77de-4c0a-8b21-222222222222"


def settings(strategy):
    return effective_device_settings(NvidiaConfig(), NodeDeviceConfig(name=NODE, migstrategy=strategy))


def doc(instances):
    return {"gpus": [
        {"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960,
         "mig": {"enabled": True, "instances": [{"profile": p, "start": s} for p, s in instances]}},
        {"uuid": U2, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "index": 1},
    ]}


async def test_single_strategy_advertises_mig_devices_as_gpus_and_allocates_them():
    async with NodeHarness(settings("single"), gpus=doc([("1g.5gb", 0), ("1g.5gb", 1)])) as h:
        migs = [m.mig_uuid for m in h.backend.mig_instances(U1)]
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 12)
        ids = {d.ID for d in h.kubelet.devices()}
        assert set(migs) <= ids and {f"{U2}-{i}" for i in range(10)} <= ids and not any(U1 in i for i in ids)
        await h.agent.nodes.wait_for(lambda: "hami.io/node-nvidia-register" in (
            h.agent.nodes.store[NODE]["metadata"].get("annotations") or {}), 10)
        reg = json.loads(h.agent.nodes.store[NODE]["metadata"]["annotations"]["hami.io/node-nvidia-register"])
        assert [d["id"] for d in reg] == [U2]
        resp = await h.kubelet.allocate([[migs[1]]])
        assert dict(resp.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": migs[1],
                                                           "CUDA_VISIBLE_DEVICES": migs[1]}
        pod = await h.create_pod("whole", {"main": 1}, f"{U2},NVIDIA,1000,10:;")
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert dict(c.envs)["NVIDIA_VISIBLE_DEVICES"] == U2
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([[migs[0], f"{U2}-3"]])
        assert "mixes MIG devices and whole GPUs" in err.value.details()


async def test_mixed_strategy_serves_one_resource_per_profile():
    async with NodeHarness(settings("mixed"), gpus=doc([("1g.5gb", 0), ("3g.20gb", 4)])) as h:
        by_profile = {m.profile: m.mig_uuid for m in h.backend.mig_instances(U1)}
        small, big = "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count(big) == 1
                                        and h.kubelet.healthy_count(small) == 1)
        assert [d.ID for d in h.kubelet.devices(big)] == [by_profile["3g.20gb"]]
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 10)  # only U2's slots
        assert not any(U1 in d.ID for d in h.kubelet.devices())
        resp = await h.kubelet.allocate([[by_profile["3g.20gb"]]], resource=big)
        assert dict(resp.container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"] == by_profile["3g.20gb"]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate([["MIG-00000000-0000-0000-0000-000000000000"]], resource=big)
        assert "unknown MIG device" in err.value.details()
        later = h.backend.create_mig(U1, "2g.10gb", 0 + 2)
        mid = "nvidia.com/mig-2g.10gb"
        assert await h.kubelet.wait_for(lambda: [d.ID for d in h.kubelet.devices(mid)] == [later.mig_uuid])


async def test_none_strategy_advertises_no_mig_device():
    async with NodeHarness(settings("none"), gpus=doc([("1g.5gb", 0)])) as h:
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        assert not any(d.ID.startswith("MIG-") for d in h.kubelet.devices())


def test_bad_strategy_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        parse_node_configs({"nodeconfig": [{"name": "n1", "migstrategy": "some"}]}, "config.json", lambda m: None)
    assert "nodeconfig[0].migstrategy" in str(err.value)
    with pytest.raises(ValueError, match="migstrategy"):
        advertised("some", [], {})


async def test_mig_devices_are_named_by_cdi_like_whole_gpus():
    strategies = ("cdi-annotations", "cdi-cri")
    async with NodeHarness(settings("mixed"), gpus=doc([("1g.5gb", 0)]), device_list_strategy=strategies) as h:
        (mig,) = [m.mig_uuid for m in h.backend.mig_instances(U1)]
        small = "nvidia.com/mig-1g.5gb"
        assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count(small) == 1)
        resp = await h.kubelet.allocate([[mig]], resource=small)
        c = resp.container_responses[0]
        assert [d.name for d in c.cdi_devices] == [f"nvidia.com/gpu={mig}"]
        assert list(c.annotations.values()) == [f"nvidia.com/gpu={mig}"]
        assert dict(c.envs)["NVIDIA_VISIBLE_DEVICES"] == "void"  # no legacy-hook fallback to every GPU


def test_index_names_for_mig_devices_are_refused_not_guessed():
    from hami.agent.allocate import AllocationError
    from hami.agent.cdi import cdi_name
    with pytest.raises(AllocationError, match="device-id-strategy=uuid"):
        cdi_name("MIG-11111111-2222-3333-4444-555555555555", "index", lambda _u: 0)
    assert cdi_name(U1, "index", lambda _u: 3) == "nvidia.com/gpu=3"
