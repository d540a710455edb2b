"""The few things hami asks of GPU hardware, behind one protocol (NVML and fake side by side).

A backend is synchronous and cheap to poll: roles call it from a thread (`asyncio.to_thread`) or
directly for the fake. Health is sticky per backend instance: once an XID marks a GPU unhealthy it
stays so (HAMi has no path back to healthy short of a restart), except for the fake backend, where
the file is the truth. The factory, `make_backend`, lives in `select.py`: the backends import this
module, so this module imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class GpuBackendError(RuntimeError):
    """The GPU backend cannot be used: names the backend and why (file, field, NVML error)."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    uuid: str
    index: int
    name: str  # NVML name as reported, e.g. "NVIDIA A100-SXM4-40GB"
    memory_total_mib: int
    memory_used_mib: int = 0
    numa: int = 0
    healthy: bool = True
    utilization: int | None = 0  # percent, NVML utilization.gpu; None when NVML failed to say
    memory_utilization: int | None = 0  # percent, NVML utilization.memory; None likewise
    minor: int = -1  # /dev/nvidia<minor>; -1 when unknown
    memory_supported: bool = True  # False when NVML answered NOT_SUPPORTED for memory info


@runtime_checkable
class GpuBackend(Protocol):
    name: str

    def list_gpus(self) -> list[GpuInfo]:
        """Every GPU of this node, ordered by index, with current health and usage."""
        ...

    def process_utilization(self, uuid: str) -> dict[int, int]:
        """host PID -> SM utilization percent of the processes running on GPU `uuid` right now
        ({} when there were none); raises GpuBackendError when the GPU could not be asked."""
        ...

    def close(self) -> None:
        """Stop background health watching and release the library."""
        ...
