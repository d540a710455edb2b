"""Making and freeing MIG slices on a card, for whichever role owns them (the node agent's dynamic
MIG, hami.agent.migmgr; the DRA plugin's partitions, hami.dra.plugin).

One slicer per role. Backend calls run in a thread for NVML (they block) and inline for the fake;
`lock` serialises every MIG change on the node (NVML MIG calls are not concurrent-safe per card).
A card goes into MIG mode when its first slice is made and leaves it with its last one, so a card
nobody slices is whole again. An instance with running processes is never destroyed (HAMi's
nvmlBusyGPUs guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from hami.device.model import MigProfileAllow
from hami.gpu.backend import GpuBackend, GpuInfo
from hami.gpu.mig import (
    MigControl,
    MigError,
    MigInstance,
    MigProfileInfo,
    SliceKey,
    allowed_profiles,
    instance_key,
)
from hami.obs.log import get_logger

log = get_logger(__name__)


class MigSlicer:
    def __init__(self, backend: GpuBackend, allowlist: Sequence[MigProfileAllow] = ()):
        if not isinstance(backend, MigControl):
            raise MigError(f"GPU backend {backend.name!r} cannot manage MIG")
        self.backend = backend
        self.allowlist = tuple(allowlist)
        self.lock = asyncio.Lock()
        self.profile_cache: dict[str, tuple[MigProfileInfo, ...]] = {}
        self.created = 0
        self.destroyed = 0

    async def call(self, fn, *args):
        if self.backend.name == "nvml":
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def profiles(self, gpu: GpuInfo) -> tuple[MigProfileInfo, ...]:
        """Allowed profiles of a MIG-capable card, () for any other (cached: the geometry does not change)."""
        if gpu.uuid not in self.profile_cache:
            if not await self.call(self.backend.mig_capable, gpu.uuid):
                self.profile_cache[gpu.uuid] = ()
            else:
                offered = await self.call(self.backend.mig_profiles, gpu.uuid)
                self.profile_cache[gpu.uuid] = allowed_profiles(gpu.name, offered, self.allowlist)
        return self.profile_cache[gpu.uuid]

    async def realize_slices(self, keys: Sequence[SliceKey], where: str) -> list[MigInstance]:
        """Create (or find, after a restart) each slice, in order: all or none. On a failure the
        instances this call created are destroyed again, MIG mode turned on here is turned off,
        and MigError says why. The caller has checked the profiles and placements."""
        out: list[MigInstance] = []
        made: list[MigInstance] = []
        enabled_here: list[str] = []
        async with self.lock:
            try:
                for key in keys:
                    out.append(await self.find_or_create(key, where, made, enabled_here))
            except MigError as exc:
                await self.roll_back(made, enabled_here)
                raise MigError(f"{where}: cannot realize the MIG slice {key.profile} at slice {key.start} "
                               f"on GPU {key.gpu_uuid}: {exc}") from None
        return out

    async def find_or_create(self, key: SliceKey, where: str, made: list[MigInstance],
                             enabled_here: list[str]) -> MigInstance:
        live = await self.call(self.backend.mig_instances, key.gpu_uuid)
        found = next((m for m in live if instance_key(m) == key and m.mig_uuid), None)
        if found is not None:
            return found
        if not await self.call(self.backend.mig_enabled, key.gpu_uuid):
            await self.call(self.backend.set_mig_mode, key.gpu_uuid, True)
            enabled_here.append(key.gpu_uuid)
        found = await self.call(self.backend.create_mig, key.gpu_uuid, key.profile, key.start)
        made.append(found)
        self.created += 1
        log.info("Created MIG instance", owner=where, gpu=key.gpu_uuid, profile=key.profile, start=key.start,
                 mig_uuid=found.mig_uuid, gi=found.gpu_instance_id)
        return found

    async def roll_back(self, made: Sequence[MigInstance], enabled_here: Sequence[str]) -> None:
        for m in made:
            try:
                await self.call(self.backend.destroy_mig, m.gpu_uuid, m.gpu_instance_id)
            except MigError as exc:
                log.warning("Rolling back a MIG instance failed", gpu=m.gpu_uuid, error=str(exc))
        for uuid in enabled_here:
            if not await self.call(self.backend.mig_instances, uuid):
                await self.call(self.backend.set_mig_mode, uuid, False)

    async def release_slices(self, keys: Iterable[SliceKey], where: str) -> list[MigInstance]:
        """Destroy the live instances of `keys` (one already gone is released) and leave MIG mode
        on cards with no instance left. An instance with running processes is kept: MigError."""
        gone: list[MigInstance] = []
        async with self.lock:
            for key in keys:
                live = await self.call(self.backend.mig_instances, key.gpu_uuid)
                for m in (m for m in live if instance_key(m) == key):
                    if await self.busy(m):
                        raise MigError(f"{where}: MIG instance {m.mig_uuid} ({m.profile} at slice {m.start} on GPU "
                                       f"{m.gpu_uuid}) still has running processes")
                    await self.call(self.backend.destroy_mig, m.gpu_uuid, m.gpu_instance_id)
                    gone.append(m)
                    self.destroyed += 1
                    log.info("Destroyed MIG instance", owner=where, gpu=m.gpu_uuid, profile=m.profile,
                             start=m.start, mig_uuid=m.mig_uuid)
                if await self.call(self.backend.mig_enabled, key.gpu_uuid) and \
                        not await self.call(self.backend.mig_instances, key.gpu_uuid):
                    await self.call(self.backend.set_mig_mode, key.gpu_uuid, False)
                    log.info("MIG mode off: no instance left on the card", gpu=key.gpu_uuid)
        return gone

    async def ensure_whole(self, uuid: str, where: str) -> None:
        """Leave MIG mode on a card with no instance, so it can be shared whole; MigError when it
        has instances (they are someone's)."""
        async with self.lock:
            if not await self.call(self.backend.mig_enabled, uuid):
                return
            if await self.call(self.backend.mig_instances, uuid):
                raise MigError(f"{where}: GPU {uuid} has MIG instances: it cannot be shared whole")
            await self.call(self.backend.set_mig_mode, uuid, False)
            log.info("MIG mode off: the card is shared whole", owner=where, gpu=uuid)

    async def busy(self, m: MigInstance) -> bool:
        """HAMi's nvmlBusyGPUs guard: an instance with running processes is never destroyed."""
        busy = getattr(self.backend, "mig_busy", None)
        return bool(busy is not None and await self.call(busy, m.gpu_uuid, m.gpu_instance_id))
