"""`hami doctor` against what the Helm chart really deploys.

The chart is rendered (Helm's engine, tests/deploy/chart.py) into release namespace hami-system with
custom resource names and leader election on; its ConfigMaps are applied to the embedded API server,
and the workloads the server cannot run are stood in for by the pods their controllers would create
from the rendered pod templates (labels included) plus the Lease the scheduler keeps. The doctor then
finds the namespace and the device config from the cluster alone, so a pod asking for the custom
resource is recognised as a HAMi pod, the scheduler is seen alive through the Lease in the release
namespace, and the fix's kubectl command selects the device-plugin pod by the labels the chart sets.
"""

from __future__ import annotations

import time

import yaml

from hami.doctor import nodes as doctor_nodes
from hami.doctor.gather import installation, scheduler_fact
from hami.doctor.pod import diagnose
from hami.doctor.tree import DEVICE_PLUGIN_SELECTOR
from tests.deploy.chart import NAMESPACE, find, objects, one
from tests.doctor.conftest import doctor_args

VALUES = {"resourceName": "example.com/vgpu", "resourceMem": "example.com/vgpu-memory",
          "resourceCores": "example.com/vgpu-cores", "scheduler": {"leaderElect": True}}


def apply_chart(store) -> list[dict]:
    docs = objects(VALUES)
    store.create("namespaces", "", {"metadata": {"name": NAMESPACE}})  # helm install --create-namespace
    for cm in find(docs, "ConfigMap"):
        store.create("configmaps", cm["metadata"]["namespace"], cm)
    # What the Deployment and DaemonSet controllers would create: pods from the rendered templates.
    for kind, name in (("Deployment", "hami-scheduler"), ("DaemonSet", "hami-device-plugin")):
        tmpl = one(docs, kind, name)["spec"]["template"]
        store.create("pods", NAMESPACE, {"metadata": {"name": f"{name}-x1", "labels": tmpl["metadata"]["labels"]},
                                         "spec": {**tmpl["spec"], "nodeName": "gpu-1"}})
    store.create("leases.coordination.k8s.io", NAMESPACE, {
        "metadata": {"name": "hami-scheduler"},
        "spec": {"holderIdentity": "hami-scheduler-x1", "leaseDurationSeconds": 15,
                 "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}})
    return docs


async def test_doctor_reads_namespace_device_config_and_labels_from_the_deployed_chart(apiserver, kube):
    store = apiserver.store
    docs = apply_chart(store)
    device = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert device["nvidia"]["resourceCountName"] == "example.com/vgpu"
    store.create("nodes", "", {"metadata": {"name": "gpu-1", "annotations": {}},
                               "status": {"allocatable": {"example.com/vgpu": "20"},
                                          "capacity": {"example.com/vgpu": "20"}}})
    store.create("pods", "default", {
        "metadata": {"name": "train"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [{
            "name": "c", "image": "cuda", "resources": {"limits": {"example.com/vgpu": "1",
                                                                    "example.com/vgpu-memory": "4000"}}}]}})
    store.create("events", "default", {
        "metadata": {"name": "train.1"}, "involvedObject": {"kind": "Pod", "name": "train", "namespace": "default"},
        "reason": "FilteringFailed", "message": "1 nodes NodeUnfitPod(gpu-1)", "type": "Warning", "count": 1,
        "source": {"component": "hami-scheduler"},
        "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    d = await diagnose(kube, doctor_args(pod="default/train", scheduler_namespace="", hami_namespace=""))
    # a HAMi pod (custom resource names from the ConfigMap), scheduler alive via the release's Lease
    assert d.leaf == "node-register-missing", d
    args = doctor_args(scheduler_namespace="", hami_namespace="")
    sched = await scheduler_fact(kube, args, namespace=(await installation(kube, args)).namespace)
    assert sched.alive is True and sched.how.startswith(f"lease {NAMESPACE}/hami-scheduler held by hami-scheduler-x1")
    assert d.setup == (f"HAMi in namespace {NAMESPACE}, device config from configmap "
                       f"{NAMESPACE}/hami-scheduler-device (resource example.com/vgpu)",)
    command = f"kubectl -n {NAMESPACE} get pods -l {DEVICE_PLUGIN_SELECTOR} -o wide"
    assert command in d.fix
    # the fix's selector finds exactly the device-plugin pod the DaemonSet's template makes
    picked = await kube.list("pods", NAMESPACE, label_selector=DEVICE_PLUGIN_SELECTOR)
    assert [p["metadata"]["name"] for p in picked["items"]] == ["hami-device-plugin-x1"]

    rows = await doctor_nodes.check(kube, doctor_args(hami_namespace=""))
    assert [(r.name, r.gpu_node, r.healthy) for r in rows] == [("gpu-1", True, False)]  # counted by example.com/vgpu


async def test_hami_namespace_flag_wins_and_a_missing_configmap_is_said(apiserver, kube):
    apply_chart(apiserver.store)
    inst = await installation(kube, doctor_args(hami_namespace="elsewhere"))
    assert (inst.namespace, inst.source, inst.nvidia.resource_count_name) == (
        "elsewhere", "built-in defaults", "nvidia.com/gpu")
    assert inst.notes == ("no ConfigMap with app.kubernetes.io/component=hami-scheduler holding "
                          "device-config.yaml in elsewhere: using HAMi's default device config",)
    found = await installation(kube, doctor_args(hami_namespace=""))
    assert (found.namespace, found.nvidia.resource_count_name, found.notes) == (NAMESPACE, "example.com/vgpu", ())
