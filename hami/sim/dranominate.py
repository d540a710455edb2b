"""KEP-5690's claim nomination in the embedded loop's DRA preemption (the 1.37 beta's design).

The devices a preemption frees come back only when the resourceclaim controller deallocates the
victims' claims, after the victims are gone. Meanwhile the preemptor has been promised them and
holds nothing. So when DefaultPreemption nominates a node for a pod with claims, the loop records
(`nominate`) the allocation the allocator found for the preemptor there with the victims' claims
released, and the claims the victims alone reserved:

- holding capacity: a pod of lower or equal priority filtered on that node sees the preemptor's
  allocation as taken (`usage_on`), so it cannot be given the freed devices first;
- no second preemption: while a victim claim on the nominated node is still allocated, the
  preemptor is not eligible to preempt again (`settling`): its next attempt fails on the still
  allocated devices, and preempting then would evict pods it never needed.

A nomination ends when the preemptor is bound or deleted, or a new preemption replaces it (`forget`).

Held in memory, as KEP-5690 holds it. One simplification: upstream filters such a pod twice (with
the nominated allocations and the victims' claims subtracted, and without either) and keeps an
allocation valid in both; here the preemptor's allocation is added on top of the victims' claims
while they are still allocated, which is the same for whole devices and stricter for a device whose
capacity both share (until the victims' claims are deallocated).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami.dra import podclaims
from hami.kubesched.allocator import Outcome, Usage
from hami.sim.dynamicresources import DynamicResources, released_by


@dataclass(frozen=True, slots=True)
class Nomination:
    node: str
    priority: int
    held: tuple[dict, ...]  # the preemptor's claims with the allocation simulated on `node`
    victim_claims: frozenset[str]  # claim keys the victims alone reserved


class ClaimNominations:
    def __init__(self, dra: DynamicResources):
        self.dra = dra
        self.by_pod: dict[str, Nomination] = {}  # preemptor pod key -> its nomination

    def nominate(self, pod_key: str, node: str, priority: int, claims: Iterable[dict], outcome: Outcome,
                 victims: frozenset[str]) -> None:
        """Record the preemptor's simulated allocation on `node` and the claims its victims (uids) free."""
        held = []
        for claim in claims:
            alloc = outcome.allocations.get(podclaims.pod_key(claim))
            if alloc is not None:
                held.append({**claim, "status": {**(claim.get("status") or {}), "allocation": alloc}})
        freed = frozenset(k for k, c in self.dra.current_claims().items() if released_by(c, victims))
        self.by_pod[pod_key] = Nomination(node, priority, tuple(held), freed)

    def forget(self, pod_key: str) -> None:
        self.by_pod.pop(pod_key, None)

    def settling(self, pod_key: str) -> bool:
        """The pod's earlier preemption is still being reclaimed: a victim claim is still allocated."""
        nom = self.by_pod.get(pod_key)
        if nom is None:
            return False
        current = self.dra.current_claims()
        return any((((current.get(k) or {}).get("status")) or {}).get("allocation") for k in nom.victim_claims)

    def usage_on(self, node: str, priority: int, pod_key: str) -> Usage | None:
        """The usage a pod of `priority` is filtered against on `node`, with the allocations held for
        preemptors of at least its priority nominated there; None when none is."""
        held = [n for k, n in self.by_pod.items() if k != pod_key and n.node == node and n.priority >= priority]
        if not held:
            return None
        current = self.dra.current_claims()
        for nom in held:
            for claim in nom.held:
                key = podclaims.pod_key(claim)
                if not (((current.get(key) or {}).get("status")) or {}).get("allocation"):
                    current[key] = claim  # allocated for real already: counted as it is
        return Usage.of(current.values())
