"""AWS Neuron devices as HAMi derives them from a node (pkg/device/awsneuron GetNodeDevices).

The Neuron device plugin writes no register annotation: the node's capacity of
`aws.amazon.com/neuron` gives the devices and of `aws.amazon.com/neuroncore` their cores. Device i
is `<node>-AWSNeuron-<i>`, count = cores per device (each core can go to one container), devmem 0,
devcore = the mask of its cores (`2^cores - 1`: 3 on Inf2/Trn1, 15 on Inf1). Inferentia nodes (the
`node.kubernetes.io/instance-type` label names `inf`) connect their devices in a ring, which the
fit's grouping needs; the devices carry that as mode `ring`.

Allocation annotations the plugin reads: `AWS_NEURON_IDS` (device indexes, or core ids
`cores_per_device * index + bit` for a core request), `NEURON_RESOURCE_TYPE` (the core resource
when cores were asked), `NEURON_ALLOC_TIME` (unix ns), `NEURON_ALLOCATED=false` and
`aws.amazon.com/predicate-node`.
"""

from __future__ import annotations

from hami.device.codec.errors import CodecError
from hami.device.model import DeviceInfo

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
RING = "ring"
ASSIGNED_IDS = "AWS_NEURON_IDS"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
ALLOC_TIME = "NEURON_ALLOC_TIME"
ALLOCATED = "NEURON_ALLOCATED"
PREDICATE_NODE = "aws.amazon.com/predicate-node"
MAX_DEVICES = 1024  # a capacity beyond any real node is refused, not materialised


def core_mask(cores: int) -> int:
    """The mask of a device's cores: `cores` low bits set."""
    return (1 << cores) - 1 if cores > 0 else 0


def devices_from_capacity(node: str, devices: int, cores: int, instance_type: str, *, vendor: str = "AWSNeuron",
                          id_format: str = "{node}-AWSNeuron-{index}", default_cores: int = 2,
                          resource: str = "aws.amazon.com/neuron") -> tuple[DeviceInfo, ...]:
    """GetNodeDevices: no devices is HAMi's `device not found <resource>`; a node reporting fewer
    cores than devices gets count 0 devices (as HAMi) whose mask spans `default_cores`."""
    if devices <= 0:
        raise CodecError(f"device not found {resource}", field=resource, text=str(devices))
    if devices > MAX_DEVICES:
        raise CodecError(f"{devices} devices is more than {MAX_DEVICES}", field=resource, text=str(devices))
    per_device = max(cores, 0) // devices
    if per_device >= 31:
        raise CodecError(f"{per_device} cores per device is out of range", field=resource,
                         text=str(cores))
    mask = core_mask(per_device if per_device > 0 else default_cores)
    mode = RING if ("inf" in instance_type or "Inf" in instance_type) else ""
    return tuple(DeviceInfo(id=id_format.format(node=node, index=i), count=per_device, devmem=0, devcore=mask,
                            type=vendor, index=i, numa=0, mode=mode, health=True, vendor=vendor)
                 for i in range(devices))


def core_ids(index: int, mask: int, cores_per_device: int) -> list[int]:
    """The core ids a device's mask names: `cores_per_device * index + bit` per set bit."""
    return [cores_per_device * index + bit for bit in range(cores_per_device) if mask & (1 << bit)]
