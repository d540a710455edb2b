"""With `--report-node-capacity`, kube-scheduler's in-tree NodeResourcesFit (what Cluster Autoscaler
runs on its template nodes) never refuses a pod that HAMi's extender places on the same empty node.

The in-tree count is an underestimate: a container's `nvidia.com/gpumem` is per GPU, but
NodeResourcesFit counts it once whatever its `nvidia.com/gpu`, and the extender's per-GPU fit is
stricter than one sum over the node. Hypothesis searches pods and nodes (GPU memory, health,
deviceMemoryScaling, deviceCoreScaling, split count, init containers) for a counterexample.

The pods are what the webhook admits (a container with gpumem or gpucores but no count gets
`nvidia.com/gpu: 1`), as both kube-scheduler and Cluster Autoscaler see them. Outside the claim:
a container writing `nvidia.com/gpu: 0` beside gpumem asks memory the extender ignores, and
`nvidia.com/gpumem-percentage` is reported by no node (the last test here shows both)."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hami.agent.capacity import node_capacity
from hami.agent.register import build_devices
from hami.device.model import NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from hami.device.request import pod_requests
from hami.gpu.backend import GpuInfo
from hami.kubesched import intree
from hami.scheduler.admission.webhook import WebhookSettings, mutate_pod
from hami.scheduler.placement.fit import fit_pod, pod_request
from hami.scheduler.placement.usage import DeviceState, NodeUsage

MEM, CORES, GPU = "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"


def reported_node(gpus: list[GpuInfo], cfg: NvidiaConfig):
    """The Node as the agent (capacity) and kubelet (nvidia.com/gpu: split x healthy GPUs) report it,
    and the extender's view of the same GPUs."""
    dev_settings = effective_device_settings(cfg, None)
    devices = build_devices(gpus, dev_settings)
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", **node_capacity(devices, MEM, CORES),
             GPU: str(dev_settings.split_count * sum(1 for g in gpus if g.healthy))}
    node = {"metadata": {"name": "n"}, "status": {"capacity": dict(alloc), "allocatable": alloc}}
    return node, NodeUsage("n", [DeviceState.from_info(d) for d in devices])


def extender_places(pod: dict, usage: NodeUsage, cfg: NvidiaConfig) -> bool:
    reqs = pod_requests(pod, cfg)
    num_init = len((pod.get("spec") or {}).get("initContainers") or [])
    return fit_pod(usage, pod_request(reqs, num_init, {})).fits


gpu_st = st.builds(lambda mem, healthy: (mem, healthy), st.sampled_from([8192, 15360, 24576, 40960, 81920]),
                   st.booleans())
container_st = st.fixed_dictionaries({
    "gpus": st.one_of(st.none(), st.integers(1, 4)),
    "mem": st.one_of(st.none(), st.integers(1, 90000)),
    "cores": st.one_of(st.none(), st.integers(0, 100)),
})


def container(i: int, c: dict) -> dict:
    limits = {}
    if c["gpus"] is not None:
        limits[GPU] = str(c["gpus"])
    if c["mem"] is not None:
        limits[MEM] = str(c["mem"])
    if c["cores"] is not None:
        limits[CORES] = str(c["cores"])
    return {"name": f"c{i}", "resources": {"limits": limits}}


@settings(max_examples=400, deadline=None)
@given(gpus=st.lists(gpu_st, min_size=1, max_size=4), split=st.integers(1, 10),
       mem_scaling=st.sampled_from([1.0, 1.5, 2.0]), core_scaling=st.sampled_from([1.0, 2.0]),
       app=st.lists(container_st, min_size=1, max_size=3), init=st.lists(container_st, max_size=1))
def test_in_tree_fit_never_refuses_what_the_extender_places(gpus, split, mem_scaling, core_scaling, app, init):
    cfg = NvidiaConfig(device_split_count=split, device_memory_scaling=mem_scaling, device_core_scaling=core_scaling)
    infos = [GpuInfo(uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000", index=i, name="NVIDIA A100",
                     memory_total_mib=mem, healthy=healthy) for i, (mem, healthy) in enumerate(gpus)]
    node, usage = reported_node(infos, cfg)
    pod = {"metadata": {"name": "p", "namespace": "t"},
           "spec": {"schedulerName": "hami-scheduler", "containers": [container(i, c) for i, c in enumerate(app)],
                    **({"initContainers": [container(9, c) for c in init]} if init else {})}}
    decision = mutate_pod(pod, WebhookSettings(nvidia=cfg))
    if not decision.allowed:
        event("the webhook denies")
        return
    pod = decision.pod or pod
    if not extender_places(pod, usage, cfg):
        event("the extender refuses")
        return
    event("the extender places")
    verdict = intree.fit_resources(pod, node, [], intree.Requests(), extended=True)
    assert verdict is None, (verdict, pod, node["status"]["allocatable"])


def test_a_multi_gpu_pod_counts_its_per_gpu_memory_once():
    cfg = NvidiaConfig()
    infos = [GpuInfo(uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000", index=i, name="NVIDIA A100",
                     memory_total_mib=40960) for i in range(2)]
    node, usage = reported_node(infos, cfg)
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "2", MEM: "30000", CORES: "60"}}}]}}
    assert extender_places(pod, usage, cfg)  # 30000 MiB on each of the two GPUs: 60000 in all
    assert intree.extended_requests(pod) == {GPU: 2, MEM: 30000, CORES: 60}  # the count sees 30000
    assert node["status"]["allocatable"][MEM] == "81920"
    assert intree.fit_resources(pod, node, [], intree.Requests(), extended=True) is None
    # the same memory on one GPU the extender refuses; in-tree still says it fits (a sum, not per GPU)
    one = {"metadata": {"name": "q"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "1", MEM: "60000"}}}]}}
    assert not extender_places(one, usage, cfg)
    assert intree.fit_resources(one, node, [], intree.Requests(), extended=True) is None


def test_without_reported_capacity_every_gpumem_pod_is_refused_in_tree():
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "64", GPU: "20"}}}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "1", MEM: "1000"}}}]}}
    verdict = intree.fit_resources(pod, node, [], intree.Requests(), extended=True)
    assert verdict is not None and verdict.reasons == (f"Insufficient {MEM}",)
    # the embedded kube-scheduler loop (HAMi's profile: the device resources are ignoredByScheduler)
    assert intree.fit_resources(pod, node, [], intree.Requests()) is None
    # memory beside an explicit zero count: the extender ignores the container, in-tree counts it
    zero = {"metadata": {"name": "z"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "0", MEM: "50000"}}}]}}
    assert intree.fit_resources(zero, node, [], intree.Requests(), extended=True).reasons == (f"Insufficient {MEM}",)
    # a percentage of memory is never reported: such a pod cannot make Cluster Autoscaler scale up
    pct = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {GPU: "1", "nvidia.com/gpumem-percentage": "50"}}}]}}
    node["status"]["allocatable"][MEM] = "40960"
    assert intree.fit_resources(pct, node, [], intree.Requests(), extended=True).reasons == \
        ("Insufficient nvidia.com/gpumem-percentage",)
