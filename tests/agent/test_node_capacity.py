"""`--report-node-capacity` (HAMi #2839): the node agent keeps nvidia.com/gpumem and nvidia.com/gpucores
in its Node's capacity and allocatable through `nodes/status`, on the fake backend over real HTTP."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.agent.capacity import node_capacity, status_patch
from hami.device.model import DeviceInfo, NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from hami.kube.client import ApiError
from tests.agent.harness import NODE, U1, U2, NodeHarness, gpu_doc

MEM, CORES = "nvidia.com/gpumem", "nvidia.com/gpucores"
NAMES = (MEM, CORES)


def _dev(i: int, mem: int, core: int = 100, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=f"GPU-{i}", count=10, devmem=mem, devcore=core, type="NVIDIA-A100", index=i, health=health)


def test_capacity_sums_only_healthy_registered_gpus():
    devs = [_dev(0, 40960), _dev(1, 40960, health=False), _dev(2, 81920, core=200)]
    assert node_capacity(devs, MEM, CORES) == {MEM: "122880", CORES: "300"}
    assert node_capacity([], MEM, CORES) == {MEM: "0", CORES: "0"}


@given(st.dictionaries(st.sampled_from(NAMES + ("nvidia.com/gpu", "cpu")), st.sampled_from(["0", "1", "81920"])),
       st.booleans(), st.sampled_from([None, {MEM: "81920", CORES: "200"}, {MEM: "0", CORES: "0"}]))
def test_status_patch_leads_to_exactly_the_wanted_values(have, same_in_both, want):
    from hami.sim.apiserver.patch import STRATEGIC, apply_patch

    node = {"status": {"capacity": dict(have), "allocatable": dict(have) if same_in_both else {}}}
    patch = status_patch(node, want, NAMES)
    after = apply_patch(node, orjson.dumps(patch), STRATEGIC) if patch else node
    for field in ("capacity", "allocatable"):
        got = after["status"].get(field) or {}
        assert {n: got[n] for n in NAMES if n in got} == (want or {})
        # what is not ours is left as it was
        assert {k: v for k, v in got.items() if k not in NAMES} == \
            {k: v for k, v in node["status"][field].items() if k not in NAMES}
    assert status_patch(after, want, NAMES) is None  # nothing left to send


def _reported(node: dict) -> tuple[dict, dict]:
    st_ = node.get("status") or {}
    return ({k: v for k, v in (st_.get("capacity") or {}).items() if k in NAMES},
            {k: v for k, v in (st_.get("allocatable") or {}).items() if k in NAMES})


async def _wait_reported(h: NodeHarness, want: dict, timeout: float = 60.0, kubelet: bool = False) -> dict:
    """The node once it carries `want` (and, with `kubelet`, the kubelet's nvidia.com/gpu as well); the timeout is a
    loaded machine's, the wait ends at the condition."""
    async def poll():
        while True:
            node = await h.node()
            if _reported(node) == (want, want) and (
                    not kubelet or "nvidia.com/gpu" in (node.get("status") or {}).get("capacity", {})):
                return node
            await asyncio.sleep(0.05)
    return await asyncio.wait_for(poll(), timeout)


async def test_reports_healthy_memory_and_cores_and_follows_health_loss():
    async with NodeHarness(report_node_capacity=True) as h:
        node = await _wait_reported(h, {MEM: "81920", CORES: "200"}, kubelet=True)
        # the kubelet's own device-plugin resource is still there beside ours
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "20"
        h.write_gpus(gpu_doc(healthy=(True, False)))
        await _wait_reported(h, {MEM: "40960", CORES: "100"})
        h.write_gpus(gpu_doc(healthy=(False, False)))
        await _wait_reported(h, {MEM: "0", CORES: "0"})
        h.write_gpus(gpu_doc())
        await _wait_reported(h, {MEM: "81920", CORES: "200"})
        patches = h.agent.capacity.patches
        await h.passes(6)  # many passes: an unchanged node is not patched again
        assert h.agent.capacity.patches == patches


async def test_memory_scaling_is_in_the_reported_memory():
    settings = effective_device_settings(NvidiaConfig(device_memory_scaling=1.5, device_core_scaling=2.0), None)
    async with NodeHarness(settings, report_node_capacity=True) as h:
        await _wait_reported(h, {MEM: str(2 * 61440), CORES: "400"})


async def test_a_static_mig_gpu_leaves_the_reported_capacity():
    settings = effective_device_settings(NvidiaConfig(), NodeDeviceConfig(name=NODE, migstrategy="single"))
    doc = {"gpus": [
        {"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
        {"uuid": U2, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "index": 1},
    ]}
    async with NodeHarness(settings, gpus=doc, report_node_capacity=True) as h:
        await _wait_reported(h, {MEM: "81920", CORES: "200"})
        # U1 turns into MIG devices: they are served as nvidia.com/gpu MIG slices, not shares
        h.write_gpus({"gpus": [dict(doc["gpus"][0], mig={"enabled": True, "instances": [
            {"profile": "3g.20gb", "start": 0}]}), doc["gpus"][1]]})
        await _wait_reported(h, {MEM: "40960", CORES: "100"})


async def test_turning_the_flag_off_removes_what_an_earlier_run_reported():
    async with NodeHarness(report_node_capacity=True) as h:
        await _wait_reported(h, {MEM: "81920", CORES: "200"})
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        h.agent_kwargs["report_node_capacity"] = False
        await h.start_agent()
        node = await _wait_reported(h, {}, kubelet=True)
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "20"  # the kubelet's resource stays
        assert h.agent.capacity.patches == 1
        # off means off: a value someone writes later is not the agent's business until its next start
        await h.client.patch_node_status(NODE, {"status": {"capacity": {MEM: "5"}}})
        # The agent has seen that write (its node cache) and then had many passes to undo it.
        assert await h.agent.nodes.wait_for(
            lambda: ((h.agent.nodes.store.get(NODE) or {}).get("status") or {}).get("capacity", {}).get(MEM) == "5", 60)
        await h.passes(6)
        assert _reported(await h.node())[0] == {MEM: "5"}


async def test_without_the_flag_nothing_is_written():
    async with NodeHarness() as h:
        await h.agent.nodes.wait_for(lambda: h.agent.registered is not None, 60)
        await h.passes(4)  # passes after the registration, each a chance to write capacity
        assert _reported(await h.node()) == ({}, {})
        assert h.agent.capacity.patches == 0


# ------------------------------------------------------------------ the embedded API server's nodes/status


async def test_nodes_status_takes_every_patch_type_and_the_node_itself_leaves_status_alone():
    async with NodeHarness() as h:
        await h.client.patch_node_status(NODE, {"status": {"capacity": {MEM: "100"}, "allocatable": {MEM: "100"}}},
                                         content_type="application/merge-patch+json")
        assert _reported(await h.node()) == ({MEM: "100"}, {MEM: "100"})
        # a patch of the Node (not /status) cannot change its status, as on kube-apiserver
        await h.client.patch_node(NODE, {"status": {"capacity": {MEM: "999"}}})
        assert _reported(await h.node()) == ({MEM: "100"}, {MEM: "100"})
        await h.client.patch_node_status(NODE, [{"op": "remove", "path": "/status/capacity/nvidia.com~1gpumem"}],
                                         content_type="application/json-patch+json")
        assert _reported(await h.node()) == ({}, {MEM: "100"})
        await h.client.patch_node_status(NODE, {"status": {"allocatable": {MEM: None}}})  # strategic null
        assert _reported(await h.node()) == ({}, {})
        # a status write cannot change the spec
        await h.client.patch_node_status(NODE, {"spec": {"unschedulable": True}, "status": {"capacity": {CORES: "1"}}})
        node = await h.node()
        assert not (node.get("spec") or {}).get("unschedulable") and _reported(node)[0] == {CORES: "1"}


@pytest.mark.parametrize(("value", "text"), [("1.5", "must be an integer"), ("500m", "must be an integer"),
                                              ("-1", "greater than or equal to 0"), ("lots", "quantities must match")])
async def test_bad_extended_quantities_are_refused_naming_the_field(value, text):
    async with NodeHarness() as h:
        with pytest.raises(ApiError) as err:
            await h.client.patch_node_status(NODE, {"status": {"capacity": {MEM: value}}})
        assert err.value.status == 422
        assert f"status.capacity[{MEM}]" in str(err.value) and text in str(err.value)
        assert _reported(await h.node()) == ({}, {})


async def test_a_refused_status_patch_never_holds_up_the_registration():
    """A chart without the nodes/status grant: the agent registers and serves, and says once why the
    capacity is missing; once the grant is there it reports."""
    async with NodeHarness(report_node_capacity=True) as h:
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        await h.client.patch_node_status(NODE, {"status": {"capacity": {MEM: None, CORES: None},
                                                           "allocatable": {MEM: None, CORES: None}}})
        h.server.authz.deny("patch", "nodes/status", reason="no RBAC rule")
        await h.client.patch_node(NODE, {"metadata": {"annotations": {"hami.io/node-nvidia-register": None}}})
        await h.start_agent()
        await h.agent.nodes.wait_for(lambda: "hami.io/node-nvidia-register" in (
            (h.agent.nodes.store.get(NODE) or {}).get("metadata", {}).get("annotations") or {}), 60)
        await asyncio.wait_for(h.agent.plugin.registered.wait(), 60)
        assert h.agent.readiness() == []  # serving: the missing grant is not a reason to be unready
        assert h.agent.capacity.error.startswith("403 Forbidden")
        assert _reported(await h.node()) == ({}, {})
        refusals = h.agent.capacity.refusals
        await h.passes(40)  # 40 passes: a refused patch is retried every 5 s, not every pass
        assert refusals >= 1 and h.agent.capacity.refusals <= refusals + 1
        h.server.authz.allow_all()
        await _wait_reported(h, {MEM: "81920", CORES: "200"})
        assert h.agent.capacity.error == ""
