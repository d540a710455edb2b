"""Why is a DRA pod Pending? (pure): its claims, the nodes' ResourceSlices, the allocator's verdict.

For a pod with `spec.resourceClaims` (the `--dra` webhook's, or written by hand): a templated claim
the resourceclaim controller has not made, a claim that does not exist, no node publishing
devices, or, per node, the allocator's answer (`hami.kubesched.allocator`, the one the embedded
kube-scheduler runs) with every device's reason: which claim, which selector or which capacity
failed on which device. When the claims would fit somewhere now, the pod only waits for
kube-scheduler's next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.doctor.tree import Diagnosis
from hami.dra import podclaims
from hami.dra.claims import DRIVER
from hami.kubesched.allocator import Allocator, Usage, allocated_node, inventory

MAX_EVIDENCE = 40


def uses_claims(pod: Mapping) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def diagnose_dra_pod(pod: Mapping, claims: Mapping[str, Mapping], slices: Iterable[Mapping],
                     classes: Mapping[str, Mapping], nodes: Iterable[str]) -> Diagnosis:
    """`claims`: every ResourceClaim by "ns/name" (their allocations are the cluster's usage)."""
    key = podclaims.pod_key(pod)
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "")
    path = ["pending", "dra"]
    names, waiting = podclaims.claim_names(pod)
    if waiting:
        return Diagnosis(key, "dra-claim-not-created",
                         f"the ResourceClaim for pod claim {waiting[0]!r} has not been created from its template",
                         tuple(f"spec.resourceClaims: {pc}" for pc in (pod.get("spec") or {}).get("resourceClaims")
                               or []),
                         "the resourceclaim controller of kube-controller-manager makes it (DRA is GA in 1.34: "
                         "check the controller runs); the template must exist in the pod's namespace",
                         (*path, "claim-not-created"))
    mine = []
    for name in names:
        claim = claims.get(f"{ns}/{name}")
        if claim is None:
            return Diagnosis(key, "dra-claim-missing", f"ResourceClaim {ns}/{name} does not exist", (),
                             "create the claim, or reference an existing one in spec.resourceClaims",
                             (*path, "claim-missing"))
        mine.append(claim)
    devices = inventory(slices)
    if not devices:
        return Diagnosis(key, "dra-no-devices", "no node publishes devices in a ResourceSlice", (),
                         f"run hami's DRA plugin on the GPU nodes (`hami --role dra`, the chart's dra.enabled); "
                         f"`kubectl get resourceslices` should list one slice of {DRIVER} per node",
                         (*path, "no-devices"))
    usage = Usage.of(c for k, c in claims.items() if k not in {podclaims.pod_key(m) for m in mine})
    evidence: list[str] = []
    for c in mine:
        alloc = (c.get("status") or {}).get("allocation")
        if alloc:
            evidence.append(f"claim {podclaims.pod_key(c)} is allocated on node {allocated_node(alloc)}")
    fits, reasons = [], {}
    allocator = Allocator()
    for node in sorted(set(nodes) | devices.nodes):
        out = allocator.allocate(mine, node, devices, usage, classes)
        if out.ok:
            fits.append(node)
            continue
        reasons.setdefault(out.reason, []).append(node)
        for d in out.details:
            evidence.append(f"{node}: {d}")
    for reason, where in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        evidence.insert(0, f"{len(where)} node(s): {reason}")
    if len(evidence) > MAX_EVIDENCE:
        evidence = [*evidence[:MAX_EVIDENCE], f"... {len(evidence) - MAX_EVIDENCE} more device lines"]
    if fits:
        return Diagnosis(key, "dra-fits-now", f"its claims would be allocated on {', '.join(fits[:5])} now",
                         tuple(evidence), "kube-scheduler retries after its backoff (claim, slice and class "
                                          "changes wake it); if it stays Pending, look at its other "
                                          "requirements (node selector, taints, cpu/memory)", (*path, "fits-now"))
    worst = max(reasons.items(), key=lambda kv: len(kv[1]))[0]
    return Diagnosis(key, "dra-cannot-allocate", f"no node can allocate its claims: {worst}", tuple(evidence),
                     "free capacity (delete pods holding shares of the GPUs named), lower the claim's "
                     "capacity.requests (nvidia.com/gpumem, gpucores with the --dra webhook), or loosen its "
                     "selectors (use-gputype / use-gpuuuid annotations); a matchAttribute constraint needs "
                     "every device on one NUMA node or NVLink domain", (*path, "cannot-allocate"))
