"""Per-GPU health telemetry (temperature, power, clocks, ECC, XIDs, throttling, PCIe replays).

Every field is None when the GPU (or NVML) does not report it: consumers leave such a metric out
instead of exporting 0. `xid_counts` counts XID events by code since the backend started
(NVML: from its event set, ignored XIDs included; fake: from the file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# XIDs that are application errors, not hardware faults (HAMi rm/health.go).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# NVML clock event (throttle) reason bits -> the `reason` label value.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_BITS = {name: bit for bit, name in THROTTLE_REASONS.items()}


@dataclass(frozen=True, slots=True)
class GpuHealth:
    uuid: str
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    ecc_corrected: int | None = None  # volatile (since last driver load) counts
    ecc_uncorrected: int | None = None
    pcie_replays: int | None = None
    throttle_reasons: int | None = None  # NVML bit mask
    xid_counts: Mapping[int, int] = field(default_factory=dict)


def throttle_flags(mask: int) -> dict[str, int]:
    """Every known reason -> 1 when its bit is set in `mask`, else 0."""
    return {name: int(bool(mask & bit)) for bit, name in THROTTLE_REASONS.items()}


@runtime_checkable
class HealthSource(Protocol):
    def health(self) -> list[GpuHealth]:
        """One sample per GPU present now (a GPU that vanished has no entry)."""
        ...
