"""The DynamicResources plugin of the embedded kube-scheduler loop (structured parameters).

PreEnqueue keeps a pod out of the queue until every claim it names exists (no backoff meanwhile).
PreFilter reads the pod's claims (`hami.dra.podclaims`): a templated claim the controller has not
made yet, or a claim that does not exist, keeps the pod Pending with that reason. Filter runs the
pure allocator (`hami.kubesched.allocator`) per node against the node's ResourceSlices, the DeviceClasses
and what every allocated claim holds. Reserve (in the scheduling cycle) assumes each claim's new
status (`status.allocation` when it had none, the pod added to `status.reservedFor`) so the next
cycle never hands the same capacity out twice; PreBind (in the binding cycle, as upstream) writes
it through the status subresource with the claim's resourceVersion as precondition before the pod
is bound. What it wrote stays assumed until the claim informer shows it.

Claim, slice and class changes are the plugin's queue events (`hami.kubesched.schedqueue`).
"""

from __future__ import annotations

from collections.abc import Callable

from hami.dra import podclaims
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.kubesched import schedqueue as sq
from hami.kubesched.allocator import Allocator, Inventory, Outcome, Usage, inventory
from hami.obs.log import get_logger

log = get_logger(__name__)

PLUGIN = "DynamicResources"


def uses_claims(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def _rv(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class DynamicResources:
    def __init__(self, client: KubeClient, allocator: Allocator | None = None):
        self.client = client
        self.allocator = allocator or Allocator()
        self.on_event: Callable[[tuple[str, str], dict | None, dict | None], None] | None = None
        self.slices = Informer(client, "resourceslices", handler=self._slice_event)
        self.claims = Informer(client, "resourceclaims", handler=self._claim_event)
        self.classes = Informer(client, "deviceclasses", handler=self._class_event)
        self._assumed: dict[str, dict] = {}  # claim key -> the claim as we wrote it
        self._inventory: Inventory | None = None
        self.reserved = 0

    @property
    def informers(self) -> list[Informer]:
        return [self.slices, self.claims, self.classes]

    # ------------------------------------------------------------------ events

    def _emit(self, event: tuple[str, str], old, new) -> None:
        if self.on_event is not None:
            self.on_event(event, old, new)

    def _slice_event(self, etype: str, old, new) -> None:
        self._inventory = None
        self._emit((sq.RESOURCE_SLICE, sq.ADD if old is None else sq.UPDATE), old, new)

    def _class_event(self, etype: str, old, new) -> None:
        self._emit((sq.DEVICE_CLASS, sq.ADD if old is None else sq.UPDATE), old, new)

    def _claim_event(self, etype: str, old, new) -> None:
        obj = new or old or {}
        key = podclaims.pod_key(obj)
        mine = self._assumed.get(key)
        if mine is not None and (new is None or _rv(new) >= _rv(mine)):
            del self._assumed[key]
        action = sq.DELETE if new is None else sq.ADD if old is None else sq.UPDATE
        self._emit((sq.RESOURCE_CLAIM, action), old, new)

    # ------------------------------------------------------------------ views

    def claim(self, key: str) -> dict | None:
        return self._assumed.get(key) or self.claims.store.get(key)

    def usage(self) -> Usage:
        current = dict(self.claims.store)
        current.update(self._assumed)
        return Usage.of(current.values())

    def devices(self) -> Inventory:
        if self._inventory is None:
            self._inventory = inventory(self.slices.store.values())
        return self._inventory

    # ------------------------------------------------------------------ the plugin

    def gated(self, pod: dict) -> bool:
        """PreEnqueue: a pod waits outside the queue until every claim it names exists."""
        if not uses_claims(pod):
            return False
        names, waiting = podclaims.claim_names(pod)
        ns = (pod.get("metadata") or {}).get("namespace", "")
        return bool(waiting) or any(self.claim(f"{ns}/{n}") is None for n in names)

    def prefilter(self, pod: dict) -> tuple[list[dict] | None, str]:
        """(the pod's claims, "") or (None, why the pod must wait)."""
        ns = (pod.get("metadata") or {}).get("namespace", "")
        names, waiting = podclaims.claim_names(pod)
        if waiting:
            return None, (f'pod "{podclaims.pod_key(pod)}": waiting for the resource claim controller to create '
                          f'the ResourceClaim for pod claim "{waiting[0]}"')
        claims = []
        for name in names:
            claim = self.claim(f"{ns}/{name}")
            if claim is None:
                return None, f'resourceclaim "{ns}/{name}" not found'
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return None, f'resourceclaim "{ns}/{name}" is being deleted'
            claims.append(claim)
        return claims, ""

    def filter(self, claims: list[dict], node: dict | str, usage: Usage) -> Outcome:
        """Filter on one node (the Node object: nodeSelector slices match its labels)."""
        classes = {name: c for name, c in self.classes.store.items()}
        return self.allocator.allocate(claims, node, self.devices(), usage, classes)

    def reserve(self, pod: dict, claims: list[dict], outcome: Outcome) -> list[dict]:
        """Reserve: the claims' new status (allocation, the pod in reservedFor), assumed at once so the
        next cycle sees the capacity taken; PreBind writes them (`prebind`) in the binding cycle."""
        meta = pod.get("metadata") or {}
        ref = {"resource": "pods", "name": meta.get("name", ""), "uid": meta.get("uid", "")}
        bodies = []
        for claim in claims:
            key = podclaims.pod_key(claim)
            status = dict(claim.get("status") or {})
            alloc = outcome.allocations.get(key)
            if alloc is not None:
                status["allocation"] = alloc
            held = podclaims.reserved_for(claim)
            if any(r.get("uid") == ref["uid"] for r in held) and alloc is None:
                continue
            status["reservedFor"] = [*held, ref]
            body = {**claim, "status": status}
            self._assumed[key] = body
            bodies.append(body)
        return bodies

    def unreserve(self, bodies: list[dict]) -> None:
        for body in bodies:
            key = podclaims.pod_key(body)
            if self._assumed.get(key) is body:
                del self._assumed[key]

    async def prebind(self, bodies: list[dict]) -> str:
        """PreBind: write each reserved claim's status through /status, its resourceVersion as
        precondition; "" or the error (then every reservation of the pod is dropped)."""
        for body in bodies:
            key = podclaims.pod_key(body)
            cmeta = body["metadata"]
            try:
                written = await self.client.request(
                    "replace", "resourceclaims/status", "PUT",
                    resource_path("resourceclaims", cmeta.get("namespace"), cmeta["name"], "status"),
                    body=body, content_type="application/json")
            except ApiError as exc:
                self.unreserve(bodies)
                return f"could not reserve resourceclaim {key}: {exc.message}"
            if self._assumed.get(key) is body:
                self._assumed[key] = written
            self.reserved += 1
        return ""
