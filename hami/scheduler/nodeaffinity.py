"""Does a node pass a pod's nodeSelector and required node affinity? (pure)

kube-scheduler's NodeAffinity Filter (`pkg/scheduler/framework/plugins/nodeaffinity`,
`component-helpers/scheduling/corev1/nodeaffinity`): every nodeSelector label must be equal, and
when required terms exist at least one term must match; a term matches when all its
matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels) and matchFields
(`metadata.name`) hold; a term with neither matches nothing. Used by the requeue waker (a node
the pod's own constraints exclude is no reason to wake it) and by the embedded kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def expression_matches(expr: Mapping, labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def term_matches(term: Mapping, labels: Mapping[str, str], name: str) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(expression_matches(e, labels) for e in exprs) and all(
        expression_matches(f, {"metadata.name": name}) for f in fields)


def required_terms(pod: Mapping) -> Sequence[Mapping]:
    affinity = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
    return (affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or []


def node_matches(node_selector: Mapping[str, str] | None, terms: Sequence[Mapping],
                 labels: Mapping[str, str], name: str) -> bool:
    for k, v in (node_selector or {}).items():
        if labels.get(k) != v:
            return False
    return not terms or any(term_matches(t, labels, name) for t in terms)
