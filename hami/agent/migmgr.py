"""Dynamic MIG on the node, the I/O half: realize the scheduler's slices on the card, free the
ones no pod holds, keep the card in MIG mode only while it has instances.

One manager per agent, a `MigSlicer` (hami.gpu.migslicer: the card calls, their lock, making and
freeing slices) with the pods' side: one lock serialises every MIG change on the node, so
Allocate and the reconcile tick never interleave.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from hami.agent import mig as plan
from hami.device import codec
from hami.device.model import MigProfile, MigProfileAllow
from hami.gpu import GpuBackend, GpuInfo
from hami.gpu.mig import MigError, MigInstance
from hami.gpu.migslicer import MigSlicer
from hami.obs.log import get_logger

log = get_logger(__name__)


class MigManager(MigSlicer):
    def __init__(self, backend: GpuBackend, allowlist: Sequence[MigProfileAllow] = ()):
        plan.validate_allowlist(allowlist)
        super().__init__(backend, allowlist)
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ registration

    async def register_profiles(self, gpus: Iterable[GpuInfo]) -> dict[str, tuple[MigProfile, ...]]:
        return {g.uuid: plan.register_profiles(await self.profiles(g)) for g in gpus}

    # ------------------------------------------------------------------ allocate

    async def realize(self, pod: Mapping, container_index: int, gpus: Sequence[GpuInfo]) -> list[MigInstance]:
        """Create (or find, after a restart) the container's slices, in device order. On any
        failure the instances this call created are destroyed again and MigRequestError/MigError
        says why; the card is left as it was."""
        allocations = plan.pod_allocations(pod)  # malformed -> MigRequestError before any card change
        wanted = plan.container_slices(allocations, container_index)
        by_uuid = {g.uuid: g for g in gpus}
        where = f"pod {(pod.get('metadata') or {}).get('namespace')}/{(pod.get('metadata') or {}).get('name')}"
        for a in wanted:
            gpu = by_uuid.get(a.gpu_uuid)
            if gpu is None:
                raise plan.MigRequestError(f"{where}: {plan.MIG_ANNOTATION} names GPU {a.gpu_uuid}, not on this node")
            plan.check_request(a, await self.profiles(gpu), where)
        return await self.realize_slices([plan.key_of(a) for a in wanted], where)

    async def forget(self, created: Iterable[MigInstance]) -> None:
        """Destroy instances an Allocate created but could not record (its patch failed)."""
        async with self.lock:
            for m in created:
                try:
                    await self.call(self.backend.destroy_mig, m.gpu_uuid, m.gpu_instance_id)
                except MigError as exc:
                    log.warning("Destroying an unrecorded MIG instance failed", gpu=m.gpu_uuid, error=str(exc))

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, gpus: Sequence[GpuInfo], pods: Iterable[Mapping]) -> list[MigInstance]:
        """Destroy instances no live pod holds; leave MIG mode on cards with none left. Returns
        what was destroyed. A pod whose annotation does not decode pauses destruction."""
        held, errors = plan.held_slices(pods)
        if errors:
            for e in errors:
                if e not in self._warned:
                    self._warned.add(e)
                    log.warning("MIG reconcile paused: a pod's MIG annotation does not decode", error=e)
            return []
        gone: list[MigInstance] = []
        async with self.lock:
            for g in gpus:
                if not await self.profiles(g):
                    continue
                if not await self.call(self.backend.mig_enabled, g.uuid):
                    continue
                live = await self.call(self.backend.mig_instances, g.uuid)
                for m in plan.reconcile_plan(live, held):
                    if await self.busy(m):
                        key = f"busy {m.mig_uuid}"
                        if key not in self._warned:
                            self._warned.add(key)
                            log.warning("Unheld MIG instance has running processes: kept", gpu=g.uuid,
                                        profile=m.profile, start=m.start, mig_uuid=m.mig_uuid)
                        continue
                    try:
                        await self.call(self.backend.destroy_mig, g.uuid, m.gpu_instance_id)
                    except MigError as exc:
                        log.warning("Destroying a MIG instance failed", gpu=g.uuid, error=str(exc))
                        continue
                    gone.append(m)
                    self.destroyed += 1
                    log.info("Destroyed MIG instance no pod holds", gpu=g.uuid, profile=m.profile, start=m.start,
                             mig_uuid=m.mig_uuid)
                if not await self.call(self.backend.mig_instances, g.uuid):
                    try:
                        await self.call(self.backend.set_mig_mode, g.uuid, False)
                        log.info("MIG mode off: no slice held on the card", gpu=g.uuid)
                    except MigError as exc:
                        log.warning("Leaving MIG mode failed", gpu=g.uuid, error=str(exc))
        return gone


    async def apply(self, pod: Mapping, containers: Sequence, gpus: Sequence[GpuInfo]) -> tuple[list, str | None]:
        """Allocate's MIG step: realize each container's slices and point its envs at the MIG
        devices. Returns (containers, new annotation value or None when the pod asked for none)."""
        allocations = plan.pod_allocations(pod)
        if not allocations:
            return list(containers), None
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or [])]
        out, created = [], {}
        for c in containers:
            k = names.index(c.container) if c.container in names else -1
            instances = await self.realize(pod, k, gpus)
            slices = plan.container_slices(allocations, k)
            for a, m in zip(slices, instances, strict=True):
                created[(a.container_index, a.device_index)] = m
            out.append(replace(c, envs=plan.mig_envs(c.envs, [m.mig_uuid for m in instances])) if instances else c)
        return out, annotate(pod, created)


def annotate(pod: Mapping, created: Mapping[tuple[int, int], MigInstance]) -> str:
    """New `hami.io/vgpu-mig-allocations` value with the realized slices' runtime identity."""
    return codec.encode_mig_allocations(plan.record_instances(plan.pod_allocations(pod), created))
