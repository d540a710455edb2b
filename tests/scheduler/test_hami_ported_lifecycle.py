"""HAMi `pkg/scheduler/scheduler_pod_lifecycle_test.go`, ported to the scheduler's pod handler
(ClusterState.on_pod, fed the same events the pod informer delivers) and the usage index.

Covers Test_onAddPod_TerminatingPodReplayedIntoEmptyCache and
Test_onUpdatePod_TerminatingPodMissingFromCache (a terminating pod still holds its GPU and its
namespace quota usage), Test_onDelPod_CleansCachedAllocationWithoutAnnotations and
_CleansAnnotationlessTombstoneAndIsIdempotent (a delete is keyed by UID, annotations or not),
Test_onDelPod_AnnotationlessOldUIDDoesNotDeleteReplacement (a stale delete of an old UID leaves the
same-name replacement counted) and Test_onUpdatePod_TerminatedWithoutAssignmentRemovesCachedUsage.
Also the same through the watch: a pod deleted in the embedded API server releases its GPU.
Not ported: the AllocationDecodeFailed event tests (an undecodable allocation is logged here).
"""

from __future__ import annotations

import copy

import pytest

from hami.device import codec
from hami.device.model import ContainerDevice
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env

GPU0 = gpu_uuid("n0", 0)


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(1, gpus=1, mem=40960)) as e:
        e.apiserver.store.create("resourcequotas", "default", {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "default"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "100000", "limits.nvidia.com/gpucores": "1000"}}})
        await eventually(lambda: e.sched.state.index.quota_view("default") is not None)
        yield e


def terminating_pod(uid: str, name: str, ns: str = "default") -> dict:
    text = codec.encode_pod_devices([[ContainerDevice(GPU0, "NVIDIA", 20000, 100)]])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": uid, "name": name, "namespace": ns, "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {codec.VGPU_NODE_ANNOTATION: "n0", codec.ALLOCATED_ANNOTATION: text}},
            "spec": {"nodeName": "n0", "terminationGracePeriodSeconds": 3600, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def gpu0(env):
    d = env.sched.state.index.node("n0").by_id[GPU0]
    return d.used, d.usedmem, d.usedcores


def quota_used(env, ns="default"):
    return env.sched.state.index.quota_used(ns)


def stripped(pod: dict) -> dict:
    p = copy.deepcopy(pod)
    p["metadata"].pop("annotations", None)
    return p


@pytest.mark.parametrize("etype", ["ADDED", "MODIFIED"], ids=[
    "Test_onAddPod_TerminatingPodReplayedIntoEmptyCache", "Test_onUpdatePod_TerminatingPodMissingFromCache"])
async def test_terminating_pod_is_counted(env, etype):
    pod = terminating_pod("replay-uid", "long-graceful")
    env.sched.state.on_pod(etype, copy.deepcopy(pod) if etype == "MODIFIED" else None, pod)
    assert gpu0(env) == (1, 20000, 100)
    used = quota_used(env)
    assert (used["nvidia.com/gpumem"][0], used["nvidia.com/gpucores"][0]) == (20000, 100)
    env.sched.state.on_pod("DELETED", pod, None)
    assert gpu0(env) == (0, 0, 0)


@pytest.mark.parametrize("times", [1, 2], ids=[
    "Test_onDelPod_CleansCachedAllocationWithoutAnnotations",
    "Test_onDelPod_CleansAnnotationlessTombstoneAndIsIdempotent"])
async def test_delete_without_annotations_releases_by_uid(env, times):
    pod = terminating_pod("annotationless-uid", "annotationless")
    env.sched.state.on_pod("ADDED", None, pod)
    assert gpu0(env) == (1, 20000, 100)
    for _ in range(times):
        env.sched.state.on_pod("DELETED", stripped(pod), None)
    assert gpu0(env) == (0, 0, 0)
    used = quota_used(env)
    assert (used["nvidia.com/gpumem"][0], used["nvidia.com/gpucores"][0]) == (0, 0)


async def test_Test_onDelPod_AnnotationlessOldUIDDoesNotDeleteReplacement(env):
    old = terminating_pod("old-uid", "replaced-pod")
    new = terminating_pod("new-uid", "replaced-pod")
    env.sched.state.on_pod("ADDED", None, old)
    env.sched.state.on_pod("ADDED", None, new)
    assert gpu0(env) == (2, 40000, 200)
    env.sched.state.on_pod("DELETED", stripped(old), None)
    assert gpu0(env) == (1, 20000, 100)
    assert quota_used(env)["nvidia.com/gpumem"][0] == 20000
    assert env.sched.state.index.pod("new-uid") is not None and env.sched.state.index.pod("old-uid") is None


async def test_Test_onUpdatePod_TerminatedWithoutAssignmentRemovesCachedUsage(env):
    pod = terminating_pod("terminal-uid", "terminal")
    del pod["metadata"]["deletionTimestamp"]
    env.sched.state.on_pod("ADDED", None, pod)
    assert gpu0(env) == (1, 20000, 100)
    done = stripped(pod)
    done["status"]["phase"] = "Succeeded"
    env.sched.state.on_pod("MODIFIED", pod, done)
    assert gpu0(env) == (0, 0, 0)
    assert env.sched.state.index.pod("terminal-uid") is None


async def test_pod_deleted_in_the_api_server_releases_its_gpu(env):
    p = env.create_pod(pod_obj("p", mem=1000, cores=10))
    out = await env.filter(p, ["n0"])
    assert out["NodeNames"] == ["n0"]
    assert gpu0(env) == (1, 1000, 10)
    env.store.delete("pods", "default", "p")
    await eventually(lambda: gpu0(env) == (0, 0, 0))
