"""Why is a DRA pod Pending? (pure): its claims, the nodes' ResourceSlices, the allocator's verdict.

For a pod with `spec.resourceClaims` (the `--dra` webhook's, or written by hand): a templated claim
the resourceclaim controller has not made (its template missing, or asking admin access in a
namespace without the `resource.kubernetes.io/admin-access` label, which the API server refuses),
a claim that does not exist, no node publishing devices, or, per node, the allocator's answer
(`hami.kubesched.allocator`, the one the embedded kube-scheduler runs, given the Node object so
`nodeSelector` slices match its labels): which request of which claim failed, and every device's
reason: a selector that is false, the capacity short with the numbers (`memory 4000Mi requested,
0 of 8000Mi free`), a device taint the request does not tolerate, the device in use, a counter of
a partitionable GPU exhausted (`counter .../memory: needs 10Gi, 0 of 40Gi left`). When the claims
would fit somewhere now, the pod only waits for kube-scheduler's next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.doctor.tree import Diagnosis
from hami.dra import podclaims
from hami.dra.claims import DRIVER
from hami.kubesched.allocator import Allocator, Usage, allocated_node, inventory

MAX_EVIDENCE = 40
ADMIN_LABEL = "resource.kubernetes.io/admin-access"  # the namespace label that allows adminAccess


def uses_claims(pod: Mapping) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def admin_requests(claim_spec: Mapping) -> list[str]:
    """The requests (and firstAvailable subrequests, as `<request>/<sub>`) asking adminAccess."""
    out = []
    for r in ((claim_spec.get("devices") or {}).get("requests") or []) if isinstance(claim_spec, Mapping) else []:
        if not isinstance(r, Mapping):
            continue
        if isinstance(r.get("exactly"), Mapping) and r["exactly"].get("adminAccess") is True:
            out.append(str(r.get("name")))
        for sub in r.get("firstAvailable") or []:
            if isinstance(sub, Mapping) and sub.get("adminAccess") is True:
                out.append(f"{r.get('name')}/{sub.get('name')}")
    return out


def _admin_refused(claim_spec: Mapping, ns: str, namespace_labels: Mapping[str, str] | None) -> str:
    asks = admin_requests(claim_spec)
    if not asks or namespace_labels is None or namespace_labels.get(ADMIN_LABEL) == "true":
        return ""
    return (f"request {', '.join(asks)} asks adminAccess, and namespace {ns} is not labelled {ADMIN_LABEL}=true: "
            "the API server refuses such a claim")


def _template_of(pod: Mapping, pod_claim: str) -> str:
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        if isinstance(pc, Mapping) and pc.get("name") == pod_claim:
            return str(pc.get("resourceClaimTemplateName") or "")
    return ""


def diagnose_dra_pod(pod: Mapping, claims: Mapping[str, Mapping], slices: Iterable[Mapping],
                     classes: Mapping[str, Mapping], nodes: Iterable[Mapping | str],
                     templates: Mapping[str, Mapping] | None = None,
                     namespace_labels: Mapping[str, str] | None = None) -> Diagnosis:
    """`claims`: every ResourceClaim by "ns/name" (their allocations are the cluster's usage);
    `nodes`: the Node objects (names alone match no `nodeSelector` slice); `templates` by "ns/name"
    and the pod namespace's labels, when known, say why a templated claim was not made."""
    key = podclaims.pod_key(pod)
    ns = (pod.get("metadata") or {}).get("namespace", "")
    path = ("pending", "dra")
    names, waiting = podclaims.claim_names(pod)
    if waiting:
        return _claim_not_made(pod, waiting[0], templates, namespace_labels, path)
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
        refused = "" if alloc else _admin_refused(c.get("spec") or {}, ns, namespace_labels)
        if refused:
            evidence.append(f"claim {podclaims.pod_key(c)}: {refused} (labelled when it was made?)")
    fits, reasons = _allocator_per_node(mine, nodes, devices, usage, classes, evidence)
    return _verdict(key, fits, reasons, evidence, path)


def _claim_not_made(pod: Mapping, pod_claim: str, templates: Mapping[str, Mapping] | None,
                    namespace_labels: Mapping[str, str] | None, path: tuple[str, ...]) -> Diagnosis:
    """A templated claim not made yet: its template missing, its adminAccess refused, or the controller."""
    key = podclaims.pod_key(pod)
    ns = (pod.get("metadata") or {}).get("namespace", "")
    if templates is not None:
        tname = _template_of(pod, pod_claim)
        tmpl = templates.get(f"{ns}/{tname}")
        if tmpl is None:
            return Diagnosis(key, "dra-template-missing",
                             f"ResourceClaimTemplate {ns}/{tname} for pod claim {pod_claim!r} does not exist", (),
                             "create the template in the pod's namespace (with --dra the scheduler makes HAMi's "
                             "templates for the pods it admitted: check it runs)", (*path, "template-missing"))
        refused = _admin_refused((tmpl.get("spec") or {}).get("spec") or {}, ns, namespace_labels)
        if refused:
            return Diagnosis(key, "dra-admin-access-refused",
                             f"the claim for pod claim {pod_claim!r} cannot be made: {refused}",
                             (f"template {ns}/{tname}",),
                             f"label the namespace {ADMIN_LABEL}=true (cluster admins only), or drop adminAccess",
                             (*path, "admin-access-refused"))
    return Diagnosis(key, "dra-claim-not-created",
                     f"the ResourceClaim for pod claim {pod_claim!r} has not been created from its template",
                     tuple(f"spec.resourceClaims: {pc}" for pc in (pod.get("spec") or {}).get("resourceClaims")
                           or []),
                     "the resourceclaim controller of kube-controller-manager makes it (DRA is GA in 1.34: "
                     "check the controller runs); the template must exist in the pod's namespace",
                     (*path, "claim-not-created"))


def _allocator_per_node(mine: list, nodes: Iterable[Mapping | str], devices, usage: Usage,
                        classes: Mapping[str, Mapping], evidence: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The allocator's answer on every node: the nodes that fit now, and the others by reason (their
    device lines added to `evidence`)."""
    objects: dict[str, Mapping | str] = {}
    for n in nodes:
        objects[str((n.get("metadata") or {}).get("name", "")) if isinstance(n, Mapping) else str(n)] = n
    fits, reasons = [], {}
    allocator = Allocator()
    for node in sorted(set(objects) | devices.nodes):
        out = allocator.allocate(mine, objects.get(node) or node, devices, usage, classes)
        if out.ok:
            fits.append(node)
            continue
        reasons.setdefault(out.reason, []).append(node)
        for d in out.details:
            evidence.append(f"{node}: {d}")
    return fits, reasons


def _verdict(key: str, fits: list[str], reasons: dict[str, list[str]], evidence: list[str],
             path: tuple[str, ...]) -> Diagnosis:
    """Fits somewhere now (kube-scheduler's next attempt), or the reason most nodes give, with the evidence."""
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
