"""Pure Allocate (hami.agent.allocate): every env var and mount HAMi sets for 1 container / 1 GPU,
2 containers, 1 container / 2 GPUs, init containers first, CUDA_DISABLE_CONTROL (Go ParseBool; only
where the node config allows it),
oversubscription, log level, disableCoreLimit, license mounts, MIG mode, preferred-allocation UUID
rewrite; the rewritten devices-to-allocate; errors for missing / malformed annotations, wrong
device counts and nothing left; choosing the pod (lock owner, else oldest allocating pod)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.agent import allocate as alloc
from hami.agent.allocate import AllocationError, Mount, plan_allocation
from hami.device import codec
from hami.device.model import ContainerDevice
from hami.device.nodeconfig import DeviceSettings

U1 = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
U2 = "GPU-91ab03c4-77de-4c0a-8b21-222222222222"
HOOK = "/usr/local"
UID = "7d9a0b1c-2e3f-4a5b-8c6d-0e1f2a3b4c5d"


def pod(to_allocate, containers=("main",), init=(), env=None, name="p1", **anns):
    def ctr(n):
        c = {"name": n}
        if env and n in env:
            c["env"] = [{"name": k, "value": v} for k, v in env[n].items()]
        return c

    spec = {"containers": [ctr(n) for n in containers], "nodeName": "n1"}
    if init:
        spec["initContainers"] = [ctr(n) for n in init]
    annotations = {alloc.ANN_TO_ALLOCATE: to_allocate, alloc.ANN_BIND_PHASE: "allocating",
                   alloc.ANN_BIND_TIME: "100", alloc.ANN_VGPU_NODE: "n1"}
    annotations.update(anns)
    return {"metadata": {"name": name, "namespace": "default", "uid": UID, "annotations": annotations},
            "spec": spec, "status": {"phase": "Pending"}}


def names():
    counter = itertools.count()
    return lambda: f"cache-{next(counter)}"


def plan(p, requests, settings=DeviceSettings(lib_cuda_log_level="1"), **kw):
    return plan_allocation(p, requests, settings, HOOK, new_cache_name=names(), **kw)


def base_mounts(container, preload=True):
    m = [
        Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
        Mount("/usr/local/vgpu", f"/usr/local/vgpu/containers/{UID}_{container}", False),
        Mount("/tmp/vgpulock", "/tmp/vgpulock", False),
    ]
    if preload:
        m.append(Mount("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload", True))
    return tuple(m)


def test_one_container_one_gpu_every_env_and_mount():
    p = plan(pod(f"{U1},NVIDIA,3000,30:;"), [[f"{U1}-0"]])
    (c,) = p.containers
    assert dict(c.envs) == {
        "NVIDIA_VISIBLE_DEVICES": U1,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/cache-0.cache",
        "LIBCUDA_LOG_LEVEL": "1",
    }
    assert c.mounts == base_mounts("main")
    assert c.cache_dir == f"/usr/local/vgpu/containers/{UID}_main"
    assert p.done and p.remaining_text == ";;"


def test_one_container_two_gpus_sets_limits_per_position_and_sm_of_first():
    p = plan(pod(f"{U1},NVIDIA,3000,30:{U2},NVIDIA,5000,50:;"), [[f"{U1}-1", f"{U2}-4"]])
    envs = p.containers[0].envs
    assert envs["NVIDIA_VISIBLE_DEVICES"] == f"{U1},{U2}"
    assert (envs["CUDA_DEVICE_MEMORY_LIMIT_0"], envs["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("3000m", "5000m")
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert "CUDA_DEVICE_MEMORY_LIMIT_2" not in envs


def test_same_gpu_twice_is_listed_once_in_visible_devices():
    p = plan(pod(f"{U1},NVIDIA,1000,10:{U1},NVIDIA,1000,10:;"), [["a", "b"]])
    assert p.containers[0].envs["NVIDIA_VISIBLE_DEVICES"] == U1


def test_two_containers_served_one_request_at_a_time_in_order():
    first = pod(f"{U1},NVIDIA,1000,10:;{U2},NVIDIA,2000,20:;", containers=("a", "b"))
    p1 = plan(first, [["x"]])
    assert p1.containers[0].container == "a" and p1.containers[0].envs["NVIDIA_VISIBLE_DEVICES"] == U1
    assert not p1.done
    assert p1.remaining_text == f";{U2},NVIDIA,2000,20:;;"
    second = pod(p1.remaining_text, containers=("a", "b"))
    p2 = plan(second, [["y"]])
    (c,) = p2.containers
    assert (c.container, c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], c.envs["CUDA_DEVICE_SM_LIMIT"]) == ("b", "2000m", "20")
    assert c.mounts == base_mounts("b")
    assert p2.done


def test_two_container_requests_in_one_call_get_distinct_cache_files():
    p = plan(pod(f"{U1},NVIDIA,1000,10:;{U2},NVIDIA,2000,20:;", containers=("a", "b")), [["x"], ["y"]])
    assert [c.container for c in p.containers] == ["a", "b"]
    caches = {c.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] for c in p.containers}
    assert len(caches) == 2 and p.done


def test_container_without_gpu_is_skipped_and_init_containers_come_first():
    p = plan(pod(f";{U1},NVIDIA,1000,10:;;", containers=("app", "gpu"), init=("setup",)), [["x"]])
    assert p.containers[0].container == "app"  # slot 1 = first app container after one init container
    p = plan(pod(f"{U1},NVIDIA,1000,10:;;;", containers=("app", "gpu"), init=("setup",)), [["x"]])
    assert p.containers[0].container == "setup"


@pytest.mark.parametrize(
    ("value", "preload"),
    [("true", False), ("1", False), ("True", False), ("false", True), ("yes", True), ("", True)],
    ids=["true", "one", "True", "false", "unparsable", "empty"],
)
def test_cuda_disable_control_true_drops_ld_so_preload_where_the_node_allows_it(value, preload):
    allowed = DeviceSettings(lib_cuda_log_level="1", allow_disable_control=True)
    p = plan(pod(f"{U1},NVIDIA,1000,10:;", env={"main": {"CUDA_DISABLE_CONTROL": value}}), [["x"]], allowed)
    assert p.containers[0].mounts == base_mounts("main", preload)
    # Without the operator's opt-in a tenant's env never drops the preload.
    p = plan(pod(f"{U1},NVIDIA,1000,10:;", env={"main": {"CUDA_DISABLE_CONTROL": value}}), [["x"]])
    assert p.containers[0].mounts == base_mounts("main", True)


def test_oversubscribe_disable_core_limit_and_no_log_level():
    s = DeviceSettings(memory_scaling=1.5, disable_core_limit=True, lib_cuda_log_level="")
    envs = plan(pod(f"{U1},NVIDIA,1000,10:;"), [["x"]], s).containers[0].envs
    assert envs["CUDA_OVERSUBSCRIBE"] == "true"
    assert envs["GPU_CORE_UTILIZATION_POLICY"] == "disable"
    assert "LIBCUDA_LOG_LEVEL" not in envs
    envs = plan(pod(f"{U1},NVIDIA,1000,10:;"), [["x"]], DeviceSettings(memory_scaling=1.0)).containers[0].envs
    assert "CUDA_OVERSUBSCRIBE" not in envs and "GPU_CORE_UTILIZATION_POLICY" not in envs


def test_license_and_versioned_library_mounts():
    p = plan(pod(f"{U1},NVIDIA,1000,10:;"), [["x"]], license_exists=True,
             lib_path="/usr/local/vgpu/libvgpu.so.v2.10")
    m = p.containers[0].mounts
    assert m[0] == Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so.v2.10", True)
    assert m[-2:] == (Mount("/tmp/license", "/usr/local/vgpu/license", True),
                      Mount("/usr/bin/vgpuvalidator", "/usr/local/vgpu/vgpuvalidator", True))


def test_mig_mode_sets_only_visible_devices():
    (c,) = plan(pod(f"{U1},NVIDIA,1000,10:;"), [["x"]], DeviceSettings(mode="mig")).containers
    assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": U1} and c.mounts == () and c.cache_dir == ""


def test_preferred_allocation_rewrites_uuids_from_kubelet_ids():
    s = DeviceSettings(enable_get_preferred_allocation=True)
    p = plan(pod(f"{U1},NVIDIA,1000,10:;"), [[f"{U2}-3"]], s)
    assert p.containers[0].envs["NVIDIA_VISIBLE_DEVICES"] == U2


@pytest.mark.parametrize(
    ("annotation", "requests", "message"),
    [
        (None, [["x"]], "has no hami.io/vgpu-devices-to-allocate"),
        (f"{U1},NVIDIA,abc,10:;", [["x"]], "bad hami.io/vgpu-devices-to-allocate"),
        (f"{U1}:;", [["x"]], "bad hami.io/vgpu-devices-to-allocate"),
        (f"{U1},NVIDIA,1000,10:;", [["x", "y"]], "device number not matched"),
        (f"{U1},NVIDIA,1000,10:{U2},NVIDIA,1,1:;", [["x"]], "has 2 device(s)"),
        (";;", [["x"]], "no devices left"),
        (f"{U1},NVIDIA,1000,10:;", [["x"], ["y"]], "no devices left"),
        (f";;{U1},NVIDIA,1000,10:;", [["x"]], "the pod has 1 container(s)"),
    ],
    ids=["missing", "bad-number", "bad-segment", "too-many-ids", "too-few-ids", "empty", "second-request",
         "slot-out-of-range"],
)
def test_bad_annotations_and_counts_raise_allocation_error(annotation, requests, message):
    p = pod(annotation or "")
    if annotation is None:
        del p["metadata"]["annotations"][alloc.ANN_TO_ALLOCATE]
    with pytest.raises(AllocationError, match="default/p1") as err:
        plan(p, requests)
    assert message in str(err.value)


def node(lock=None):
    anns = {alloc.ANN_NODE_LOCK: lock} if lock else {}
    return {"metadata": {"name": "n1", "annotations": anns}}


def test_lock_owner_parses_new_format_and_ignores_legacy_and_garbage():
    assert alloc.lock_owner(node("2026-08-21T06:20:39Z,default,gpu-pod-1")) == ("default", "gpu-pod-1")
    assert alloc.lock_owner(node("2026-08-21T06:20:39Z")) is None
    assert alloc.lock_owner(node("garbage")) is None
    assert alloc.lock_owner(node()) is None and alloc.lock_owner(None) is None


def test_allocating_pods_oldest_bind_first_and_filtered():
    old = pod(f"{U1},NVIDIA,1,1:;", name="old", **{alloc.ANN_BIND_TIME: "50"})
    new = pod(f"{U1},NVIDIA,1,1:;", name="new", **{alloc.ANN_BIND_TIME: "60"})
    done = pod(";;", name="done")
    failed = pod(f"{U1},NVIDIA,1,1:;", name="failed", **{alloc.ANN_BIND_PHASE: "failed"})
    other = pod(f"{U1},NVIDIA,1,1:;", name="other", **{alloc.ANN_VGPU_NODE: "n2"})
    got = alloc.allocating_pods([new, done, failed, other, old], "n1")
    assert [p["metadata"]["name"] for p in got] == ["old", "new"]


@given(st.lists(st.lists(st.tuples(st.sampled_from([U1, U2]), st.integers(0, 80000), st.integers(0, 100)),
                         max_size=3), min_size=1, max_size=4))
def test_serving_every_slot_in_turn_leaves_nothing_and_sets_limits(slots):
    text = codec.encode_pod_devices(
        tuple(tuple(ContainerDevice(u, "NVIDIA", m, c) for u, m, c in s) for s in slots))
    containers = tuple(f"c{i}" for i in range(len(slots) + 1))
    p = pod(text, containers=containers)
    served = 0
    for s in slots:
        if not s:
            continue
        result = plan(p, [["id"] * len(s)])
        (c,) = result.containers
        assert [c.envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(len(s))] == [f"{m}m" for _, m, _ in s]
        assert c.envs["CUDA_DEVICE_SM_LIMIT"] == str(s[0][2])
        p = pod(result.remaining_text, containers=containers)
        served += 1
    assert not alloc.has_devices_left(p)
