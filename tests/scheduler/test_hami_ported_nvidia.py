"""HAMi v2.10 `pkg/device/nvidia/device_test.go`, the cases not already ported in test_fit.py,
tests/device/test_request.py and test_webhook.py.

Pure (hami.scheduler.placement.fit, hami.scheduler.cache.handshake, hami.device.codec/request): Test_checkType,
TestCheckGPUtype_NoUse / _EmptyAnnotation / _InUseMismatch, TestCheckType_AllocateMode, TestAssertNuma,
TestFit_NumaSwitching, TestFit_MutexPolicy, TestFit_TopologyExactMatch / WorstSingleCard /
BestCombination / BestCombinationZeroScores / NegativeScores, TestZeroMemoryPercentageIsAccountedAsWholeCard,
Test_GetNodeDevices (+ _InvalidJSON, _PairScores, _InvalidPairScores), Test_PatchAnnotations,
TestDevices_AddResourceUsage, TestCheckHealth and TestNodeDeleted_ReuseAfterDeletion (judge/forget).
Over HTTP: TestLockNode (a pod takes the node lock at /bind iff some container, init or app, got a GPU).

Deviations kept (see the report): HAMi judges a node with no register annotation by its handshake
alone; here such a node is never written and counts unhealthy (it has no devices either way).
"""

from __future__ import annotations

import pytest

from hami.device import codec
from hami.device.model import ContainerDevice, NvidiaConfig
from hami.device.request import container_request
from hami.kube.nodelock import LOCK_KEY
from hami.scheduler.cache.handshake import Handshaker, Seen, judge
from hami.scheduler.placement import fit
from hami.scheduler.placement.fit import fit_devices, fit_options
from hami.scheduler.placement.usage import UsageIndex
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env

from ._helpers import dev, info, req

TOPOLOGY = {"hami.io/gpu-scheduler-policy": "topology-aware"}


def run(devices, request, annos=None, **kw):
    return fit_devices(devices, request, fit_options(annos or {}), **kw)


# ------------------------------------------------------------------ checkType family


@pytest.mark.parametrize(("annos", "dev_type", "want"), [
    ({fit.USE_GPUTYPE: "A10"}, "NVIDIA A100", True),
    ({fit.USE_GPUTYPE: "A10", fit.NOUSE_GPUTYPE: "A100"}, "NVIDIA A100", False),
    ({fit.USE_GPUTYPE: "A10", fit.NOUSE_GPUTYPE: "A100"}, "NVIDIA A10", True),
    ({fit.NOUSE_GPUTYPE: "A100"}, "NVIDIA-A100", False),
    ({fit.NOUSE_GPUTYPE: "A100"}, "NVIDIA-V100", True),
    ({fit.USE_GPUTYPE: ""}, "NVIDIA-A100", True),
    ({fit.USE_GPUTYPE: "   "}, "NVIDIA-A100", True),
    ({fit.NOUSE_GPUTYPE: ""}, "NVIDIA-A100", True),
    ({fit.NOUSE_GPUTYPE: "   "}, "NVIDIA-A100", True),
    ({fit.USE_GPUTYPE: "A100"}, "NVIDIA-V100", False),
], ids=[
    "Test_checkType/use set GPUInUse don't set GPUNoUse annotation,device match",
    "Test_checkType/use set GPUInUse set GPUNoUse annotation,device don't match",
    "Test_checkType/use set GPUInUse set GPUNoUse annotation,device match",
    "TestCheckGPUtype_NoUse/A100", "TestCheckGPUtype_NoUse/V100",
    "TestCheckGPUtype_EmptyAnnotation/use empty", "TestCheckGPUtype_EmptyAnnotation/use blank",
    "TestCheckGPUtype_EmptyAnnotation/nouse empty", "TestCheckGPUtype_EmptyAnnotation/nouse blank",
    "TestCheckGPUtype_InUseMismatch",
])
def test_check_type(annos, dev_type, want):
    d = dev("d0", type=dev_type, totalmem=8192)
    ok, _, reason = run([d], req(1, 10), annos)
    assert ok is want
    assert fit_options(annos).type_ok(d) is want
    if not want:
        assert reason == "1/1 CardTypeMismatch"


@pytest.mark.parametrize(("mode_anno", "want"), [("mps", False), ("hami-core", True)],
                         ids=["TestCheckType_AllocateMode/mode not contained", "TestCheckType_AllocateMode/contained"])
def test_TestCheckType_AllocateMode(mode_anno, want):
    d = dev("d0", type="NVIDIA-A100", mode="hami-core", totalmem=8192)
    assert fit_options({fit.VGPU_MODE: mode_anno}).type_ok(d) is want


@pytest.mark.parametrize(("annos", "want"), [({fit.NUMA_BIND: "true"}, True), ({fit.NUMA_BIND: "false"}, False),
                                             ({fit.NUMA_BIND: "notabool"}, False), ({}, False)],
                         ids=["TestAssertNuma/NumaBind=true enforces numa", "TestAssertNuma/NumaBind=false",
                              "TestAssertNuma/NumaBind invalid value", "TestAssertNuma/NumaBind key absent"])
def test_TestAssertNuma(annos, want):
    assert fit_options(annos).numa_bind is want


# ------------------------------------------------------------------ Fit


def card(id, index, numa=0, used=0, usedmem=0, totalmem=8192, count=10):
    return dev(id, index=index, numa=numa, used=used, usedmem=usedmem, totalmem=totalmem, count=count)


def test_TestFit_NumaSwitching():
    devices = [card("dev-0", 0, numa=1), card("dev-1", 1, numa=1), card("dev-2", 2, numa=0)]
    ok, chosen, _ = run(devices, req(2, 100, cores=10), {fit.NUMA_BIND: "true"})
    assert ok and [c.uuid for c in chosen] == ["dev-1", "dev-0"]


def test_TestFit_MutexPolicy():
    devices = [card("used", 0, used=1), card("idle", 1)]
    annos = {"hami.io/gpu-scheduler-policy": "mutex"}
    ok, chosen, _ = run(devices, req(1, 100, cores=10), annos)
    assert ok and [c.uuid for c in chosen] == ["idle"]
    ok, _, _ = run(devices, req(2, 100, cores=10), annos)
    assert not ok


SCORES = {"dev-0": {"dev-1": 100, "dev-2": 200}, "dev-1": {"dev-0": 100, "dev-2": 150},
          "dev-2": {"dev-0": 200, "dev-1": 150}}
ZERO = {"dev-0": {"dev-1": 0, "dev-2": 0}, "dev-1": {"dev-0": 0, "dev-2": 0}, "dev-2": {"dev-0": 0, "dev-1": 0}}
NEGATIVE = {"dev-0": {"dev-1": -5, "dev-2": -3}, "dev-1": {"dev-0": -5, "dev-2": -1},
            "dev-2": {"dev-0": -3, "dev-1": -1}}


@pytest.mark.parametrize(("n_dev", "nums", "scores", "want"), [
    (2, 2, None, None),
    (3, 1, SCORES, {"dev-1"}),
    (3, 2, SCORES, {"dev-0", "dev-2"}),
    (3, 2, ZERO, None),
    (3, 1, NEGATIVE, {"dev-0"}),
    (3, 2, NEGATIVE, {"dev-1", "dev-2"}),
], ids=["TestFit_TopologyExactMatch", "TestFit_TopologyWorstSingleCard", "TestFit_TopologyBestCombination",
        "TestFit_TopologyBestCombinationZeroScores", "TestFit_TopologyNegativeScores/SingleGPU",
        "TestFit_TopologyNegativeScores/MultiGPU"])
def test_topology_aware_fit(n_dev, nums, scores, want):
    devices = [card(f"dev-{i}", i) for i in range(n_dev)]
    ok, chosen, _ = run(devices, req(nums, 100, cores=10), TOPOLOGY, pair_scores=scores)
    assert ok and len(chosen) == nums
    if want is not None:
        assert {c.uuid for c in chosen} == want


def test_TestZeroMemoryPercentageIsAccountedAsWholeCard():
    ctr = {"name": "test", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}}}
    request = container_request(ctr, NvidiaConfig())
    ok, chosen, reason = run([card("dev-0", 0, totalmem=11264)], request)
    assert ok, reason
    assert chosen[0].usedmem == 11264
    ok, _, reason = run([card("dev-0", 0, totalmem=11264, usedmem=11260)], request)
    assert not ok and "CardInsufficientMemory" in reason


# ------------------------------------------------------------------ node devices and pod annotations


def test_Test_GetNodeDevices_exist_gpu_devices():
    text = ('[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,'
            '"health":true,"index":0}]')
    [d] = codec.decode_node_devices(text)
    assert (d.index, d.id, d.devcore, d.health, d.numa, d.type, d.count, d.vendor) == (
        0, "GPU-0", 100, True, 0, "NVIDIA-Tesla P4", 5, "NVIDIA")


def test_Test_GetNodeDevices_no_gpu_devices_leaves_the_node_unregistered():
    # HAMi: "no gpu found on node"; the decoder answers no devices and the scheduler keeps the node out
    assert codec.decode_node_devices("[]") == ()
    idx = UsageIndex()
    assert idx.node("node-02") is None


@pytest.mark.parametrize("text", ["not-valid-json", ""], ids=["TestGetNodeDevices_InvalidJSON", "no annotation"])
def test_bad_register_annotation_is_an_error(text):
    with pytest.raises(codec.CodecError):
        codec.decode_node_devices(text)


def test_TestGetNodeDevices_PairScores():
    scores = codec.decode_pair_scores('[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}]')
    assert {s.uuid: dict(s.scores) for s in scores} == {"GPU-0": {"GPU-1": 100}, "GPU-1": {"GPU-0": 100}}
    with pytest.raises(codec.CodecError):
        codec.decode_pair_scores("not-valid-json")


@pytest.mark.parametrize(("pod_devices", "want"), [
    ([[ContainerDevice("nvidia-device-0", "NVIDIA", 2000, 1)]], "nvidia-device-0,NVIDIA,2000,1:;"),
    ([], ""),
], ids=["Test_PatchAnnotations/exist device", "Test_PatchAnnotations/no device"])
def test_Test_PatchAnnotations(pod_devices, want):
    assert codec.encode_pod_devices(pod_devices) == want


def test_TestDevices_AddResourceUsage():
    idx = UsageIndex()
    idx.set_node("n", [info("dev-0")])
    idx.add_pod("ns/a", "n", [[ContainerDevice("dev-0", "NVIDIA", 2000, 15)]], namespace="ns")
    idx.add_pod("ns/b", "n", [[ContainerDevice("dev-0", "NVIDIA", 1024, 50)]], namespace="ns")
    d = idx.node("n").by_id["dev-0"]
    assert (d.used, d.usedcores, d.usedmem) == (2, 65, 3024)


# ------------------------------------------------------------------ CheckHealth


NOW = 1_767_225_600.0  # a fixed instant: judge() takes the clock as an argument
PAST = NOW - 2 * 3600
REG_OK = codec.encode_node_devices([info("GPU-0", type="NVIDIA-A100", devmem=8192, health=True)])
REG_SICK = codec.encode_node_devices([info("GPU-0", type="NVIDIA-A100", devmem=8192, health=False)])


def health_node(handshake: str, current: int, register: str | None) -> dict:
    annos = {codec.HANDSHAKE_ANNOTATION: handshake}
    if register is not None:
        annos[codec.REGISTER_ANNOTATION] = register
    return {"metadata": {"name": "test-node", "annotations": annos},
            "status": {"allocatable": {"nvidia.com/gpu": str(current)} if current else {}}}


@pytest.mark.parametrize(("stamp", "current", "reported", "cached", "register", "healthy", "reset"), [
    (NOW, 0, 0, REG_OK, REG_OK, True, False),
    (PAST, 0, 0, REG_OK, REG_OK, False, False),
    (PAST, 4, 4, REG_OK, REG_SICK, True, True),
    (PAST, 4, 4, REG_OK, REG_OK, True, False),
], ids=["TestCheckHealth/Kernel 6.17 Bug: current=0 reported=0 but handshake pending",
        "TestCheckHealth/Kernel 6.17 Bug: current=0 reported=0 but handshake expired",
        "TestCheckHealth/current>0 reported same: changed register annotation requests refresh",
        "TestCheckHealth/current>0 reported same: unchanged register annotation keeps cache"])
def test_TestCheckHealth(stamp, current, reported, cached, register, healthy, reset):
    node = health_node(codec.encode_handshake_requesting(stamp, None), current, register)
    v = judge(node, NOW, Seen(allocatable=reported, register=cached))
    assert (v.healthy, v.changed) == (healthy, reset)


def test_TestCheckHealth_deleted_register_annotation_drops_the_node():
    # HAMi: (healthy, needReset) = (true, true), then GetNodeDevices fails and the devices go.
    node = health_node(codec.encode_handshake_requesting(PAST, None), 4, None)
    v = judge(node, NOW, Seen(allocatable=4, register=REG_OK))
    assert v.healthy is False and v.write is None


def test_TestNodeDeleted_ReuseAfterDeletion():
    hs = Handshaker(None, clock=lambda: NOW)
    node = health_node("Heartbeat_2099-01-01T00:00:00Z", 4, REG_OK)
    node["metadata"]["name"] = "reused-node"
    hs.seen["reused-node"] = Seen(allocatable=4, register="old-anno")
    hs.forget("reused-node")
    assert "reused-node" not in hs.seen
    v = hs.evaluate(node)
    assert v.healthy is True and v.changed is True


# ------------------------------------------------------------------ TestLockNode over /filter + /bind

GPU = {"nvidia.com/gpu": "1"}


def lock_pod(name: str, init_gpu: bool, app_gpu: bool) -> dict:
    p = pod_obj(name, gpus=1 if app_gpu else 0)
    if init_gpu:
        p["spec"]["initContainers"] = [{"name": "gpu-init", "image": "cuda", "resources": {"limits": dict(GPU)}}]
    return p


@pytest.mark.parametrize(("init_gpu", "app_gpu", "has_lock"), [
    (False, False, False), (False, True, True), (True, False, True), (True, True, True),
], ids=["TestLockNode/no GPU containers - skip lock",
        "TestLockNode/regular-container-only GPU request - acquires lock",
        "TestLockNode/init-container-only GPU request - acquires lock",
        "TestLockNode/init and regular container GPU request - acquires lock"])
async def test_TestLockNode(apiserver, init_gpu, app_gpu, has_lock):
    async with running_env(apiserver, hami_nodes(1)) as env:
        p = env.create_pod(lock_pod("p", init_gpu, app_gpu))
        out = await env.filter(p, ["n0"])
        assert out["NodeNames"] == ["n0"]
        res = await env.bind(env.pod("default", "p"), "n0")
        assert res["Error"] == ""
        lock = env.store.get("nodes", "", "n0")["metadata"]["annotations"].get(LOCK_KEY)
        assert (lock is not None) is has_lock
        if has_lock:
            assert codec.decode_node_lock(lock).owned_by("default", "p")
        assert env.store.get("pods", "default", "p")["spec"].get("nodeName") == "n0"


def test_node_obj_helper_registers_devices():
    assert codec.REGISTER_ANNOTATION in node_obj("x")["metadata"]["annotations"]
