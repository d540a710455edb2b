"""The scheduler's watches of DRA objects (`--dra`): ResourceSlices, ResourceClaims and DeviceClasses,
the devices the slices publish (rebuilt only after a slice event), and a pod's claims as the cache
has them. It decides nothing: the Placer (hami.scheduler.placer) ranks nodes for pods with claims
from what it reads here and holds the allocations it answered.
"""

from __future__ import annotations

from hami.dra import podclaims
from hami.kube.client import KubeClient
from hami.kube.informer import Informer
from hami.kubesched import extendedres
from hami.kubesched.allocator import Inventory, inventory

CLAIM_WAIT_SECONDS = 2.0  # a claim kube-scheduler has but our watch has not shown yet


def uses_claims(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


class DraWatch:
    def __init__(self, client: KubeClient | None, *, sync_timeout: float = 30.0):
        self.sync_timeout = sync_timeout  # before its watches have listed, an answer would see no devices
        self.slices = Informer(client, "resourceslices", handler=self._slice_event)
        self.claims = Informer(client, "resourceclaims")
        self.classes = Informer(client, "deviceclasses")
        self._inventory: Inventory | None = None
        self._slices_changed = False

    @property
    def informers(self) -> list[Informer]:
        return [self.slices, self.claims, self.classes]

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def _slice_event(self, etype: str, old, new) -> None:
        self._slices_changed = True

    def devices(self) -> Inventory:
        """The devices the slices publish, rebuilt after a slice event (the unchanged slices' reads kept)."""
        if self._inventory is None or self._slices_changed:
            self._slices_changed = False
            self._inventory = inventory(self.slices.store.values(), self._inventory)
        return self._inventory

    def class_mapping(self) -> dict:
        """Extended resource name -> the DeviceClass that serves it (KEP-5004)."""
        return extendedres.class_mapping(self.classes.store.values())

    def serves(self, pod: dict) -> bool:
        """A pod whose devices DRA allocates: claims, or extended resources a DeviceClass maps (KEP-5004)."""
        return uses_claims(pod) or bool(extendedres.pod_wants(pod, self.class_mapping()))

    def claims_of(self, pod: dict) -> tuple[list[dict], list[str]]:
        """(the pod's claims in our cache, the names it uses that our cache lacks)."""
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        names, waiting = podclaims.claim_names(pod)
        got, missing = [], list(waiting)
        for name in names:
            claim = self.claims.store.get(f"{ns}/{name}")
            if claim is None:
                missing.append(name)
            else:
                got.append(claim)
        return got, missing

    def waits(self, pod: dict) -> bool:
        """Whether an answer for `pod` must wait: the watches have not listed, or a claim is not cached yet."""
        return not self.synced or bool(self.claims_of(pod)[1])

    async def ready(self, pod: dict) -> str:
        """Wait until the watches have listed and the pod's claims are cached: "" then, else why not."""
        for informer in self.informers:
            if not await informer.wait_synced(self.sync_timeout):
                return "the scheduler's ResourceSlice, ResourceClaim and DeviceClass watches have not synced"
        await self.claims.wait_for(lambda: not self.claims_of(pod)[1], CLAIM_WAIT_SECONDS)
        missing = self.claims_of(pod)[1]
        if missing:
            ns = (pod.get("metadata") or {}).get("namespace") or "default"
            return f'resourceclaim "{ns}/{missing[0]}" is not in the scheduler\'s cache yet'
        return ""
