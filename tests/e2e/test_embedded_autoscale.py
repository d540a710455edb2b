"""End to end: node groups on `hami --role all --embedded`, grown and shrunk by the embedded Cluster
Autoscaler stand-in (hami.sim.autoscaler), which decides with kube-scheduler's in-tree filters only.

Covers, on one group `pool:1:2:1xA100` (each node one 40 GiB GPU, its node agent like every node's):
* with `--report-node-capacity`: a Job's GPU-share pod that fits no existing node (30000 MiB where
  19960 are left) makes the group grow by one node, and runs there; the autoscaler keeps that node
  while the pod fits no other node by the in-tree filters (the reported allocatable says so), and
  once room appears elsewhere drains it (the pod is evicted, recreated by the Job controller, placed
  on the other node) and removes it;
* without the flag the same pod never triggers a scale-up: the group's template, a copy of its node,
  carries no nvidia.com/gpumem, and the pod gets Cluster Autoscaler's NotTriggerScaleUp saying so,
  while the group stays at one node; `hami doctor pod` says why, and `hami whatif --scale-up` counts
  no node for Cluster Autoscaler where HAMi would use one.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest
import yaml

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

GROUP = "pool:1:2:1xNVIDIA A100-SXM4-40GB:40960"
POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: cuda
    image: cuda
    resources: {{limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}}}
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: default}}
spec:
  backoffLimit: 6
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: cuda
        image: cuda
        resources: {{limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}}}
"""


@contextlib.contextmanager
def embedded_cluster(tmp_path, *extra):
    """The embedded system with the node group; yields its kubectl, whose `env` reaches the cluster."""
    with embedded_system(tmp_path, "--sim-nodes", "0", "--sim-node-group", GROUP, "--sim-scale-down-unneeded", "1s",
                         "--sim-pod-stop-seconds", "0.2s", *extra) as system:
        run = system.run
        run.env = system.env
        yield run


def _pod(run, name):
    return json.loads(run("get", "pod", name, "-o", "json"))


def _running_on(run, name):
    pod = _pod(run, name)
    return pod["spec"].get("nodeName") if pod["status"].get("phase") == "Running" else None


def _nodes(run):
    return sorted(n["metadata"]["name"] for n in json.loads(run("get", "nodes", "-o", "json"))["items"])


def _status(run):
    cm = json.loads(run("get", "configmap", "-n", "kube-system", "cluster-autoscaler-status", "-o", "json"))
    return yaml.safe_load(cm["data"]["status"])


def _job_pod(run, job):
    pods = json.loads(run("get", "pods", "-l", f"job-name={job}", "-o", "json"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") == "Running"]
    return live[0] if len(live) == 1 else None


def _events(run, pod, reason):
    out = run("get", "events", "-n", "default", "--field-selector",
              f"involvedObject.name={pod},reason={reason}", "-o", "json")
    return [e["message"] for e in json.loads(out)["items"]]


def test_with_reported_capacity_a_pending_share_pod_grows_the_group_and_the_node_goes_when_unneeded(tmp_path):
    with embedded_cluster(tmp_path, "--report-node-capacity") as run:
        wait_until(lambda: _nodes(run) == ["pool-1"], 60, what="the group at its min size")
        node = wait_until(lambda: (lambda n: n if n["status"]["allocatable"].get("nvidia.com/gpumem") else None)(
            json.loads(run("get", "node", "pool-1", "-o", "json"))), 60, what="pool-1 reporting its capacity")
        assert node["status"]["allocatable"]["nvidia.com/gpumem"] == "40960"
        assert node["status"]["allocatable"]["nvidia.com/gpucores"] == "100"
        for name, mem in (("first", 20000), ("keeper", 1000)):
            run("apply", "--validate=false", "-f", "-", stdin=POD.format(name=name, mem=mem))
            assert wait_until(lambda n=name: _running_on(run, n), 120, what=f"{name} Running") == "pool-1"

        # 19960 MiB left on pool-1: the Job's pod needs a new node, and gets one
        run("apply", "--validate=false", "-f", "-", stdin=JOB.format(name="second", mem=30000))
        pod = wait_until(lambda: _job_pod(run, "second"), 120, what="second's pod Running")
        assert pod["spec"]["nodeName"] == "pool-2"
        assert _nodes(run) == ["pool-1", "pool-2"]
        messages = _events(run, pod["metadata"]["name"], "TriggeredScaleUp")
        assert messages == ["pod triggered scale-up: [{pool 1->2 (max: 2)}]"]

        # kept: its pod fits no other node by the in-tree filters (pool-1's reported allocatable is short);
        # pool-1 is kept for its pods that no controller would recreate
        def blockers():
            got = _status(run)["scaleDown"]["blockers"]
            return got if "added too recently" not in got.values() and len(got) == 2 else None

        got = wait_until(blockers, 60, what="both nodes' blockers")
        assert got["pool-2"] == f"pod default/{pod['metadata']['name']} fits no other node by the in-tree filters"
        assert "is not replicated" in got["pool-1"], got
        assert _nodes(run) == ["pool-1", "pool-2"]

        # room on pool-1: pool-2's pod can move, so pool-2 is drained (its pod evicted and recreated by
        # the Job controller, then placed on pool-1 by the extender) and removed
        run("delete", "pod", "first", "--wait=false")
        wait_until(lambda: _nodes(run) == ["pool-1"], 120, what="pool-2 removed")
        moved = wait_until(lambda: _job_pod(run, "second"), 120, what="second's pod Running again")
        assert moved["spec"]["nodeName"] == "pool-1" and moved["metadata"]["name"] != pod["metadata"]["name"]
        def removed(st: dict) -> dict | None:
            kept = st["nodeGroups"][0]["nodes"] == ["pool-1"]
            return st if kept and "min size" in st["scaleDown"]["blockers"].get("pool-1", "") else None

        status = wait_until(lambda: removed(_status(run)), 30, what="the status after the removal")
        assert status["scaleDown"]["removed"] == ["pool-2"]
        assert status["scaleDown"]["blockers"] == {"pool-1": "node group pool is at its min size 1"}


def test_without_reported_capacity_a_pending_share_pod_never_triggers_a_scale_up(tmp_path):
    with embedded_cluster(tmp_path) as run:
        wait_until(lambda: _nodes(run) == ["pool-1"], 60, what="the group at its min size")
        run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="first", mem=30000))
        assert wait_until(lambda: _running_on(run, "first"), 120, what="first Running") == "pool-1"
        node = json.loads(run("get", "node", "pool-1", "-o", "json"))
        assert "nvidia.com/gpumem" not in node["status"]["allocatable"]
        run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="second", mem=30000))
        # Cluster Autoscaler looked at the pod and refused it: the template (a copy of pool-1) is short
        messages = wait_until(lambda: _events(run, "second", "NotTriggerScaleUp"), 60, what="NotTriggerScaleUp")
        assert messages == ["pod didn't trigger scale-up: Insufficient nvidia.com/gpumem"]
        assert _nodes(run) == ["pool-1"]
        assert _status(run)["scaleUp"] == []
        assert _pod(run, "second")["status"]["phase"] == "Pending"

        # hami doctor says why, and hami whatif --scale-up counts what each side would need
        res = subprocess.run([sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/second", "--json",
                              "--no-whatif"], env=run.env, capture_output=True, text=True, timeout=120)
        line = json.loads(res.stdout)["scaleUp"]
        assert line.startswith("cannot trigger a scale-up: no node in the cluster advertises nvidia.com/gpumem"), line
        assert "NotTriggerScaleUp: pod didn't trigger scale-up: Insufficient nvidia.com/gpumem" in line
        res = subprocess.run([sys.executable, "-m", "hami.cli.main", "whatif", "--scale-up", "--format", "json"],
                             env=run.env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        (group,) = json.loads(res.stdout)["scaleUp"]["groups"]
        assert group["group"] == "node.hami.io/node-group=pool" and group["template"] == "pool-1"
        assert group["clusterAutoscaler"] == {"nodes": 0, "pods": 0,
                                              "refused": {"Insufficient nvidia.com/gpumem": 1}}
        assert group["hami"] == {"nodes": 1, "pods": 1}
