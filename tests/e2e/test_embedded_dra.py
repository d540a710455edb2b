"""End to end in DRA mode: `hami --role all --embedded --dra` as a subprocess, driven by real kubectl.

Covers: a pod written as today (`nvidia.com/gpu: 1`, `nvidia.com/gpumem: 4000`) goes through the
webhook's claim template, the resourceclaim controller, the DynamicResources allocation, the kubelet
plugin's NodePrepareResources over its gRPC socket and the CDI spec, and runs with
`CUDA_DEVICE_MEMORY_LIMIT_0=4000m` as in device-plugin mode, its container status carrying the
device's health from the plugin's health stream (`allocatedResourcesStatus`); a second pod shares the GPU up to its
memory; a third stays Pending with a PodScheduled message naming its claim and the memory; deleting
the first unprepares it (its CDI spec goes), deletes its claim, and the third then runs;
`kubectl get resourceslices,resourceclaims,deviceclasses` lists them; `hami doctor pod` explains
the pending one; the monitor's /metrics shows a DRA pod's hami_vgpu_memory_used_bytes (read from its
claim's cache dir, `<hook>/vgpu/claims/<claim uid>/`) under its pod, namespace and container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "4000"}}
"""


@pytest.fixture(scope="module")
def dra(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("dra"), "--dra", "--sim-nodes", "1",
                         "--sim-gpus", "1xNVIDIA A100-SXM4-40GB:8000", "-v=2") as system:
        wait_until(lambda: system.slices() == 1, 60, what="the node's ResourceSlice")
        yield {"kubectl": system.run, "state": system.state, "env": system.env,
               "monitor": f"127.0.0.1:{system.ports['mmetrics']}"}


def _pod(run, name):
    return json.loads(run("get", "pod", name, "-o", "json"))


def test_claims_share_a_gpu_and_deletion_frees_it(dra):
    try:
        _claims_share_a_gpu(dra)
    finally:
        _delete_pods(dra["kubectl"], "p1", "p2", "p3")  # leave the cluster as this test found it, pass or fail


def _claims_share_a_gpu(dra) -> None:
    run, state = dra["kubectl"], dra["state"]
    for name in ("p1", "p2"):
        run("create", "--validate=false", "-f", "-", stdin=POD.format(name=name))
    for name in ("p1", "p2"):
        wait_until(lambda n=name: _pod(run, n)["status"].get("phase") == "Running", 30, what=f"{name} Running")
    env = json.loads(run("get", "pod", "p1", "-o", "jsonpath={.metadata.annotations.sim\\.hami\\.io/allocated-env}"))
    assert env["cuda"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert env["cuda"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    p1 = _pod(run, "p1")
    assert p1["metadata"]["labels"]["hami.io/dra"] == "true"
    # kubelet's health stream from the plugin, in the container's status (KEP-4680)
    [status] = p1["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    assert status["name"] == "claim:cuda-nvidia" and status["resources"] == [
        {"resourceID": "hami-core-gpu.project-hami.io/gpu-node-1/hami-gpu-0", "health": "Healthy"}]
    claim_name = p1["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = json.loads(run("get", "resourceclaim", claim_name, "-o", "json"))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"]["memory"] == str(4000 << 20) and result["shareID"]
    assert claim["status"]["reservedFor"][0]["uid"] == p1["metadata"]["uid"]
    cdi_dir = state / "nodes" / "1" / "cdi"
    assert any(claim["metadata"]["uid"] in f for f in os.listdir(cdi_dir))

    run("create", "--validate=false", "-f", "-", stdin=POD.format(name="p3"))

    def refused():
        for c in _pod(run, "p3")["status"].get("conditions") or []:
            # first "waiting for the resource claim controller", then the allocator's verdict
            if c["type"] == "PodScheduled" and c["status"] == "False" and "cannot allocate" in c["message"]:
                return c["message"]
        return None
    message = wait_until(refused, 30, what="p3 unschedulable")
    assert "cannot allocate all claims: claim default/p3-cuda-nvidia-" in message
    assert "not enough free memory on any matching device" in message

    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/p3", "--json"],
                         env=dra["env"], capture_output=True, text=True, timeout=60)
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["leaf"] == "dra-cannot-allocate", res.stderr
    assert "not enough free memory on any matching device" in doc["summary"]
    assert any(e.startswith("gpu-node-1: gpu-node-1/hami-gpu-0: memory 4000Mi requested, 0 of 8000Mi free")
               for e in doc["evidence"]), doc["evidence"]
    assert "hami whatif replays pods with claims through this allocator" in doc["whatif"]

    out = run("get", "resourceslices,resourceclaims,deviceclasses")
    assert "resourceslice.resource.k8s.io/gpu-node-1-hami-core-gpu.project-hami.io" in out
    assert "deviceclass.resource.k8s.io/hami-core-gpu.project-hami.io" in out
    assert out.count("allocated,reserved") == 2 and "pending" in out

    run("delete", "pod", "p1")
    wait_until(lambda: not any(claim["metadata"]["uid"] in f for f in os.listdir(cdi_dir)), 30, what="p1 unprepared")
    wait_until(lambda: claim_name not in run("get", "resourceclaims"), 30, what="p1's claim deleted")
    wait_until(lambda: _pod(run, "p3")["status"].get("phase") == "Running", 30, what="p3 Running after p1 left")


def _delete_pods(run, *names: str) -> None:
    """Delete the pods and wait until their claims are gone (their GPU shares free for the next test)."""
    run("delete", "pod", *names, "--wait=true", "--ignore-not-found")
    wait_until(lambda: not any(c["metadata"]["name"].startswith(tuple(f"{n}-" for n in names))
                               for c in json.loads(run("get", "resourceclaims", "-o", "json"))["items"]),
               30, what=f"the claims of {', '.join(names)} deleted")


def test_monitor_reports_a_dra_pods_usage_under_its_pod(dra):
    run = dra["kubectl"]
    run("create", "--validate=false", "-f", "-", stdin=POD.format(name="m1"))  # its own pod, whatever ran before
    try:
        _monitor_reports(dra, run)
    finally:
        _delete_pods(run, "m1")


def _monitor_reports(dra, run) -> None:
    wait_until(lambda: _pod(run, "m1")["status"].get("phase") == "Running", 30, what="m1 Running")
    running = [_pod(run, "m1")]
    name = running[0]["metadata"]["name"]
    claim_uid = json.loads(run("get", "resourceclaim", running[0]["status"]["resourceClaimStatuses"][0][
        "resourceClaimName"], "-o", "json"))["metadata"]["uid"]
    assert os.path.isdir(dra["state"] / "usr-local" / "vgpu" / "claims" / claim_uid)

    def samples():
        with urllib.request.urlopen(f"http://{dra['monitor']}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return {(s.name, s.labels.get("pod")): s for f in text_string_to_metric_families(text) for s in f.samples
                if s.labels.get("namespace") == "default"}
    got = wait_until(lambda: samples().get(("hami_vgpu_memory_used_bytes", name)) and samples(), 20,
                     what=f"{name}'s usage on /metrics")
    used = got[("hami_vgpu_memory_used_bytes", name)]
    assert used.labels["container"] == "cuda" and used.labels["device_uuid"].startswith("GPU-")
    assert 0 < used.value <= 4000 << 20
    assert got[("hami_vgpu_memory_limit_bytes", name)].value == 4000 << 20
