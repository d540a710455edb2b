"""`hami doctor pod`'s scale-up line: can this pending pod make Cluster Autoscaler add a node, and why not."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from hami.doctor.scaleup import scale_up_line
from hami.doctor.tree import EventFact

MEM = "nvidia.com/gpumem"
GROUP = "eks.amazonaws.com/nodegroup"


def node(name, gpumem=None, group="gpu-a", taints=()):
    alloc = {"cpu": "8", "nvidia.com/gpu": "10"}
    if gpumem is not None:
        alloc[MEM] = str(gpumem)
    return {"metadata": {"name": name, "labels": {GROUP: group}},
            "spec": {"taints": list(taints)} if taints else {}, "status": {"allocatable": alloc}}


def pod(name="p", node_name="", **limits):
    """A pod asking `nvidia.com/<key>` for each keyword (gpu defaults to 1)."""
    asked = {f"nvidia.com/{k}": str(v) for k, v in {"gpu": 1, **limits}.items()}
    spec = {"containers": [{"name": "c", "resources": {"limits": asked}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_no_node_advertising_gpumem_says_so_and_names_the_flag():
    line = scale_up_line(pod(gpumem=1000), [node("a"), node("b")], [])
    assert line.startswith("cannot trigger a scale-up: no node in the cluster advertises nvidia.com/gpumem")
    assert "--report-node-capacity" in line and "devicePlugin.reportNodeCapacity=true" in line


def test_a_memory_percentage_is_never_reported():
    line = scale_up_line(pod(**{"gpumem-percentage": 50}), [node("a", 40960)], [])
    assert "nvidia.com/gpumem-percentage" in line and "instead of a percentage" in line


def test_no_template_fits_names_each_groups_refusal():
    nodes = [node("a", 40960), node("b", 40960, group="gpu-b",
                                    taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}])]
    line = scale_up_line(pod(gpumem=50000), nodes, [])
    assert line == ("cannot trigger a scale-up: no node group's template would fit it: "
                    f"{GROUP}=gpu-a: Insufficient nvidia.com/gpumem; "
                    f"{GROUP}=gpu-b: node(s) had untolerated taint {{team: ml}}")


def test_room_by_the_in_tree_count_means_no_scale_up():
    # a 2-GPU pod of 20000 on each GPU is counted 20000 in-tree: 20960 of 40960 look free
    running = pod("r", node_name="a", gpu=2, gpumem=20000)
    line = scale_up_line(pod(gpumem=20000), [node("a", 40960)], [running])
    assert line.startswith("will not trigger a scale-up: node a has room for it by the in-tree count")


def test_a_fitting_template_can_trigger_and_cluster_autoscalers_own_word_is_quoted():
    running = pod("r", node_name="a", gpumem=40000)
    events = [EventFact("NotTriggerScaleUp", "old", time=1.0), EventFact("TriggeredScaleUp", "pod triggered scale-up",
                                                                         time=2.0)]
    line = scale_up_line(pod(gpumem=30000), [node("a", 40960)], [running], events)
    assert line == (f"can trigger a scale-up: the template of {GROUP}=gpu-a fits it (`hami whatif --scale-up` "
                    "counts the nodes) (Cluster Autoscaler said: TriggeredScaleUp: pod triggered scale-up)")


def test_pods_without_extended_resources_or_already_bound_get_no_line():
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert scale_up_line(plain, [node("a")], []) is None
    assert scale_up_line(pod(node_name="a", gpumem=1), [node("a")], []) is None


async def test_doctor_pod_prints_the_scale_up_line(cluster, apiserver):
    cluster.live_lease()
    cluster.node("n1")  # HAMi registered, no nvidia.com/gpumem in allocatable
    cluster.pod("p", mem=4000)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/p", "--kubeconfig", apiserver.kubeconfig,
        "--json", "--no-whatif", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 1, err.decode()
    doc = json.loads(out)
    assert doc["scaleUp"].startswith("cannot trigger a scale-up: no node in the cluster advertises nvidia.com/gpumem")
