"""CDI: `--device-list-strategy` envvar | cdi-annotations | cdi-cri (and combinations).

Covers: the pure answer per strategy (envvar unchanged; CDI names `nvidia.com/gpu=<uuid>` or
`=<index>` in the cdi_devices field or a `cdi.k8s.io/hami-device-plugin_<container>` annotation;
NVIDIA_VISIBLE_DEVICES=void without envvar; annotation keys stay valid for any container name; an
index the node does not have is an AllocationError); the same over real gRPC from the agent to the
test kubelet for each strategy, with HAMi-core's envs and mounts unchanged; the simulated kubelet
resolves what it received into GPUs for every channel (and refuses a name it cannot resolve), and
the sample pod's `sim.hami.io/allocated-devices` annotation shows what it received.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.agent._pb import api_pb2 as pb
from hami.agent.allocate import AllocationError, ContainerAllocation
from hami.agent.cdi import annotation_key, apply_strategy, names_from_annotations
from hami.device.model import ContainerDevice
from hami.sim.kubelet.devicemanager import KubeletError, visible_gpus
from tests.agent.harness import NODE, U1, U2, NodeHarness

pytestmark = pytest.mark.timeout(60)

DEVS = (ContainerDevice(U1, "NVIDIA", 1000, 10), ContainerDevice(U2, "NVIDIA", 1000, 10))
BASE = ContainerAllocation("main", DEVS, {"NVIDIA_VISIBLE_DEVICES": f"{U1},{U2}", "CUDA_DEVICE_SM_LIMIT": "10"},
                           (), "")
INDEX = {U1: 0, U2: 1}.get


def test_envvar_is_hamis_answer_unchanged():
    assert apply_strategy(BASE, ("envvar",)) is BASE


def test_cdi_cri_names_by_uuid_and_voids_the_env():
    c = apply_strategy(BASE, ("cdi-cri",))
    assert c.cdi_devices == (f"nvidia.com/gpu={U1}", f"nvidia.com/gpu={U2}")
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == "void" and c.envs["CUDA_DEVICE_SM_LIMIT"] == "10"
    assert c.annotations == {}


def test_cdi_annotations_by_index():
    c = apply_strategy(BASE, ("cdi-annotations",), "index", INDEX)
    assert c.annotations == {"cdi.k8s.io/hami-device-plugin_main": "nvidia.com/gpu=0,nvidia.com/gpu=1"}
    assert c.cdi_devices == () and c.envs["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert names_from_annotations(c.annotations) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]


def test_combined_strategies_keep_the_env_when_envvar_is_listed():
    c = apply_strategy(BASE, ("envvar", "cdi-cri", "cdi-annotations"))
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == f"{U1},{U2}"
    assert len(c.cdi_devices) == 2 and len(c.annotations) == 1


def test_unknown_index_is_an_allocation_error_naming_the_gpu():
    with pytest.raises(AllocationError, match=U2):
        apply_strategy(BASE, ("cdi-cri",), "index", {U1: 0}.get)


@given(st.text(min_size=1, max_size=120))
def test_annotation_key_is_a_valid_qualified_name_for_any_container(name):
    key = annotation_key(name)
    prefix, _, rest = key.partition("/")
    assert prefix == "cdi.k8s.io" and len(rest) <= 63
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", rest)


def _resp(envs=None, cdi=(), annotations=None):
    r = pb.ContainerAllocateResponse()
    r.envs.update(envs or {})
    r.annotations.update(annotations or {})
    for n in cdi:
        r.cdi_devices.add(name=n)
    return r


def test_sim_kubelet_resolves_every_channel():
    assert visible_gpus(_resp({"NVIDIA_VISIBLE_DEVICES": f"{U1},{U2}"})) == [U1, U2]
    assert visible_gpus(_resp({"NVIDIA_VISIBLE_DEVICES": "void"})) == []
    assert visible_gpus(_resp({"NVIDIA_VISIBLE_DEVICES": "void"}, cdi=[f"nvidia.com/gpu={U2}"])) == [U2]
    by_index = _resp(annotations={"cdi.k8s.io/hami-device-plugin_main": "nvidia.com/gpu=1"})
    assert visible_gpus(by_index, {0: U1, 1: U2}) == [U2]
    with pytest.raises(KubeletError, match="no GPU with index 1"):
        visible_gpus(by_index, {0: U1})
    with pytest.raises(KubeletError, match="amd.com/gpu=0"):
        visible_gpus(_resp(cdi=["amd.com/gpu=0"]))


@pytest.mark.parametrize(("strategy", "id_strategy", "field", "want"), [
    (("envvar",), "uuid", "env", U1),
    (("cdi-cri",), "uuid", "cdi_devices", [f"nvidia.com/gpu={U1}"]),
    (("cdi-cri",), "index", "cdi_devices", ["nvidia.com/gpu=0"]),
    (("cdi-annotations",), "uuid", "cdi_annotations", {"cdi.k8s.io/hami-device-plugin_main": f"nvidia.com/gpu={U1}"}),
])
async def test_allocate_over_grpc_and_the_sample_pod_shows_what_it_received(tmp_path, strategy, id_strategy,
                                                                           field, want):
    from hami.config import Config
    from hami.sim.cluster import DEVICES_ANNOTATION, PodRunner

    async with NodeHarness(device_list_strategy=strategy, device_id_strategy=id_strategy) as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        assert await h.agent.nodes.wait_for(
            lambda: "hami.io/node-nvidia-register" in (h.agent.nodes.store.get(NODE, {}).get("metadata", {})
                                                       .get("annotations") or {}), 10)
        pod = await h.create_pod("p1", {"main": 1}, f"{U1},NVIDIA,3000,30:;")
        runner = PodRunner(h.client, NODE, h.kubelet, Config(), node_index=1, hostpid_bug=False,
                           proc_root=str(tmp_path / "proc"))
        await runner.start_pod(pod)
        got = await h.pod("p1")
        assert got["status"]["phase"] == "Running"
        seen = json.loads(got["metadata"]["annotations"][DEVICES_ANNOTATION])["main"]
        assert seen["gpus"] == [U1]
        if field == "env":
            assert seen["NVIDIA_VISIBLE_DEVICES"] == want and seen["cdi_devices"] == [] and not seen["cdi_annotations"]
        else:
            assert seen[field] == want and seen["NVIDIA_VISIBLE_DEVICES"] == "void"
        env = json.loads(got["metadata"]["annotations"]["sim.hami.io/allocated-env"])["main"]
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"  # HAMi-core's limits whatever the strategy
        assert len(runner.started[got["metadata"]["uid"]]) == 1  # the shared region was written for the GPU
