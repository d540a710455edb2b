"""End to end: Kubernetes 1.36 claims on `hami --role all --embedded --dra`, driven by real kubectl.

Hand-written ResourceClaims, as a user writes them for HAMi's driver, allocated by the embedded
kube-scheduler's structured allocator and prepared by hami's DRA plugin, until the pods run:

- `firstAvailable`: no H100 is published, so the claim gets its second subrequest (result
  `gpu/a100`), with the memory it asked for and one of the GPU's `shares`, and HAMi-core's limit;
- a second claim shares the same GPU (its own shareID, one more share);
- `adminAccess`: refused by the API server in a namespace without the admin-access label, and in
  one with it allocated on the GPU the others share (result `adminAccess: true`); the pod runs.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

DRIVER = "hami-core-gpu.project-hami.io"
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("dra136"), "--dra", "--sim-nodes", "1",
                         "--sim-gpus", "1xNVIDIA A100-SXM4-40GB:8000", "-v=2", results=True) as system:
        wait_until(lambda: system.slices() >= 1, 60, what="the node's ResourceSlice")
        yield system.run


def _claim(name: str, ns: str, request: dict) -> str:
    return json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                       "metadata": {"name": name, "namespace": ns}, "spec": {"devices": {"requests": [request]}}})


def _pod(name: str, ns: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {
        "containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                        "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}})


def _model(name: str) -> list[dict]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].productName == "{name}"'}}]


def _running(run, name: str, ns: str = "default") -> dict:
    def phase():
        pod = json.loads(run("get", "pod", name, "-n", ns, "-o", "json"))
        return pod if pod["status"].get("phase") == "Running" else None
    return wait_until(phase, 60, what=f"{ns}/{name} Running")


def _results(run, name: str, ns: str = "default") -> list[dict]:
    claim = json.loads(run("get", "resourceclaim", name, "-n", ns, "-o", "json"))
    return claim["status"]["allocation"]["devices"]["results"]


def test_first_available_shares_and_admin_access_run(cluster):
    run = cluster
    fa = {"name": "gpu", "firstAvailable": [
        {"name": "h100", "deviceClassName": DRIVER, "selectors": _model("NVIDIA H100 80GB HBM3")},
        {"name": "a100", "deviceClassName": DRIVER, "selectors": _model("NVIDIA A100-SXM4-40GB"),
         "capacity": {"requests": {"memory": "2000Mi"}}}]}
    run("create", "-f", "-", stdin=_claim("fa", "default", fa))
    run("create", "-f", "-", stdin=_pod("fa", "default"))
    pod = _running(run, "fa")
    (first,) = _results(run, "fa")
    assert first["request"] == "gpu/a100" and first["device"] == "hami-gpu-0" and first["shareID"]
    assert int(first["consumedCapacity"]["memory"]) == 2000 * MIB and first["consumedCapacity"]["shares"] == "1"
    env = json.loads(pod["metadata"]["annotations"]["sim.hami.io/allocated-env"])
    assert env["cuda"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"

    run("create", "-f", "-", stdin=_claim("second", "default", {"name": "gpu", "exactly": {
        "deviceClassName": DRIVER, "capacity": {"requests": {"memory": "1000Mi"}}}}))
    run("create", "-f", "-", stdin=_pod("second", "default"))
    _running(run, "second")
    (second,) = _results(run, "second")
    assert second["device"] == "hami-gpu-0" and second["shareID"] != first["shareID"]
    assert second["consumedCapacity"]["shares"] == "1"

    # Admin access: the namespace must carry the label; the device is the shared GPU. On a device
    # with allowMultipleAllocations the request's capacity must still fit what is free (upstream),
    # so a monitoring claim asks for the minimum.
    admin = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "adminAccess": True,
                                        "capacity": {"requests": {"memory": "1Mi"}}}}
    refused = run("create", "-f", "-", stdin=_claim("watch", "default", admin), check=False)
    assert refused.returncode != 0 and "adminAccess: Forbidden" in refused.stderr
    run("create", "namespace", "monitoring")
    run("label", "namespace", "monitoring", "resource.kubernetes.io/admin-access=true")
    run("create", "-f", "-", stdin=_claim("watch", "monitoring", admin))
    run("create", "-f", "-", stdin=_pod("watch", "monitoring"))
    _running(run, "watch", "monitoring")
    (watch,) = _results(run, "watch", "monitoring")
    assert watch["device"] == "hami-gpu-0" and watch["adminAccess"] is True
