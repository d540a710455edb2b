"""The `pods/eviction` subresource (policy/v1 Eviction) of the embedded API server.

pkg/registry/core/pod/storage/eviction.go, 1.31: the Eviction's name must be the pod's; a pod that
is finished, not yet running (Pending) or already terminating is deleted without asking any budget
(`canIgnorePDB`). Otherwise the PodDisruptionBudgets of its namespace whose selector matches it are
read: more than one is a 500 (the subresource does not support it); one whose allowance is spent
refuses with 429 TooManyRequests and a `DisruptionBudget` cause; else one disruption is taken and
the pod's graceful deletion starts (grace from deleteOptions.gracePeriodSeconds, else the pod's
terminationGracePeriodSeconds). The simulated kubelet ends it (hami.sim.kubelet.termination).

The allowance is the PDB's `status.disruptionsAllowed` when someone wrote one (then decremented and
the pod recorded in `status.disruptedPods`, as the registry does); the embedded cluster runs no
disruption controller, so otherwise it is derived from the spec and the healthy pods
(hami.kubesched.pdb.disruptions_allowed: Running and not terminating), which already counts the
evicted pod as gone once its deletion started.
"""

from __future__ import annotations

import time

from hami.apierror import ApiError
from hami.kubesched.pdb import disruptions_allowed, selects
from hami.sim.apiserver.store import Store

PDB_KEY = "poddisruptionbudgets.policy"
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def _can_ignore_pdb(pod: dict) -> bool:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase in ("Succeeded", "Failed", "Pending") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _grace(pod: dict, options: dict) -> int:
    value = options.get("gracePeriodSeconds")
    if value is None:
        value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ApiError(422, "Invalid", f"Eviction: deleteOptions.gracePeriodSeconds: Invalid value: {value!r}: "
                                       "must be a non-negative integer")
    return value


def evict(store: Store, ns: str, name: str, body: dict) -> dict:
    """Answer one Eviction; returns the Status body (201) or raises ApiError."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "Eviction: expected a JSON object")
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    if meta.get("name") and meta["name"] != name:
        raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") if isinstance(body.get("deleteOptions"), dict) else {}
    pre = options.get("preconditions") if isinstance(options.get("preconditions"), dict) else {}
    uid = pre.get("uid") if isinstance(pre.get("uid"), str) else None
    dry = bool(options.get("dryRun"))
    pod = store.get("pods", ns, name)
    grace = _grace(pod, options)
    if uid and uid != pod["metadata"].get("uid"):
        raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on pods \"{name}\": Precondition failed: "
                                        f"UID in precondition: {uid}, UID in object meta: {pod['metadata'].get('uid')}")
    if not _can_ignore_pdb(pod):
        pdbs = [e.obj for e in store.list(PDB_KEY, ns)[1] if selects(e.obj, pod)]
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError",
                           "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
                           "not support.")
        if pdbs:
            _take_disruption(store, ns, name, pdbs[0], dry)
    store.delete_gracefully(ns, name, grace, uid=uid, dry_run=dry)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _take_disruption(store: Store, ns: str, pod_name: str, pdb: dict, dry: bool) -> None:
    pods = [e.obj for e in store.list("pods", ns)[1]]
    allowed = disruptions_allowed(pdb, pods)
    pdb_name = pdb["metadata"]["name"]
    if allowed <= 0:
        chosen = [p for p in pods if selects(pdb, p)]
        healthy = sum(1 for p in chosen if (p.get("status") or {}).get("phase") == "Running"
                      and not p["metadata"].get("deletionTimestamp"))
        raise ApiError(429, "TooManyRequests", VIOLATION, {
            "causes": [{"reason": "DisruptionBudget",
                        "message": f"The disruption budget {pdb_name} needs {healthy - allowed} healthy pods "
                                   f"and has {healthy} currently"}]})
    status = pdb.get("status") or {}
    if isinstance(status.get("disruptionsAllowed"), int) and not dry:
        disrupted = dict(status.get("disruptedPods") or {})
        disrupted[pod_name] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        new = dict(pdb)
        new["status"] = {**status, "disruptionsAllowed": status["disruptionsAllowed"] - 1, "disruptedPods": disrupted}
        store.update(PDB_KEY, ns, pdb_name, new, subresource="status")
