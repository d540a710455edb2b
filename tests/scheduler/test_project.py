"""The scheduler's cache projections (hami.scheduler.cache.project): every field a reader of the cached
pods and nodes uses survives (device requests, init-container release, PDB selection, /preempt
order, bind phase, placement, lock and handshake fields), what no reader uses is dropped
(managedFields, env, images, volumes, container statuses, node images and conditions), equal
parts are stored once and released when no object uses them, and the running scheduler's
informers hold the projections."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.config import Config
from hami.device import codec
from hami.kubesched import pdb
from hami.scheduler.admission.missed import created_at
from hami.scheduler.cache.handshake import gpu_allocatable
from hami.scheduler.cache.project import Shared, project_node, project_pod
from hami.scheduler.extender.verbs import pod_priority, start_time
from hami.scheduler.placement.usage import init_released
from hami.scheduler.role import make_requests_fn
from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import running_env


def full_pod(name: str = "p", node: str = "n1") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "42",
            "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-02T00:00:00Z",
            "labels": {"app": "train", "tier": "gpu"},
            "annotations": {codec.VGPU_NODE_ANNOTATION: node, codec.BIND_PHASE_ANNOTATION: "success",
                            "nvidia.com/use-gputype": "A100", "other": "x"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "rs"}],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": node, "schedulerName": "hami-scheduler", "priority": 7,
            "schedulingGroup": {"podGroupName": "g"},
            "resourceClaims": [{"name": "main-nvidia", "resourceClaimTemplateName": "hami-gpu-0123456789abcdef"}],
            "initContainers": [{"name": "init", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [{"name": "main", "image": "cuda", "env": [{"name": "A", "value": "b"}],
                            "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                            "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}}}],
            "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"operator": "Exists"}],
        },
        "status": {
            "phase": "Running", "startTime": "2026-01-01T00:00:05Z", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "init", "image": "busybox", "restartCount": 0,
                                       "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [{"name": "main", "state": {"running": {}}}],
            "resourceClaimStatuses": [{"name": "main-nvidia", "resourceClaimName": "p-main-nvidia-x1"}],
        },
    }


def test_pod_projection_keeps_every_read_field_and_drops_the_rest():
    pod = full_pod()
    p = project_pod(full_pod(), Shared())
    meta = p["metadata"]
    assert {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                                 "deletionTimestamp")} == {k: pod["metadata"][k] for k in meta}
    assert set(meta) == {"name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp"}
    assert p["spec"] == {
        "nodeName": "n1", "schedulerName": "hami-scheduler", "priority": 7, "schedulingGroup": {"podGroupName": "g"},
        "resourceClaims": [{"name": "main-nvidia", "resourceClaimTemplateName": "hami-gpu-0123456789abcdef"}],
        "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}}}],
    }
    assert p["status"] == {"phase": "Running", "startTime": "2026-01-01T00:00:05Z",
                           "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
                           "resourceClaimStatuses": [{"name": "main-nvidia", "resourceClaimName": "p-main-nvidia-x1"}]}
    assert "apiVersion" not in p and "kind" not in p


def test_a_pending_pod_keeps_its_creation_time_and_a_bound_one_does_not():
    """The missed-webhook watcher waits on an unbound pod's creationTimestamp from the cache (no GET);
    bound pods (nearly all of them) do not carry it."""
    pending = full_pod()
    del pending["spec"]["nodeName"]
    meta = project_pod(pending, Shared())["metadata"]
    assert meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert created_at(project_pod(full_pod(), Shared())) is None
    assert created_at({"metadata": meta}) == created_at(full_pod())


def test_readers_see_the_same_answers_on_the_projection():
    pod = full_pod()
    p = project_pod(full_pod(), Shared())
    requests = make_requests_fn(Config())
    assert requests(p) == requests(pod)
    assert init_released(p) is init_released(pod) is True
    assert (pod_priority(p), start_time(p)) == (pod_priority(pod), start_time(pod))
    budget = {"metadata": {"namespace": "team"}, "spec": {"selector": {"matchLabels": {"app": "train"}}}}
    assert pdb.selects(budget, p) and pdb.selects(budget, pod)


container = st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={
    "resources": st.fixed_dictionaries({}, optional={
        "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                                                   "nvidia.com/gpumem-percentage", "cpu"]),
                                  st.sampled_from(["0", "1", "2", "50", "4000", "x"]), max_size=4),
        "requests": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem"]),
                                    st.sampled_from(["1", "3000"]), max_size=2)}),
    "image": st.text(max_size=3)})
status_entry = st.fixed_dictionaries({"name": st.text(max_size=3)}, optional={"state": st.one_of(
    st.just({"running": {}}), st.builds(lambda c: {"terminated": {"exitCode": c, "reason": "r"}}, st.integers(0, 2)),
    st.just({"terminated": {}}))})


@settings(max_examples=150, deadline=None)
@given(st.lists(container, max_size=3), st.lists(container, max_size=2), st.lists(status_entry, max_size=3),
       st.sampled_from(["Pending", "Running", "Succeeded"]))
def test_projection_never_changes_what_the_scheduler_derives(containers, inits, statuses, phase):
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {"nvidia.com/nouse-gputype": "T4"}},
           "spec": {"containers": containers, "initContainers": inits, "nodeName": "n"},
           "status": {"phase": phase, "initContainerStatuses": statuses}}
    p = project_pod(orjson_copy(pod), Shared())
    requests = make_requests_fn(Config())
    try:
        want = requests(pod)
    except ValueError as exc:
        want = str(exc)
    try:
        got = requests(p)
    except ValueError as exc:
        got = str(exc)
    assert got == want
    assert init_released(p) == init_released(pod)
    assert p["status"]["phase"] == phase and p["spec"]["nodeName"] == "n"


def orjson_copy(obj):
    import orjson

    return orjson.loads(orjson.dumps(obj))


def test_node_projection_keeps_registration_handshake_and_counts():
    node = node_obj("n1", handshake="Requesting_2026-01-01 00:00:00", annotations={"hami.io/mutex.lock": "x"})
    node["status"]["images"] = [{"names": ["cuda"], "sizeBytes": 1}]
    node["status"]["nodeInfo"] = {"kubeletVersion": "v1.31"}
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    p = project_node(orjson_copy(node), Shared())
    assert p["metadata"]["annotations"] == node["metadata"]["annotations"]
    assert p["status"] == {"capacity": node["status"]["capacity"], "allocatable": node["status"]["allocatable"]}
    assert gpu_allocatable(p) == gpu_allocatable(node) == 20
    assert "managedFields" not in p["metadata"]


def test_equal_parts_are_stored_once_and_dropped_when_unused():
    shared = Shared(min_sweep=1)
    a, b = project_pod(full_pod("a"), shared), project_pod(full_pod("b"), shared)
    assert a["spec"]["containers"] is b["spec"]["containers"]
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["annotations"][codec.VGPU_NODE_ANNOTATION] is b["spec"]["nodeName"]  # interned
    other = project_pod({**full_pod("c"), "spec": {"containers": [{"name": "solo", "resources": {}}]}}, shared)
    assert other["spec"]["containers"] is not a["spec"]["containers"]
    held = len(shared)
    del a, b, other
    gc.collect()
    shared.sweep()
    assert len(shared) == 0 < held


def test_annotations_no_reader_uses_are_dropped_and_a_done_to_allocate_is_stored_once():
    shared = Shared()
    pods = []
    for name, to_allocate in (("a", ";"), ("b", ";"), ("c", "GPU-1,NVIDIA,4000,30:;")):
        pod = full_pod(name)
        pod["metadata"]["annotations"].update({
            codec.VGPU_TIME_ANNOTATION: "1790000000", codec.TO_ALLOCATE_ANNOTATION: to_allocate,
            "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}"})
        pods.append(project_pod(orjson_copy(pod), shared))
    a, b, c = (p["metadata"]["annotations"] for p in pods)
    want = {**full_pod()["metadata"]["annotations"], codec.TO_ALLOCATE_ANNOTATION: ";"}
    assert a == b == want  # every other key and value as listed, the tenant's own ("other") too
    assert a[codec.TO_ALLOCATE_ANNOTATION] is b[codec.TO_ALLOCATE_ANNOTATION]
    assert c[codec.TO_ALLOCATE_ANNOTATION] == "GPU-1,NVIDIA,4000,30:;"  # devices still to allocate: as listed
    assert codec.VGPU_TIME_ANNOTATION not in c and "kubectl.kubernetes.io/last-applied-configuration" not in c


def bound(name: str, node: str = "n1", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "schedulerName": "hami-scheduler",
                     "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}], **spec},
            "status": {"phase": "Running"}}


def test_equal_bound_specs_are_stored_once_and_any_difference_keeps_its_own():
    shared = Shared(min_sweep=1)
    a, b = project_pod(bound("a"), shared), project_pod(bound("b"), shared)
    assert a["spec"] is b["spec"] and a["spec"] == bound("a")["spec"] | {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    differing = [bound("c", node="n2"), bound("d", priority=5), bound("e", priority=None),
                 bound("f", containers=[{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]),
                 bound("g", schedulerName=None), bound("h", initContainers=[{"name": "i"}]),
                 bound("i", schedulingGroup={"podGroupName": "g"}), bound("j", priority=True)]
    specs = [project_pod(p, shared)["spec"] for p in differing]
    for pod, spec in zip(differing, specs, strict=True):
        assert spec is not a["spec"] and spec == project_pod(pod, Shared())["spec"]
    assert "priority" not in a["spec"] and specs[2]["priority"] is None  # a null is not an absent key
    assert specs[7]["priority"] is True
    pending = {**bound("k"), "spec": {**bound("k")["spec"], "nodeName": ""}}
    assert project_pod(pending, shared)["spec"] is not project_pod(pending, shared)["spec"]
    del a, b, specs, spec
    gc.collect()
    shared.sweep()
    assert len(shared) == 0


async def test_running_scheduler_caches_hold_projections(apiserver):
    async with running_env(apiserver, [node_obj("n1")]) as env:
        for name in ("a", "b"):
            pod = pod_obj(name, labels={"app": "x"})
            pod["metadata"]["managedFields"] = [{"manager": "test"}]
            pod["spec"]["containers"][0]["env"] = [{"name": "K", "value": "V"}]
            env.create_pod(pod)
        state = env.sched.state
        await eventually(lambda: state.pod("default", "a") is not None and state.pod("default", "b") is not None)
        a, b = state.pod("default", "a"), state.pod("default", "b")
        assert "managedFields" not in a["metadata"] and "env" not in a["spec"]["containers"][0]
        assert a["spec"]["containers"] is b["spec"]["containers"]
        assert "conditions" not in state.node("n1")["status"]
