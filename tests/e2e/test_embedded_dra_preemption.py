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
import os
import signal
import subprocess
import sys

import pytest

from tests.e2e.test_embedded import _wait
from tests.ports import free_ports
from tests.tools import find_kubectl

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
    state = tmp_path_factory.mktemp("drapreempt")
    ports = dict(zip(("api", "ext", "smetrics", "mmetrics", "ui"), free_ports(5), strict=True))
    cmd = [sys.executable, "-m", "hami.cli.main", "--role", "all", "--embedded", "--dra",
           "--sim-state-dir", str(state), "--sim-listen", f"127.0.0.1:{ports['api']}",
           "--http_bind", f"127.0.0.1:{ports['ext']}",
           "--scheduler-metrics-bind-address", f"127.0.0.1:{ports['smetrics']}",
           "--monitor-metrics-bind-address", f"127.0.0.1:{ports['mmetrics']}",
           "--ui-bind-address", f"127.0.0.1:{ports['ui']}",
           "--sim-nodes", "1", "--sim-gpus", "1xNVIDIA A100-SXM4-40GB:40960", "--sim-pod-stop-seconds", "0",
           "-v=4"]
    log = open(state / "hami.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kubeconfig = str(state / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    kubectl = find_kubectl()

    def run(*args, check=True, stdin=None):
        res = subprocess.run([kubectl, *args], env=env, capture_output=True, text=True, input=stdin, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res.stdout

    def published():
        out = run("get", "resourceslices", "-o", "json", check=False)
        return out and len(json.loads(out)["items"]) == 1

    try:
        _wait(lambda: proc.poll() is None and os.path.exists(kubeconfig), 60, what="kubeconfig")
        _wait(published, 60, what="the node's ResourceSlice")
        yield {"kubectl": run, "kubeconfig": kubeconfig, "log": state / "hami.log"}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _pod(run, name):
    out = run("get", "pod", name, "-o", "json", check=False)
    return json.loads(out) if out else None


def test_a_high_priority_claim_pod_preempts_the_low_priority_one_on_a_full_node(cluster):
    run = cluster["kubectl"]
    run("create", "-f", "-", stdin=CLASSES)
    run("create", "-f", "-", stdin=POD.format(name="low", priority="low", mem=30000))
    _wait(lambda: (_pod(run, "low") or {}).get("status", {}).get("phase") == "Running", 60, what="low Running")
    run("create", "-f", "-", stdin=POD.format(name="high", priority="high", mem=20000))
    _wait(lambda: (_pod(run, "high") or {}).get("status", {}).get("phase") == "Running", 90, what="high Running")
    assert _pod(run, "low") is None  # the victim is gone
    claims = json.loads(run("get", "resourceclaims", "-o", "json"))["items"]
    owners = {ref["name"] for c in claims for ref in c["metadata"].get("ownerReferences") or []}
    assert owners == {"high"}  # the victim's generated claim went with it
    (claim,) = claims
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"]["memory"] == str(20000 << 20)
