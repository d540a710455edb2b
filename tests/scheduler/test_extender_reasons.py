"""Every HAMi reason code reaches FailedNodes through the real /filter path (watch-fed cache,
HTTP, the embedded API server): CardTypeMismatch (type and vgpu-mode), CardUuidMismatch,
CardTimeSlicingExhausted, CardInsufficientMemory, CardInsufficientCore,
ExclusiveDeviceAllocateConflict, CardComputeUnitsExhausted, CardNotHealth, CardCordoned,
NumaNotFit, NodeInsufficientDevice, AllocatedCardsInsufficientRequest, ResourceQuotaNotFit,
node unregistered, and a bad scoring-weights annotation in Error."""

from __future__ import annotations

import pytest

from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo
from tests.kube.helpers import gpu_uuid, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env


def node(name, gpus=1, **kw):
    return node_obj(name, gpus, handshake=requesting_now(), **kw)


def user(name: str, node_name: str, mem: int, cores: int, ns: str = "default") -> dict:
    devs = codec.encode_pod_devices(((ContainerDevice(gpu_uuid(node_name, 0), "NVIDIA", mem, cores),),))
    p = pod_obj(name, ns, annotations={"hami.io/vgpu-node": node_name,
                                       "hami.io/vgpu-devices-allocated": devs,
                                       "hami.io/vgpu-devices-to-allocate": devs})
    p["spec"]["nodeName"] = node_name  # bound: counted (an unbound claim is not)
    return p


def sick_node() -> dict:
    n = node("sick")
    dev = DeviceInfo(id=gpu_uuid("sick", 0), count=10, devmem=40960, devcore=100, type="NVIDIA A100-SXM4-40GB",
                     mode="hami-core", health=False)
    n["metadata"]["annotations"][codec.REGISTER_ANNOTATION] = codec.encode_node_devices([dev])
    return n


@pytest.fixture
async def env(apiserver):
    nodes = [
        node("plain", 2), node("slices", count=1), node("core"), node("excl"), node("cu"), sick_node(),
        node("cordon", annotations={codec.CORDON_ANNOTATION: gpu_uuid("cordon", 0)}),
        node("numa", 2, numa=[0, 1]), node("partial", 2, annotations={codec.CORDON_ANNOTATION: gpu_uuid("partial", 1)}),
    ]
    store = apiserver.store
    store.create("namespaces", "", {"metadata": {"name": "q"}})
    store.create("resourcequotas", "q", {"metadata": {"name": "gpu", "namespace": "q"},
                                         "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}})
    for p in (user("u-slices", "slices", 10, 0), user("u-core", "core", 10, 50), user("u-excl", "excl", 10, 0),
              user("u-cu", "cu", 10, 100)):
        store.create("pods", "default", p)
    async with running_env(apiserver, nodes) as e:
        yield e


CASES = [
    ("type", dict(mem=10, annotations={"nvidia.com/use-gputype": "V100"}), "plain", "2/2 CardTypeMismatch"),
    ("nouse-type", dict(mem=10, annotations={"nvidia.com/nouse-gputype": "A100"}), "plain", "2/2 CardTypeMismatch"),
    ("mode", dict(mem=10, annotations={"nvidia.com/vgpu-mode": "mig"}), "plain", "2/2 CardTypeMismatch"),
    ("uuid", dict(mem=10, annotations={"nvidia.com/use-gpuuuid": "GPU-nope"}), "plain", "2/2 CardUuidMismatch"),
    ("slices", dict(mem=10), "slices", "1/1 CardTimeSlicingExhausted"),
    ("memory", dict(mem=10**6), "plain", "2/2 CardInsufficientMemory"),
    ("core", dict(mem=10, cores=60), "core", "1/1 CardInsufficientCore"),
    ("exclusive", dict(mem=10, cores=100), "excl", "1/1 ExclusiveDeviceAllocateConflict"),
    ("compute-units", dict(mem=10, cores=0), "cu", "1/1 CardComputeUnitsExhausted"),
    ("health", dict(mem=10), "sick", "1/1 CardNotHealth"),
    ("cordon", dict(mem=10), "cordon", "1/1 CardCordoned"),
    ("too-many", dict(gpus=3, mem=10), "plain", "NodeInsufficientDevice"),
    ("partial", dict(gpus=2, mem=10), "partial", "1/2 AllocatedCardsInsufficientRequest, 1/2 CardCordoned"),
    ("unregistered", dict(mem=10), "ghost", "node unregistered"),
]


@pytest.mark.parametrize(("kw", "target", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_reason_reaches_failed_nodes(env, kw, target, reason):
    pod = env.create_pod(pod_obj("p", **kw))
    out = await env.filter(pod, [target])
    assert out["Error"] == ""
    assert out["FailedNodes"] == {target: reason}


async def test_numa_bind_reason(env):
    pod = env.create_pod(pod_obj("p", gpus=2, mem=10, annotations={"nvidia.com/numa-bind": "true"}))
    out = await env.filter(pod, ["numa"])
    assert "NumaNotFit" in out["FailedNodes"]["numa"]


async def test_resource_quota_reason(env):
    pod = env.create_pod(pod_obj("p", "q", mem=2000))
    out = await env.filter(pod, ["plain"])
    assert out["FailedNodes"] == {"plain": "2/2 ResourceQuotaNotFit"}


async def test_bad_scoring_weights_is_an_error(env):
    pod = env.create_pod(pod_obj("p", mem=10, annotations={"hami.io/device-scoring-weights": "slot=x"}))
    out = await env.filter(pod, ["plain"])
    assert out["Error"].startswith("calcScore failed ") and out["Error"].endswith(" for pod p")


async def test_quota_metrics_are_exported(env):
    pod = env.create_pod(pod_obj("p", "q", mem=600))
    assert (await env.filter(pod, ["plain"]))["NodeNames"] == ["plain"]
    async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/metrics") as r:
        text = await r.text()
    assert 'hami_resource_quota_limit{namespace="q",quota_name="nvidia.com/gpumem",zone="vGPU"} 1000.0' in text
    assert 'hami_resource_quota_used{limit="1000",namespace="q",quota_name="nvidia.com/gpumem",zone="vGPU"} 600.0' \
        in text
    # Usage of a resource no quota limits: HAMi's used series with limit="0", and no limit series.
    assert 'hami_resource_quota_used{limit="0",namespace="q",quota_name="nvidia.com/gpucores",zone="vGPU"} 0.0' in text
    assert 'hami_resource_quota_limit{namespace="q",quota_name="nvidia.com/gpucores"' not in text
