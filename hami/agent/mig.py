"""Dynamic MIG on the node, the pure half: what to register, which slices pods hold, what a
container gets. No I/O; `migmgr.py` talks to the GPU backend.

HAMi semantics (`pkg/device-plugin/nvidiadevice/nvinternal/plugin/migmgr.go`, `mig_startup.go`,
`pkg/device/nvidia/mig_allocations.go`):

* a MIG-mode card registers `migProfiles` (name, memoryMB, core, sliceCount, placements) read from
  NVML, limited by `migProfileAllowlist`, and `count` = the largest instance count among them;
* the scheduler writes `hami.io/vgpu-mig-allocations` (container, device, GPU, profile, placement);
  Allocate creates exactly that GPU instance + compute instance and records `migUUID`,
  `gpuInstanceID`, `computeInstanceID` back into the annotation;
* an instance is *held* while a non-terminal pod on the node names its (GPU, profile, placement);
  unheld instances are destroyed (HAMi: on start for idle GPUs, and on pod release).

Where hami differs (improvements): the card leaves MIG mode when no slice is held (HAMi keeps
every idle MIG-capable card in MIG mode); reconcile runs continuously, so a pod deleted while the
agent was down frees its slice on the next tick rather than waiting for an idle-card reset; a
malformed annotation on any pod pauses destruction (nothing is freed on a guess).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from hami.device import codec
from hami.device.model import DeviceInfo, MigPlacement, MigProfile, MigProfileAllow
from hami.gpu.mig import (  # noqa: F401 - SliceKey, instance_key, allowed_profiles: the node agent's names too
    MigInstance,
    MigProfileInfo,
    SliceKey,
    allowed_profiles,
    instance_key,
    profile_core,
    short_model,
)

MIG_ANNOTATION = codec.MIG_ALLOCATIONS_ANNOTATION
TERMINAL_PHASES = ("Succeeded", "Failed")
_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb")


class MigRequestError(ValueError):
    """A pod's MIG request cannot be served; the message names the annotation and what is wrong."""


def key_of(a: codec.MigAllocation) -> SliceKey:
    return SliceKey(a.gpu_uuid, a.profile, a.placement.start, a.placement.size)


# --------------------------------------------------------------------------- registration


def register_profiles(profiles: Sequence[MigProfileInfo]) -> tuple[MigProfile, ...]:
    """HAMi's register format of a card's profiles (placements in NVML order)."""
    full = tuple(profiles)
    return tuple(
        MigProfile(p.name, p.memory_mib, profile_core(p, full), p.slices,
                   tuple(MigPlacement(s, z) for s, z in p.placements))
        for p in full
    )


def with_mig_profiles(
    devices: Iterable[DeviceInfo], profiles: Mapping[str, tuple[MigProfile, ...]],
) -> tuple[DeviceInfo, ...]:
    """Registered devices with `migProfiles` set and `count` = the largest instance count of the
    card's profiles (HAMi MIG mode); cards without profiles are left as they are."""
    out = []
    for d in devices:
        profs = profiles.get(d.id)
        if profs:
            d = replace(d, mig_profiles=profs, count=max(len(p.placements) for p in profs))
        out.append(d)
    return tuple(out)


def validate_allowlist(allowlist: Sequence[MigProfileAllow]) -> None:
    """HAMi ValidateMigProfileAllowlist: models and profiles given, profiles shaped `<N>g.<M>gb`."""
    for i, entry in enumerate(allowlist):
        if not entry.models or not entry.profiles:
            raise MigRequestError(f"nvidia.migProfileAllowlist[{i}]: must define models and profiles")
        for p in entry.profiles:
            if not _PROFILE.fullmatch(p):
                raise MigRequestError(f"nvidia.migProfileAllowlist[{i}].profiles: invalid MIG profile {p!r}")


# --------------------------------------------------------------------------- pods


def pod_allocations(pod: Mapping) -> tuple[codec.MigAllocation, ...]:
    """The pod's `hami.io/vgpu-mig-allocations`; MigRequestError naming the key when malformed."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(MIG_ANNOTATION)
    try:
        return codec.decode_mig_allocations(text)
    except codec.CodecError as exc:
        raise MigRequestError(
            f"pod {meta.get('namespace', '')}/{meta.get('name', '')}: bad {MIG_ANNOTATION} annotation: {exc}"
        ) from None


def holds_slices(pod: Mapping) -> bool:
    """A pod that may still run on its slices: not in a terminal phase, allocation not failed."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(codec.BIND_PHASE_ANNOTATION) != "failed"


def held_slices(pods: Iterable[Mapping]) -> tuple[frozenset[SliceKey], list[str]]:
    """(slices held by live pods, errors of pods whose annotation does not decode)."""
    held: set[SliceKey] = set()
    errors = []
    for pod in pods:
        if not holds_slices(pod):
            continue
        try:
            held.update(key_of(a) for a in pod_allocations(pod))
        except MigRequestError as exc:
            errors.append(str(exc))
    return frozenset(held), errors


def check_request(a: codec.MigAllocation, profiles: Sequence[MigProfileInfo], where: str) -> None:
    """The slice must be an allowed profile of the card at one of its NVML placements."""
    prof = next((p for p in profiles if p.name == a.profile), None)
    if prof is None:
        raise MigRequestError(
            f"{where}: GPU {a.gpu_uuid} offers no MIG profile {a.profile!r} "
            f"(allowed: {', '.join(p.name for p in profiles) or 'none'})")
    if (a.placement.start, a.placement.size) not in prof.placements:
        raise MigRequestError(
            f"{where}: placement start={a.placement.start} size={a.placement.size} is not a placement of "
            f"{a.profile} on GPU {a.gpu_uuid} (possible: {list(prof.placements)})")


def container_slices(allocations: Sequence[codec.MigAllocation], container_index: int) -> list[codec.MigAllocation]:
    return sorted((a for a in allocations if a.container_index == container_index), key=lambda a: a.device_index)


def mig_envs(envs: Mapping[str, str], mig_uuids: Sequence[str]) -> dict[str, str]:
    """The container sees its MIG devices, not the parent GPU: both runtime and CUDA lists."""
    out = dict(envs)
    out["NVIDIA_VISIBLE_DEVICES"] = ",".join(mig_uuids)
    out["CUDA_VISIBLE_DEVICES"] = ",".join(mig_uuids)
    return out


def record_instances(allocations: Sequence[codec.MigAllocation],
                     created: Mapping[tuple[int, int], MigInstance]) -> tuple[codec.MigAllocation, ...]:
    """The annotation with runtime identity (all three fields) for the slices realized."""
    out = []
    for a in allocations:
        m = created.get((a.container_index, a.device_index))
        if m is not None:
            a = replace(a, mig_uuid=m.mig_uuid, gpu_instance_id=m.gpu_instance_id,
                        compute_instance_id=m.compute_instance_id)
        out.append(a)
    return tuple(out)


def reconcile_plan(instances: Iterable[MigInstance], held: frozenset[SliceKey]) -> list[MigInstance]:
    """Instances to destroy: those no live pod holds."""
    return [m for m in instances if instance_key(m) not in held]
