"""The replay's kept node order and remembered fit failures (hami/whatif/picker.py) give the answers
`score.select_node` gives, pod for pod.

Covers: random clusters (mixed card sizes, split counts and types, labels, a tainted node, cordoned
GPUs, running pods, nodes reporting allocatable cpu and pods) and random queues (1-2 GPUs, memory in MiB or percent,
cores, init containers, two-container pods with cpu limits (kube-scheduler's NodeResourcesFit), per-pod node and GPU
policies, use-gputype, nodeSelector, a namespace quota that fills up) replayed with the picker and with `select_node`
per pod, under binpack and spread: the same node, devices and pending reasons for every pod, the same card fill at the
end. A node refused for one request is tried again once a pod leaves it changed.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.device import codec
from hami.device.model import ContainerDeviceRequest, DeviceInfo
from hami.scheduler.placement import fit as fitmod
from hami.scheduler.placement import score as scoremod
from hami.scheduler.placement.usage import UsageIndex
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import run_scenario
from hami.whatif.picker import Picker
from hami.whatif.scenario import parse_plan
from tests.whatif import snap

MODELS = ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100-80GB-HBM3")


def _cluster_doc(rng: random.Random) -> dict:
    items = []
    names = [f"n{i}" for i in range(rng.randint(2, 8))]
    for i, name in enumerate(names):
        gpus = rng.randint(1, 4)
        n = snap.node(name, gpus=gpus, mem=rng.choice([16384, 40960, 81920]), count=rng.choice([2, 4, 10]),
                      labels={"zone": rng.choice("ab")})
        if rng.random() < 0.3:  # another model on this node (use-gputype filters it)
            devs = codec.decode_node_devices(n["metadata"]["annotations"][codec.REGISTER_ANNOTATION])
            devs = [replace(d, type=MODELS[2]) for d in devs]
            n["metadata"]["annotations"][codec.REGISTER_ANNOTATION] = codec.encode_node_devices(devs)
        if i == 0 and rng.random() < 0.5:
            n["spec"] = {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}
        if rng.random() < 0.5:  # kube-scheduler's NodeResourcesFit counts cpu and pods here
            n["status"]["allocatable"].update({"cpu": rng.choice(["2", "3500m"]), "pods": str(rng.randint(2, 6))})
        items.append(n)
        for j in range(rng.randint(0, 3)):
            running = snap.pod(f"run-{name}-{j}", node=name, card=rng.randrange(gpus),
                               mem=rng.choice([1000, 4000, 8000]), cores=rng.choice([0, 20, 50]))
            if rng.random() < 0.5:
                running["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
            items.append(running)
    items.append(snap.quota("q", mem=rng.choice([20000, 60000]), cores=rng.choice([100, 300])))
    return snap.listing(*items)


def _workloads(rng: random.Random) -> list[dict]:
    out = []
    for k in range(rng.randint(3, 7)):
        w: dict = {"name": f"w{k}", "count": rng.randint(1, 12), "gpus": rng.choice([1, 1, 2]),
                   "namespace": rng.choice(["default", "default", "q"])}
        if rng.random() < 0.2:
            w["memoryPercentage"] = rng.choice([25, 50])
        else:
            w["memory"] = rng.choice([2000, 8000, 20000, 40000])
        if rng.random() < 0.6:
            w["cores"] = rng.choice([0, 10, 30, 60])
        annos = {}
        if rng.random() < 0.3:
            annos["hami.io/node-scheduler-policy"] = rng.choice(["spread", "binpack"])
        if rng.random() < 0.3:
            annos["hami.io/gpu-scheduler-policy"] = rng.choice(["spread", "binpack"])
        if rng.random() < 0.2:
            annos["nvidia.com/use-gputype"] = rng.choice(["H100", "A100"])
        if annos:
            w["annotations"] = annos
        if rng.random() < 0.2:
            w["nodeSelector"] = {"zone": rng.choice("ab")}
        if rng.random() < 0.2:
            lim = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(rng.choice([1000, 6000]))}
            if rng.random() < 0.7:
                lim["cpu"] = rng.choice(["250m", "1"])
            w = {"name": f"t{k}", "count": rng.randint(1, 5), "pod": {"spec": {
                "initContainers": [{"name": "init", "image": "x", "resources": {"limits": dict(lim)}}],
                "containers": [{"name": "a", "image": "x", "resources": {"limits": dict(lim)}},
                               {"name": "b", "image": "x", "resources": {"limits": dict(lim)}}]}}}
        out.append(w)
    return out


def _outcomes(result):
    return [(o.pod, o.node, o.devices, o.reasons, o.message) for o in result.outcomes]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_kept_order_places_every_pod_as_select_node(seed):
    rng = random.Random(seed)
    cluster = parse_snapshot(_cluster_doc(rng), "snap.json")
    plan = parse_plan({
        "seed": seed, "arrival": rng.choice(["sequential", "interleaved", "shuffled"]),
        "workloads": _workloads(rng),
        "scenarios": [{"name": "spread", "changes": {"nodeSchedulerPolicy": "spread"}},
                      {"name": "cordon", "changes": {"cordonGPUs": ["n1/0"], "deviceSplitCount": 3}}],
    }, "plan.yaml")
    for scenario in plan.scenarios:
        fast = run_scenario(cluster, scenario, plan, kept_order=True)
        ref = run_scenario(cluster, scenario, plan, kept_order=False)
        assert _outcomes(fast) == _outcomes(ref), scenario.name
        assert fast.nodes == ref.nodes


def test_a_refused_node_is_tried_again_after_its_usage_changes():
    index = UsageIndex()
    for name in ("a", "b"):
        index.set_node(name, [DeviceInfo(id=f"GPU-{name}", count=2, devmem=10000, devcore=100,
                                         type=MODELS[0], index=0, numa=0, mode="hami-core", health=True)])
    picker = Picker(index)
    names = ["a", "b"]
    big = fitmod.pod_request([ContainerDeviceRequest(1, memreq=8000)], 0, {}, node_policy="binpack")
    small = fitmod.pod_request([ContainerDeviceRequest(1, memreq=3000)], 0, {}, node_policy="binpack")

    first = picker.select(big, names, "all")
    assert first.node == "a"
    index.add_pod("p1", "a", first.devices)
    # binpack prefers the used node a; it cannot take 8000 MiB more (2000 left) and b takes the pod.
    second = picker.select(big, names, "all")
    assert second.node == "b"
    index.add_pod("p2", "b", second.devices)
    third = picker.select(big, names, "all")
    assert third.node is None and third.failed_nodes == scoremod.select_node(index.nodes, names, big).failed_nodes
    assert "CardInsufficientMemory" in third.failed_nodes["a"]
    # A pod leaves a (only the index is told): the remembered refusal must not outlive the change.
    index.remove_pod("p1")
    assert picker.select(big, names, "all").node == "a"
    assert picker.select(small, names, "all").node == scoremod.select_node(index.nodes, names, small).node
