"""Builders of small snapshot documents (what `kubectl get nodes,pods,resourcequotas -A -o json` prints)."""

from __future__ import annotations

from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo

MODEL = "NVIDIA A100-SXM4-40GB"


def node(name: str, gpus: int = 1, mem: int = 40960, count: int = 10, *, labels: dict | None = None,
         extra: dict | None = None) -> dict:
    devices = [DeviceInfo(id=f"GPU-{name}-{i}", count=count, devmem=mem, devcore=100, type=MODEL, index=i,
                          numa=0, mode="hami-core", health=True) for i in range(gpus)]
    annos = {codec.REGISTER_ANNOTATION: codec.encode_node_devices(devices), **(extra or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annos, "labels": labels or {}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus * count)}}}


def pod(name: str, ns: str = "default", *, gpus: int = 1, mem: int | None = 4000, cores: int | None = None,
        node: str = "", card: int = 0, created: str = "2026-11-24T00:00:00Z", annotations: dict | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    annos = dict(annotations or {})
    spec = {"schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}
    status = {"phase": "Pending"}
    if node:
        devs = ((ContainerDevice(f"GPU-{node}-{card}", "NVIDIA", mem or 0, cores or 0),),)
        text = codec.encode_pod_devices(devs)
        annos.update({codec.VGPU_NODE_ANNOTATION: node, codec.ALLOCATED_ANNOTATION: text,
                      codec.TO_ALLOCATE_ANNOTATION: text})
        spec["nodeName"] = node
        status = {"phase": "Running"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "annotations": annos,
                         "creationTimestamp": created},
            "spec": spec, "status": status}


def quota(ns: str, mem: int | None = None, cores: int | None = None) -> dict:
    hard = {}
    if mem is not None:
        hard["limits.nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        hard["limits.nvidia.com/gpucores"] = str(cores)
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns},
            "spec": {"hard": hard}}


def device_config(split: int = 10, mem_scaling: float = 1.0) -> dict:
    text = f"nvidia:\n  deviceSplitCount: {split}\n  deviceMemoryScaling: {mem_scaling}\n"
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hami-scheduler-device",
                                                                  "namespace": "kube-system"},
            "data": {"device-config.yaml": text}}


def listing(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}
