"""End to end: a cluster mid-migration, `hami --role all --embedded --dra --sim-dra-nodes 1` (gpu-node-1
on the device plugin, gpu-node-2 on DRA, 2 A100 40GB each), driven by real kubectl.

The GPU mode is chosen per namespace and per pod (hami.scheduler.admission.gpumode): pods in a
namespace labelled `hami.io/gpu-mode=device-plugin` keep HAMi's extended resources and land on the
device-plugin node through hami-scheduler; pods in other namespaces get claims (the --dra default)
and land on the DRA node through kube-scheduler's DynamicResources; both kinds created at once all
run (neither starves). A pod's `hami.io/gpu-mode` annotation wins only where its namespace lets pods
choose; elsewhere naming another mode is refused. `hami doctor pod` says which mode a pod got and why.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.embedded import create_at_once, embedded_system, wait_until

pytestmark = pytest.mark.slow

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  annotations: {annotations}
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "3000"}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("dramixed"), "--dra", "--sim-dra-nodes", "1", "--sim-nodes", "2",
                         "--sim-gpus", "2xNVIDIA A100-SXM4-40GB:40960", "-v=2", results=True) as system:
        run = system.run

        def ready():
            slices = run("get", "resourceslices", "-o", "json", check=False).stdout
            nodes = run("get", "nodes", "-o", "json", check=False).stdout
            if not slices or not nodes:
                return False
            registered = [n for n in json.loads(nodes)["items"]
                          if "hami.io/node-nvidia-register" in (n["metadata"].get("annotations") or {})]
            return len(json.loads(slices)["items"]) == 1 and len(registered) == 1

        wait_until(ready, 90, what="one DRA node's slice and one device-plugin node's registration")
        run("create", "namespace", "legacy")
        run("label", "namespace", "legacy", "hami.io/gpu-mode=device-plugin")
        run("create", "namespace", "free")
        run("label", "namespace", "free", "hami.io/gpu-mode=dra", "hami.io/gpu-mode-pod-choice=true")
        yield {"run": run, "env": system.env, "port": system.ports["api"]}


def _choosing_namespace(run, ns: str, hard: str) -> None:
    """A namespace on DRA by default whose pods may choose their mode, with a ResourceQuota `hard`."""
    run("create", "namespace", ns)
    run("label", "namespace", ns, "hami.io/gpu-mode=dra", "hami.io/gpu-mode-pod-choice=true")
    run("create", "-f", "-", stdin=f"""
apiVersion: v1
kind: ResourceQuota
metadata: {{name: gpu, namespace: {ns}}}
spec:
  hard: {{{hard}}}
""")


def _pod(run, ns, name):
    return json.loads(run("get", "pod", name, "-n", ns, "-o", "json"))


def _running_on(run, ns, name):
    wait_until(lambda: _pod(run, ns, name)["status"].get("phase") == "Running", 90, what=f"{ns}/{name} Running")
    return _pod(run, ns, name)["spec"]["nodeName"]


def _create(run, ns, name, annotations=None):
    return run("create", "-f", "-", check=False, stdin=POD.format(ns=ns, name=name,
                                                                  annotations=json.dumps(annotations or {})))


def test_both_kinds_of_pods_land_on_their_own_nodes_and_neither_starves(cluster):
    run = cluster["run"]
    # created interleaved, all at once: 8 device-plugin pods and 8 claim pods
    for i in range(8):
        assert _create(run, "legacy", f"dp{i}").returncode == 0
        assert _create(run, "default", f"claim{i}").returncode == 0
    for i in range(8):
        assert _running_on(run, "legacy", f"dp{i}") == "gpu-node-1"
        assert _running_on(run, "default", f"claim{i}") == "gpu-node-2"
    dp, claim = _pod(run, "legacy", "dp0"), _pod(run, "default", "claim0")
    assert "resourceClaims" not in dp["spec"] and dp["spec"]["schedulerName"] == "hami-scheduler"
    assert dp["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "3000"
    assert claim["spec"]["resourceClaims"] and claim["metadata"]["labels"]["hami.io/dra"] == "true"
    assert dp["metadata"]["annotations"]["hami.io/gpu-mode-decision"] == (
        "device-plugin: namespace legacy has the label hami.io/gpu-mode=device-plugin")
    assert claim["metadata"]["annotations"]["hami.io/gpu-mode-decision"] == (
        "dra: the scheduler's default (--dra-default-mode=dra)")


def test_a_pods_annotation_wins_only_where_its_namespace_lets_pods_choose(cluster):
    run = cluster["run"]
    assert _create(run, "free", "chooser", {"hami.io/gpu-mode": "device-plugin"}).returncode == 0
    assert _running_on(run, "free", "chooser") == "gpu-node-1"
    assert _pod(run, "free", "chooser")["metadata"]["annotations"]["hami.io/gpu-mode-decision"].startswith(
        "device-plugin: the pod's annotation hami.io/gpu-mode=device-plugin (namespace free lets pods choose")
    refused = _create(run, "legacy", "escape", {"hami.io/gpu-mode": "dra"})
    assert refused.returncode != 0
    assert "namespace legacy does not let pods choose their GPU mode" in refused.stderr, refused.stderr
    bogus = _create(run, "free", "bogus", {"hami.io/gpu-mode": "mig"})
    assert bogus.returncode != 0 and "'mig' is not dra or device-plugin" in bogus.stderr, bogus.stderr


def test_doctor_pod_says_which_mode_and_why(cluster):
    """Its own pod (the mode is decided at admission, so whether it runs yet does not matter): the tests of
    this module run in any order."""
    run, kubeconfig = cluster["run"], cluster["env"]["KUBECONFIG"]
    assert _create(run, "legacy", "doctored").returncode == 0
    out = subprocess.run([sys.executable, "-m", "hami.cli.main", "doctor", "pod", "legacy/doctored",
                          "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=60)
    assert ("GPU mode device-plugin: namespace legacy has the label hami.io/gpu-mode=device-plugin "
            "(the webhook's decision at admission)") in out.stdout, out.stdout + out.stderr


SIZED = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: both
  annotations: {{hami.io/gpu-mode: {mode}}}
spec:
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}"}}
"""


def test_a_namespace_with_both_modes_keeps_one_quota_across_them(cluster):
    run = cluster["run"]
    _choosing_namespace(run, "both", 'limits.nvidia.com/gpumem: "8000"')

    def create(name, mode, mem):
        return run("create", "-f", "-", check=False, stdin=SIZED.format(name=name, mode=mode, mem=mem))

    assert create("dp", "device-plugin", 5000).returncode == 0
    assert _running_on(run, "both", "dp") == "gpu-node-1"
    # the device-plugin pod's 5000 MiB count against a claim pod's check
    refused = create("claim-big", "dra", 5000)
    assert refused.returncode != 0 and "exceeding resource quota" in refused.stderr, refused.stderr
    assert create("claim-small", "dra", 2000).returncode == 0
    assert _running_on(run, "both", "claim-small") == "gpu-node-2"
    # ...and the claim's 2000 MiB against a device-plugin pod's: 5000 + 2000 + 2000 > 8000
    refused = create("dp2", "device-plugin", 2000)
    assert refused.returncode != 0 and "exceeding resource quota" in refused.stderr, refused.stderr
    assert create("dp3", "device-plugin", 1000).returncode == 0


def test_a_device_plugin_pods_gpu_count_counts_the_namespaces_claims(cluster):
    run = cluster["run"]
    _choosing_namespace(run, "count", 'requests.nvidia.com/gpu: "2"')
    for i in range(2):
        assert _create(run, "count", f"c{i}").returncode == 0
        assert _running_on(run, "count", f"c{i}") == "gpu-node-2"
    refused = _create(run, "count", "dp", {"hami.io/gpu-mode": "device-plugin"})
    assert refused.returncode != 0
    assert "exceeding resource quota: nvidia.com/gpu: 1 requested, 2 of 2 used" in refused.stderr, refused.stderr


def test_device_plugin_pods_admitted_at_once_cannot_together_pass_the_gpu_count(cluster):
    """Kubernetes' own quota check counts the device-plugin pods' `requests.nvidia.com/gpu` (the
    embedded API server does as kube-apiserver: hami.sim.apiserver.quota) but not the claims, and
    hami's check of the claims beside them ran without a reservation: four device-plugin pods created
    at once in a namespace whose claims hold 1 of 3 GPUs all passed both. Each now reserves its count
    on the quota (written with its resourceVersion), so exactly the two that fit are admitted."""
    run = cluster["run"]
    _choosing_namespace(run, "race", 'requests.nvidia.com/gpu: "3"')
    assert _create(run, "race", "claim").returncode == 0
    assert _running_on(run, "race", "claim") == "gpu-node-2"
    admitted, refused = create_at_once(cluster["env"], [POD.format(ns="race", name=f"dp{i}", annotations=json.dumps(
        {"hami.io/gpu-mode": "device-plugin"})) for i in range(4)])
    assert len(admitted) == 2, (admitted, refused)
    assert all("exceeding resource quota: nvidia.com/gpu: 1 requested, 3 of 3 used" in e for e in refused), refused
    quota = json.loads(run("get", "resourcequota", "gpu", "-n", "race", "-o", "json"))
    assert "hami.io/dra-quota-reservations" in quota["metadata"]["annotations"]
    assert quota["status"]["used"]["requests.nvidia.com/gpu"] == "2"  # Kubernetes' count: the two pods
