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

Binding conditions (DRADeviceBindingConditions): when an allocated device carries
`bindingConditions`, PreBind stamps `allocation.allocationTimestamp` and then waits, as upstream's
PreBind does, until the claim's `status.devices[]` entry for that device has every binding
condition True; a `bindingFailureConditions` condition True, or `binding_timeout` (upstream's 600 s
default) passing, fails the binding: the claim's allocation and reservation are cleared so the pod
is scheduled again.

Claim, slice and class changes are the plugin's queue events (`hami.kubesched.schedqueue`).

Preemption. `usage_without(pods)` is the usage with the claims only those pods reserve released: the
RemovePod of KEP-5690 (DRA preemption), which DefaultPreemption's dry run calls for each victim it
takes off a node (`KubeSchedulerLoop(dra_preemption=True)`). Kubernetes 1.36's plugin has no
PreFilterExtensions, so there a victim's devices stay allocated in the dry run and a pod short only
of DRA devices finds no victims. `unavailable_claim` is the plugin's own PostFilter, which 1.36 has:
a claim of the pod that is allocated, reserved by no other pod, and kept the pod off a node, is
deallocated (`deallocate`) so the next attempt allocates it afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from hami.dra import podclaims
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.kubesched import extendedres
from hami.kubesched import schedqueue as sq
from hami.kubesched.allocator import Allocator, Inventory, Outcome, Usage, allocated_node, inventory
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
    def __init__(self, client: KubeClient, allocator: Allocator | None = None, *, binding_timeout: float = 600.0,
                 binding_poll: float = 0.05):
        self.client = client
        self.binding_timeout = binding_timeout
        self.binding_poll = binding_poll
        self.allocator = allocator or Allocator()
        self.on_event: Callable[[tuple[str, str], dict | None, dict | None], None] | None = None
        self.slices = Informer(client, "resourceslices", handler=self._slice_event)
        self.claims = Informer(client, "resourceclaims", handler=self._claim_event)
        self.classes = Informer(client, "deviceclasses", handler=self._class_event)
        self._assumed: dict[str, dict] = {}  # claim key -> the claim as we wrote it
        # an extended-resource claim not created yet (its in-memory key) -> (pod ns, pod name, request mappings)
        self._extended: dict[str, tuple[str, str, list[dict]]] = {}
        self._inventory: Inventory | None = None
        self._slices_changed = False  # a slice event since the inventory was built: rebuilt at the next use
        self.reserved = 0
        self.binding_checks = 0  # PreBind's looks at a claim's binding conditions that found them unmet

    @property
    def informers(self) -> list[Informer]:
        return [self.slices, self.claims, self.classes]

    # ------------------------------------------------------------------ events

    def _emit(self, event: tuple[str, str], old, new) -> None:
        if self.on_event is not None:
            self.on_event(event, old, new)

    def _slice_event(self, etype: str, old, new) -> None:
        self._slices_changed = True
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

    def current_claims(self) -> dict[str, dict]:
        """Every claim as this scheduler sees it: the informer's, with what it assumed over them."""
        current = dict(self.claims.store)
        current.update(self._assumed)
        return current

    def usage(self) -> Usage:
        return Usage.of(self.current_claims().values())

    def usage_without(self, pods: frozenset[str]) -> Usage:
        """The usage with every claim reserved only by the pods (uids) `pods` released: what the
        resourceclaim controller deallocates once they are deleted (a claim another pod still
        reserves stays allocated)."""
        current = self.current_claims()
        if pods:
            current = {k: c for k, c in current.items() if not released_by(c, pods)}
        return Usage.of(current.values())

    def unavailable_claim(self, pod: dict, claims: list[dict], failed_nodes) -> dict | None:
        """PostFilter's pick: the first of the pod's claims that is allocated, reserved by no pod
        but this one, and pinned to a node other than one of `failed_nodes` (where the
        DynamicResources filter refused the pod); None when there is none."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        for claim in claims:
            alloc = (claim.get("status") or {}).get("allocation")
            if not alloc or any(r.get("uid") != uid for r in podclaims.reserved_for(claim)):
                continue
            where = allocated_node(alloc)
            if any(n != where for n in failed_nodes):
                return claim
        return None

    async def deallocate(self, claim: dict) -> str:
        """PostFilter: the claim's allocation and reservation cleared (with its resourceVersion as
        precondition); "" or why not."""
        meta = claim.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        status = {k: v for k, v in (claim.get("status") or {}).items() if k not in ("allocation", "reservedFor")}
        try:
            await self.client.request("replace", "resourceclaims/status", "PUT",
                                      resource_path("resourceclaims", ns, name, "status"),
                                      body={**claim, "status": status}, content_type="application/json")
        except ApiError as exc:
            return f"could not deallocate resourceclaim {ns}/{name}: {exc.message}"
        self._assumed.pop(f"{ns}/{name}", None)
        return ""

    def devices(self) -> Inventory:
        if self._inventory is None or self._slices_changed:
            self._slices_changed = False
            self._inventory = inventory(self.slices.store.values(), self._inventory)
        return self._inventory

    # ------------------------------------------------------------------ the plugin

    def mapping(self) -> dict[str, str]:
        """Extended resource -> DeviceClass (KEP-5004: extendedResourceName, or the implicit name)."""
        return extendedres.class_mapping(self.classes.store.values())

    def involves(self, pod: dict) -> bool:
        """The plugin has work for the pod: claims, or extended resources a DeviceClass maps."""
        return uses_claims(pod) or bool(extendedres.pod_wants(pod, self.mapping()))

    def with_extended(self, pod: dict, claims: list[dict], node: dict) -> tuple[list[dict], tuple | None]:
        """The claims to allocate on `node`: the pod's, plus the extended-resource claim kube-scheduler
        builds where the node's allocatable lacks a mapped resource the pod asks (then the claim and its
        request mappings), unless the pod has one already."""
        mapping = self.mapping()
        wants = extendedres.pod_wants(pod, mapping)
        need = extendedres.needs_dra(wants, node)
        if not need or extendedres.find_claim(pod, claims):
            return claims, None
        meta = pod.get("metadata") or {}
        special, mappings = extendedres.special_claim(
            pod, need, mapping, name=f"{meta.get('name', '')}-extended-resources-pending-{meta.get('uid', '')[:8]}")
        return [*claims, special], (special, mappings)

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
        made = extendedres.find_claim(pod, self.claims.store.values())  # created by an earlier PreBind
        if made is not None and not any(c is made for c in claims):
            claims.append(dict(made))
        return claims, ""

    def filter(self, claims: list[dict], node: dict | str, usage: Usage) -> Outcome:
        """Filter on one node (the Node object: nodeSelector slices match its labels)."""
        classes = {name: c for name, c in self.classes.store.items()}
        return self.allocator.allocate(claims, node, self.devices(), usage, classes)

    def reserve(self, pod: dict, claims: list[dict], outcome: Outcome, extended: tuple | None = None) -> list[dict]:
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
                if waits_for_binding(alloc):
                    alloc = {**alloc, "allocationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                status["allocation"] = alloc
            held = podclaims.reserved_for(claim)
            if any(r.get("uid") == ref["uid"] for r in held) and alloc is None:
                continue
            status["reservedFor"] = [*held, ref]
            body = {**claim, "status": status}
            self._assumed[key] = body
            bodies.append(body)
        if extended is not None:
            self._extended[podclaims.pod_key(extended[0])] = (meta.get("namespace", ""), meta.get("name", ""),
                                                             extended[1])
        return bodies

    def unreserve(self, bodies: list[dict]) -> None:
        for body in bodies:
            key = podclaims.pod_key(body)
            if self._assumed.get(key) is body:
                del self._assumed[key]

    async def prebind(self, bodies: list[dict], claim_keys: list[str] = ()) -> str:
        """PreBind: write each reserved claim's status through /status, its resourceVersion as
        precondition, then wait for the binding conditions of every claim of the pod (`claim_keys`,
        allocated now or before); "" or the error (then every reservation of the pod is dropped)."""
        for i, body in enumerate(bodies):
            key = podclaims.pod_key(body)
            if key in self._extended:
                created, error = await self._create_extended(body, key)
                if error:
                    self.unreserve(bodies)
                    return error
                body = bodies[i] = created
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
        for key in dict.fromkeys([*(podclaims.pod_key(b) for b in bodies), *claim_keys]):
            if waits_for_binding(((self.claim(key) or {}).get("status") or {}).get("allocation")):
                error = await self._wait_bound(key)
                if error:
                    await self._release(bodies, key)
                    return error
        return ""

    async def _create_extended(self, body: dict, key: str) -> tuple[dict, str]:
        """PreBind for the extended-resource claim: create it (generateName, annotated, owned by the
        pod), record it in the pod's status.extendedResourceClaimStatus; the created claim with the
        reserved status to write next, or the error."""
        pod_ns, pod_name, mappings = self._extended.pop(key)
        meta = {k: v for k, v in body["metadata"].items() if k != "name"}
        try:
            created = await self.client.create("resourceclaims", {**body, "metadata": meta, "status": {}}, pod_ns)
        except ApiError as exc:
            return body, f"create claim for extended resources of pod {pod_ns}/{pod_name}: {exc.message}"
        name = created["metadata"]["name"]
        try:
            await self.client.request(
                "patch", "pods/status", "PATCH", resource_path("pods", pod_ns, pod_name, "status"),
                body={"status": {"extendedResourceClaimStatus": {"resourceClaimName": name,
                                                                  "requestMappings": mappings}}},
                content_type="application/merge-patch+json")
        except ApiError as exc:
            with contextlib.suppress(ApiError):
                await self.client.delete("resourceclaims", name, pod_ns)
            return body, f"update pod {pod_ns}/{pod_name} ExtendedResourceClaimStatus: {exc.message}"
        if self._assumed.get(key) is body:
            del self._assumed[key]
        out = {**created, "status": body.get("status") or {}}
        self._assumed[podclaims.pod_key(out)] = out
        return out, ""

    async def _wait_bound(self, key: str) -> str:
        """Until every binding condition of the claim's devices is True: "" or why binding failed."""
        deadline = time.monotonic() + self.binding_timeout
        while True:
            verdict = binding_verdict(self.claim(key) or {})
            if verdict is not None:
                return verdict
            self.binding_checks += 1
            if time.monotonic() >= deadline:
                return f"resourceclaim {key}: binding conditions not met within {self.binding_timeout:g}s"
            await asyncio.sleep(self.binding_poll)

    async def _release(self, bodies: list[dict], failed: str) -> None:
        """A failed binding: the claim's allocation and reservation go (read fresh, written with its
        resourceVersion, retried on a conflict), so the pod is placed anew."""
        self.unreserve(bodies)
        ns, _, name = failed.partition("/")
        for _ in range(5):
            try:
                current = await self.client.get("resourceclaims", name, ns)
                await self.client.request(
                    "replace", "resourceclaims/status", "PUT", resource_path("resourceclaims", ns, name, "status"),
                    body={**current, "status": {}}, content_type="application/json")
                return
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("Could not release claim after failed binding", claim=failed, error=exc.message)
                    return
        log.warning("Could not release claim after failed binding: conflicts", claim=failed)


def released_by(claim: dict, pods: frozenset[str]) -> bool:
    """The claim is allocated and every pod reserving it is in `pods` (uids): deleting them frees it."""
    held = podclaims.reserved_for(claim)
    return bool(held) and bool((claim.get("status") or {}).get("allocation")) and all(
        r.get("uid") in pods for r in held)


def waits_for_binding(allocation: dict | None) -> bool:
    return any(r.get("bindingConditions") for r in ((allocation or {}).get("devices") or {}).get("results") or [])


def binding_verdict(claim: dict) -> str | None:
    """None while waiting; "" when every device's binding conditions are True; else why it failed."""
    status = claim.get("status") or {}
    devices = {(d.get("driver"), d.get("pool"), d.get("device")): {
        c.get("type"): c.get("status") for c in d.get("conditions") or [] if isinstance(c, dict)}
        for d in status.get("devices") or [] if isinstance(d, dict)}
    key = podclaims.pod_key(claim)
    waiting = False
    for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
        if not r.get("bindingConditions"):
            continue
        conds = devices.get((r.get("driver"), r.get("pool"), r.get("device")), {})
        for failure in r.get("bindingFailureConditions") or []:
            if conds.get(failure) == "True":
                return f"resourceclaim {key}: binding failed for device {r.get('device')}: {failure} is True"
        if any(conds.get(c) != "True" for c in r["bindingConditions"]):
            waiting = True
    if not (status.get("allocation") or {}):
        return f"resourceclaim {key}: allocation removed while waiting for binding conditions"
    return None if waiting else ""
