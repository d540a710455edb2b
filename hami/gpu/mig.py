"""MIG (Multi-Instance GPU) facts shared by the NVML and fake backends: profiles, instances, the
`MigControl` protocol, and the fake backend's geometry table (`data/mig_geometries.yaml`).

A *profile* is an NVML GPU-instance profile (`1g.10gb`: 1 compute slice, ~10 GB) with the memory
slice placements NVML allows for it; an *instance* is a live GPU instance with its one compute
instance and the MIG device UUID CUDA sees (`MIG-...`). Placements are in memory slices (0..7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol, runtime_checkable

from hami.device.model import MigProfileAllow
from hami.gpu.backend import GpuBackendError


class MigError(GpuBackendError):
    """A MIG operation was refused or failed; the message names the GPU, profile and placement."""


@dataclass(frozen=True, slots=True)
class MigProfileInfo:
    name: str  # "1g.10gb"
    slices: int  # compute slices, the N of "Ng"
    memory_mib: int
    multiprocessors: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices, NVML order
    gi_profile: int = 0  # NVML_GPU_INSTANCE_PROFILE_* id

    @property
    def instance_count(self) -> int:
        return len(self.placements)


@dataclass(frozen=True, slots=True)
class MigInstance:
    gpu_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    start: int
    size: int
    mig_uuid: str

    @property
    def placement(self) -> tuple[int, int]:
        return (self.start, self.size)


@dataclass(frozen=True, slots=True)
class SliceKey:
    """A MIG slice: the parent GPU, the profile and its placement (memory slices)."""

    gpu_uuid: str
    profile: str
    start: int
    size: int


def instance_key(m: MigInstance) -> SliceKey:
    return SliceKey(m.gpu_uuid, m.profile, m.start, m.size)


def short_model(nvml_name: str) -> str:
    return nvml_name.removeprefix("NVIDIA ").removeprefix("NVIDIA-").strip()


def allowed_profiles(model: str, profiles: Sequence[MigProfileInfo],
                     allowlist: Sequence[MigProfileAllow]) -> tuple[MigProfileInfo, ...]:
    """Profiles of a card after `migProfileAllowlist`: the entries naming this model (NVML name
    without `NVIDIA `) decide; a model no entry names keeps every profile NVML offers."""
    entries = [a for a in allowlist if short_model(model) in a.models or model in a.models]
    if not entries:
        return tuple(profiles)
    names = {p for a in entries for p in a.profiles}
    return tuple(p for p in profiles if p.name in names)


def profile_core(profile: MigProfileInfo, profiles: tuple[MigProfileInfo, ...]) -> int:
    """HAMi's `core` of a profile: percent of the full card's multiprocessors, rounded up."""
    full = max((p.multiprocessors for p in profiles), default=0)
    if full <= 0:
        return math.ceil(100 * profile.slices / 7)
    return min(100, math.ceil(100 * profile.multiprocessors / full))


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def slice_key(profile: str) -> str:
    """`1g.10gb` -> `1g` (HAMi's profileSliceKey)."""
    head, dot, _ = profile.partition(".")
    return head if dot and head else profile


@runtime_checkable
class MigControl(Protocol):
    """A backend that can read and change MIG state. Every call names the parent GPU by UUID."""

    def mig_capable(self, uuid: str) -> bool: ...

    def mig_enabled(self, uuid: str) -> bool: ...

    def set_mig_mode(self, uuid: str, enabled: bool) -> None: ...

    def mig_profiles(self, uuid: str) -> tuple[MigProfileInfo, ...]: ...

    def mig_instances(self, uuid: str) -> tuple[MigInstance, ...]: ...

    def create_mig(self, uuid: str, profile: str, start: int) -> MigInstance: ...

    def destroy_mig(self, uuid: str, gpu_instance_id: int) -> None: ...


# --------------------------------------------------------------------------- fake geometry table


def _table() -> list[dict]:
    from importlib.resources import files

    import yaml

    doc = yaml.safe_load(files("hami.gpu.data").joinpath("mig_geometries.yaml").read_text())
    return list(doc["geometries"])


@cache
def geometries() -> dict[str, tuple[MigProfileInfo, ...]]:
    """Geometry name (`A100-40GB`, `A100-80GB`, `H100-80GB`) -> its profiles."""
    out = {}
    for g in _table():
        out[g["name"]] = tuple(
            MigProfileInfo(
                name=p["name"], slices=int(p["slices"]), memory_mib=int(p["memory_mib"]),
                multiprocessors=int(p["sm"]), placements=tuple((int(s), int(z)) for s, z in p["placements"]),
                gi_profile=int(p["gi_profile"]),
            )
            for p in g["profiles"]
        )
    return out


@cache
def _model_index() -> tuple[tuple[str, str], ...]:
    return tuple((m, g["name"]) for g in _table() for m in g["models"])


def geometry_for_model(model: str) -> str | None:
    """The geometry name of an NVML device name (`NVIDIA A100-SXM4-40GB` -> `A100-40GB`)."""
    short = model.removeprefix("NVIDIA ").strip()
    for m, name in _model_index():
        if short == m or short == name:
            return name
    return None
