"""Which claims a pod uses, and the claims a pod's templates make (pure).

The resourceclaim controller's and the DynamicResources plugin's shared reading of
`pod.spec.resourceClaims` (k8s.io/dynamic-resource-allocation/resourceclaim): an entry names a
claim directly (`resourceClaimName`) or a template (`resourceClaimTemplateName`), whose generated
claim is recorded in `pod.status.resourceClaimStatuses`. A generated claim carries the annotation
`resource.kubernetes.io/pod-claim-name` and a controller ownerReference to the pod, so it goes
with the pod.
"""

from __future__ import annotations

from collections.abc import Mapping

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def pod_key(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def claim_names(pod: Mapping) -> tuple[list[str], list[str]]:
    """(claim names the pod uses, pod claim entries still waiting for their generated claim)."""
    spec = pod.get("spec") or {}
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if isinstance(s, Mapping)}
    names, waiting = [], []
    for pc in spec.get("resourceClaims") or []:
        if not isinstance(pc, Mapping):
            continue
        if pc.get("resourceClaimName"):
            names.append(str(pc["resourceClaimName"]))
        elif pc.get("resourceClaimTemplateName"):
            got = generated.get(pc.get("name"))
            if got:
                names.append(str(got))
            else:
                waiting.append(str(pc.get("name")))
    return names, waiting


def generated_claim(pod: Mapping, pod_claim: Mapping, template: Mapping) -> dict:
    """The ResourceClaim the controller creates for one templated pod claim (generateName)."""
    meta = pod.get("metadata") or {}
    tmeta = template.get("metadata") or {}
    prefix = f"{meta.get('name', '')}-{pod_claim.get('name', '')}"[:57].rstrip("-.") + "-"
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {
            "generateName": prefix,
            "namespace": meta.get("namespace", ""),
            "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_ANNOTATION: str(pod_claim.get("name"))},
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""),
                                 "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": (template.get("spec") or {}).get("spec") or {},
    }


def owned_by(claim: Mapping, pod_uid: str) -> bool:
    return any(r.get("uid") == pod_uid and r.get("controller")
               for r in (claim.get("metadata") or {}).get("ownerReferences") or [] if isinstance(r, Mapping))


def reserved_for(claim: Mapping) -> list[dict]:
    return [r for r in (claim.get("status") or {}).get("reservedFor") or [] if isinstance(r, Mapping)]


def release(claim: Mapping, pod_uid: str) -> dict | None:
    """The claim's new status once the pod is gone: its reservation dropped and, when no pod is left,
    the allocation with it (the controller deallocates); None when the pod held no reservation."""
    held = reserved_for(claim)
    rest = [r for r in held if r.get("uid") != pod_uid]
    if len(rest) == len(held):
        return None
    status = dict(claim.get("status") or {})
    if rest:
        status["reservedFor"] = rest
    else:
        status.pop("reservedFor", None)
        status.pop("allocation", None)
    return status
