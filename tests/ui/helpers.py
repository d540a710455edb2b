"""Builders of nodes, pods, events and quotas as the API server holds them, for the UI's tests and bench."""

from __future__ import annotations

from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo

MODEL = "NVIDIA A100-SXM4-40GB"


def node(name: str, gpus: int = 2, mem: int = 40960) -> dict:
    devs = [DeviceInfo(id=f"GPU-{name}-{i}", count=10, devmem=mem, devcore=100, type=MODEL, index=i, numa=0,
                       mode="hami-core", health=True) for i in range(gpus)]
    return {"metadata": {"name": name, "annotations": {codec.REGISTER_ANNOTATION: codec.encode_node_devices(devs)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus * 10)},
                       "capacity": {"nvidia.com/gpu": str(gpus * 10)}}}


def pod(name: str, ns: str = "default", *, node: str = "", card: int = 0, mem: int = 4000, cores: int = 30,
        vgpu_node: str | None = None, phase: str | None = None, annotations: dict | None = None) -> dict:
    annos = dict(annotations or {})
    spec = {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}}}]}
    if node or vgpu_node:
        text = codec.encode_pod_devices(((ContainerDevice(f"GPU-{node or vgpu_node}-{card}", "NVIDIA", mem, cores),),))
        annos.update({codec.VGPU_NODE_ANNOTATION: vgpu_node or node, codec.ALLOCATED_ANNOTATION: text,
                      codec.TO_ALLOCATE_ANNOTATION: text})
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns, "annotations": annos}, "spec": spec,
            "status": {"phase": phase or ("Running" if node else "Pending")}}


def filter_failed(pod_name: str, message: str, ns: str = "default") -> dict:
    return {"metadata": {"name": f"{pod_name}.ff", "namespace": ns}, "reason": "FilteringFailed", "type": "Warning",
            "message": message, "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod_name}}
