"""The mutating webhook as a pure function (hami.scheduler.admission.webhook).

Covers (spec §3.4, HAMi `pkg/scheduler/webhook.go` and the MutateAdmission tests of
`pkg/device/nvidia/device_test.go`): AdmissionReview v1 and v1beta1 echoing, base64 JSONPatch
that reproduces the mutated pod, schedulerName, exclusive default gpucores=100 (the
TestMutateAdmissionDefaultsExclusiveCore table), defaultGPUNum, priority and gpuCorePolicy env,
runtimeClassName, overwriteEnv, denials (no containers, privileged, nodeName, quota),
gpumem-percentage range errors, foreign schedulers left alone, Kubernetes quantities.
"""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

from hami.device.model import NvidiaConfig
from hami.scheduler.admission.webhook import (
    WebhookError,
    WebhookSettings,
    mutate,
    mutate_pod,
    quantity_int,
    quantity_value,
)
from hami.scheduler.placement.usage import Quota, QuotaView

S = WebhookSettings()


def pod(*containers, init=(), **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": list(containers), "initContainers": list(init), **spec}}


def ctr(name="c", limits=None, requests=None, **extra):
    res = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    return {"name": name, "resources": res, **extra}


def review(obj, version="admission.k8s.io/v1"):
    return {"apiVersion": version, "kind": "AdmissionReview",
            "request": {"uid": "uid-1", "namespace": "default", "operation": "CREATE", "object": obj}}


def patched(obj, out):
    resp = out["response"]
    if "patch" not in resp:
        return obj
    ops = json.loads(base64.b64decode(resp["patch"]))
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_gpu_pod_gets_scheduler_and_exclusive_cores(version):
    obj = pod(ctr(limits={"nvidia.com/gpu": "1"}))
    out = mutate(review(obj, version), S)
    assert out["apiVersion"] == version and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == "uid-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    new = patched(obj, out)
    assert new["spec"]["schedulerName"] == "hami-scheduler"
    assert new["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"


EXCLUSIVE = [
    ("exclusive via percentage", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, None, "100"),
    ("exclusive via percentage in requests only", None, {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"},
     "100"),
    ("non-exclusive percentage", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, None, None),
    ("no memory fields defaults to exclusive", {"nvidia.com/gpu": "1"}, None, "100"),
    ("explicit cores remains unchanged", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "70"}, None, "70"),
    ("memory size present treated as shareable", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}, None, None),
]


@pytest.mark.parametrize("name,limits,requests,want", EXCLUSIVE, ids=[e[0] for e in EXCLUSIVE])
def test_exclusive_core_default_table(name, limits, requests, want):
    d = mutate_pod(pod(ctr(limits=limits, requests=requests)), S)
    assert d.allowed
    got = (d.pod["spec"]["containers"][0]["resources"].get("limits") or {}).get("nvidia.com/gpucores")
    assert got == want


def test_explicit_cores_in_requests_stay_in_requests():
    d = mutate_pod(pod(ctr(requests={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "55"})), S)
    res = d.pod["spec"]["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpucores"] == "55" and "nvidia.com/gpucores" not in (res.get("limits") or {})


@pytest.mark.parametrize("res", ["nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage"])
def test_default_gpu_num_is_added_when_only_memory_or_cores_given(res):
    d = mutate_pod(pod(ctr(limits={res: "1"})), S)
    assert d.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert d.pod["spec"]["schedulerName"] == "hami-scheduler"


def test_no_gpu_pod_is_left_alone():
    obj = pod(ctr(limits={"cpu": "1"}))
    out = mutate(review(obj), S)
    assert out["response"]["allowed"] is True and "patch" not in out["response"]


def test_priority_and_core_policy_env():
    s = WebhookSettings(nvidia=NvidiaConfig(gpu_core_policy="force"))
    d = mutate_pod(pod(ctr(limits={"nvidia.com/gpu": "1", "nvidia.com/priority": "1"})), s)
    env = d.pod["spec"]["containers"][0]["env"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in env
    assert {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"} in env


def test_runtime_class_and_overwrite_env():
    s = WebhookSettings(nvidia=NvidiaConfig(runtime_class_name="nvidia", overwrite_env=True))
    d = mutate_pod(pod(ctr("g", limits={"nvidia.com/gpu": "1"}), ctr("plain", limits={"cpu": "1"})), s)
    assert d.pod["spec"]["runtimeClassName"] == "nvidia"
    assert d.pod["spec"]["containers"][1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    d = mutate_pod(pod(ctr("g", limits={"nvidia.com/gpu": "1"}), runtimeClassName="mine"), s)
    assert d.pod["spec"]["runtimeClassName"] == "mine"


def test_init_containers_are_mutated_too():
    d = mutate_pod(pod(ctr(limits={"cpu": "1"}), init=[ctr("i", limits={"nvidia.com/gpu": "1"})]), S)
    assert d.pod["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"


@pytest.mark.parametrize("pct,ok", [(0, True), (100, True), (101, False), (150, False), (-1, False)])
def test_gpumem_percentage_range(pct, ok):
    obj = pod(ctr("test", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": str(pct)}))
    out = mutate(review(obj), S)
    assert out["response"]["allowed"] is ok
    if not ok:
        assert out["response"]["status"]["code"] == 500
        assert out["response"]["status"]["message"] == (
            f"invalid nvidia.com/gpumem-percentage value {pct} in container test: "
            "must be an integer between 0 and 100")


def test_denials():
    cases = [
        (pod(), "pod has no containers"),
        (pod(ctr("c", limits={"nvidia.com/gpu": "1"}, securityContext={"privileged": True})),
         "container c is privileged"),
        (pod(ctr(limits={"nvidia.com/gpu": "1"}), nodeName="n1"), "pod has node assigned"),
    ]
    for obj, msg in cases:
        resp = mutate(review(obj), S)["response"]
        assert resp["allowed"] is False and resp["status"]["message"] == msg and resp["status"]["code"] == 403


def test_privileged_container_without_gpu_is_fine():
    d = mutate_pod(pod(ctr("c", limits={"cpu": "1"}, securityContext={"privileged": True})), S)
    assert d.allowed


def test_any_privileged_container_in_a_gpu_pod_is_denied():
    obj = pod(ctr("gpu", limits={"nvidia.com/gpu": "1"}),
              init=[ctr("setup", limits={"cpu": "1"}, securityContext={"privileged": True})])
    resp = mutate(review(obj), S)["response"]
    assert resp["allowed"] is False and resp["status"]["message"] == "container setup is privileged"


def test_foreign_scheduler_is_left_alone_but_default_is_overwritten():
    out = mutate(review(pod(ctr(limits={"nvidia.com/gpu": "1"}), schedulerName="volcano")), S)
    assert out["response"]["allowed"] is True and "patch" not in out["response"]
    assert out["response"]["status"]["message"] == "pod already has different scheduler assigned"
    d = mutate_pod(pod(ctr(limits={"nvidia.com/gpu": "1"}), schedulerName="default-scheduler"), S)
    assert d.pod["spec"]["schedulerName"] == "hami-scheduler"
    s = WebhookSettings(force_overwrite_default_scheduler=False)
    d = mutate_pod(pod(ctr(limits={"nvidia.com/gpu": "1"}), schedulerName="default-scheduler"), s)
    assert d.pod is None and d.allowed


def test_resource_quota_denial_uses_max_of_init_and_app_sum():
    quota = QuotaView(Quota(used=0, limit=4000), None)
    ok = pod(ctr("a", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
             ctr("b", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
             init=[ctr("i", limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000"})])
    assert mutate(review(ok), S, quota=lambda ns: quota)["response"]["allowed"] is True
    bad = pod(ctr("a", limits={"nvidia.com/gpu": "3", "nvidia.com/gpumem": "2000"}))
    resp = mutate(review(bad), S, quota=quota)["response"]
    assert resp["allowed"] is False and resp["status"]["message"] == "exceeding resource quota"


def test_malformed_review_raises_naming_the_field():
    with pytest.raises(WebhookError, match="request"):
        mutate({"apiVersion": "admission.k8s.io/v1"}, S)
    with pytest.raises(WebhookError, match="apiVersion"):
        mutate({"apiVersion": "v2", "request": {}}, S)
    resp = mutate({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "x", "object": "nope"}}, S)["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400


@pytest.mark.parametrize("text,value,exact", [
    ("1", 1, 1), (2, 2, 2), ("100m", 1, None), ("1k", 1000, 1000), ("1Ki", 1024, 1024),
    ("1.5", 2, None), ("1e3", 1000, 1000), ("16Gi", 16 * 2**30, 16 * 2**30), ("x", None, None),
])
def test_quantities(text, value, exact):
    assert quantity_value(text) == value
    assert quantity_int(text) == exact
