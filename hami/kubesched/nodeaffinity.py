"""Does a node pass a pod's nodeSelector and required node affinity? (pure)

kube-scheduler's NodeAffinity Filter (`pkg/scheduler/framework/plugins/nodeaffinity`,
`component-helpers/scheduling/corev1/nodeaffinity`): every nodeSelector label must be equal, and
when required terms exist at least one term must match; a term matches when all its
matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels) and matchFields
(`metadata.name`) hold; a term with neither matches nothing. Gt/Lt compare as
`strconv.ParseInt(v, 10, 64)` (apimachinery's labels.Requirement), so " 5" or "1_0" match nothing.

A requirement upstream cannot build (`labels.NewRequirement`, `nodeSelectorRequirementsAsFieldSelector`)
makes its term match nothing, as the scheduler's lazy selector does: a label key that is not a
qualified name, an In/NotIn value that is not a label value or an empty value list, values on
Exists/DoesNotExist, Gt/Lt without exactly one integer, an unknown operator, a field other than
`metadata.name`, or a field In/NotIn without exactly one value. `pod_matches` is
`GetRequiredNodeAffinity(pod).Match(node)`: a required node affinity whose term list is empty
matches no node.

The one matcher for the requeue waker, the embedded kube-scheduler and `hami whatif`. whatif
reads snapshot files by hand, so every shape is checked: a malformed expression or term
matches nothing, and a malformed term list is no constraint (as a spec without one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from hami.device.codec.golang import parse_go_int64

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None


def _label_value(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 63 and (v == "" or _NAME.fullmatch(v) is not None)


def requirement_valid(expr: object, *, field: bool = False) -> bool:
    """Whether upstream can build this requirement (a label one, or with `field` a field one)."""
    if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
        return False
    op, values = expr.get("operator"), expr.get("values")
    if values is not None and not isinstance(values, list):
        return False
    values = values or []
    if field:
        return expr["key"] == "metadata.name" and op in ("In", "NotIn") and len(values) == 1 and \
            isinstance(values[0], str)
    if not _qualified_name(expr["key"]):
        return False
    if op in ("In", "NotIn"):
        return bool(values) and all(_label_value(v) for v in values)
    if op in ("Exists", "DoesNotExist"):
        return not values
    if op in ("Gt", "Lt"):
        return len(values) == 1 and isinstance(values[0], str) and parse_go_int64(values[0]) is not None
    return False


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
    if not all(requirement_valid(e) for e in exprs) or not all(requirement_valid(f, field=True) for f in fields):
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


def pod_matches(spec: object, labels: Mapping[str, str], name: str) -> bool:
    """`GetRequiredNodeAffinity(pod).Match(node)`: every nodeSelector label equal, and when the pod
    has a required node affinity, one of its terms matching (an empty term list matches nothing)."""
    selector = _field(spec, "nodeSelector")
    for k, v in (selector.items() if isinstance(selector, Mapping) else ()):
        if labels.get(k) != v:
            return False
    required = _field(_field(_field(spec, "affinity"), "nodeAffinity"), REQUIRED)
    if not isinstance(required, Mapping):
        return True
    terms = required.get("nodeSelectorTerms")
    return isinstance(terms, list) and any(term_matches(t, labels, name) for t in terms)


def preferred_score(terms: object, labels: Mapping[str, str], name: str) -> int:
    """`PreferredSchedulingTerms.Score`: the weights of the preferred terms the node matches
    (terms of weight 0 are skipped, as upstream never builds them)."""
    total = 0
    for t in terms if isinstance(terms, list) else ():
        weight = _field(t, "weight")
        if isinstance(weight, int) and not isinstance(weight, bool) and weight and \
                term_matches(_field(t, "preference"), labels, name):
            total += weight
    return total
