"""The node's GPUs as `resource.k8s.io/v1` ResourceSlices. Pure: GPU facts in, slice dicts out.

One pool per node, named after the node (`pool_slices`): the main slice `<node>-<driver>` with every
GPU that is not partitionable; for each MIG-capable GPU its own slice `<node>-<driver>-<device>`
(the whole GPU and its MIG partitions); the partitionable GPUs' CounterSets in slices of their own
(`<node>-<driver>-counters-<k>`, at most 8 sets each: the API keeps counters and devices apart).
Fixed names, so a restarted plugin finds and reuses them (hami.dra.pool writes them).

Each GPU is one device `hami-gpu-<minor>` (HAMi's k8s-dra-driver name; the index when the minor is
unknown) with HAMi's attributes (`type: hami-gpu`, which HAMi's DeviceClass selects on, `uuid`,
`minor`, `productName`, `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`,
`cudaDriverVersion`, `pcieBusID`) plus hami's: `index`, `numa`, `memoryBytes`, `nvlinkDomain`
(the lowest index of the GPU's NVLink-connected group: a claim asking for several GPUs can
`matchAttribute` on it, or on `numa`), `migEnabled`. Capacities, with `allowMultipleAllocations:
true` so several claims share one GPU (consumable capacity, KEP-5075), as HAMi's driver publishes:
`memory` (bytes: the card's times `deviceMemoryScaling`; a request takes 1 MiB steps up to it,
default all of it), `cores` (percent: 100 times `deviceCoreScaling`; a request takes 0-100 in steps
of 1, default 0 = no SM limit, as a device-plugin pod without `gpucores`; HAMi's driver defaults to
100, which lets no memory-only claim share) and `shares` (`deviceSplitCount`; every claim takes 1
unless it asks for more, so at most that many claims share the GPU, as in device-plugin mode).

MIG, two ways. A GPU in MIG mode whose instances this plugin did not create (static MIG: an
operator's, or the node agent's geometry before the node moved to DRA) is published as those
instances (`hami-gpu-<minor>-mig-<start>-<size>`, type `mig`, with `uuid`, `parentUUID`, `profile`,
`migStart`, `migSize` and the instance's memory), each whole and exclusive. Any other MIG-capable
GPU is partitionable (KEP-4815): its CounterSet `hami-gpu-<minor>-counters` holds `multiprocessors`,
`memory` and one `memory-slice-<i>` per memory slice; every profile placement NVML allows is a
device `hami-gpu-<minor>-mig-<profile>-<start>` (type `mig`, `parentUUID`, `profile`, `migStart`,
`migSize`, no `uuid` until prepare creates it) consuming its slices, SMs and memory; the whole GPU
consumes all of them, so a GPU is either shared whole through HAMi-core or cut into instances,
never both. HAMi-core does not limit inside a MIG instance, so MIG devices carry no shared capacity.

Health: an unhealthy GPU keeps its devices and gets a `NoSchedule` device taint (`health_taints`):
`<driver>/gpu-lost` (XID 79, or the GPU vanished from the driver), else `<driver>/xid` with the XID
code as value, else `<driver>/unhealthy`. Claims already allocated keep running; a new claim needs
a toleration. `NoExecute` is never set: evicting workloads is the operator's decision, as NVIDIA's
driver leaves it. Clusters without device taints (before 1.36's beta) can ask for withdrawal
instead (`--dra-withdraw-unhealthy`): the devices leave the slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami.device.nodeconfig import DeviceSettings
from hami.gpu.backend import GpuInfo
from hami.gpu.mig import MigProfileInfo

DRIVER = "hami-core-gpu.project-hami.io"
API_VERSION = "resource.k8s.io/v1"
DEVICE_TYPE = "hami-gpu"  # HAMi's DeviceClass: device.attributes[driver].type == 'hami-gpu'
MIG_TYPE = "mig"  # a MIG instance (HAMi's driver: MigDeviceType)
MIB = 1 << 20
MAX_CORES = 100  # what one claim may ask: HAMi-core's SM limit is a percent of the physical GPU
SHARES = "shares"
CAPACITIES = ("memory", "cores", SHARES)
# resource.k8s.io/v1: attributes + capacities of one device together at most 32.
MAX_ATTRIBUTES_AND_CAPACITY = 32
MAX_COUNTER_SETS_PER_SLICE = 8
NO_SCHEDULE = "NoSchedule"
TAINT_GPU_LOST = f"{DRIVER}/gpu-lost"
TAINT_XID = f"{DRIVER}/xid"
TAINT_UNHEALTHY = f"{DRIVER}/unhealthy"
XID_GPU_LOST = 79  # "GPU has fallen off the bus"
MULTIPROCESSORS, MEMORY = "multiprocessors", "memory"


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


def _capacities(memory: int, cores: int, split_count: int) -> dict:
    out = {
        "memory": {"value": binary_quantity(memory), "requestPolicy": {
            "default": binary_quantity(memory),
            "validRange": {"min": "1Mi", "max": binary_quantity(memory), "step": "1Mi"}}},
        # default 0 (HAMi's driver: 100): a claim that asks only for memory gets no SM limit, as a
        # device-plugin pod without gpucores does, and leaves the cores for the next claim. One
        # claim asks at most 100 (the whole GPU's SMs); the device holds 100 x deviceCoreScaling.
        "cores": {"value": str(cores), "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "max": str(min(cores, MAX_CORES)), "step": "1"}}},
    }
    if split_count > 0:
        out[SHARES] = {"value": str(split_count), "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": str(split_count), "step": "1"}}}
    return out


def gpu_device(gpu: GpuInfo, memory_mib: int, extras: GpuExtras | None = None, *, cores: int = MAX_CORES,
               split_count: int = 0, taints: Sequence[Mapping] = ()) -> dict:
    """One ResourceSlice device for a whole GPU. `split_count` > 0 adds the `shares` capacity."""
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
    out = {"name": device_name(gpu), "attributes": attrs, "capacity": _capacities(memory, cores, split_count),
           "allowMultipleAllocations": True}
    if taints:
        out["taints"] = [dict(t) for t in taints]
    return out


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A MIG instance of a MIG-enabled GPU, as the backend lists it."""

    mig_uuid: str
    profile: str  # "1g.10gb"
    start: int
    size: int
    memory_mib: int


def _mig_attributes(parent: GpuInfo, extras: GpuExtras | None, memory_mib: int, profile: str, start: int,
                    size: int) -> dict:
    whole = gpu_device(parent, memory_mib, extras)
    attrs = {k: v for k, v in whole["attributes"].items() if k not in ("nvlinkDomain", "migEnabled", "uuid")}
    attrs.update({"type": {"string": MIG_TYPE}, "parentUUID": {"string": parent.uuid},
                  "profile": {"string": profile}, "migStart": {"int": start}, "migSize": {"int": size}})
    return attrs


def mig_device(parent: GpuInfo, mig: MigSlice, extras: GpuExtras | None = None,
               taints: Sequence[Mapping] = ()) -> dict:
    """One ResourceSlice device for a static MIG instance: type `mig` (HAMi's `hami-gpu` DeviceClass
    does not select it), whole and exclusive (no consumable capacity: HAMi-core does not limit
    inside MIG)."""
    attrs = _mig_attributes(parent, extras, mig.memory_mib, mig.profile, mig.start, mig.size)
    attrs["uuid"] = {"string": mig.mig_uuid}
    name = f"{device_name(parent)}-mig-{mig.start}-{mig.size}"
    out = {"name": name, "attributes": attrs,
           "capacity": {"memory": {"value": binary_quantity(mig.memory_mib * MIB)}}}
    if taints:
        out["taints"] = [dict(t) for t in taints]
    return out


# --------------------------------------------------------------------------- partitions (KEP-4815)


def counter_set_name(gpu: GpuInfo) -> str:
    return f"{device_name(gpu)}-counters"


def memory_slice(i: int) -> str:
    return f"memory-slice-{i}"


def partition_name(gpu: GpuInfo, profile: str, start: int) -> str:
    """`hami-gpu-0-mig-1g-10gb-0`: a DNS label (the profile's dot becomes a dash)."""
    return f"{device_name(gpu)}-mig-{profile.replace('.', '-')}-{start}"


def _full_profile(profiles: Sequence[MigProfileInfo]) -> MigProfileInfo:
    return max(profiles, key=lambda p: (p.multiprocessors, p.memory_mib))


def counter_set(gpu: GpuInfo, profiles: Sequence[MigProfileInfo]) -> dict:
    """The GPU's shared counters: its SMs, its MIG memory and each memory slice once."""
    full = _full_profile(profiles)
    slices = max(s + z for p in profiles for s, z in p.placements)
    counters = {MULTIPROCESSORS: {"value": str(full.multiprocessors)},
                MEMORY: {"value": binary_quantity(full.memory_mib * MIB)}}
    counters.update({memory_slice(i): {"value": "1"} for i in range(slices)})
    return {"name": counter_set_name(gpu), "counters": counters}


def _consumes(gpu: GpuInfo, sm: int, memory_mib: int, start: int, size: int) -> list[dict]:
    counters = {MULTIPROCESSORS: {"value": str(sm)}, MEMORY: {"value": binary_quantity(memory_mib * MIB)}}
    counters.update({memory_slice(i): {"value": "1"} for i in range(start, start + size)})
    return [{"counterSet": counter_set_name(gpu), "counters": counters}]


def partition_devices(gpu: GpuInfo, profiles: Sequence[MigProfileInfo], extras: GpuExtras | None = None,
                      taints: Sequence[Mapping] = ()) -> list[dict]:
    """Every placement of every profile as a device consuming the GPU's counters, smallest first
    (the allocator takes the first that fits: a small claim does not take a big partition)."""
    out = []
    for p in sorted(profiles, key=lambda p: (p.slices, p.memory_mib, p.name)):
        for start, size in p.placements:
            d = {"name": partition_name(gpu, p.name, start),
                 "attributes": _mig_attributes(gpu, extras, p.memory_mib, p.name, start, size),
                 "capacity": {"memory": {"value": binary_quantity(p.memory_mib * MIB)}},
                 "consumesCounters": _consumes(gpu, p.multiprocessors, p.memory_mib, start, size)}
            if taints:
                d["taints"] = [dict(t) for t in taints]
            out.append(d)
    return out


def whole_consumes(gpu: GpuInfo, profiles: Sequence[MigProfileInfo]) -> list[dict]:
    """What the whole GPU consumes of its counters: all of them."""
    full = _full_profile(profiles)
    slices = max(s + z for p in profiles for s, z in p.placements)
    return _consumes(gpu, full.multiprocessors, full.memory_mib, 0, slices)


# --------------------------------------------------------------------------- health


def health_taints(healthy: bool, *, xids: Mapping[int, int] | None = None, lost: bool = False) -> list[dict]:
    """The device taints of a GPU (none when healthy). `xids`: critical XID code -> events seen;
    the value is the code seen most often (ties: the lowest), a label value kubectl shows."""
    if healthy and not lost:  # XIDs alone do not taint: the backend decides which make a GPU unhealthy
        return []
    if lost or (xids or {}).get(XID_GPU_LOST):
        return [{"key": TAINT_GPU_LOST, "value": "true", "effect": NO_SCHEDULE}]
    if xids:
        code = min(xids, key=lambda c: (-xids[c], c))
        return [{"key": TAINT_XID, "value": str(code), "effect": NO_SCHEDULE}]
    return [{"key": TAINT_UNHEALTHY, "value": "true", "effect": NO_SCHEDULE}]


# --------------------------------------------------------------------------- the node's devices


@dataclass(frozen=True, slots=True)
class GpuState:
    """What the role knows of one GPU beyond GpuInfo."""

    extras: GpuExtras | None = None
    static_mig: tuple[MigSlice, ...] | None = None  # MIG mode with instances this plugin did not make
    profiles: tuple[MigProfileInfo, ...] = ()  # MIG-capable, partitionable: the allowed profiles
    taints: tuple[Mapping, ...] = ()


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """The devices of a node's pool, by slice: `main` (whole GPUs, static MIG instances), one list
    per partitionable GPU, and the counter sets of those GPUs."""

    main: tuple[dict, ...] = ()
    partitioned: tuple[tuple[str, tuple[dict, ...]], ...] = ()  # (slice suffix, devices)
    counter_sets: tuple[dict, ...] = ()

    def devices(self) -> list[dict]:
        return [*self.main, *(d for _, devs in self.partitioned for d in devs)]


def layout_for(gpus: Sequence[GpuInfo], settings: DeviceSettings | None = None,
               states: Mapping[str, GpuState] | None = None, *, withdraw_unhealthy: bool = False) -> PoolLayout:
    """The pool this node publishes, by index: GPUs the node config filters out are left out, an
    unhealthy one is tainted (or left out with `withdraw_unhealthy`). Memory is the card's times
    deviceMemoryScaling (settings.devmem: the preconfigured size when NVML cannot tell)."""
    settings = settings or DeviceSettings()
    states = states or {}
    main: list[dict] = []
    partitioned: list[tuple[str, tuple[dict, ...]]] = []
    counters: list[dict] = []
    for g in sorted(gpus, key=lambda g: g.index):
        st = states.get(g.uuid) or GpuState()
        if settings.filtered(g.uuid, g.index) or (withdraw_unhealthy and (not g.healthy or st.taints)):
            continue
        if st.static_mig is not None:
            main += [mig_device(g, m, st.extras, st.taints) for m in sorted(st.static_mig, key=lambda m: m.start)
                     if m.mig_uuid]
            continue
        whole = gpu_device(g, settings.devmem(g.memory_total_mib), st.extras, cores=settings.devcore(),
                           split_count=settings.split_count, taints=st.taints)
        if not st.profiles:
            main.append(whole)
            continue
        whole["consumesCounters"] = whole_consumes(g, st.profiles)
        partitioned.append((device_name(g), (whole, *partition_devices(g, st.profiles, st.extras, st.taints))))
        counters.append(counter_set(g, st.profiles))
    return PoolLayout(tuple(main), tuple(partitioned), tuple(counters))


def devices_for(gpus: Sequence[GpuInfo], settings: DeviceSettings | None = None,
                extras: Mapping[str, GpuExtras] | None = None,
                migs: Mapping[str, Sequence[MigSlice]] | None = None) -> list[dict]:
    """The devices of the main slice when no GPU is partitionable (static MIG in `migs`)."""
    extras, migs = extras or {}, migs or {}
    states = {g.uuid: GpuState(extras.get(g.uuid), tuple(migs[g.uuid]) if g.uuid in migs else None,
                               taints=tuple(health_taints(g.healthy))) for g in gpus}
    return layout_for(gpus, settings, states).devices()


def build_slice(node: str, devices: Sequence[dict], generation: int, *, driver: str = DRIVER,
                node_uid: str = "", name: str = "", count: int = 1, counter_sets: Sequence[dict] = ()) -> dict:
    meta: dict = {"name": name or slice_name(node, driver)}
    if node_uid:  # garbage-collected with its Node, as kubelet's own slices are
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                    "controller": True}]
    spec: dict = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
    }
    if counter_sets:
        spec["sharedCounters"] = [dict(c) for c in counter_sets]
    else:
        spec["devices"] = list(devices)
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta, "spec": spec}
