"""What this node registers: GPUs -> `DeviceInfo` list, per HAMi v2.10's plugin rules. Pure.

Rules (spec node.md §1.1-§1.3, §2.2):
* per-node settings: the `nvidia:` section, overridden by the matching per-node config entry;
* `filterdevices` drops GPUs by UUID or index: neither advertised to kubelet nor registered;
* `count` = deviceSplitCount; `devmem` = int(MiB * deviceMemoryScaling) (MiB from NVML, or
  preConfiguredDeviceMemory when NVML cannot tell, else the GPU is skipped);
  `devcore` = int(deviceCoreScaling * 100); `type` = NVML name, prefixed `NVIDIA-` unless it
  starts with `NVIDIA`; `mode` = operating mode ("" when no node config file was readable);
* kubelet sees `<UUID>-<i>` for i in [0, split), health "Healthy"/"Unhealthy", NUMA topology only
  when enableNumaTopology.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami.device.model import DeviceInfo
from hami.device.nodeconfig import DeviceSettings
from hami.gpu.backend import GpuInfo

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One device ID as kubelet sees it."""

    id: str
    health: str
    numa: int | None = None


def device_type(nvml_name: str) -> str:
    """HAMi registers the NVML name, prefixed with `NVIDIA-` when it does not start with NVIDIA."""
    return nvml_name if nvml_name.startswith("NVIDIA") else "NVIDIA-" + nvml_name


def filtered(gpus: Iterable[GpuInfo], settings: DeviceSettings) -> list[GpuInfo]:
    """GPUs left after `filterdevices` (by UUID, or by index)."""
    return [g for g in gpus if not settings.filtered(g.uuid, g.index)]


def build_devices(
    gpus: Sequence[GpuInfo], settings: DeviceSettings, unhealthy: Iterable[str] = ()
) -> tuple[DeviceInfo, ...]:
    """The `hami.io/node-nvidia-register` device list, ordered by GPU index."""
    bad = set(unhealthy)
    out = []
    for g in sorted(filtered(gpus, settings), key=lambda g: g.index):
        if g.memory_supported:
            mem = settings.devmem(g.memory_total_mib)
        elif settings.preconfigured_memory > 0:
            mem = settings.preconfigured_memory
        else:
            continue
        out.append(
            DeviceInfo(
                id=g.uuid,
                count=settings.split_count,
                devmem=mem,
                devcore=settings.devcore(),
                type=device_type(g.name),
                index=g.index,
                numa=g.numa,
                mode=settings.mode,
                health=g.healthy and g.uuid not in bad,
            )
        )
    return tuple(out)


def plugin_devices(
    gpus: Sequence[GpuInfo], settings: DeviceSettings, unhealthy: Iterable[str] = ()
) -> tuple[PluginDevice, ...]:
    """Device IDs advertised to kubelet: `<UUID>-<i>` for each split slot of each GPU."""
    bad = set(unhealthy)
    out = []
    for g in sorted(filtered(gpus, settings), key=lambda g: g.index):
        health = HEALTHY if g.healthy and g.uuid not in bad else UNHEALTHY
        numa = g.numa if settings.enable_numa_topology else None
        out.extend(PluginDevice(f"{g.uuid}-{i}", health, numa) for i in range(settings.split_count))
    return tuple(out)


def physical_id(device_id: str) -> str:
    """kubelet device ID -> GPU UUID (`<UUID>-<n>`, `<UUID>::<n>`, `<UUID>[..]`; else as is)."""
    if "::" in device_id:
        return device_id.split("::", 1)[0]
    if "[" in device_id:
        return device_id[: device_id.index("[")]
    if device_id.count("-") == 6:
        head, _, tail = device_id.rpartition("-")
        if tail.isdigit():
            return head
    return device_id


def _key(d: DeviceInfo) -> tuple:
    return (d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.numa, d.mode, d.health, d.mig_profiles)


def same_devices(a: Iterable[DeviceInfo], b: Iterable[DeviceInfo]) -> bool:
    """Equal as registrations: order does not matter (HAMi's own order is random), vendor ignored."""
    return sorted(map(_key, a)) == sorted(map(_key, b))
