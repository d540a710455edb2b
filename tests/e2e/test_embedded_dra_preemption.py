"""End to end: preemption of a pod with DRA claims on `hami --role all --embedded --dra` (one node,
one A100 40GB), driven by real kubectl.

A low-priority pod asking 30000 MiB (the `--dra` webhook turns it into a claim template; the
resourceclaim controller makes the claim; DynamicResources allocates it) runs; a high-priority pod
asking 20000 MiB cannot be allocated next to it. The embedded kube-scheduler's preemption
(KEP-5690's dry run: the low pod's claim counts as released once it is off the node) deletes the
low pod, the resourceclaim controller deletes its claim, and the high pod runs on the node.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  priorityClassName: {priority}
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}
"""
CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("drapreempt"), "--dra", "--sim-nodes", "1",
                         "--sim-gpus", "1xNVIDIA A100-SXM4-40GB:40960", "--sim-pod-stop-seconds", "0",
                         "-v=4") as system:
        wait_until(lambda: system.slices() == 1, 60, what="the node's ResourceSlice")
        yield {"kubectl": system.run, "kubeconfig": system.kubeconfig, "log": system.log}


def _pod(run, name):
    out = run("get", "pod", name, "-o", "json", check=False)
    return json.loads(out) if out else None


def test_a_high_priority_claim_pod_preempts_the_low_priority_one_on_a_full_node(cluster):
    run = cluster["kubectl"]
    run("create", "-f", "-", stdin=CLASSES)
    run("create", "-f", "-", stdin=POD.format(name="low", priority="low", mem=30000))
    wait_until(lambda: (_pod(run, "low") or {}).get("status", {}).get("phase") == "Running", 60, what="low Running")
    run("create", "-f", "-", stdin=POD.format(name="high", priority="high", mem=20000))
    wait_until(lambda: (_pod(run, "high") or {}).get("status", {}).get("phase") == "Running", 90, what="high Running")
    assert _pod(run, "low") is None  # the victim is gone
    claims = json.loads(run("get", "resourceclaims", "-o", "json"))["items"]
    owners = {ref["name"] for c in claims for ref in c["metadata"].get("ownerReferences") or []}
    assert owners == {"high"}  # the victim's generated claim went with it
    (claim,) = claims
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"]["memory"] == str(20000 << 20)
