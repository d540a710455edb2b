"""Real kubectl against `hami --role sim` (a subprocess), using the kubeconfig it writes, unedited.

Covers the seed runbooks' commands: `get nodes` (server-side Table), `get node N -o jsonpath=` of
all annotations and of one escaped key, `get nodes -o custom-columns=` with an annotation,
`describe pod P -n NS` with its events, `get pods --all-namespaces --field-selector=status.phase=Pending`,
`get pods -l`, `annotate node` (add, overwrite, remove), `patch` (strategic, merge and json),
`create -f` and `apply -f` (with and, on kubectl 1.28+, without --validate=false),
`--dry-run=server`, and a smoke run of every other kubectl version found (gcloud's kubectl.1.27..1.33, Debian's 1.20).

kubectl is looked up in $HAMI_TEST_KUBECTL, on PATH, then /usr/lib/google-cloud-sdk/bin/kubectl*, then
.ci/tools/kubectl (`scripts/install-kubectl` puts it there). No kubectl means these tests FAIL; they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.tools import find_kubectl, kubectl_candidates

ROOT = Path(__file__).resolve().parents[2]


class Sim:
    """A running `hami --role sim` and helpers to seed it over plain HTTP."""

    def __init__(self, tmp: Path):
        self.kubeconfig = str(tmp / "kubeconfig")
        self.cache = str(tmp / "kube-cache")
        self.log = open(tmp / "sim.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hami.cli.main", "--role", "sim", "--sim-listen", "127.0.0.1:0",
             "--sim-kubeconfig", self.kubeconfig], stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.kubeconfig):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("hami --role sim did not write its kubeconfig: "
                                   + (tmp / "sim.log").read_text()[-2000:])
            time.sleep(0.05)
        cfg = json.loads(Path(self.kubeconfig).read_text())
        self.url = cfg["clusters"][0]["cluster"]["server"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()

    def request(self, method: str, path: str, body: dict | list | None = None,
                ctype: str = "application/json") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": ctype})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def kubectl(self, *args: str, binary: str | None = None, check: bool = True) -> str:
        cmd = [binary or find_kubectl(), "--kubeconfig", self.kubeconfig, "--cache-dir", self.cache, *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({res.returncode}): {res.stderr}")
        return res.stdout


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory):
    s = Sim(tmp_path_factory.mktemp("kubectl"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def sim(sim_process):
    """The shared process with the seed objects as `seed` made them: each test starts from the same
    state whatever ran before it (several tests annotate, patch and create)."""
    wipe(sim_process)
    seed(sim_process)
    return sim_process


def wipe(s: Sim) -> None:
    for path in ("/api/v1/nodes", "/api/v1/pods", "/api/v1/events"):
        for obj in s.request("GET", path)["items"]:
            meta = obj["metadata"]
            where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
            s.request("DELETE", f"/api/v1{where}/{path.rsplit('/', 1)[1]}/{meta['name']}")


def seed(s: Sim) -> None:
    for name, shake in (("gpu-node-01", "Reported_2026-11-22 00:00:00"), ("gpu-node-02",
                                                                          "Requesting_2026-11-22 00:00:00")):
        s.request("POST", "/api/v1/nodes", {
            "metadata": {"name": name, "labels": {"gpu": "on"},
                         "annotations": {"hami.io/node-handshake": shake,
                                         "hami.io/node-nvidia-register":
                                            f"GPU-{name},10,40960,100,NVIDIA-A100,0,true:"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.31.0"}}})
    if "ml" not in {n["metadata"]["name"] for n in s.request("GET", "/api/v1/namespaces")["items"]}:
        s.request("POST", "/api/v1/namespaces", {"metadata": {"name": "ml"}})
    pod = s.request("POST", "/api/v1/namespaces/ml/pods", {
        "metadata": {"name": "train-0", "labels": {"app": "train"}},
        "spec": {"schedulerName": "hami-scheduler",
                 "containers": [{"name": "cuda", "image": "nvidia/cuda:12.4",
                                 "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}]}})
    s.request("POST", "/api/v1/namespaces/ml/events", {
        "metadata": {"name": "train-0.filtering"}, "type": "Warning", "reason": "FilteringFailed",
        "message": "no available node, 2 nodes do not meet: CardInsufficientMemory",
        "source": {"component": "hami-scheduler"}, "count": 1,
        "firstTimestamp": "2026-11-22T00:00:00Z", "lastTimestamp": "2026-11-22T00:00:00Z",
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "train-0", "uid": pod["metadata"]["uid"],
                           "apiVersion": "v1"}})
    s.request("POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": "web", "labels": {"app": "hami-scheduler"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    s.request("PATCH", "/api/v1/namespaces/default/pods/web/status", {"status": {"phase": "Running"}},
              "application/merge-patch+json")


def test_kubectl_is_found():
    assert os.access(find_kubectl(), os.X_OK)


def test_get_nodes_prints_status_columns(sim):
    out = sim.kubectl("get", "nodes")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"]
    assert any(line.split()[:2] == ["gpu-node-01", "Ready"] for line in lines)
    assert any(line.startswith("gpu-node-02") for line in lines)


def test_get_node_jsonpath_annotations(sim):
    out = sim.kubectl("get", "node", "gpu-node-01", "-o", "jsonpath={.metadata.annotations}")
    annotations = json.loads(out)
    assert annotations["hami.io/node-handshake"].startswith("Reported_")
    out = sim.kubectl("get", "node", "gpu-node-02", "-o", r"jsonpath={.metadata.annotations.hami\.io/node-handshake}")
    assert out == "Requesting_2026-11-22 00:00:00"


def test_get_nodes_custom_columns(sim):
    out = sim.kubectl("get", "nodes", "-o",
                      r"custom-columns=NAME:.metadata.name,GPU_REGISTERED:.metadata.annotations.hami\.io/node-nvidia-register")
    assert "GPU-gpu-node-01,10,40960" in out and out.splitlines()[0].split() == ["NAME", "GPU_REGISTERED"]


def test_describe_pod_shows_events(sim):
    out = sim.kubectl("describe", "pod", "train-0", "-n", "ml")
    assert "Name:" in out and "train-0" in out
    events = out.split("Events:", 1)[1]
    assert "FilteringFailed" in events and "CardInsufficientMemory" in events and "hami-scheduler" in events


def test_get_pending_pods_across_namespaces(sim):
    out = sim.kubectl("get", "pods", "--all-namespaces", "--field-selector=status.phase=Pending")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert ["ml", "train-0"] in [r[:2] for r in rows]
    assert all(r[1] != "web" for r in rows)


def test_get_pods_by_label(sim):
    out = sim.kubectl("get", "pods", "-n", "default", "-l", "app=hami-scheduler", "-o",
                      "jsonpath={.items[0].metadata.name}")
    assert out == "web"


def test_annotate_node_adds_overwrites_and_removes(sim):
    sim.kubectl("annotate", "node", "gpu-node-01", "hami.io/mutex.lock=2026-11-22T00:00:00Z,kube-system,s")
    assert sim.request("GET",
                       "/api/v1/nodes/gpu-node-01")["metadata"]["annotations"]["hami.io/mutex.lock"].endswith(",s")
    sim.kubectl("annotate", "node", "gpu-node-01", "--overwrite", "hami.io/mutex.lock=other")
    assert sim.request("GET", "/api/v1/nodes/gpu-node-01")["metadata"]["annotations"]["hami.io/mutex.lock"] == "other"
    sim.kubectl("annotate", "node", "gpu-node-01", "hami.io/mutex.lock-")
    assert "hami.io/mutex.lock" not in sim.request("GET", "/api/v1/nodes/gpu-node-01")["metadata"]["annotations"]


def test_patch_strategic_merge_and_json(sim):
    sim.kubectl("patch", "node", "gpu-node-02", "-p", '{"metadata":{"labels":{"zone":"a"}}}')
    sim.kubectl("patch", "node", "gpu-node-02", "--type=merge", "-p", '{"metadata":{"labels":{"gpu":null}}}')
    sim.kubectl("patch", "node", "gpu-node-02", "--type=json", "-p",
                '[{"op":"replace","path":"/metadata/annotations/hami.io~1node-handshake","value":"Deleted_x"}]')
    node = sim.request("GET", "/api/v1/nodes/gpu-node-02")
    assert node["metadata"]["labels"] == {"zone": "a"}
    assert node["metadata"]["annotations"]["hami.io/node-handshake"] == "Deleted_x"
    sim.kubectl("patch", "pod", "train-0", "-n", "ml", "-p",
                '{"spec":{"containers":[{"name":"cuda","image":"nvidia/cuda:12.6"}]}}')
    pod = sim.request("GET", "/api/v1/namespaces/ml/pods/train-0")
    assert pod["spec"]["containers"][0]["image"] == "nvidia/cuda:12.6"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "3000"


def test_every_other_kubectl_version_reads_nodes_and_describes(sim):
    others = kubectl_candidates()[1:]
    for binary in others:
        out = sim.kubectl("get", "nodes", binary=binary)
        assert "gpu-node-01" in out, binary
        out = sim.kubectl("describe", "pod", "train-0", "-n", "ml", binary=binary)
        assert "FilteringFailed" in out.split("Events:", 1)[1], binary


def kubectl_minor(sim: Sim, binary: str) -> int:
    out = subprocess.run([binary, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
    return int(json.loads(out.stdout)["clientVersion"]["minor"].rstrip("+"))


def test_create_and_apply_from_a_file(sim, tmp_path):
    manifest = tmp_path / "pod.json"
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "from-file", "namespace": "ml"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}
    manifest.write_text(json.dumps(doc))
    sim.kubectl("create", "--validate=false", "-f", str(manifest))
    doc["spec"]["containers"][0]["image"] = "busybox:2"
    manifest.write_text(json.dumps(doc))
    sim.kubectl("apply", "--validate=false", "-f", str(manifest))
    assert sim.request("GET", "/api/v1/namespaces/ml/pods/from-file")["spec"]["containers"][0]["image"] == "busybox:2"
    if kubectl_minor(sim, find_kubectl()) >= 28:
        # Newer kubectl validates through the server (our OpenAPI v3 stub advertises fieldValidation).
        doc["spec"]["containers"][0]["image"] = "busybox:3"
        manifest.write_text(json.dumps(doc))
        sim.kubectl("apply", "-f", str(manifest))
        assert sim.request("GET",
                           "/api/v1/namespaces/ml/pods/from-file")["spec"]["containers"][0]["image"] == "busybox:3"


def test_server_dry_run_changes_nothing(sim):
    before = sim.request("GET", "/api/v1/nodes/gpu-node-01")
    if kubectl_minor(sim, find_kubectl()) >= 27:
        sim.kubectl("annotate", "node", "gpu-node-01", "dry=run", "--dry-run=server")
        sim.kubectl("delete", "node", "gpu-node-01", "--dry-run=server")
    else:  # older kubectl checks dry-run support in OpenAPI v2 (protobuf), which the sim does not serve
        sim.request("PATCH", "/api/v1/nodes/gpu-node-01?dryRun=All", {"metadata": {"annotations": {"dry": "run"}}},
                    "application/merge-patch+json")
        sim.request("DELETE", "/api/v1/nodes/gpu-node-01", {"dryRun": ["All"]})
    assert sim.request("GET", "/api/v1/nodes/gpu-node-01") == before
