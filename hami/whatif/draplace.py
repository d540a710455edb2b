"""Pods with DRA claims in a replay (pure, no I/O): what the embedded `--dra` cluster does with them.

A pod with `spec.resourceClaims` (the `--dra` webhook's claim templates, or claims written by hand)
is placed as kube-scheduler with the DynamicResources plugin and HAMi's extender place it there:

1. the pod's claims: a `resourceClaimName` is the snapshot's claim (as the replay has left it); a
   `resourceClaimTemplateName` gets a claim made from the template (`<pod>-<pod claim>`), as the
   resourceclaim controller makes one; a missing claim or template keeps the pod pending;
2. per candidate node (kube-scheduler's in-tree filters passed, name order), the structured allocator
   (`hami.kubesched.allocator`, the one the DynamicResources plugin runs) against the node's
   ResourceSlices (the Node object: `nodeSelector` slices match its labels), the DeviceClasses and
   what every allocated claim holds;
3. among the nodes the claims fit, the extender's node policy by GPU fill
   (`hami.scheduler.placement.claimfit`, as the scheduler's Placer answers /filter): binpack
   the fullest, spread the emptiest, ties to the earlier name; that node's allocation is written
   to the claims with the pod in `reservedFor`.

A placed pod that leaves drops its reservations; a claim nobody reserves is deallocated (a claim
made from a template goes with its pod), as the resourceclaim controller does.

At the start of a replay, the claims the replayed pods reserve are released the same way, so those
pods are allocated anew. Share IDs are numbered, not random, so a replay is deterministic; the text
of an allocation (`allocation_text`) leaves them out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hami.dra import podclaims
from hami.kubesched.allocator import Allocator, Outcome, Usage, inventory
from hami.scheduler.placement import claimfit
from hami.scheduler.placement.policy import node_policy_for

DRA_CLAIM_MISSING = "DRAClaimMissing"  # a claim or template the pod names is not in the snapshot
DRA_NO_DEVICES = "DRANoDevices"  # no candidate node has a ResourceSlice


@dataclass(frozen=True, slots=True)
class DraObjects:
    """The snapshot's resource.k8s.io objects, as read."""

    slices: tuple[Mapping, ...] = ()
    claims: Mapping[str, Mapping] = field(default_factory=dict)  # "ns/name"
    templates: Mapping[str, Mapping] = field(default_factory=dict)  # "ns/name"
    classes: Mapping[str, Mapping] = field(default_factory=dict)  # name

    def __bool__(self) -> bool:
        return bool(self.slices or self.claims or self.templates or self.classes)


def uses_claims(pod: Mapping) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and bool(spec.get("resourceClaims"))


def allocation_text(pod: Mapping, claims: Mapping[str, Mapping]) -> str:
    """The devices a placed pod's claims hold, `<pod claim>:<request>=<pool>/<device>` with the
    capacity consumed, in the pod's claim order; `claims` by pod claim name."""
    parts = []
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = pc.get("name") if isinstance(pc, Mapping) else None
        claim = claims.get(name) if name else None
        results = ((((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
        for r in results or []:
            text = f"{name}:{r.get('request')}={r.get('pool')}/{r.get('device')}"
            consumed = r.get("consumedCapacity")
            if isinstance(consumed, Mapping) and consumed:
                text += "(" + ",".join(f"{k}={v}" for k, v in sorted(consumed.items())) + ")"
            parts.append(text)
    return ";".join(parts)


@dataclass(frozen=True, slots=True)
class DeviceFill:
    """One published GPU as the report counts it: shares (HAMi's slots), memory in MiB, cores."""

    name: str  # pool/device
    type: str  # productName, else the device name
    slots: int
    slots_used: int
    mem: int
    mem_used: int
    cores: int
    cores_used: int
    usable: bool  # no NoSchedule/NoExecute taint


@dataclass(frozen=True, slots=True)
class Placement:
    node: str = ""
    devices: str = ""  # allocation_text of the pod once placed
    failed: Mapping[str, str] = field(default_factory=dict)  # node -> reason (HAMi-style counts first)
    problem: tuple[str, str] | None = None  # (code, message) when the pod cannot be tried at all


def _release(claim: Mapping, uids: Iterable[str]) -> dict:
    """The claim with `uids` dropped from reservedFor and, when nobody is left, deallocated."""
    gone = set(uids)
    status = dict(claim.get("status") or {})
    held = [r for r in podclaims.reserved_for(claim) if r.get("uid") not in gone]
    status.pop("reservedFor", None)
    if held:
        status["reservedFor"] = held
    else:
        status.pop("allocation", None)
    return {**claim, "status": status}


class DraReplay:
    """One scenario's DRA state: the claims as the replay has them, and what they hold."""

    def __init__(self, objs: DraObjects, node_objs: Mapping[str, Mapping], taken: set[str], node_policy: str):
        self.inventory = inventory(objs.slices)
        self.classes = dict(objs.classes)
        self.templates = objs.templates
        self.node_objs = node_objs
        self.node_policy = node_policy
        self.claims: dict[str, dict] = {}
        for key, claim in objs.claims.items():
            owners = {o.get("uid") for o in (claim.get("metadata") or {}).get("ownerReferences") or []
                      if isinstance(o, Mapping) and o.get("controller")}
            if owners & taken:
                continue  # made for a replayed pod: made again from its template when it is replayed
            held = {r.get("uid") for r in podclaims.reserved_for(claim)}
            self.claims[key] = _release(claim, held & taken) if held & taken else dict(claim)
        self.usage = Usage.of(self.claims.values())
        numbers = itertools.count(1)
        self.allocator = Allocator(new_share_id=lambda: f"whatif-share-{next(numbers)}")
        self._held: dict[str, tuple[list[str], list[str]]] = {}  # uid -> (claim keys, keys made for it)

    def _pod_claims(self, pod: Mapping) -> tuple[list[tuple[str, dict]], list[str], tuple[str, str] | None]:
        """((pod claim, claim) pairs, keys of claims made from templates, or the problem)."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name", "")
        out, made = [], []
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            if not isinstance(pc, Mapping):
                return [], [], ("InvalidPod", "spec.resourceClaims: expected an array of objects")
            if pc.get("resourceClaimName"):
                key = f"{ns}/{pc['resourceClaimName']}"
                claim = self.claims.get(key)
                if claim is None:
                    return [], [], (DRA_CLAIM_MISSING, f"ResourceClaim {key} is not in the snapshot")
                out.append((str(pc.get("name")), claim))
            elif pc.get("resourceClaimTemplateName"):
                tkey = f"{ns}/{pc['resourceClaimTemplateName']}"
                tmpl = self.templates.get(tkey)
                if tmpl is None:
                    return [], [], (DRA_CLAIM_MISSING, f"ResourceClaimTemplate {tkey} is not in the snapshot")
                claim_name = f"{name}-{pc.get('name')}"
                spec = (tmpl.get("spec") or {}).get("spec") if isinstance(tmpl.get("spec"), Mapping) else None
                claim = {"metadata": {"name": claim_name, "namespace": ns}, "spec": dict(spec or {})}
                out.append((str(pc.get("name")), claim))
                made.append(f"{ns}/{claim_name}")
        return out, made, None

    def devices_of(self, node: str) -> list[DeviceFill]:
        """The node's whole GPUs (partitions of a MIG-capable GPU are left out) with what is allocated."""
        out = []
        for pool in self.inventory.pools_for(self.node_objs.get(node) or node):
            for dev in pool.devices:
                if dev.counters:
                    continue
                cap, whole = dev.capacity, dev.key in self.usage.exclusive
                consumed = self.usage.consumed.get(dev.key, {})

                def amount(name: str, unit: int = 1, cap=cap, whole=whole, consumed=consumed) -> tuple[int, int]:
                    total = int(cap.get(name, 0)) // unit
                    return total, total if whole else min(total, int(consumed.get(name, 0)) // unit)
                mem, mem_used = amount("memory", 1 << 20)
                cores, cores_used = amount("cores")
                if "shares" in cap:
                    slots, slots_used = amount("shares")
                else:
                    slots, slots_used = 1, int(whole or dev.key in self.usage.shared)
                attrs = dev.raw.get("attributes") if isinstance(dev.raw.get("attributes"), Mapping) else {}
                product = attrs.get("productName") if isinstance(attrs.get("productName"), Mapping) else {}
                out.append(DeviceFill(dev.label, str(product.get("string") or dev.name), slots, slots_used, mem,
                                      mem_used, cores, cores_used,
                                      not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in dev.taints)))
        return out

    def fill(self, node: str, usage: Usage | None = None) -> float:
        return claimfit.node_fill(self.inventory.pools_for(self.node_objs.get(node) or node), usage or self.usage)

    def place(self, pod: Mapping, names: Sequence[str], screen: Callable[[str], str | None] | None) -> Placement:
        """The node kube-scheduler and the extender pick among `names` (in-tree candidates), its
        allocation recorded; or every node's reason."""
        pairs, made, problem = self._pod_claims(pod)
        if problem is not None:
            return Placement(problem=problem)
        claims = [c for _, c in pairs]
        if not self.inventory:
            return Placement(problem=(DRA_NO_DEVICES, "no node publishes devices in a ResourceSlice"))
        feasible, failed, outcomes = [], {}, {}
        for name in names:
            refused = screen(name) if screen is not None else None
            if refused is not None:
                failed[name] = refused
                continue
            out = self.allocator.allocate(claims, self.node_objs.get(name) or name, self.inventory, self.usage,
                                          self.classes)
            if out.ok:
                feasible.append(name)
                outcomes[name] = out
            else:
                failed[name] = claimfit.unfit_reason(out)
        if not feasible:
            return Placement(failed=failed)
        policy = node_policy_for((pod.get("metadata") or {}).get("annotations"), self.node_policy)
        node = claimfit.order(feasible, {n: self.fill(n) for n in feasible}, policy)[0]
        placed = self._record(pod, pairs, made, outcomes[node])
        return Placement(node=node, devices=allocation_text(pod, placed))

    def _record(self, pod: Mapping, pairs: list[tuple[str, dict]], made: list[str], out: Outcome) -> dict[str, dict]:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or podclaims.pod_key(pod)
        ref = {"resource": "pods", "name": meta.get("name", ""), "uid": uid}
        keys, placed = [], {}
        for pc, claim in pairs:
            key = podclaims.pod_key(claim)
            current = self.claims.get(key, claim)
            status = dict(current.get("status") or {})
            alloc = out.allocations.get(key)
            if alloc is not None:
                status["allocation"] = alloc
                self.usage.add_allocation(alloc)
            status["reservedFor"] = [*podclaims.reserved_for(current), ref]
            self.claims[key] = placed[pc] = {**current, "status": status}
            keys.append(key)
        self._held[uid] = (keys, made)
        return placed

    def left(self, uid: str) -> bool:
        """A placed pod finished: its reservations go, claims nobody reserves are deallocated."""
        held = self._held.pop(uid, None)
        if held is None:
            return False
        keys, made = held
        for key in keys:
            if key in made:
                self.claims.pop(key, None)
            elif key in self.claims:
                self.claims[key] = _release(self.claims[key], (uid,))
        self.usage = Usage.of(self.claims.values())
        return True
