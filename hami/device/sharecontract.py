"""HAMi-core's contract for one share of GPUs: the envs libvgpu.so reads and the mounts that put it
in place. Pure. The one source of these values: the device plugin's Allocate
(hami.agent.allocate.container_response) and the DRA plugin's prepare (hami.dra.plugin) both call
`share_contract`, so a container gets the same limits whichever path handed it the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami.device.model import MODE_MIG, ContainerDevices
from hami.device.nodeconfig import DeviceSettings

VGPU_LOCK_DIR = "/tmp/vgpulock"
# /tmp/vgpulock is mounted read-write into every tenant container, whose processes (any uid) create
# HAMi-core's lock files there: world-writable, but sticky, so no tenant removes another's lock.
VGPU_LOCK_DIR_MODE = 0o1777


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


def share_contract(
    devices: ContainerDevices,
    settings: DeviceSettings,
    hook_path: str,
    *,
    cache_file: str,
    cache_dir: str,
    lib_path: str = "",
    preload: bool = True,
    license_exists: bool = False,
) -> tuple[dict[str, str], tuple[Mount, ...]]:
    """HAMi-core's contract for one share of GPUs: the envs libvgpu.so reads and the mounts that put
    it in place (HAMi server.go Allocate, non-MIG). The one source of these values: the device
    plugin's Allocate and the DRA plugin's prepare (hami.dra) both call it.

    `cache_file` is the name of the shared-region file inside `<hook>/vgpu` in the container;
    `cache_dir` the host directory mounted there. `preload`: mount ld.so.preload (the device plugin
    leaves it out for a container that sets CUDA_DISABLE_CONTROL)."""
    hook = hook_path.rstrip("/") or ""
    envs: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": ",".join(dict.fromkeys(d.uuid for d in devices))}
    if settings.mode == MODE_MIG:
        return envs, ()
    for i, d in enumerate(devices):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{d.usedmem}m"
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].usedcores)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{hook}/vgpu/{cache_file}"
    if settings.memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    if settings.lib_cuda_log_level:
        envs["LIBCUDA_LOG_LEVEL"] = settings.lib_cuda_log_level
    if settings.disable_core_limit:
        envs["GPU_CORE_UTILIZATION_POLICY"] = "disable"
    mounts = [
        Mount(f"{hook}/vgpu/libvgpu.so", lib_path or f"{hook}/vgpu/libvgpu.so", True),
        Mount(f"{hook}/vgpu", cache_dir, False),
        Mount(VGPU_LOCK_DIR, VGPU_LOCK_DIR, False),
    ]
    if preload:
        mounts.append(Mount("/etc/ld.so.preload", f"{hook}/vgpu/ld.so.preload", True))
    if license_exists:
        mounts.append(Mount("/tmp/license", f"{hook}/vgpu/license", True))
        mounts.append(Mount("/usr/bin/vgpuvalidator", f"{hook}/vgpu/vgpuvalidator", True))
    return envs, tuple(mounts)
