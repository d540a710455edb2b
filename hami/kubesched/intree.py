"""kube-scheduler 1.31's in-tree plugins that weigh pods against each other and against node
capacity, for the embedded loop (hami.sim.kubescheduler). Pure: objects in, verdicts and scores out.

Modelled (kubernetes/pkg/scheduler/framework/plugins/...):

* NodeResourcesFit (noderesources/fit.go): the pod's request is `computePodResourceRequest`: the
  sum over containers, at least each init container's, plus `spec.overhead`; a resource with only a
  limit counts the limit (the API server defaults requests to limits). Filter: `Too many pods`,
  `Insufficient cpu|memory|ephemeral-storage` against `status.allocatable` minus the pods on the
  node. Extended resources are not checked by the embedded loop: HAMi's chart lists its device
  resources as the extender's managedResources with `ignoredByScheduler: true`. Cluster Autoscaler's
  simulation (and a default-scheduler profile) checks them: `fit_resources(..., extended=True)` sums
  each extended resource over the containers (requests, else limits; at least each init container's;
  plus overhead) and answers `Insufficient <name>` when the node's allocatable (0 when it reports
  none) less the pods on it is short. A node that reports no allocatable
  value for a resource is not checked for it (kubelet always reports cpu, memory and pods; the
  test nodes do not always). Score (weight 1 each): LeastAllocated over cpu and memory with
  `NonZeroRequested` (100m / 200Mi for a container without a request), and
  NodeResourcesBalancedAllocation (1 - the standard deviation of the requested fractions).
* InterPodAffinity (interpodaffinity/filtering.go, scoring.go): required affinity (every term needs
  a pod matching all terms in the node's topology domain; the first pod of a self-affine group
  passes), required anti-affinity of the pod, existing pods' required anti-affinity; the three texts
  upstream gives. Score (weight 2): preferred (anti-)affinity of the pod and of existing pods, plus
  existing pods' required affinity at hardPodAffinityWeight 1, normalised to 0..100 by (s-min)/(max-min).
  Term namespaces: `namespaces`, else the pod's own, or those a `namespaceSelector` selects by the
  namespaces' labels (`{}`: every namespace).
* PodTopologySpread (podtopologyspread/filtering.go, scoring.go): DoNotSchedule constraints filter
  (`skew = matching pods in the node's domain + self - min over domains > maxSkew`; a node without
  the key is UnschedulableAndUnresolvable), counting pods on nodes that pass the pod's node
  affinity/selector (nodeAffinityPolicy Honor) and carry every constraint key; `minDomains` lowers
  the minimum to 0 when fewer domains exist. ScheduleAnyway constraints score (weight 2): the
  count weighted by log(domains + 2) plus maxSkew - 1, inverted and normalised. The cluster-level
  default constraints (for pods of Services/ReplicaSets) are not applied; matchLabelKeys is not modelled.
* TaintToleration Score (tainttoleration/taint_toleration.go, weight 3): the count of PreferNoSchedule
  taints the pod does not tolerate, normalised reversed (DefaultNormalizeScore: fewest -> 100).
* Nominated pods (framework/runtime `RunFilterPluginsWithNominatedPods`): pods nominated to a node
  with a priority at least the pod's are added to that node before filtering, and a node passes only
  when it passes with and without them; the extender is not told of them (upstream neither).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami.device.codec import CodecError
from hami.device.request import parse_quantity
from hami.kubesched.taints import tolerates

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU = 100  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 1024 * 1024  # schedutil.DefaultMemoryRequest
HARD_POD_AFFINITY_WEIGHT = 1

RESOURCES = ("cpu", "memory", "ephemeral-storage")
ERR_TOO_MANY_PODS = "Too many pods"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_SPREAD = "node(s) didn't match pod topology spread constraints"
ERR_SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


@dataclass(frozen=True)
class Verdict:
    plugin: str
    reasons: tuple[str, ...]
    unresolvable: bool = False


# ---------------------------------------------------------------------------- quantities, requests

def _amount(resource: str, value) -> int:
    """cpu in millicores (MilliValue), everything else Value(); 0 when unreadable."""
    try:
        q = parse_quantity(value, field=resource)
    except CodecError:
        return 0
    if resource == "cpu":
        q *= 1000
    return -((-q.numerator) // q.denominator)


def _container_requests(c: Mapping) -> dict[str, int]:
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    out = {}
    for r in RESOURCES:
        v = req.get(r, lim.get(r))
        if v is not None:
            out[r] = _amount(r, v)
    return out


def pod_requests(pod: Mapping, *, non_zero: bool = False) -> dict[str, int]:
    """computePodResourceRequest (cpu milli, memory and ephemeral-storage bytes); `non_zero` gives
    every container without a cpu/memory request the scheduler's defaults (scoring only)."""
    spec = pod.get("spec") or {}
    total = dict.fromkeys(RESOURCES, 0)
    for c in spec.get("containers") or []:
        req = _container_requests(c)
        if non_zero:
            req.setdefault("cpu", DEFAULT_MILLI_CPU)
            req.setdefault("memory", DEFAULT_MEMORY)
        for r, v in req.items():
            total[r] += v
    for c in spec.get("initContainers") or []:
        for r, v in _container_requests(c).items():
            total[r] = max(total[r], v)
    for r, v in (spec.get("overhead") or {}).items():
        if r in total:
            total[r] += _amount(r, v)
    return total


def is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified name outside kubernetes.io (`nvidia.com/gpumem`)."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def is_scalar(name: str) -> bool:
    """schedutil.IsScalarResourceName: extended, hugepages-*, attachable-volumes-* or a
    kubernetes.io-prefixed native resource."""
    if not isinstance(name, str):
        return False
    if is_extended(name) or name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    domain = name.split("/", 1)[0] if "/" in name else ""
    return domain == "kubernetes.io" or domain.endswith(".kubernetes.io")


def _container_extended(c: Mapping) -> dict[str, int]:
    """A container's extended resources; a resources block of the wrong shape asks none (the pod's
    creator writes it: a bad shape must not stop whoever reads it)."""
    res = c.get("resources") if isinstance(c, Mapping) else None
    res = res if isinstance(res, Mapping) else {}
    req, lim = res.get("requests"), res.get("limits")
    req, lim = (req if isinstance(req, Mapping) else {}), (lim if isinstance(lim, Mapping) else {})
    out = {}
    for r in {*req, *lim}:
        if is_scalar(r):
            out[r] = _amount(r, req.get(r, lim.get(r)))
    return out


def extended_requests(pod: Mapping) -> dict[str, int]:
    """computePodResourceRequest's scalar resources (extended, hugepages, kubernetes.io-prefixed),
    summed as cpu is."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    total: dict[str, int] = {}
    for c in _list(spec.get("containers")):
        for r, v in _container_extended(c).items():
            total[r] = total.get(r, 0) + v
    for c in _list(spec.get("initContainers")):
        for r, v in _container_extended(c).items():
            total[r] = max(total.get(r, 0), v)
    overhead = spec.get("overhead")
    for r, v in (overhead.items() if isinstance(overhead, Mapping) else ()):
        if r in total:
            total[r] += _amount(r, v)
    return total


def _list(value) -> list:
    return value if isinstance(value, list) else []


def extended_allocatable(node: Mapping) -> dict[str, int]:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return {}
    return {r: _amount(r, v) for r, v in alloc.items() if isinstance(r, str) and is_extended(r)}


def allocatable(node: Mapping) -> dict[str, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out = {r: _amount(r, alloc[r]) for r in RESOURCES if r in alloc}
    if "pods" in alloc:
        out["pods"] = _amount("pods", alloc["pods"])
    return out


class Requests:
    """Pod requests cached by uid and resourceVersion (the loop asks for them every cycle)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, bool], dict[str, int]] = {}

    def of(self, pod: Mapping, non_zero: bool = False) -> dict[str, int]:
        return self._cached(pod, non_zero, lambda: pod_requests(pod, non_zero=non_zero))

    def extended(self, pod: Mapping) -> dict[str, int]:
        return self._cached(pod, "extended", lambda: extended_requests(pod))

    def _cached(self, pod: Mapping, kind, compute) -> dict[str, int]:
        meta = pod.get("metadata") or {}
        key = (meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}", meta.get("resourceVersion", ""),
               kind)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) > 50_000:
                self._cache.clear()
            got = self._cache[key] = compute()
        return got


def fit_resources(pod: Mapping, node: Mapping, on_node: Sequence[Mapping], req: Requests, *,
                  extended: bool = False, ignored: frozenset[str] = frozenset(),
                  ignored_groups: frozenset[str] = frozenset()) -> Verdict | None:
    """NodeResourcesFit Filter; `extended` checks scalar resources too, except the extended ones
    `ignored` by name or by domain (`ignored_groups`), as NodeResourcesFitArgs ignore them."""
    alloc = allocatable(node)
    reasons = []
    if "pods" in alloc and len(on_node) + 1 > alloc["pods"]:
        reasons.append(ERR_TOO_MANY_PODS)
    want = req.of(pod)
    if any(want.values()):
        used = dict.fromkeys(RESOURCES, 0)
        for p in on_node:
            for r, v in req.of(p).items():
                used[r] += v
        for r in RESOURCES:
            if want[r] and r in alloc and want[r] > alloc[r] - used[r]:
                reasons.append(f"Insufficient {r}")
    if extended:
        reasons.extend(_short_extended(pod, node, on_node, req, ignored, ignored_groups))
    return Verdict("NodeResourcesFit", tuple(reasons)) if reasons else None


def _short_extended(pod: Mapping, node: Mapping, on_node: Sequence[Mapping], req: Requests,
                    ignored: frozenset[str], ignored_groups: frozenset[str]) -> list[str]:
    want = {r: v for r, v in req.extended(pod).items()
            if v and not (is_extended(r) and (r in ignored or r.split("/", 1)[0] in ignored_groups))}
    if not want:
        return []
    raw = (node.get("status") or {}).get("allocatable") or {}
    alloc = {r: _amount(r, v) for r, v in raw.items() if is_scalar(r)}
    used = dict.fromkeys(want, 0)
    for p in on_node:
        for r, v in req.extended(p).items():
            if r in used:
                used[r] += v
    return [f"Insufficient {r}" for r in sorted(want) if want[r] > alloc.get(r, 0) - used[r]]


def resource_scores(pod: Mapping, nodes: Sequence[Mapping], pods_on: Mapping[str, Sequence[Mapping]],
                    req: Requests) -> dict[str, int]:
    """LeastAllocated + BalancedAllocation (each 0..100, weight 1 each, summed)."""
    out = {}
    mine, mine_real = req.of(pod, True), req.of(pod)
    for node in nodes:
        name = node["metadata"]["name"]
        alloc = allocatable(node)
        least, fractions = [], []
        for r in ("cpu", "memory"):
            cap = alloc.get(r, 0)
            used = sum(req.of(p, True)[r] for p in pods_on.get(name, ())) + mine[r]
            used_real = sum(req.of(p)[r] for p in pods_on.get(name, ())) + mine_real[r]
            least.append(0 if cap == 0 or used > cap else (cap - used) * MAX_NODE_SCORE // cap)
            fractions.append(min(1.0, used_real / cap) if cap else 1.0)
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
        out[name] = sum(least) // len(least) + int((1 - std) * MAX_NODE_SCORE)
    return out


# ---------------------------------------------------------------------------- label selectors, terms

def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector: nil selects nothing, {} selects everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def labels_of(obj: Mapping) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def namespace_of(obj: Mapping) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def term_matches(term: Mapping, owner: Mapping, other: Mapping,
                 ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> bool:
    """AffinityTerm.Matches: `other` is in the term's namespaces (`namespaces`, else the owner's own when
    no namespaceSelector is set) or in a namespace its namespaceSelector selects (by `ns_labels`,
    namespace -> labels; unknown namespaces have none), and its labels match the labelSelector."""
    nss = term.get("namespaces") or []
    ns_sel = term.get("namespaceSelector")
    if not nss and ns_sel is None:
        nss = [namespace_of(owner)]
    if namespace_of(other) not in nss and not (
            ns_sel is not None and selector_matches(ns_sel, (ns_labels or {}).get(namespace_of(other)) or {})):
        return False
    return selector_matches(term.get("labelSelector"), labels_of(other))


def affinity_terms(pod: Mapping, kind: str, mode: str) -> list:
    return (((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}).get(mode) or []


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


# ---------------------------------------------------------------------------- InterPodAffinity

def anti_affinity_holders(pods_on: Mapping[str, Sequence[Mapping]]) -> list[tuple[Mapping, str]]:
    """(pod, node) of the placed pods with required anti-affinity (computed once per cycle)."""
    return [(p, n) for n, ps in pods_on.items() for p in ps if affinity_terms(p, "podAntiAffinity", REQUIRED)]


def inter_pod_affinity(pod: Mapping, node: Mapping, nodes: Mapping[str, Mapping],
                       pods_on: Mapping[str, Sequence[Mapping]],
                       holders: Sequence[tuple[Mapping, str]] | None = None,
                       ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> Verdict | None:
    """InterPodAffinity Filter (satisfyPodAffinity, satisfyPodAntiAffinity, satisfyExistingPodsAntiAffinity).
    `holders`: anti_affinity_holders(pods_on), when the caller has it."""
    labels = labels_of(node)
    affinity = affinity_terms(pod, "podAffinity", REQUIRED)
    anti = affinity_terms(pod, "podAntiAffinity", REQUIRED)
    if holders is None:
        holders = anti_affinity_holders(pods_on)
    placed = [(p, labels_of(nodes[n])) for n, ps in pods_on.items() if n in nodes for p in ps] if (
        affinity or anti) else []
    if affinity:
        if any(t.get("topologyKey") not in labels for t in affinity):
            return Verdict("InterPodAffinity", (ERR_AFFINITY,), True)
        matching = [nl for p, nl in placed if all(term_matches(t, pod, p, ns_labels) for t in affinity)]
        here = all(any(nl.get(t["topologyKey"]) == labels[t["topologyKey"]] for nl in matching) for t in affinity)
        if not here:
            self_group = not matching and all(term_matches(t, pod, pod, ns_labels) for t in affinity)
            if not self_group:
                return Verdict("InterPodAffinity", (ERR_AFFINITY,), True)
    for t in anti:
        key = t.get("topologyKey")
        if key in labels and any(nl.get(key) == labels[key] and term_matches(t, pod, p, ns_labels) for p, nl in placed):
            return Verdict("InterPodAffinity", (ERR_ANTI_AFFINITY,))
    for p, n in holders:
        nl = labels_of(nodes[n]) if n in nodes else {}
        for t in affinity_terms(p, "podAntiAffinity", REQUIRED):
            key = t.get("topologyKey")
            if key in labels and nl.get(key) == labels[key] and term_matches(t, p, pod, ns_labels):
                return Verdict("InterPodAffinity", (ERR_EXISTING_ANTI_AFFINITY,))
    return None


def inter_pod_affinity_scores(pod: Mapping, feasible: Sequence[Mapping], nodes: Mapping[str, Mapping],
                              pods_on: Mapping[str, Sequence[Mapping]],
                              ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, int]:
    """InterPodAffinity Score + NormalizeScore (0..100)."""
    pairs: dict[tuple[str, str], int] = {}

    def add(term: Mapping, owner: Mapping, other: Mapping, node_labels: Mapping, weight: int) -> None:
        key = term.get("topologyKey")
        if key in node_labels and term_matches(term, owner, other, ns_labels):
            pairs[(key, node_labels[key])] = pairs.get((key, node_labels[key]), 0) + weight

    for n, ps in pods_on.items():
        if n not in nodes:
            continue
        nl = labels_of(nodes[n])
        for p in ps:
            for w in affinity_terms(pod, "podAffinity", PREFERRED):
                add(w.get("podAffinityTerm") or {}, pod, p, nl, int(w.get("weight") or 0))
            for w in affinity_terms(pod, "podAntiAffinity", PREFERRED):
                add(w.get("podAffinityTerm") or {}, pod, p, nl, -int(w.get("weight") or 0))
            for t in affinity_terms(p, "podAffinity", REQUIRED):
                add(t, p, pod, nl, HARD_POD_AFFINITY_WEIGHT)
            for w in affinity_terms(p, "podAffinity", PREFERRED):
                add(w.get("podAffinityTerm") or {}, p, pod, nl, int(w.get("weight") or 0))
            for w in affinity_terms(p, "podAntiAffinity", PREFERRED):
                add(w.get("podAffinityTerm") or {}, p, pod, nl, -int(w.get("weight") or 0))
    raw = {}
    for node in feasible:
        nl = labels_of(node)
        raw[node["metadata"]["name"]] = sum(v for (k, val), v in pairs.items() if nl.get(k) == val)
    if not raw:
        return {}
    lo, hi = min(raw.values()), max(raw.values())
    return {n: (int(MAX_NODE_SCORE * (s - lo) / (hi - lo)) if hi > lo else 0) for n, s in raw.items()}


# ---------------------------------------------------------------------------- PodTopologySpread

def _constraints(pod: Mapping, when: str) -> list:
    return [c for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []
            if c.get("whenUnsatisfiable", "DoNotSchedule") == when]


def _spread_counts(pod: Mapping, constraints: list, eligible: Iterable[Mapping],
                   pods_on: Mapping[str, Sequence[Mapping]]) -> list[dict[str, int]]:
    """Per constraint: domain value -> matching pods (same namespace, not terminating)."""
    out: list[dict[str, int]] = [{} for _ in constraints]
    for node in eligible:
        nl = labels_of(node)
        if any(c.get("topologyKey") not in nl for c in constraints):
            continue
        name = node["metadata"]["name"]
        for i, c in enumerate(constraints):
            value = nl[c["topologyKey"]]
            n = sum(1 for p in pods_on.get(name, ()) if namespace_of(p) == namespace_of(pod)
                    and not (p.get("metadata") or {}).get("deletionTimestamp")
                    and selector_matches(c.get("labelSelector"), labels_of(p)))
            out[i][value] = out[i].get(value, 0) + n
    return out


def topology_spread(pod: Mapping, node: Mapping, eligible: Sequence[Mapping],
                    pods_on: Mapping[str, Sequence[Mapping]]) -> Verdict | None:
    """PodTopologySpread Filter. `eligible`: the nodes passing the pod's node affinity/selector."""
    constraints = _constraints(pod, "DoNotSchedule")
    if not constraints:
        return None
    labels = labels_of(node)
    if any(c.get("topologyKey") not in labels for c in constraints):
        return Verdict("PodTopologySpread", (ERR_SPREAD_LABEL,), True)
    counts = _spread_counts(pod, constraints, eligible, pods_on)
    for c, per in zip(constraints, counts, strict=True):
        lowest = min(per.values(), default=0)
        if c.get("minDomains") and len(per) < int(c["minDomains"]):
            lowest = 0
        self_match = 1 if selector_matches(c.get("labelSelector"), labels_of(pod)) else 0
        if per.get(labels[c["topologyKey"]], 0) + self_match - lowest > int(c.get("maxSkew") or 1):
            return Verdict("PodTopologySpread", (ERR_SPREAD,))
    return None


def topology_spread_scores(pod: Mapping, feasible: Sequence[Mapping], eligible: Sequence[Mapping],
                           pods_on: Mapping[str, Sequence[Mapping]]) -> dict[str, int]:
    """PodTopologySpread Score + NormalizeScore for ScheduleAnyway constraints (0..100)."""
    constraints = _constraints(pod, "ScheduleAnyway")
    if not constraints:
        return {}
    hostname = "kubernetes.io/hostname"
    names = {n["metadata"]["name"] for n in feasible}
    counts = _spread_counts(pod, constraints, [n for n in eligible if n["metadata"]["name"] in names] if any(
        c.get("topologyKey") == hostname for c in constraints) else eligible, pods_on)
    raw: dict[str, float] = {}
    for node in feasible:
        nl = labels_of(node)
        if any(c.get("topologyKey") not in nl for c in constraints):
            continue
        s = 0.0
        for c, per in zip(constraints, counts, strict=True):
            weight = math.log(len(per) + 2)
            s += per.get(nl[c["topologyKey"]], 0) * weight + (int(c.get("maxSkew") or 1) - 1)
        raw[node["metadata"]["name"]] = round(s)
    if not raw:
        return {}
    lo, hi = min(raw.values()), max(raw.values())
    out = {}
    for node in feasible:
        name = node["metadata"]["name"]
        if name not in raw:
            out[name] = 0
        else:
            out[name] = MAX_NODE_SCORE if hi == 0 else int(MAX_NODE_SCORE * (hi + lo - raw[name]) / hi)
    return out


# ---------------------------------------------------------------------------- TaintToleration (score)

def _tolerated(pod: Mapping, taint: Mapping) -> bool:
    """v1helper.TolerationsTolerateTaint for one taint (hami.kubesched.taints)."""
    return tolerates((pod.get("spec") or {}).get("tolerations"),
                     (taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""))


def taint_toleration_scores(pod: Mapping, feasible: Sequence[Mapping]) -> dict[str, int]:
    """TaintToleration Score + NormalizeScore(reverse): intolerable PreferNoSchedule taints, fewest best."""
    raw = {n["metadata"]["name"]: sum(1 for t in (n.get("spec") or {}).get("taints") or []
                                      if t.get("effect") == "PreferNoSchedule" and not _tolerated(pod, t))
           for n in feasible}
    top = max(raw.values(), default=0)
    return {n: (MAX_NODE_SCORE - c * MAX_NODE_SCORE // top if top else MAX_NODE_SCORE) for n, c in raw.items()}
