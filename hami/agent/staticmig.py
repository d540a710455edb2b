"""Static MIG, as NVIDIA's k8s-device-plugin `--mig-strategy` (docs/mig.md): MIG devices an
administrator created are advertised to kubelet and handed out by Allocate.

* `single`: every MIG device is one `nvidia.com/gpu` device (ID = MIG UUID); cards in MIG mode
  are not offered whole. NVIDIA requires one profile on the whole node: mixed profiles are
  advertised anyway and `warnings` says so.
* `mixed`: `nvidia.com/mig-<profile>` per profile, each from its own plugin socket; cards in MIG
  mode leave `nvidia.com/gpu`.

Allocate of MIG IDs answers `NVIDIA_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES` with them, from the
IDs alone (no pod annotation: the default scheduler placed the pod, as with NVIDIA's plugin).
The pure part (`advertised`, `mig_allocation`) takes values; `StaticMigRouter` is the handler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami.agent import cdi
from hami.agent.allocate import AllocationError, ContainerAllocation
from hami.agent.register import HEALTHY, UNHEALTHY, PluginDevice
from hami.gpu import GpuInfo
from hami.gpu.mig import MigInstance

STRATEGIES = ("none", "single", "mixed")
GPU_RESOURCE = "nvidia.com/gpu"


def mig_resource(profile: str) -> str:
    return f"nvidia.com/mig-{profile}"


@dataclass(frozen=True, slots=True)
class StaticMig:
    """What the node advertises: resource -> devices, the MIG parents, and strategy warnings."""

    resources: Mapping[str, tuple[PluginDevice, ...]]
    mig_parents: frozenset[str]
    warnings: tuple[str, ...] = ()


def advertised(strategy: str, gpus: Sequence[GpuInfo], instances: Mapping[str, Sequence[MigInstance]]) -> StaticMig:
    """Extra resources and MIG devices for `strategy` (`instances`: parent UUID -> its MIG devices)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"migstrategy: got {strategy!r}, expected one of {', '.join(STRATEGIES)}")
    parents = frozenset(u for u, ms in instances.items() if ms)
    if strategy == "none":
        return StaticMig({}, frozenset())
    health = {g.uuid: HEALTHY if g.healthy else UNHEALTHY for g in gpus}
    numa = {g.uuid: g.numa for g in gpus}
    devs: dict[str, list[PluginDevice]] = {}
    for g in gpus:
        for m in instances.get(g.uuid, ()):
            if not m.mig_uuid:
                continue
            res = GPU_RESOURCE if strategy == "single" else mig_resource(m.profile)
            devs.setdefault(res, []).append(PluginDevice(m.mig_uuid, health[g.uuid], numa[g.uuid]))
    warnings = []
    profiles = sorted({m.profile for ms in instances.values() for m in ms})
    if strategy == "single" and len(profiles) > 1:
        warnings.append(f"migstrategy single expects one MIG profile on the node, found {', '.join(profiles)}")
    return StaticMig({r: tuple(d) for r, d in devs.items()}, parents, tuple(warnings))


def mig_allocation(ids: Sequence[str], known: Iterable[str]) -> ContainerAllocation:
    """Allocate answer for one container asking for MIG devices by ID."""
    known = set(known)
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise AllocationError(f"unknown MIG device(s) {', '.join(unknown)}: not advertised by this node")
    if not ids:
        raise AllocationError("invalid allocation request with no devices requested")
    visible = ",".join(ids)
    return ContainerAllocation("", (), {"NVIDIA_VISIBLE_DEVICES": visible, "CUDA_VISIBLE_DEVICES": visible}, (), "")


class StaticMigRouter:
    """AllocateHandler: MIG IDs are answered here, everything else by the HAMi pod allocator."""

    def __init__(self, fallback, known: callable, device_list_strategy: tuple[str, ...] = ("envvar",),
                 device_id_strategy: str = "uuid"):
        self.fallback = fallback
        self.known = known  # () -> current MIG UUIDs of the node
        self.device_list_strategy = device_list_strategy
        self.device_id_strategy = device_id_strategy

    def _answer(self, ids: Sequence[str], known: set[str]) -> ContainerAllocation:
        # MIG devices are named to the runtime the same way whole GPUs are (envvar and/or CDI).
        return cdi.apply_strategy(mig_allocation(ids, known), self.device_list_strategy,
                                  self.device_id_strategy, uuids=ids)

    async def allocate(self, requests: Sequence[Sequence[str]]) -> Sequence[ContainerAllocation]:
        known = set(self.known())
        if requests and all(ids and all(i in known for i in ids) for ids in requests):
            return [self._answer(ids, known) for ids in requests]
        if any(i in known for ids in requests for i in ids):
            raise AllocationError("a request mixes MIG devices and whole GPUs; ask for one kind per container")
        if self.fallback is None:
            return [self._answer(ids, known) for ids in requests]
        return await self.fallback.allocate(requests)

    async def preferred(self, requests):
        if self.fallback is None:
            return []
        return await self.fallback.preferred(requests)
