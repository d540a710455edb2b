"""End to end: extended resources backed by DRA (KEP-5004) on `hami --role all --embedded --dra`, driven
by real kubectl, with no webhook in the way (`--force-overwrite-default-scheduler=false` and pods that
name default-scheduler: the webhook leaves them as written).

HAMi's DeviceClass gets `extendedResourceName: nvidia.com/gpu` (the chart's `dra.extendedResourceName`).
A pod asking `nvidia.com/gpu: 1` on a node where no device plugin advertises it is served as 1.36's
kube-scheduler serves it: the embedded loop creates the claim `<pod>-extended-resources-<suffix>`,
annotated `resource.kubernetes.io/extended-resource-claim: "true"`, owned by the pod, one request
`container-0-request-0` for a whole GPU; the pod's `status.extendedResourceClaimStatus` maps its
container to it; kubelet prepares it and the container gets the GPU (HAMi-core's env from the CDI
spec). Deleting the pod deletes the claim. Without the mapping the same pod stays Pending.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

DRIVER = "hami-core-gpu.project-hami.io"

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  schedulerName: default-scheduler
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1"}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("draext"), "--dra", "--force-overwrite-default-scheduler=false",
                         "--sim-nodes", "1", "--sim-gpus", "2xNVIDIA A100-SXM4-40GB:40960", "-v=2") as system:
        wait_until(lambda: system.slices() == 1, 60, what="the node's ResourceSlice")
        yield system.run


def _pod(run, name):
    return json.loads(run("get", "pod", name, "-o", "json"))


def _claims(run):
    return json.loads(run("get", "resourceclaims", "-o", "json"))["items"]


def test_without_the_mapping_a_gpu_pod_finds_no_node(cluster):
    run = cluster
    run("create", "-f", "-", stdin=POD.format(name="unmapped", ns="default"))

    def pending_unschedulable():
        conds = _pod(run, "unmapped")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

    # NodeResourcesFit: the node advertises no nvidia.com/gpu and no DeviceClass maps it
    try:
        wait_until(pending_unschedulable, 180, what="unmapped refused")
        assert not _pod(run, "unmapped")["spec"].get("nodeName")
    finally:
        run("delete", "pod", "unmapped", "--wait=true")


def test_a_mapped_extended_resource_gets_a_claim_kube_scheduler_creates(cluster):
    run = cluster
    cls = json.loads(run("get", "deviceclass", DRIVER, "-o", "json"))
    cls["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    run("replace", "-f", "-", stdin=json.dumps(cls))
    try:
        _mapped_pod_runs_with_its_claim(run)
    finally:  # the module's other test needs the class unmapped, whatever order the tests run in
        run("delete", "pod", "whole", "--ignore-not-found", "--wait=true")
        cls = json.loads(run("get", "deviceclass", DRIVER, "-o", "json"))
        cls["spec"].pop("extendedResourceName", None)
        run("replace", "-f", "-", stdin=json.dumps(cls))


def _mapped_pod_runs_with_its_claim(run) -> None:
    run("create", "-f", "-", stdin=POD.format(name="whole", ns="default"))
    wait_until(lambda: _pod(run, "whole")["status"].get("phase") == "Running", 60, what="whole Running")
    pod = _pod(run, "whole")
    assert "resourceClaims" not in pod["spec"]  # untouched by the webhook
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "cuda", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]
    (claim,) = [c for c in _claims(run) if c["metadata"]["name"] == status["resourceClaimName"]]
    assert claim["metadata"]["name"].startswith("whole-extended-resources-")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert owner["uid"] == pod["metadata"]["uid"] and owner["controller"] is True
    assert claim["spec"]["devices"]["requests"] == [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["request"] == "container-0-request-0" and result["driver"] == DRIVER
    assert claim["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]
    env = json.loads(run("get", "pod", "whole", "-o",
                         "jsonpath={.metadata.annotations.sim\\.hami\\.io/allocated-env}"))
    assert env["cuda"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    # counts only: no memory was asked, so the claim holds the whole card (the policy's default)
    assert result["consumedCapacity"]["memory"] == str(40960 << 20)
    run("delete", "pod", "whole", "--wait=true")
    wait_until(lambda: not any(c["metadata"]["name"] == status["resourceClaimName"] for c in _claims(run)), 60,
               what="the extended-resource claim deleted with its pod")


def test_kubernetes_own_quota_counts_the_gpus_of_pods_that_bypass_the_webhook(cluster):
    run = cluster
    run("create", "namespace", "kep-quota")
    run("create", "-f", "-", stdin="""
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpu, namespace: kep-quota}
spec:
  hard: {requests.nvidia.com/gpu: "1"}
""")
    run("create", "-f", "-", stdin=POD.format(name="first", ns="kep-quota"))
    first = json.loads(run("get", "pod", "first", "-n", "kep-quota", "-o", "json"))
    assert "resourceClaims" not in first["spec"]  # the webhook left it as written
    quota = json.loads(run("get", "resourcequota", "gpu", "-n", "kep-quota", "-o", "json"))
    assert quota["status"]["used"] == {"requests.nvidia.com/gpu": "1"}
    try:
        run("create", "-f", "-", stdin=POD.format(name="second", ns="kep-quota"))
    except AssertionError as exc:
        assert ('exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, '
                'limited: requests.nvidia.com/gpu=1') in str(exc), exc
    else:
        raise AssertionError("a second one-GPU pod was admitted past requests.nvidia.com/gpu: 1")
    run("delete", "pod", "first", "-n", "kep-quota", "--wait=true")
