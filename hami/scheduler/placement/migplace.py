"""MIG placement: which profile and slice placement a container gets on a MIG card (pure, no I/O).

HAMi sources: `pkg/device/nvidia/device.go` (`selectMigCandidate`, the MIG branch of `Fit` and
`AddResourceUsage`). Spec: scheduler.md §5.

- `select_mig(profiles, occupied, memory)`: the smallest profile (memory, then slices) with at
  least `memory` MiB and a placement that overlaps none of `occupied`, or None.
- `mig_feasible(dev, chosen, memreq)`: whether `dev` still has room for `memreq` after the
  devices already `chosen` for this container took theirs (Fit's CardMigTopologyInfeasible check).
- `take_placement(dev, memory, taken)`: choose for one chosen device and remember the placement
  in `taken` (card id -> placements), so a second device of the container on the card skips it.
- `is_mig_request(request, devices, vgpu_mode)`: whether an NVIDIA request may land on MIG cards.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami.device.model import (
    MODE_MIG,
    NVIDIA,
    ContainerDevice,
    ContainerDeviceRequest,
    MigPlacement,
    MigProfile,
)
from hami.scheduler.placement.usage import DeviceState


def _overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def select_mig(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], memory: int
) -> tuple[MigProfile, MigPlacement] | None:
    """selectMigCandidate: smallest profile (memory, then slices) with memory >= request and a
    placement free of every occupied one."""
    for prof in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        if prof.memory_mb < memory:
            continue
        for pl in prof.placements:
            if not any(_overlaps(pl, o) for o in occupied):
                return prof, pl
    return None


def mig_feasible(dev: DeviceState, chosen: Sequence[ContainerDevice], memreq: int) -> bool:
    occupied = list(dev.mig_in_use)
    for existing in chosen:
        if existing.uuid != dev.id:
            continue
        sel = select_mig(dev.mig_profiles, occupied, existing.usedmem)
        if sel is None:
            return False
        occupied.append(sel[1])
    return select_mig(dev.mig_profiles, occupied, memreq) is not None


def take_placement(
    dev: DeviceState, memory: int, taken: dict[str, list[MigPlacement]]
) -> tuple[MigProfile, MigPlacement] | None:
    """select_mig on `dev` past its placements in use and those in `taken[dev.id]`; the chosen
    placement is added to `taken`."""
    occupied = taken.get(dev.id)
    if occupied is None:
        occupied = taken[dev.id] = list(dev.mig_in_use)
    sel = select_mig(dev.mig_profiles, occupied, memory)
    if sel is not None:
        occupied.append(sel[1])
    return sel


def is_mig_request(request: ContainerDeviceRequest, devices: Sequence[DeviceState], vgpu_mode: str | None) -> bool:
    if request.type != NVIDIA:
        return False
    if vgpu_mode is not None and MODE_MIG not in vgpu_mode:
        return False
    return any(d.mode == MODE_MIG for d in devices)
