"""Does a node pass a pod's nodeSelector and required node affinity? (pure)

kube-scheduler's NodeAffinity Filter (`pkg/scheduler/framework/plugins/nodeaffinity`,
`component-helpers/scheduling/corev1/nodeaffinity`): every nodeSelector label must be equal, and
when required terms exist at least one term must match; a term matches when all its
matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels) and matchFields
(`metadata.name`) hold; a term with neither matches nothing. Gt/Lt compare as
`strconv.ParseInt(v, 10, 64)` (apimachinery's labels.Requirement), so " 5" or "1_0" match nothing.

The one matcher for the requeue waker, the embedded kube-scheduler and `hami whatif`. whatif
reads snapshot files by hand, so every shape is checked: a malformed expression or term
matches nothing, and a malformed term list is no constraint (as a spec without one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami.device.codec.golang import parse_go_int64

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def expression_matches(expr: object, labels: Mapping[str, str]) -> bool:
    if not isinstance(expr, Mapping):
        return False
    key, op = expr.get("key"), expr.get("operator")
    if not isinstance(key, str):
        return False
    values = expr.get("values")
    values = values if isinstance(values, list) else []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        have, want = parse_go_int64(labels[key]), parse_go_int64(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: object, labels: Mapping[str, str], name: str) -> bool:
    if not isinstance(term, Mapping):
        return False
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(exprs, list) or not isinstance(fields, list) or not (exprs or fields):
        return False
    return all(expression_matches(e, labels) for e in exprs) and all(
        expression_matches(f, {"metadata.name": name}) for f in fields)


def _field(obj: object, key: str) -> object:
    return obj.get(key) if isinstance(obj, Mapping) else None


def spec_required_terms(spec: object) -> Sequence[object]:
    """The pod spec's required nodeSelectorTerms; [] when there are none or they are not a list."""
    terms = _field(_field(_field(_field(spec, "affinity"), "nodeAffinity"), REQUIRED), "nodeSelectorTerms")
    return terms if isinstance(terms, list) else []


def required_terms(pod: Mapping) -> Sequence[object]:
    return spec_required_terms(pod.get("spec"))


def node_matches(node_selector: Mapping[str, str] | None, terms: Sequence[object],
                 labels: Mapping[str, str], name: str) -> bool:
    for k, v in (node_selector or {}).items():
        if labels.get(k) != v:
            return False
    return not terms or any(term_matches(t, labels, name) for t in terms)
