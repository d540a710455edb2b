"""Per-node device settings: which `nodeconfig` entry applies, and what it changes. Pure.

HAMi's device plugin reads the `nvidia:` section of the device config, then the entry of
`config.json` whose name is this node's, and merges it over (../shared/spec/node.md §1.1):
every per-node value that is set wins (`devicesplitcount`, `devicememoryscaling`,
`devicecorescaling`, `preconfigureddevicememory`, `libcudaloglevel`, `enablenumatopology`);
`operatingmode` replaces the mode when non-empty (default `hami-core`); `filterdevices` becomes
the filter when it lists anything; `enablegetpreferredallocation` is copied.

hami extends the name match: an entry matches by exact name or by shell glob
(`inference-pool-*`, fnmatch, case-sensitive); an exact name beats any glob, and among entries of
the same kind the first in the file wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from hami.device.model import (
    MODE_HAMI_CORE,
    MODE_MIG,
    FilterDevices,
    NodeDeviceConfig,
    NvidiaConfig,
)


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """What the node agent registers with on one node."""

    split_count: int = 10
    memory_scaling: float = 1.0
    core_scaling: float = 1.0
    preconfigured_memory: int = 0  # MiB, used when NVML cannot report the card's memory
    lib_cuda_log_level: str = ""
    enable_numa_topology: bool = False
    mode: str = MODE_HAMI_CORE
    filter: FilterDevices = field(default_factory=FilterDevices)
    enable_get_preferred_allocation: bool = False
    disable_core_limit: bool = False
    matched_entry: str | None = None  # the nodeconfig name (or glob) that applied
    mig_strategy: str = "none"  # static MIG as NVIDIA's device plugin: none | single | mixed
    # CUDA_DISABLE_CONTROL in a container's env drops HAMi-core's preload only where the operator allows it.
    allow_disable_control: bool = False

    def filtered(self, uuid: str, index: int | str | None = None) -> bool:
        """HAMi FilterDeviceToRegister: the card is left out (not advertised, not registered)."""
        if not self.filter.uuid and not self.filter.index:
            return False
        if uuid and uuid in self.filter.uuid:
            return True
        if index is None or index == "":
            return False
        if isinstance(index, str):
            if _GO_INT.fullmatch(index) is None:
                return False  # HAMi: Atoi fails -> not filtered
            index = int(index)
        return index in self.filter.index

    def devmem(self, memory_mib: int) -> int:
        """`devmem` of a card with `memory_mib` MiB: int32(float64(x) * scaling), MIG unscaled."""
        if self.mode == MODE_MIG or self.memory_scaling == 1.0:
            return _int32(memory_mib)
        return _int32(math.trunc(float(_int32(memory_mib)) * self.memory_scaling))

    def devcore(self) -> int:
        """`devcore`: int32(deviceCoreScaling * 100); 100 in MIG mode."""
        if self.mode == MODE_MIG:
            return 100
        return _int32(math.trunc(self.core_scaling * 100))


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _int32(n: int) -> int:
    return (int(n) + (1 << 31)) % (1 << 32) - (1 << 31)


def resolve_node_config(entries: Iterable[NodeDeviceConfig], node_name: str) -> NodeDeviceConfig | None:
    """The entry for `node_name`: the first exact name, else the first matching glob, else None."""
    entries = tuple(entries)
    for entry in entries:
        if entry.name == node_name:
            return entry
    for entry in entries:
        if entry.name and fnmatchcase(node_name, entry.name):
            return entry
    return None


def effective_device_settings(
    cfg: NvidiaConfig,
    entry: NodeDeviceConfig | None,
    *,
    node_config_readable: bool = True,
) -> DeviceSettings:
    """Merge the per-node entry over the `nvidia:` section, as HAMi's plugin does.

    `node_config_readable=False` reproduces HAMi when `config.json` cannot be read: the mode is
    the empty string and `mode` is then left out of the register annotation.
    """
    s = DeviceSettings(
        split_count=cfg.device_split_count,
        memory_scaling=cfg.device_memory_scaling,
        core_scaling=cfg.device_core_scaling,
        preconfigured_memory=cfg.pre_configured_device_memory,
        lib_cuda_log_level=cfg.lib_cuda_log_level,
        enable_numa_topology=cfg.enable_numa_topology,
        mode=MODE_HAMI_CORE if node_config_readable else "",
        disable_core_limit=cfg.disable_core_limit,
    )
    if entry is None:
        return s
    changes: dict = {"matched_entry": entry.name}
    for attr, value in (
        ("split_count", entry.devicesplitcount),
        ("memory_scaling", entry.devicememoryscaling),
        ("core_scaling", entry.devicecorescaling),
        ("preconfigured_memory", entry.preconfigureddevicememory),
        ("lib_cuda_log_level", entry.libcudaloglevel),
        ("enable_numa_topology", entry.enablenumatopology),
    ):
        if value is not None:
            changes[attr] = value
    if entry.operatingmode:
        changes["mode"] = entry.operatingmode
    if entry.migstrategy:
        changes["mig_strategy"] = entry.migstrategy
    if entry.filterdevices.uuid or entry.filterdevices.index:
        changes["filter"] = entry.filterdevices
    changes["enable_get_preferred_allocation"] = entry.enablegetpreferredallocation
    changes["allow_disable_control"] = entry.allowdisablecontrol
    return replace(s, **changes)


def settings_for_node(
    cfg: NvidiaConfig, entries: Iterable[NodeDeviceConfig], node_name: str, *, node_config_readable: bool = True
) -> DeviceSettings:
    """resolve_node_config + effective_device_settings in one call."""
    return effective_device_settings(
        cfg, resolve_node_config(entries, node_name), node_config_readable=node_config_readable
    )
