"""The extender's decisions for pods with DRA claims: node policy by GPU fill, and the nodes the
claims cannot fit, with HAMi-style reasons.

kube-scheduler's DynamicResources plugin allocates the devices (its structured allocator); the
extender only ranks and filters nodes, from its own watches of ResourceSlices, ResourceClaims and
DeviceClasses (started with `--dra`). It runs the same allocator (hami.kubesched.allocator) on each
candidate in the pod's node policy order (`hami.io/node-scheduler-policy`, else
`--node-scheduler-policy`; fill from placement.claimfit) and answers the first node the claims fit,
or, with `--extender-prioritize`, every fitting node best first.

A burst: kube-scheduler writes a claim's allocation in its binding cycle, after the extender
answered the next pods. So the allocation this allocator found on the answered node is assumed here
until the claim informer shows the claim allocated (or deleted), or `ASSUME_SECONDS` pass: the next
pod's fill counts it, and binpack keeps filling the same node, spread moves on. Same allocator, same
inputs: kube-scheduler allocates the same devices on that node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from hami.dra import podclaims
from hami.kube.client import KubeClient
from hami.kube.informer import Informer
from hami.kubesched import cel, extendedres
from hami.kubesched.allocator import Allocator, Inventory, Usage, inventory
from hami.obs.log import get_logger
from hami.scheduler.placement import claimfit
from hami.scheduler.placement.policy import node_policy_for

log = get_logger(__name__)

ASSUME_SECONDS = 30.0
CLAIM_WAIT_SECONDS = 2.0  # a claim kube-scheduler has but our watch has not shown yet
# The claims' selectors and search are the pod creator's: bound what one /filter may spend on them on the
# event loop that also serves every other pod's /filter and /bind. Past either bound a node is left
# undecided and passed on, because kube-scheduler's own allocator has the last word on the devices: a
# node failed open costs at worst an allocation kube-scheduler refuses, never a node wrongly filtered out.
FILTER_BUDGET_SECONDS = 0.05  # the walk over the candidates, selectors (hami.kubesched.cel) included
FILTER_MAX_STEPS = 2_000  # search steps per node (upstream's cases take tens; MAX_STEPS is 20,000)


def uses_claims(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


class ClaimPlacer:
    def __init__(self, client: KubeClient, *, node_policy: str, prioritize: bool,
                 node_of: Callable[[str], dict | None], allocator: Allocator | None = None,
                 clock: Callable[[], float] = time.monotonic, sync_timeout: float = 30.0):
        self.node_policy = node_policy
        self.prioritize = prioritize  # --extender-prioritize: every fitting node, best first
        self.node_of = node_of
        self.allocator = allocator or Allocator()
        self.clock = clock
        self.sync_timeout = sync_timeout  # before its watches have listed, an answer would see no devices
        self.slices = Informer(client, "resourceslices", handler=self._slice_event)
        self.claims = Informer(client, "resourceclaims", handler=self.on_claim)
        self.classes = Informer(client, "deviceclasses")
        self._inventory: Inventory | None = None
        self.assumed: dict[str, tuple[dict, float]] = {}  # claim key -> (allocation, until)
        self.answered = 0

    @property
    def informers(self) -> list[Informer]:
        return [self.slices, self.claims, self.classes]

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def _slice_event(self, etype: str, old, new) -> None:
        self._inventory = None

    def on_claim(self, etype: str, old, new) -> None:
        obj = new or old or {}
        key = podclaims.pod_key(obj)
        if key in self.assumed and (new is None or (new.get("status") or {}).get("allocation")):
            del self.assumed[key]

    # ------------------------------------------------------------------ views

    def devices(self) -> Inventory:
        if self._inventory is None:
            self._inventory = inventory(self.slices.store.values())
        return self._inventory

    def usage(self) -> Usage:
        now = self.clock()
        for key in [k for k, (_, until) in self.assumed.items() if until <= now]:
            del self.assumed[key]
        u = Usage.of(self.claims.store.values())
        for key, (allocation, _) in self.assumed.items():
            stored = self.claims.store.get(key)
            if stored is None or not (stored.get("status") or {}).get("allocation"):
                u.add_allocation(allocation)
        return u

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

    # ------------------------------------------------------------------ verbs

    def filter(self, pod: dict, names: list[str]) -> dict | Coroutine[Any, Any, dict]:
        if not self.synced:
            return self._filter_once_synced(pod, names)
        claims, missing = self.claims_of(pod)
        if missing:
            return self._filter_when_cached(pod, names)
        return self._filter(pod, names, claims)

    async def _filter_once_synced(self, pod: dict, names: list[str]) -> dict:
        for informer in self.informers:
            if not await informer.wait_synced(self.sync_timeout):
                return {"Error": "the scheduler's ResourceSlice, ResourceClaim and DeviceClass watches have not synced"}
        out = self.filter(pod, names)
        return out if out.__class__ is dict else await out

    async def _filter_when_cached(self, pod: dict, names: list[str]) -> dict:
        await self.claims.wait_for(lambda: not self.claims_of(pod)[1], CLAIM_WAIT_SECONDS)
        claims, missing = self.claims_of(pod)
        if missing:
            ns = (pod.get("metadata") or {}).get("namespace") or "default"
            return {"Error": f'resourceclaim "{ns}/{missing[0]}" is not in the scheduler\'s cache yet'}
        return self._filter(pod, names, claims)

    def serves(self, pod: dict) -> bool:
        """A pod whose devices DRA allocates: claims, or extended resources a DeviceClass maps (KEP-5004)."""
        return uses_claims(pod) or bool(extendedres.pod_wants(pod, extendedres.class_mapping(
            self.classes.store.values())))

    def node_claims(self, pod: dict, claims: list[dict], name: str) -> list[dict]:
        """The claims to fit on one node: the pod's, plus the claim kube-scheduler builds for its mapped
        extended resources where the node's allocatable lacks them (hami.kubesched.extendedres)."""
        mapping = extendedres.class_mapping(self.classes.store.values())
        wants = extendedres.pod_wants(pod, mapping) if mapping else {}
        need = extendedres.needs_dra(wants, self.node_of(name) or {}) if wants else set()
        if not need or extendedres.find_claim(pod, claims):
            return claims
        meta = pod.get("metadata") or {}
        special, _ = extendedres.special_claim(
            pod, need, mapping, name=f"{meta.get('name', '')}-extended-resources-pending-{meta.get('uid', '')[:8]}")
        return [*claims, special]

    def policy_of(self, pod: dict) -> str:
        return node_policy_for((pod.get("metadata") or {}).get("annotations"), self.node_policy)

    def fills(self, names: list[str], usage: Usage) -> dict[str, float]:
        inv = self.devices()
        return {n: claimfit.node_fill(inv.pools_for(self.node_of(n) or n), usage) for n in names}

    def _filter(self, pod: dict, names: list[str], claims: list[dict]) -> dict:
        usage = self.usage()
        fills = self.fills(names, usage)
        classes = dict(self.classes.store)
        fitting, failed, outcomes, undecided = [], {}, {}, []
        ordered = claimfit.order(names, fills, self.policy_of(pod))
        at = self.clock() + FILTER_BUDGET_SECONDS
        with cel.deadline(FILTER_BUDGET_SECONDS, self.clock):
            for i, name in enumerate(ordered):
                if self.clock() > at:
                    undecided += ordered[i:]
                    break
                outcome = self.allocator.allocate(self.node_claims(pod, claims, name), self.node_of(name) or name,
                                                  self.devices(), usage, classes, max_steps=FILTER_MAX_STEPS)
                if not outcome.ok and (outcome.undecided or self.clock() > at):
                    undecided.append(name)  # stopped by a bound, not refused by the devices
                    continue
                if not outcome.ok:
                    failed[name] = claimfit.unfit_reason(outcome)
                    continue
                fitting.append(name)
                outcomes[name] = outcome
                if not self.prioritize:
                    break
        if undecided:
            log.v(2).info("The pod's claims were not worked out within /filter's bounds; kube-scheduler's "
                          "allocator decides on the nodes left", pod=podclaims.pod_key(pod), nodes=len(undecided),
                          seconds=FILTER_BUDGET_SECONDS, steps=FILTER_MAX_STEPS)
            passed = {*fitting, *undecided}  # nothing assumed: which devices kube-scheduler takes is open
            return {"NodeNames": [n for n in ordered if n in passed], "FailedNodes": failed or None, "Error": ""}
        key = podclaims.pod_key(pod)
        if not fitting:
            log.v(2).info("No node fits the pod's claims", pod=key, nodes=len(names))
            return {"NodeNames": None, "FailedNodes": failed, "Error": ""}
        self.answered += 1
        if len(fitting) == 1 or not self.prioritize:
            until = self.clock() + ASSUME_SECONDS
            for claim_key, allocation in outcomes[fitting[0]].allocations.items():
                if claim_key in self.claims.store:  # not an extended-resource claim kube-scheduler has yet to make
                    self.assumed[claim_key] = (allocation, until)
        log.v(4).info("Claims placed", pod=key, node=fitting[0], fill=round(fills[fitting[0]], 2),
                      policy=self.policy_of(pod))
        return {"NodeNames": fitting, "FailedNodes": None if not self.prioritize else failed or None, "Error": ""}

    def scores(self, pod: dict, names: list[str]) -> list[dict]:
        """/prioritize for a pod with claims: 0..10 by fill, per its node policy."""
        return claimfit.scores(names, self.fills(names, self.usage()), self.policy_of(pod))
