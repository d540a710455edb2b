"""Does a pod tolerate a node's taints? (pure)

kube-scheduler's TaintToleration Filter (`v1helper.TolerationsTolerateTaint`): a taint with effect
NoSchedule or NoExecute must be tolerated by one of the pod's tolerations; a node marked
`spec.unschedulable` counts as the `node.kubernetes.io/unschedulable:NoSchedule` taint (the
NodeUnschedulable plugin). Every shape is checked: a malformed toleration tolerates nothing, a
malformed taint list is none. Used by `hami whatif` and by GPU preemption's refit on the leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNSCHEDULABLE = ("node.kubernetes.io/unschedulable", "", "NoSchedule")


def tolerates(tolerations: Any, taint: tuple[str, str, str]) -> bool:
    """Kubernetes' ToleratesTaint: one toleration of the pod matches the taint."""
    key, value, effect = taint
    for tol in tolerations if isinstance(tolerations, list) else ():
        if not isinstance(tol, dict):
            continue
        if tol.get("effect") and tol.get("effect") != effect:
            continue
        op = tol.get("operator") or "Equal"
        tkey = tol.get("key") or ""
        if op == "Exists" and (not tkey or tkey == key):
            return True
        if op == "Equal" and tkey == key and (tol.get("value") or "") == value:
            return True
    return False


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
