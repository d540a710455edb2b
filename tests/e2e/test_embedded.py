"""End to end: `hami --role all --embedded` as a subprocess, driven by real kubectl.

Covers: pods submitted with kubectl (no schedulerName: the embedded API server calls the
scheduler's mutating webhook, as kube-apiserver does with the chart's configuration) are scheduled by the extender,
allocated through the node agent's real gRPC Allocate and run with the right `CUDA_DEVICE_MEMORY_LIMIT_0`; the monitor's
metrics show them (read from HAMi-core-format cache files); a pod that cannot fit gets
FilteringFailed events and is explained by `hami doctor`; `hami whatif` on the live cluster warns about
no annotation hami wrote; stopping the process leaves no
stray processes or sockets behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.e2e.embedded import embedded_system, wait_until
from tests.tools import find_kubectl

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
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mem}", nvidia.com/gpucores: "30"}}
"""


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with running_embedded(tmp_path_factory.mktemp("emb")) as emb:
        yield emb


@contextlib.contextmanager
def running_embedded(state):
    """`hami --role all --embedded` (tests/e2e/embedded.py) with two A100 nodes, once both registered."""
    with embedded_system(state, "--sim-nodes", "2", "--sim-gpus", "2xNVIDIA A100-SXM4-40GB:40960", "-v=2") as system:
        run = system.run

        def registered():
            out = run("get", "nodes", "-o", "json", check=False)
            nodes = json.loads(out)["items"] if out else []
            return len(nodes) == 2 and all("hami.io/node-nvidia-register" in (n["metadata"].get("annotations") or {})
                                           for n in nodes)

        wait_until(registered, 120, what="both nodes registered")
        yield {"proc": system.proc, "kubectl": run, "state": state, "ports": system.ports, "env": system.env}


def test_pod_runs_with_its_memory_limit_and_shows_in_metrics(embedded):
    run = embedded["kubectl"]
    run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-small", mem=3000))

    def running():
        pod = json.loads(run("get", "pod", "e2e-small", "-o", "json"))
        return pod if pod["status"].get("phase") == "Running" else None

    pod = wait_until(running, 120, what="e2e-small Running")
    assert pod["spec"]["schedulerName"] == "hami-scheduler"  # set by the webhook
    ann = pod["metadata"]["annotations"]
    env = json.loads(ann["sim.hami.io/allocated-env"])["cuda"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    got = json.loads(ann["sim.hami.io/allocated-devices"])["cuda"]  # what the simulated runtime received
    assert got["gpus"] == [env["NVIDIA_VISIBLE_DEVICES"]] and got["cdi_devices"] == []
    assert ann["hami.io/bind-phase"] == "success"
    assert ann["hami.io/vgpu-node"] == pod["spec"]["nodeName"]

    url = f"http://127.0.0.1:{embedded['ports']['mmetrics']}/metrics"

    def in_metrics():
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        lines = [line for line in text.splitlines()
                 if line.startswith("hami_vgpu_memory_limit_bytes{") and 'pod="e2e-small"' in line]
        return lines

    (line,) = wait_until(in_metrics, 30, what="e2e-small in monitor metrics")
    assert float(line.rsplit(" ", 1)[1]) == 3000 * 1024 * 1024


def test_pod_that_cannot_fit_gets_filtering_failed_and_doctor_explains_it(embedded):
    run = embedded["kubectl"]
    run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-huge", mem=90000))

    def failed_event():
        out = run("get", "events", "-n", "default", "--field-selector",
                  "involvedObject.name=e2e-huge,reason=FilteringFailed", "-o", "json")
        items = json.loads(out)["items"]
        return items or None

    events = wait_until(failed_event, 60, what="FilteringFailed event")
    messages = " | ".join(e["message"] for e in events)
    assert "CardInsufficientMemory" in messages
    pod = json.loads(run("get", "pod", "e2e-huge", "-o", "json"))
    assert pod["status"]["phase"] == "Pending"

    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/e2e-huge", "--json"],
                         env=embedded["env"], capture_output=True, text=True, timeout=60)
    report = json.loads(res.stdout)
    text = json.dumps(report)
    assert "CardInsufficientMemory" in text, text
    assert res.returncode != 0  # a pod that cannot schedule is a finding


def test_whatif_on_the_embedded_cluster_warns_about_nothing_hami_wrote(embedded):
    # Nodes carry hami.io/hami-core, the scheduler pod hami.io/embedded, pods the placement keys.
    embedded["kubectl"]("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-snap", mem=2000))
    wait_until(lambda: json.loads(embedded["kubectl"]("get", "pod", "e2e-snap", "-o", "json"))["status"].get("phase")
               == "Running", 120, what="e2e-snap Running")
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "whatif", "--suggest"],
                         env=embedded["env"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "unknown annotation" not in res.stderr and "warning" not in res.stderr, res.stderr
    assert "== suggestions" in res.stdout


def test_debugging_runbook_commands_find_the_scheduler(embedded):
    """seeds/001: `kubectl get pods -n kube-system -l app=hami-scheduler`, `kubectl logs` of it, its config."""
    run = embedded["kubectl"]
    name = run("get", "pods", "-n", "kube-system", "-l", "app=hami-scheduler",
               "-o", "jsonpath={.items[0].metadata.name}")
    assert name == "hami-scheduler-embedded"
    logs = run("logs", name, "-n", "kube-system", "--tail=200")
    assert '"Scheduler extender listening"' in logs or '"Role started" role="scheduler"' in logs
    assert len(run("logs", "-n", "kube-system", "-l", "app=hami-scheduler", "--tail=5").splitlines()) <= 5
    cfg = run("get", "configmap", "-n", "kube-system", "hami-scheduler-config", "-o", "yaml")
    assert "nodeCacheCapable: true" in cfg and "filterVerb: filter" in cfg


def test_webhook_denial_reaches_kubectl(embedded):
    run = embedded["kubectl"]
    pod = POD.format(name="e2e-pinned", mem=1000).replace("spec:\n", "spec:\n  nodeName: gpu-node-1\n")
    res = subprocess.run([find_kubectl(), "apply", "--validate=false", "-f", "-"], env=embedded["env"], input=pod,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert 'admission webhook "vgpu.hami.io" denied the request' in res.stderr
    assert "node assigned" in res.stderr
    assert "e2e-pinned" not in run("get", "pods", "-o", "name")


FORGED = """
apiVersion: v1
kind: Pod
metadata:
  name: e2e-forged
  namespace: default
  annotations:
    hami.io/bind-phase: allocating
    hami.io/vgpu-node: gpu-node-2
    hami.io/bind-time: "1790000000"
    hami.io/vgpu-devices-to-allocate: "GPU-00000000-0000-0000-0000-000000000000,NVIDIA,40960,100:;"
spec:
  schedulerName: my-scheduler
  nodeName: gpu-node-2
  containers:
  - name: cuda
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {nvidia.com/gpu: "1"}
"""


def test_forged_placement_applied_with_the_user_kubeconfig_is_refused(embedded):
    """Issue 27 §1: the kubeconfig handed to people is an ordinary user, whose AdmissionReview carries its
    userInfo; a pod with hand-written placement annotations (another scheduler, nodeName set) is refused
    naming the key, and so is adding one to an existing pod (UPDATE)."""
    run = embedded["kubectl"]
    kubeconfig = json.loads(open(embedded["env"]["KUBECONFIG"]).read())
    assert kubeconfig["users"][0]["user"]["token"]  # a bearer token, not hami's own accounts
    res = subprocess.run([find_kubectl(), "apply", "--validate=false", "-f", "-"], env=embedded["env"],
                         input=FORGED, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "hami.io/bind-phase" in res.stderr and "hami-demo-user" in res.stderr
    assert "e2e-forged" not in run("get", "pods", "-o", "name")
    run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-victim", mem=1000))
    res = subprocess.run([find_kubectl(), "annotate", "pod", "e2e-victim", "hami.io/vgpu-node=gpu-node-9",
                          "--overwrite"], env=embedded["env"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "hami.io/vgpu-node" in res.stderr


def test_a_tenant_cannot_strip_its_placement_nor_raise_its_priority(embedded):
    """Issue 39 §1, §8, with kubectl and the demo user's kubeconfig: removing the placement annotations of
    a running GPU pod is refused naming the key and the user, and so is a change of spec.priority."""
    run = embedded["kubectl"]
    run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-strip", mem=1000))

    def placed():
        pod = json.loads(run("get", "pod", "e2e-strip", "-o", "json"))
        return pod if (pod["metadata"].get("annotations") or {}).get("hami.io/bind-phase") == "success" else None

    wait_until(placed, 120, what="e2e-strip placed")

    def kubectl(*args):
        return subprocess.run([find_kubectl(), *args], env=embedded["env"], capture_output=True, text=True,
                              timeout=60)

    res = kubectl("annotate", "pod", "e2e-strip", "hami.io/vgpu-node-", "hami.io/vgpu-devices-allocated-",
                  "hami.io/vgpu-devices-to-allocate-")
    assert res.returncode != 0 and "hami.io/vgpu-" in res.stderr and "hami-demo-user" in res.stderr
    assert "may not remove it" in res.stderr
    assert "hami.io/vgpu-node" in json.loads(run("get", "pod", "e2e-strip", "-o", "json"))["metadata"]["annotations"]
    res = kubectl("patch", "pod", "e2e-strip", "--type", "merge", "-p", '{"spec":{"priority":1000000000}}')
    assert res.returncode != 0 and "pod updates may not change fields" in res.stderr


def test_kubectl_hami_top_shows_every_gpu_and_a_pods_share(embedded):
    """The real kubectl finds the `kubectl-hami` console script on PATH and runs it on the current context."""
    run = embedded["kubectl"]
    run("apply", "--validate=false", "-f", "-", stdin=POD.format(name="e2e-top", mem=1500))
    wait_until(lambda: json.loads(run("get", "pod", "e2e-top", "-o", "json"))["status"].get("phase") == "Running",
               120, what="e2e-top Running")
    env = {**embedded["env"], "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    metrics = f"http://127.0.0.1:{embedded['ports']['mmetrics']}/metrics"

    def hami(*args: str) -> str:
        res = subprocess.run([find_kubectl(), "hami", *args], env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return res.stdout

    table = hami("top", "gpus").splitlines()
    assert table[0].split()[:4] == ["NODE", "GPU", "MODEL", "SLICES"]
    assert sorted(tuple(line.split()[:2]) for line in table[1:]) == [
        ("gpu-node-1", "0"), ("gpu-node-1", "1"), ("gpu-node-2", "0"), ("gpu-node-2", "1")]
    gpus = json.loads(hami("top", "gpus", "-o", "json", "--metrics-url", metrics))["items"]
    assert all(g["split"] == 10 and g["memory_mib"] == 40960 for g in gpus)
    pods = json.loads(hami("top", "pods", "-A", "-o", "json", "--metrics-url", metrics))["items"]
    (share,) = [p for p in pods if p["pod"] == "e2e-top"]
    assert share["memory_allocated_mib"] == 1500 and share["cores_allocated"] == 30
    holder = next(g for g in gpus if g["uuid"] == share["uuid"])
    assert holder["slices"] >= 1 and holder["memory_allocated_mib"] >= 1500
    assert "gpu-node-1" in hami("top", "nodes") and "e2e-top" in hami("top", "pods")  # namespace default


def test_stopping_leaves_no_processes_or_sockets(tmp_path):
    with running_embedded(tmp_path / "emb") as own:  # its own run: the module's keeps serving the other tests
        _stop_and_check(own)


def _stop_and_check(embedded) -> None:
    proc, state = embedded["proc"], embedded["state"]
    children = subprocess.run(["pgrep", "-g", str(os.getpgid(proc.pid))], capture_output=True, text=True)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    leftover = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert leftover == [], f"stray processes {leftover} (group had {children.stdout.split()})"
    sockets = [os.path.join(d, f) for d, _, files in os.walk(state) for f in files if f.endswith(".sock")]
    assert sockets == []
