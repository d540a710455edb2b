"""PodDisruptionBudgets as kube-scheduler's preemption reads them (pure; shared by the extender's
/preempt and the embedded kube-scheduler loop).

`victims_violating` is `filterPodsWithPDBViolation` (pkg/scheduler/framework/plugins/
defaultpreemption/default_preemption.go): each victim, in the order given, takes one disruption
from every PDB in its namespace whose non-empty selector matches it (unless the PDB already lists
it in `status.disruptedPods`); a victim that drives any PDB's allowance below zero violates it.
The allowance is `status.disruptionsAllowed` as the disruption controller writes it; where no
controller wrote one (the embedded cluster has none), `disruptions_allowed` derives it from the spec
and the healthy (Running, not terminating) pods the PDB selects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def _selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match and not exprs:
        return False  # an empty selector selects nothing here (selector.Empty())
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        key, op, values = e.get("key", ""), e.get("operator"), e.get("values") or ()
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = labels.get(key) not in values
        elif op in ("Exists", "DoesNotExist"):
            ok = (key in labels) == (op == "Exists")
        else:
            ok = False
        if not ok:
            return False
    return True


def selects(pdb: Mapping, pod: Mapping) -> bool:
    pm, bm = pod.get("metadata") or {}, pdb.get("metadata") or {}
    if pm.get("namespace") != bm.get("namespace"):
        return False
    return _selector_matches((pdb.get("spec") or {}).get("selector"), pm.get("labels") or {})


def _count(value, expected: int, round_up: bool) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            return None
        n = expected * pct / 100
        return math.ceil(n) if round_up else math.floor(n)
    return None


def disruptions_allowed(pdb: Mapping, pods: Iterable[Mapping]) -> int:
    status = pdb.get("status") or {}
    if isinstance(status.get("disruptionsAllowed"), int):
        return status["disruptionsAllowed"]
    chosen = [p for p in pods if selects(pdb, p)]
    healthy = sum(1 for p in chosen if (p.get("status") or {}).get("phase") == "Running"
                  and not (p.get("metadata") or {}).get("deletionTimestamp"))  # countHealthyPods skips terminating
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        mu = _count(spec["maxUnavailable"], len(chosen), True)
        return max(0, healthy - (len(chosen) - (mu or 0)))
    ma = _count(spec.get("minAvailable"), len(chosen), True)
    return max(0, healthy - (ma if ma is not None else len(chosen)))


def victims_violating(victims: Sequence[Mapping], pdbs: Sequence[Mapping],
                      pods: Iterable[Mapping] = ()) -> tuple[list[Mapping], list[Mapping]]:
    """(violating, non-violating) victims, each list in the given order."""
    pods = list(pods) or list(victims)
    allowed = [disruptions_allowed(p, pods) for p in pdbs]
    violating, fine = [], []
    for v in victims:
        name = (v.get("metadata") or {}).get("name")
        hit = False
        for i, pdb in enumerate(pdbs):
            if not selects(pdb, v) or name in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                hit = True
        (violating if hit else fine).append(v)
    return violating, fine
