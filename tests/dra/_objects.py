"""Standard resource.k8s.io/v1 objects for the DRA tests: a node's slice, the class, claims."""

from __future__ import annotations

DRIVER = "hami-core-gpu.project-hami.io"
MIB = 1 << 20


def gpu_device(i: int, *, memory_mib: int = 8000, cores: int = 100, numa: int = 0, multi: bool = True,
               model: str = "NVIDIA A100", uuid: str = "") -> dict:
    return {
        "name": f"gpu-{i}",
        "attributes": {"type": {"string": "hami-gpu"}, "uuid": {"string": uuid or f"GPU-{i:04d}"},
                       "productName": {"string": model}, "index": {"int": i}, "numa": {"int": numa}},
        # As hami.dra.slices publishes them: memory defaults to the whole card, cores to 0 (no limit).
        "capacity": {"memory": {"value": str(memory_mib * MIB), "requestPolicy": {
                         "default": str(memory_mib * MIB),
                         "validRange": {"min": "1Mi", "max": str(memory_mib * MIB), "step": "1Mi"}}},
                     "cores": {"value": str(cores), "requestPolicy": {
                         "default": "0", "validRange": {"min": "0", "max": str(cores), "step": "1"}}}},
        "allowMultipleAllocations": multi,
    }


def slice_for(node: str, devices: list[dict], generation: int = 1) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression":
                    f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "hami-gpu"'}}]}}


def claim(name: str, *, count: int = 1, memory_mib: int | None = None, cores: int | None = None,
          selectors: tuple[str, ...] = (), requests: list[dict] | None = None, constraints: list | None = None,
          ns: str = "default") -> dict:
    caps = {}
    if memory_mib is not None:
        caps["memory"] = str(memory_mib * MIB)
    if cores is not None:
        caps["cores"] = str(cores)
    req = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count,
                                      "selectors": [{"cel": {"expression": s}} for s in selectors],
                                      **({"capacity": {"requests": caps}} if caps else {})}}
    devices = {"requests": requests or [req]}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns}, "spec": {"devices": devices}}
