"""`hami doctor pod`'s preemption line (hami.doctor.preemption) on a pending high-priority pod.

Covers: whether --gpu-preemption is on, read from the scheduler pod's args (on, off, no scheduler pod
found); which victims the controller's own decision would take (the minimal lower-priority set, by
namespace/name and node); why none: preemptionPolicy Never, no lower-priority pods, no set frees
enough; a PodDisruptionBudget protecting the only victims is named (the eviction would be refused);
a pod that fits now needs no preemption; the CLI's text and --json carry the line.
"""

from __future__ import annotations

import json

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.doctor.pod import main, preemption
from hami.doctor.preemption import flag_state, preemption_line
from hami.scheduler.preemption import plan as gpupreempt

from .conftest import doctor_args, register_value

GPU_MEM = 40960


def gpu_node(store, name: str) -> None:
    store.create("nodes", "", {"metadata": {"name": name, "annotations": {
        codec.REGISTER_ANNOTATION: register_value(name, 1, mem=GPU_MEM)}},
        "status": {"allocatable": {"nvidia.com/gpu": "10"}, "capacity": {"nvidia.com/gpu": "10"}}})


def gpu_pod(name: str, mem: int, priority: int, *, node: str = "", policy: str = "", labels=None) -> dict:
    annos = {}
    if node:
        text = codec.encode_pod_devices(((ContainerDevice(f"GPU-{node}-0", "NVIDIA", mem, 0),),))
        annos = {codec.ALLOCATED_ANNOTATION: text, "hami.io/vgpu-node": node}
    spec = {"schedulerName": "hami-scheduler", "priority": priority, "containers": [{
        "name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}}}]}
    if node:
        spec["nodeName"] = node
    if policy:
        spec["preemptionPolicy"] = policy
    return {"metadata": {"name": name, "namespace": "default", "annotations": annos, "labels": labels or {}},
            "spec": spec}


def scheduler_pod(store, *args: str) -> None:
    store.create("pods", "kube-system", {"metadata": {"name": "hami-scheduler-0", "labels": {
        "app.kubernetes.io/component": "hami-scheduler"}}, "spec": {"containers": [{
            "name": "vgpu-scheduler-extender", "image": "hami", "args": ["--role", "scheduler", *args]}]}})


def full_node(store) -> None:
    gpu_node(store, "n0")
    for i, prio in enumerate((0, 5)):
        store.create("pods", "default", gpu_pod(f"low{i}", 20480, prio, node="n0", labels={"app": f"l{i}"}))
        store.patch("pods", "default", f"low{i}", b'{"status":{"phase":"Running"}}', "application/merge-patch+json",
                    subresource="status")


async def test_on_it_names_the_victims_it_would_take(apiserver, kube):
    store = apiserver.store
    full_node(store)
    scheduler_pod(store, "--gpu-preemption")
    store.create("pods", "default", gpu_pod("urgent", 20480, 1000))
    line = await preemption(kube, doctor_args(pod="default/urgent"))
    assert line == "GPU preemption (--gpu-preemption) is on; it would evict default/low0 on node n0"


async def test_off_or_unknown_says_so_and_what_it_would_do(apiserver, kube):
    store = apiserver.store
    full_node(store)
    store.create("pods", "default", gpu_pod("urgent", 20480, 1000))
    line = await preemption(kube, doctor_args(pod="default/urgent"))
    assert line.startswith("GPU preemption is not known to be on (no hami-scheduler pod found)")
    scheduler_pod(store, "--scheduler-name=hami-scheduler")
    line = await preemption(kube, doctor_args(pod="default/urgent"))
    assert line.startswith("GPU preemption is off") and "scheduler.gpuPreemption.enabled=true it would evict " \
        "default/low0 on node n0" in line


async def test_why_not(apiserver, kube):
    store = apiserver.store
    full_node(store)
    scheduler_pod(store, "--gpu-preemption=true")
    store.create("pods", "default", gpu_pod("polite", 20480, 1000, policy="Never"))
    store.create("pods", "default", gpu_pod("peer", 20480, 0))
    store.create("pods", "default", gpu_pod("huge", 60000, 1000))

    async def line(name):
        return await preemption(kube, doctor_args(pod=f"default/{name}"))
    assert (await line("polite")).endswith("it would evict nothing: preemptionPolicy: Never")
    assert (await line("peer")).endswith(gpupreempt.NO_LOWER)
    assert (await line("huge")).endswith(gpupreempt.NO_SET_HELPS)
    store.create("poddisruptionbudgets.policy", "default", {"metadata": {"name": "all"}, "spec": {
        "maxUnavailable": 0, "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}})
    store.create("pods", "default", gpu_pod("urgent", 20480, 1000))
    assert "protected by a PodDisruptionBudget: the Eviction API would refuse" in await line("urgent")
    gpu_node(store, "n1")  # a free GPU: nothing to preempt for
    assert (await line("urgent")).endswith("it fits a node now: preemption is not needed")


async def test_cli_prints_the_line_in_text_and_json(apiserver, kube, capsys):
    store = apiserver.store
    full_node(store)
    scheduler_pod(store, "--gpu-preemption")
    store.create("pods", "default", gpu_pod("urgent", 20480, 1000))
    args = {"pod": "default/urgent", "whatif": False, "kubeconfig": apiserver.kubeconfig}
    assert await main(doctor_args(**args)) == 1
    out = capsys.readouterr().out
    assert "  preemption: GPU preemption (--gpu-preemption) is on; it would evict default/low0" in out
    assert await main(doctor_args(**{**args, "json": True})) == 1
    assert json.loads(capsys.readouterr().out)["preemption"].endswith("default/low0 on node n0")


def test_flag_state_and_wording_are_pure():
    assert flag_state([]) is None
    pod = {"spec": {"containers": [{"args": ["--role", "scheduler", "--gpu-preemption=false"]}]}}
    assert flag_state([pod]) is False
    assert flag_state([{"spec": {"containers": [{"command": ["hami", "--role", "scheduler", "--gpu-preemption"]}]}}])
    plan = gpupreempt.Plan("n1", ("u1", "u2"), 0, (0, 1), ())
    assert preemption_line(True, plan, {"u1": "a/x", "u2": "a/y"}).endswith("evict a/x, a/y on node n1")
