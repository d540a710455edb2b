"""The device model shared by every role: pure dataclasses, no I/O.

Names follow HAMi's Go types (pkg/device/devices.go) so that a reader of HAMi's source finds
the same concepts here: DeviceInfo is one GPU as a node registers it, ContainerDevice one slice
handed to a container, ContainerDeviceRequest what one container asks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVIDIA = "NVIDIA"

# Operating modes a card can register with (`mode` in the register annotation).
MODE_HAMI_CORE = "hami-core"
MODE_MIG = "mig"
MODE_MPS = "mps"

# `mempercentagereq` sentinel meaning "no percentage asked for" (HAMi uses 101).
PERCENTAGE_UNSET = 101


@dataclass(frozen=True, slots=True)
class MigPlacement:
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    memory_mb: int = 0
    core: int = 0
    slice_count: int = 0
    placements: tuple[MigPlacement, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One GPU as registered in `hami.io/node-nvidia-register` (Go `DeviceInfo`)."""

    id: str
    count: int
    devmem: int  # MiB, already scaled by deviceMemoryScaling
    devcore: int  # percent, deviceCoreScaling * 100
    type: str
    index: int = 0
    numa: int = 0
    mode: str = ""
    health: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    # Set by the scheduler after decoding, never sent on the wire by the NVIDIA plugin.
    vendor: str = NVIDIA
    # Go `CustomInfo map[string]any` (`custominfo`), as Go marshals it back ("" when absent or
    # empty): vendor data the scheduler reads, e.g. Ascend's super-pod `{"NetworkID":1}`.
    custom_info: str = ""


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device slice of one container (`UUID,TYPE,USEDMEM,USEDCORES` in the pod string)."""

    uuid: str
    type: str
    usedmem: int  # MiB
    usedcores: int  # percent
    idx: int = 0  # card index on the node; not part of the wire string


# One container's devices, and the whole pod (init containers first, then app containers).
ContainerDevices = tuple[ContainerDevice, ...]
PodDevices = tuple[ContainerDevices, ...]


@dataclass(frozen=True, slots=True)
class ContainerDeviceRequest:
    """What one container asks of one vendor (Go `ContainerDeviceRequest`)."""

    nums: int
    type: str = NVIDIA
    memreq: int = 0  # MiB per GPU
    mempercentagereq: int = PERCENTAGE_UNSET
    coresreq: int = 0

    @property
    def empty(self) -> bool:
        return self.nums <= 0


@dataclass(frozen=True, slots=True)
class NodeLock:
    """Value of `hami.io/mutex.lock`: `<RFC3339>,<namespace>,<pod>` or a legacy bare timestamp."""

    timestamp: float  # unix seconds
    namespace: str = ""
    name: str = ""

    @property
    def legacy(self) -> bool:
        return not self.namespace and not self.name

    def owned_by(self, namespace: str, name: str) -> bool:
        return not self.legacy and self.namespace == namespace and self.name == name


@dataclass(frozen=True, slots=True)
class Handshake:
    """Value of `hami.io/node-handshake`.

    state is one of "Requesting", "Reported", "Deleted" or "Unknown"; timestamp is unix seconds
    when the value carries one that could be parsed, else None.
    """

    state: str
    timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """`hami.io/device-scoring-weights`: `slot=1,core=1,memory=3`."""

    slot: int = 1
    core: int = 1
    memory: int = 1


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """A registered device plus what is already allocated on it (Go `DeviceUsage`)."""

    id: str
    index: int
    count: int
    totalmem: int
    totalcore: int
    type: str
    numa: int = 0
    mode: str = ""
    health: bool = True
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    vendor: str = NVIDIA


@dataclass(frozen=True, slots=True)
class MigProfileAllow:
    models: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    """The `nvidia:` section of HAMi's device config (ConfigMap key `device-config.yaml`)."""

    resource_count_name: str = "nvidia.com/gpu"
    resource_memory_name: str = "nvidia.com/gpumem"
    resource_memory_percentage_name: str = "nvidia.com/gpumem-percentage"
    resource_core_name: str = "nvidia.com/gpucores"
    resource_priority_name: str = "nvidia.com/priority"
    overwrite_env: bool = False
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    pre_configured_device_memory: int = 0
    memory_factor: int = 1
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    enable_numa_topology: bool = False
    gpu_core_policy: str = "default"  # default | force | disable
    lib_cuda_log_level: str = ""
    runtime_class_name: str = ""
    disable_core_limit: bool = False
    mig_profile_allowlist: tuple[MigProfileAllow, ...] = ()

    @property
    def resource_names(self) -> tuple[str, ...]:
        return (
            self.resource_count_name,
            self.resource_memory_name,
            self.resource_memory_percentage_name,
            self.resource_core_name,
            self.resource_priority_name,
        )


@dataclass(frozen=True, slots=True)
class FilterDevices:
    uuid: tuple[str, ...] = ()
    index: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeDeviceConfig:
    """One entry of the per-node `config.json` `nodeconfig` list; None means "not set here"."""

    name: str
    operatingmode: str | None = None
    devicememoryscaling: float | None = None
    devicecorescaling: float | None = None
    devicesplitcount: int | None = None
    preconfigureddevicememory: int | None = None
    libcudaloglevel: str | None = None
    enablenumatopology: bool | None = None
    migstrategy: str | None = None
    filterdevices: FilterDevices = field(default_factory=FilterDevices)
    enablegetpreferredallocation: bool = False
    # The operator's opt-in to honour CUDA_DISABLE_CONTROL in a container's env (hami's own key).
    allowdisablecontrol: bool = False


def device_type_label(registered: str) -> str:
    """The card's name once, for the metrics' `device_type`. HAMi's NVIDIA agent registers `NVIDIA-` plus
    the NVML name, which already starts with NVIDIA ("NVIDIA-NVIDIA A100-SXM4-40GB"), and HAMi's metrics
    repeat that (HAMi #2990); the label drops the doubled vendor and keeps any other type as registered."""
    vendor, sep, rest = registered.partition("-")
    return rest if sep and vendor and rest.startswith(vendor) else registered
