"""End to end: a mixed embedded cluster, `--sim-gpus "2xNVIDIA ...;2xAscend910B3:65536;2xMLU:24576;
1xNVIDIA ...,1xAscend910B3:65536"`.

gpu-node-1 runs our NVIDIA node agent; gpu-node-2 registers as HAMi's Ascend device plugin would
(`hami.io/node-register-Ascend910B3`), gpu-node-3 as Cambricon's (node capacity only); gpu-node-4
has both an NVIDIA GPU (our agent) and an Ascend card (its plugin). Pods applied with kubectl go
through the webhook and the extender to a node of their vendor and run (an Ascend pod on the mixed
node starts as Ascend's plugin would: bind phase success, the node lock released); `hami doctor
nodes` shows each vendor's registration and handshake; `hami doctor pod` explains an Ascend pod
that cannot fit in Ascend's words.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.embedded import embedded_system, wait_until

pytestmark = pytest.mark.slow

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: npu, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-node-2}
  containers:
  - name: c
    image: ascend
    resources:
      limits: {huawei.com/Ascend910B3: "1", huawei.com/Ascend910B3-memory: "12000"}
---
apiVersion: v1
kind: Pod
metadata: {name: mlu, namespace: default}
spec:
  containers:
  - name: c
    image: mlu
    resources:
      limits: {cambricon.com/mlu: "1", cambricon.com/mlu.smlu.vmemory: "8", cambricon.com/mlu.smlu.vcore: "20"}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-node-1}
  containers:
  - name: c
    image: cuda
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000"}
---
apiVersion: v1
kind: Pod
metadata: {name: npu-big, namespace: default}
spec:
  containers:
  - name: c
    image: ascend
    resources:
      limits: {huawei.com/Ascend910B3: "3"}
---
apiVersion: v1
kind: Pod
metadata: {name: npu-mixed, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: gpu-node-4}
  containers:
  - name: c
    image: ascend
    resources:
      limits: {huawei.com/Ascend910B3: "1"}
"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    with embedded_system(tmp_path_factory.mktemp("mixed"), "--sim-nodes", "4", "--sim-gpus",
                         "2xNVIDIA A100-SXM4-40GB:40960;2xAscend910B3:65536;2xMLU:24576;"
                         "1xNVIDIA A100-SXM4-40GB:40960,1xAscend910B3:65536") as system:
        run = system.run
        wait_until(lambda: "hami.io/node-nvidia-register" in run("get", "node", "gpu-node-1", "-o", "json"), 120,
                   what="the NVIDIA node registered")
        # the pods every test reads, applied here so that the tests may run in any order
        run("apply", "--validate=false", "-f", "-", stdin=PODS)
        yield {"kubectl": run, "env": system.env}


def _doctor(mixed, *args):
    return subprocess.run([sys.executable, "-m", "hami.cli.main", "doctor", *args], env=mixed["env"],
                          capture_output=True, text=True, timeout=60)


def test_each_vendor_registers_and_its_pods_run_on_its_nodes(mixed):
    run = mixed["kubectl"]
    npu_node = json.loads(run("get", "node", "gpu-node-2", "-o", "json"))
    devices = json.loads(npu_node["metadata"]["annotations"]["hami.io/node-register-Ascend910B3"])
    assert [d["type"] for d in devices] == ["Ascend910B3", "Ascend910B3"]
    assert npu_node["status"]["capacity"]["huawei.com/Ascend910B3"] == "2"
    mlu_node = json.loads(run("get", "node", "gpu-node-3", "-o", "json"))
    assert mlu_node["status"]["capacity"]["cambricon.com/mlu.smlu.vcore"] == "200"
    assert not any(k.startswith("hami.io/node-") for k in mlu_node["metadata"].get("annotations") or {})

    def running():
        items = json.loads(run("get", "pods", "-o", "json"))["items"]
        got = {p["metadata"]["name"]: p for p in items if p["status"].get("phase") == "Running"}
        return got if {"npu", "mlu", "gpu", "npu-mixed"} <= set(got) else None

    pods = wait_until(running, 120, what="npu, mlu, gpu and npu-mixed Running")
    assert (pods["gpu"]["spec"]["nodeName"], pods["npu"]["spec"]["nodeName"], pods["mlu"]["spec"]["nodeName"]) == (
        "gpu-node-1", "gpu-node-2", "gpu-node-3")
    npu = pods["npu"]
    assert npu["spec"]["schedulerName"] == "hami-scheduler"  # the webhook recognised an Ascend resource
    assert npu["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == "16384"
    ann = npu["metadata"]["annotations"]
    assert ann["hami.io/bind-phase"] == "success"
    assert json.loads(ann["huawei.com/Ascend910B3"])[0]["temp"] == "vir05_1c_16g"
    assert pods["mlu"]["metadata"]["annotations"]["CAMBRICON_DSMLU_PROFILE"].endswith("_20_8")
    # The mixed node: the Ascend pod started as Ascend's plugin would, not through our NVIDIA agent.
    mixed_pod = pods["npu-mixed"]
    assert mixed_pod["spec"]["nodeName"] == "gpu-node-4"
    assert mixed_pod["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    node4 = json.loads(run("get", "node", "gpu-node-4", "-o", "json"))
    assert "hami.io/mutex.lock" not in (node4["metadata"].get("annotations") or {})
    assert "hami.io/node-nvidia-register" in node4["metadata"]["annotations"]


def test_doctor_shows_vendor_registrations_and_explains_a_vendor_pod(mixed):
    res = _doctor(mixed, "nodes", "--json")
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["gpu-node-2"]["vendors"][0].startswith("Ascend910B3: register ok (2 devices)")
    assert "handshake hami.io/node-handshake-Ascend910B3=Requesting_" in rows["gpu-node-2"]["vendors"][0]
    assert rows["gpu-node-3"]["vendors"] == ["MLU: register ok (2 devices) (capacity cambricon.com/mlu.smlu.vcore)"]
    assert all(r["healthy"] for r in rows.values()), rows

    def failed():
        out = mixed["kubectl"]("get", "events", "--field-selector",
                               "involvedObject.name=npu-big,reason=FilteringFailed", "-o", "json")
        return json.loads(out)["items"] or None

    wait_until(failed, 60, what="FilteringFailed for npu-big")
    res = _doctor(mixed, "pod", "default/npu-big", "--json", "--no-whatif")
    report = json.loads(res.stdout)
    assert report["leaf"] == "filtering-failed"
    assert report["summary"] == "no node fits the pod's Ascend910B3 request"
    assert "ask for fewer huawei.com/Ascend910B3 per container" in report["fix"]
