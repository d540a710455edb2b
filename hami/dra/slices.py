"""The node's GPUs as `resource.k8s.io/v1` ResourceSlices. Pure: GPU facts in, slice dicts out.

One pool per node, named after the node, in one slice (`resourceSliceCount: 1`), published under a
fixed name (`<node>-<driver>`) so a restarted plugin finds and reuses it. `next_slice` bumps
`pool.generation` only when the devices differ from what the stored slice carries: a restart that
sees the same GPUs writes nothing.

Each GPU is one device `hami-gpu-<minor>` (HAMi's k8s-dra-driver name; the index when the minor is
unknown) with HAMi's attributes (`type: hami-gpu`, which HAMi's DeviceClass selects on, `uuid`,
`minor`, `productName`, `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`,
`cudaDriverVersion`, `pcieBusID`) plus hami's: `index`, `numa`, `memoryBytes`, `nvlinkDomain`
(the lowest index of the GPU's NVLink-connected group: a claim asking for several GPUs can
`matchAttribute` on it, or on `numa`), `migEnabled`. Capacity `memory` (bytes; a request may take
1 MiB steps up to the card, default the whole card) and `cores` (percent, 0-100, default 0 = no SM
limit, as a device-plugin pod without `gpucores`; HAMi's driver defaults to 100, which lets no
memory-only claim share), with `allowMultipleAllocations: true` so several claims share one GPU
(consumable capacity, KEP-5075), as HAMi's driver publishes.

A GPU in MIG mode is published as its MIG instances instead (`hami-gpu-<minor>-mig-<start>-<size>`,
type `mig`, with `parentUUID`, `profile`, `migStart`, `migSize` and the instance's memory), each
whole and exclusive: HAMi-core does not limit inside a MIG instance.

Health: an unhealthy GPU is withdrawn from the slice. Device taints (`spec.devices[].taints`) are
behind the DRADeviceTaints gate (alpha in 1.33-1.34), off on a default 1.34+ cluster, so withdrawal
is what every 1.34+ scheduler honours; claims already allocated on the GPU keep their allocation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami.device.nodeconfig import DeviceSettings
from hami.gpu.backend import GpuInfo

DRIVER = "hami-core-gpu.project-hami.io"
API_VERSION = "resource.k8s.io/v1"
DEVICE_TYPE = "hami-gpu"  # HAMi's DeviceClass: device.attributes[driver].type == 'hami-gpu'
MIG_TYPE = "mig"  # a MIG instance (HAMi's driver: MigDeviceType)
MIB = 1 << 20
MAX_CORES = 100
# resource.k8s.io/v1: attributes + capacities of one device together at most 32.
MAX_ATTRIBUTES_AND_CAPACITY = 32


@dataclass(frozen=True, slots=True)
class GpuExtras:
    """What a GPU backend may know beyond GpuInfo ("" / None: unknown, attribute left out)."""

    compute_capability: str = ""  # "8.0"
    driver_version: str = ""  # "580.65.06"
    cuda_driver_version: str = ""  # "13.0"
    brand: str = ""
    architecture: str = ""
    bus_id: str = ""
    nvlink_domain: int | None = None
    mig_enabled: bool | None = None


def device_name(gpu: GpuInfo) -> str:
    return f"{DEVICE_TYPE}-{gpu.minor if gpu.minor >= 0 else gpu.index}"


def slice_name(node: str, driver: str = DRIVER) -> str:
    return f"{node}-{driver}"


def semver(text: str) -> str | None:
    """A driver's dotted version as the semver DRA's `version` attribute takes ("580.65.06" ->
    "580.65.6", "8.0" -> "8.0.0"); None when it is not dotted numbers."""
    parts = text.strip().split(".")
    if not text.strip() or len(parts) > 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return ".".join(str(n) for n in nums)


def binary_quantity(n: int) -> str:
    """Go's canonical BinarySI form of a non-negative integer: "40Gi", "1Mi", "100"."""
    for suffix, shift in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def nvlink_domains(pairs: Mapping[tuple[int, int], int]) -> dict[int, int]:
    """index -> lowest index of its NVLink-connected group, for GPUs with at least one NVLink.
    `pairs`: (index a, index b) -> NVLink count between them."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), count in pairs.items():
        if count > 0 and a != b:
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    return {i: find(i) for i in parent}


def gpu_device(gpu: GpuInfo, memory_mib: int, extras: GpuExtras | None = None) -> dict:
    """One ResourceSlice device for a whole GPU."""
    x = extras or GpuExtras()
    memory = memory_mib * MIB
    attrs: dict[str, dict] = {
        "type": {"string": DEVICE_TYPE},
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor if gpu.minor >= 0 else gpu.index},
        "productName": {"string": gpu.name},
        "numa": {"int": gpu.numa},
        "memoryBytes": {"int": memory},
    }
    for key, text in (("brand", x.brand), ("architecture", x.architecture), ("pcieBusID", x.bus_id)):
        if text:
            attrs[key] = {"string": text}
    for key, text in (("cudaComputeCapability", x.compute_capability), ("driverVersion", x.driver_version),
                      ("cudaDriverVersion", x.cuda_driver_version)):
        v = semver(text)
        if v is not None:
            attrs[key] = {"version": v}
    if x.nvlink_domain is not None:
        attrs["nvlinkDomain"] = {"int": x.nvlink_domain}
    if x.mig_enabled is not None:
        attrs["migEnabled"] = {"bool": x.mig_enabled}
    capacity = {
        "memory": {"value": binary_quantity(memory), "requestPolicy": {
            "default": binary_quantity(memory),
            "validRange": {"min": "1Mi", "max": binary_quantity(memory), "step": "1Mi"}}},
        # default 0 (HAMi's driver: 100): a claim that asks only for memory gets no SM limit, as a
        # device-plugin pod without gpucores does, and leaves the cores for the next claim.
        "cores": {"value": str(MAX_CORES), "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "max": str(MAX_CORES), "step": "1"}}},
    }
    return {"name": device_name(gpu), "attributes": attrs, "capacity": capacity, "allowMultipleAllocations": True}


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A MIG instance of a MIG-enabled GPU, as the backend lists it."""

    mig_uuid: str
    profile: str  # "1g.10gb"
    start: int
    size: int
    memory_mib: int


def mig_device(parent: GpuInfo, mig: MigSlice, extras: GpuExtras | None = None) -> dict:
    """One ResourceSlice device for a MIG instance: type `mig` (HAMi's `hami-gpu` DeviceClass does not
    select it), whole and exclusive (no consumable capacity: HAMi-core does not limit inside MIG)."""
    whole = gpu_device(parent, mig.memory_mib, extras)
    attrs = {k: v for k, v in whole["attributes"].items() if k not in ("nvlinkDomain", "migEnabled")}
    attrs.update({"type": {"string": MIG_TYPE}, "uuid": {"string": mig.mig_uuid},
                  "parentUUID": {"string": parent.uuid}, "profile": {"string": mig.profile},
                  "migStart": {"int": mig.start}, "migSize": {"int": mig.size}})
    name = f"{device_name(parent)}-mig-{mig.start}-{mig.size}"
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": binary_quantity(mig.memory_mib * MIB)}}}


def devices_for(gpus: Sequence[GpuInfo], settings: DeviceSettings | None = None,
                extras: Mapping[str, GpuExtras] | None = None,
                migs: Mapping[str, Sequence[MigSlice]] | None = None) -> list[dict]:
    """The devices this node publishes: healthy, not filtered out by the node config, by index.
    Memory is the card's (settings.devmem: the preconfigured size when NVML cannot tell). A GPU
    in `migs` (MIG mode on) is published as its MIG instances, never whole."""
    settings = settings or DeviceSettings()
    extras = extras or {}
    migs = migs or {}
    out = []
    for g in sorted(gpus, key=lambda g: g.index):
        if not g.healthy or settings.filtered(g.uuid, g.index):
            continue
        if g.uuid in migs:
            out += [mig_device(g, m, extras.get(g.uuid)) for m in sorted(migs[g.uuid], key=lambda m: m.start)
                    if m.mig_uuid]
            continue
        out.append(gpu_device(g, settings.devmem(g.memory_total_mib), extras.get(g.uuid)))
    return out


def build_slice(node: str, devices: Sequence[dict], generation: int, *, driver: str = DRIVER,
                node_uid: str = "") -> dict:
    meta: dict = {"name": slice_name(node, driver)}
    if node_uid:  # garbage-collected with its Node, as kubelet's own slices are
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                    "controller": True}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def next_slice(current: Mapping | None, node: str, devices: Sequence[dict], *, driver: str = DRIVER,
               node_uid: str = "") -> dict | None:
    """The slice to write, or None when `current` (the stored one) already publishes `devices`.
    The generation goes up by one on every change, starting at 1."""
    spec = (current or {}).get("spec") or {}
    pool = spec.get("pool") or {}
    gen = pool.get("generation")
    gen = gen if type(gen) is int and gen >= 0 else 0
    if current is not None and spec.get("devices") == list(devices) and spec.get("nodeName") == node \
            and pool.get("name") == node and spec.get("driver") == driver:
        return None
    out = build_slice(node, devices, gen + 1, driver=driver, node_uid=node_uid)
    rv = ((current or {}).get("metadata") or {}).get("resourceVersion")
    if rv:
        out["metadata"]["resourceVersion"] = rv  # a replace that loses a race gets 409, not a clobber
    return out
