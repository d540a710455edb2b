"""What a GPU is, beyond what GpuInfo polls: versions and identity a DRA ResourceSlice publishes.

An optional backend capability beside GpuBackend (as TopologySource and HealthSource are): the fake
backend reads them from its file, NVML asks the driver. A fact a backend cannot tell is "".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class GpuFacts:
    uuid: str
    compute_capability: str = ""  # "8.0"
    driver_version: str = ""  # "580.65.06"
    cuda_driver_version: str = ""  # "13.0"
    bus_id: str = ""  # "0000:3b:00.0"


@runtime_checkable
class FactsSource(Protocol):
    def facts(self) -> dict[str, GpuFacts]:
        """uuid -> GpuFacts for every GPU it knows."""
        ...


def cuda_version(n: int) -> str:
    """NVML's CUDA driver version integer as text: 12040 -> "12.4"."""
    return f"{n // 1000}.{n % 1000 // 10}"
