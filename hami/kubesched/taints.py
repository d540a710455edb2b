"""Does a pod tolerate a node's taints? (pure)

kube-scheduler's TaintToleration Filter (`v1helper.TolerationsTolerateTaint`): a taint with effect
NoSchedule or NoExecute must be tolerated by one of the pod's tolerations; a node marked
`spec.unschedulable` counts as the `node.kubernetes.io/unschedulable:NoSchedule` taint (the
NodeUnschedulable plugin). Every shape is checked: a malformed toleration tolerates nothing, a
malformed taint list is none. Used by `hami whatif` and by GPU preemption's refit on the leader.

`toleration_matches` is core/v1's `Toleration.ToleratesTaint` and, with the same rules, DRA's
`resourceclaim.ToleratesTaint` for device taints (KEP-5055): an effect, when set, must be the
taint's; a key, when set, must be the taint's; operator Exists tolerates any value, Equal (or none)
needs the same value; any other operator tolerates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNSCHEDULABLE = ("node.kubernetes.io/unschedulable", "", "NoSchedule")


def toleration_matches(tol: Any, taint: tuple[str, str, str]) -> bool:
    """One toleration against one taint (key, value, effect)."""
    if not isinstance(tol, Mapping):
        return False
    key, value, effect = taint
    if tol.get("effect") and tol.get("effect") != effect:
        return False
    if tol.get("key") and tol.get("key") != key:
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == value


def tolerates(tolerations: Any, taint: tuple[str, str, str]) -> bool:
    """Kubernetes' TolerationsTolerateTaint: one toleration of the pod matches the taint."""
    return any(toleration_matches(t, taint) for t in (tolerations if isinstance(tolerations, list) else ()))


def node_taints(node: Mapping) -> list[tuple[str, str, str]]:
    """The node's NoSchedule/NoExecute taints as (key, value, effect), `spec.unschedulable` included."""
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    out = [(str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"]))
           for t in (spec.get("taints") if isinstance(spec.get("taints"), list) else ())
           if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")]
    if spec.get("unschedulable") is True:
        out.append(UNSCHEDULABLE)
    return out


def tolerates_node(pod: Mapping, node: Mapping) -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    return all(tolerates(spec.get("tolerations"), t) for t in node_taints(node))
