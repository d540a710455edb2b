"""End to end: node policies and quotas for pods with DRA claims, on `hami --role all --embedded --dra`
(2 nodes x 2 A100 40GB), driven by real kubectl.

The webhook sets the claim pods' schedulerName to hami-scheduler; the embedded kube-scheduler runs
that profile with the chart's DRA configuration (hami.sim.cluster.kube_scheduler_configuration: the
extender entry has no managedResources, so kube-scheduler calls it for every pod of the profile;
NodeResourcesFit's args ignore HAMi's resources), so the extender filters, ranks (with
--extender-prioritize) and binds claim pods after DynamicResources wrote their allocation; it ranks
nodes by GPU fill from the ResourceSlices and allocated claims (the Placer, placement.claimwalk):

- three `binpack` pods land on one node, then two `spread` pods take the other (the emptier) one.

Quotas (hami.scheduler.admission.draquota, quotaledger): a namespace's ResourceQuota on
`limits.nvidia.com/gpumem` and `requests.nvidia.com/gpu` holds against its claims with HAMi's
`exceeding resource quota`; deleting a pod frees its share; four pods created at once where only one
fits: exactly one is admitted (the reservation on the ResourceQuota, written with its resourceVersion).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.e2e.embedded import create_at_once, embedded_system, wait_until
from tests.tools import find_kubectl

pytestmark = pytest.mark.slow

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations: {{hami.io/node-scheduler-policy: {policy}}}
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("drapolicy"), "--dra", "--sim-nodes", "2",
                         "--sim-gpus", "2xNVIDIA A100-SXM4-40GB:40960", "-v=4") as system:
        wait_until(lambda: system.slices() == 2, 60, what="both nodes' ResourceSlices")
        yield {"kubectl": system.run, "log": system.log}


def _pod(run, name):
    return json.loads(run("get", "pod", name, "-o", "json"))


def _node_when_running(run, name):
    wait_until(lambda: _pod(run, name)["status"].get("phase") == "Running", 60, what=f"{name} Running")
    pod = _pod(run, name)
    # the webhook hands claim pods to hami's profile, whose extender entry (the chart's DRA one: no
    # managedResources) kube-scheduler calls for them; bound by the extender without HAMi's bind phase
    assert pod["spec"]["schedulerName"] == "hami-scheduler" and pod["spec"]["resourceClaims"]
    assert "hami.io/bind-phase" not in pod["metadata"].get("annotations", {})
    return pod["spec"]["nodeName"]


def test_binpack_fills_one_node_and_spread_takes_the_emptier(cluster):
    run = cluster["kubectl"]
    nodes = []
    for i in range(3):  # one at a time: each placement sees the claims allocated before it
        run("create", "-f", "-", stdin=POD.format(name=f"bp{i}", policy="binpack", mem=8000))
        nodes.append(_node_when_running(run, f"bp{i}"))
    assert len(set(nodes)) == 1, nodes
    spread = []
    for i in range(2):
        run("create", "-f", "-", stdin=POD.format(name=f"sp{i}", policy="spread", mem=8000))
        spread.append(_node_when_running(run, f"sp{i}"))
    assert nodes[0] not in spread, (nodes, spread)



QUOTA = """
apiVersion: v1
kind: ResourceQuota
metadata: {{name: gpu, namespace: {ns}}}
spec:
  hard: {{limits.nvidia.com/gpumem: "8000", requests.nvidia.com/gpu: "3"}}
"""

NS_POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}
"""


def _quota_ns(run, ns):
    run("create", "namespace", ns)
    run("create", "-f", "-", stdin=QUOTA.format(ns=ns))


def test_a_namespaces_gpumem_quota_holds_against_its_claims(cluster):
    run = cluster["kubectl"]
    _quota_ns(run, "team-q")
    run("create", "-f", "-", stdin=NS_POD.format(name="q1", ns="team-q", mem=6000))
    wait_until(lambda: json.loads(run("get", "pod", "q1", "-n", "team-q", "-o", "json"))["status"].get("phase")
               == "Running", 60, what="q1 Running")
    res = subprocess.run([find_kubectl(), "create", "-f", "-"], input=NS_POD.format(name="q2", ns="team-q", mem=6000),
                         env={**os.environ, "KUBECONFIG": str(cluster["log"].parent / "kubeconfig")},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "exceeding resource quota" in res.stderr, res.stderr
    assert "nvidia.com/gpumem: 6000 requested, 6000 of 8000 used" in res.stderr, res.stderr
    run("create", "-f", "-", stdin=NS_POD.format(name="q3", ns="team-q", mem=2000))  # fits beside q1
    # deleting q1 frees its claim's 6000 MiB: the next 6000 MiB pod is admitted
    run("delete", "pod", "q1", "-n", "team-q", "--wait=true")

    def admitted():
        r = subprocess.run([find_kubectl(), "create", "-f", "-"],
                           input=NS_POD.format(name="q4", ns="team-q", mem=6000),
                           env={**os.environ, "KUBECONFIG": str(cluster["log"].parent / "kubeconfig")},
                           capture_output=True, text=True, timeout=60)
        return r.returncode == 0

    wait_until(admitted, 60, what="q4 admitted once q1's claim is gone")


def test_two_pods_admitted_at_once_cannot_both_overflow_the_quota(cluster):
    run = cluster["kubectl"]
    _quota_ns(run, "team-r")
    env = {**os.environ, "KUBECONFIG": str(cluster["log"].parent / "kubeconfig")}
    admitted, refused = create_at_once(env, [NS_POD.format(name=f"r{i}", ns="team-r", mem=5000) for i in range(4)])
    assert len(admitted) == 1, (admitted, refused)
    assert all("exceeding resource quota" in e for e in refused), refused
    quota = json.loads(run("get", "resourcequota", "gpu", "-n", "team-r", "-o", "json"))
    assert "hami.io/dra-quota-reservations" in quota["metadata"]["annotations"]
