"""HAMi v2.10 `pkg/scheduler/webhook_test.go`, ported to hami.scheduler.admission.webhook.mutate.

Covers TestHandle, TestPodHasNodeName, TestPodHasDifferentScheduler, TestFitResourceQuota (the NVIDIA
cases, plus a vendor resource we do not handle passing), TestNonGPUPodAllowedAdmission,
TestEmptyContainersDenied, TestSchedulerNameEmptyNoOverwrite, TestPrivilegedContainerDenied and
TestMutateAdmissionMultiContainerAndInitContainers, each through a whole AdmissionReview and its
base64 JSONPatch.
"""

from __future__ import annotations

import base64
import json

import pytest

from hami.device.model import NvidiaConfig
from hami.scheduler.admission.webhook import WebhookSettings, mutate
from hami.scheduler.placement.usage import Quota, QuotaView

HAMI_IO = NvidiaConfig(resource_count_name="hami.io/gpu", resource_memory_name="hami.io/gpumem",
                       resource_memory_percentage_name="hami.io/gpumem-percentage",
                       resource_core_name="hami.io/gpucores", default_memory=0, default_cores=0, default_gpu_num=1)
NVIDIA = NvidiaConfig(default_memory=0, default_cores=0, default_gpu_num=1, memory_factor=1)


def settings(nvidia=HAMI_IO, force=True) -> WebhookSettings:
    return WebhookSettings(scheduler_name="hami-scheduler", force_overwrite_default_scheduler=force, nvidia=nvidia)


def pod(containers, *, init=None, ns="default", name="test-pod", **spec) -> dict:
    s = {"containers": containers, **spec}
    if init is not None:
        s["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": s}


def ctr(name="container1", limits=None, privileged=None) -> dict:
    c: dict = {"name": name, "resources": {"limits": dict(limits)} if limits is not None else {}}
    if privileged is not None:
        c["securityContext"] = {"privileged": privileged}
    return c


def admit(obj, s: WebhookSettings, quota=None) -> dict:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "test-uid", "namespace": obj["metadata"]["namespace"],
                          "name": obj["metadata"]["name"], "operation": "CREATE", "object": obj}}
    resp = mutate(review, s, quota)["response"]
    assert resp["uid"] == "test-uid"
    return resp


def patches(resp) -> list[dict]:
    return json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []


def test_TestHandle_gpu_pod_is_allowed():
    resp = admit(pod([ctr(limits={"nvidia.com/gpu": "1"})]), settings(NVIDIA))
    assert resp["allowed"] is True
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patches(resp)


def test_TestPodHasNodeName_is_denied():
    resp = admit(pod([ctr(limits={"hami.io/gpu": "1"})], nodeName="test-node"), settings())
    assert resp["allowed"] is False
    assert patches(resp) == []


def test_TestPodHasDifferentScheduler_is_allowed_untouched():
    resp = admit(pod([ctr(limits={"hami.io/gpu": "1"})], schedulerName="different-scheduler"), settings())
    assert resp["allowed"] is True
    assert patches(resp) == []


QUOTA = QuotaView(mem=Quota(used=1000, limit=2000), cores=Quota(used=200, limit=400))


@pytest.mark.parametrize(("limits", "fit"), [
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}, True),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}, False),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"}, False),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "400"}, True),
    ({"huawei.com/Ascend910B": "1", "huawei.com/Ascend910B-memory": "1024"}, True),
], ids=["TestFitResourceQuota/quota passed", "TestFitResourceQuota/quota exceeded",
        "TestFitResourceQuota/request multiple gpus", "TestFitResourceQuota/request multiple gpus within quota",
        "TestFitResourceQuota/request ascend"])
def test_TestFitResourceQuota(limits, fit):
    obj = pod([ctr(limits=limits)], schedulerName="hami-scheduler")
    seen = []

    def quota(ns):
        seen.append(ns)
        return QUOTA if ns == "default" else None

    resp = admit(obj, settings(NVIDIA), quota)
    assert resp["allowed"] is fit
    if not fit:
        assert resp["status"]["code"] == 403 and "quota" in resp["status"]["message"]
        assert seen == ["default"]


def test_TestNonGPUPodAllowedAdmission():
    resp = admit(pod([ctr("cpu-only", limits={"cpu": "1", "memory": "256Mi"})], name="non-gpu-pod"),
                 settings(force=False))
    assert resp["allowed"] is True
    assert patches(resp) == []


def test_TestEmptyContainersDenied():
    resp = admit(pod([], name="empty-pod"), settings())
    assert resp["allowed"] is False


def test_TestSchedulerNameEmptyNoOverwrite_injects_scheduler_name():
    resp = admit(pod([ctr(limits={"hami.io/gpu": "1"}, privileged=None)]), settings(force=False))
    assert resp["allowed"] is True
    ops = [p for p in patches(resp) if p["path"] == "/spec/schedulerName" and p["op"] in ("add", "replace")]
    assert [p["value"] for p in ops] == ["hami-scheduler"]


PRIVILEGED_CASES = [
    (pod([ctr("privileged", privileged=True)], name="privileged-pod"), True),
    (pod([ctr("privileged-sidecar", privileged=True), ctr("gpu-workload", limits={"hami.io/gpu": "1"})],
         name="mixed-pod"), False),
    (pod([ctr("gpu-workload", limits={"hami.io/gpu": "1"})], init=[ctr("privileged-init", privileged=True)],
         name="init-privileged-pod"), False),
    (pod([ctr("privileged", privileged=True)], name="other-scheduler-pod", schedulerName="other-scheduler"), True),
]


@pytest.mark.parametrize(("obj", "allowed"), PRIVILEGED_CASES, ids=[
    "TestPrivilegedContainerDenied/privileged container only without gpu",
    "TestPrivilegedContainerDenied/privileged sidecar with gpu workload",
    "TestPrivilegedContainerDenied/privileged init container with gpu workload",
    "TestPrivilegedContainerDenied/privileged pod with different scheduler",
])
def test_TestPrivilegedContainerDenied(obj, allowed):
    resp = admit(obj, settings())
    assert resp["allowed"] is allowed
    if not allowed:
        assert patches(resp) == []
        assert "is privileged" in resp["status"]["message"]


def test_TestMutateAdmissionMultiContainerAndInitContainers():
    obj = pod([ctr("app-main", limits={"nvidia.com/gpu": "1"}), ctr("sidecar-logging", limits={})],
              init=[ctr("init-downloader", limits={"nvidia.com/gpu": "1"})], name="multi-container-init-pod")
    resp = admit(obj, settings(NVIDIA))
    assert resp["allowed"] is True
    paths = [p["path"] for p in patches(resp)]
    assert paths, "expected JSON patches"
    assert any(p.startswith("/spec/initContainers/0") for p in paths)
    assert any(p.startswith("/spec/containers/0") for p in paths)
    assert not any(p.startswith("/spec/containers/1") for p in paths)
