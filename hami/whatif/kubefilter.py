"""What kube-scheduler does before the extender, for the replay (pure, no I/O).

HAMi's /filter only sees the nodes kube-scheduler's own plugins let through. `KubeFilter` plays the
ones that decide GPU placement, on the replay's nodes and the pods bound to them:

- NodeUnschedulable, TaintToleration (NoSchedule/NoExecute against the pod's tolerations),
  NodeAffinity (`nodeSelector`, required `nodeSelectorTerms`): `candidates(pod)`, computed once per
  distinct selector, affinity and tolerations;
- InterPodAffinity (required affinity and anti-affinity, the pod's and the placed pods') and
  PodTopologySpread (DoNotSchedule), through `hami.kubesched.intree`, the embedded loop's own plugins:
  `pod_filter(pod, names)`, asked only when some pod uses them;
- NodeResourcesFit (cpu, memory, ephemeral-storage, pod count) where nodes report allocatable:
  `refuse(name, want)` on sums kept as pods are placed (`placed`) and leave (`left`), asked of
  each node the walk reaches (kube-scheduler filters first; the first fitting node in HAMi's order
  is the same).

Every pod bound to a node counts (GPU or not); the snapshot's pods being replayed do not.
Preferred terms and ScheduleAnyway only score in kube-scheduler, and HAMi's /filter answers one
node, so they change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.kubesched import intree
from hami.kubesched.taints import tolerates

from .cluster import TERMINAL, NodeInfo, PodInfo, node_affinity_ok


def pod_rules(spec: Mapping) -> bool:
    """The pod asks for required pod (anti-)affinity or a DoNotSchedule spread constraint."""
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    if any(isinstance(affinity.get(k), dict) and affinity[k].get(intree.REQUIRED)
           for k in ("podAffinity", "podAntiAffinity")):
        return True
    return spreads(spec)


def spreads(spec: Mapping) -> bool:
    """A DoNotSchedule topology spread constraint (or one that cannot be read: the filter says)."""
    spread = spec.get("topologySpreadConstraints")
    return bool(spread) and (not isinstance(spread, list) or any(
        not isinstance(c, dict) or c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for c in spread))


def selector_ok(pod: Mapping, node: NodeInfo) -> bool:
    """NodeAffinity (nodeSelector, required terms) and TaintToleration for one node."""
    spec = pod.get("spec") or {}
    sel = spec.get("nodeSelector") or {}
    if not all(node.labels.get(k) == v for k, v in sel.items()):
        return False
    if not node_affinity_ok(spec, node.name, node.labels):
        return False
    return all(tolerates(spec.get("tolerations"), t) for t in node.taints)


class KubeFilter:
    """kube-scheduler's filters over one scenario's nodes; see the module docstring."""

    def __init__(self, nodes: Mapping[str, NodeInfo], pods: Iterable[PodInfo], taken: set[str]):
        self.nodes = nodes
        self.schedulable = [n for n in sorted(nodes) if not nodes[n].unschedulable]
        self.tainted = any(nodes[n].taints for n in self.schedulable)
        self.node_objs = {n: {"metadata": {"name": n, "labels": dict(info.labels)}} for n, info in nodes.items()}
        self.pods_on: dict[str, list[dict]] = {}
        for p in pods:
            where = p.bound_node or p.node
            if where in nodes and p.phase not in TERMINAL and p.uid not in taken:
                self.pods_on.setdefault(where, []).append(p.obj)
        self.anti = any(intree.anti_affinity_holders(self.pods_on))
        self.fit_resources = any(n.allocatable for n in nodes.values())
        self.requested: dict[str, dict[str, int]] = {}
        if self.fit_resources:
            for where, on in self.pods_on.items():
                for p in on:
                    self._count(where, intree.pod_requests(p), +1)
        self._placed_at: dict[str, tuple[str, dict]] = {}  # uid -> (node, pod) of replayed pods
        self._candidates: dict[str, list[str]] = {}
        self._eligible: dict[str, list[dict]] = {}

    def candidates(self, pod: Mapping) -> tuple[list[str], str]:
        """Schedulable nodes nodeSelector, required node affinity and taints allow, and a key
        naming that list ("" = every schedulable node)."""
        spec = pod.get("spec") or {}
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") if isinstance(spec.get("affinity"), dict) else None
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(affinity, dict) else None
        if not spec.get("nodeSelector") and not self.tainted and not required:
            return self.schedulable, ""
        key = repr((sorted((spec.get("nodeSelector") or {}).items()), required,
                    spec.get("tolerations") if self.tainted else None))
        names = self._candidates.get(key)
        if names is None:
            names = self._candidates[key] = [n for n in self.schedulable if selector_ok(pod, self.nodes[n])]
        return names, key

    def wants_pod_filter(self, pod: Mapping) -> bool:
        return self.anti or pod_rules(pod.get("spec") or {})

    def pod_filter(self, pod: Mapping, names: list[str]) -> list[str]:
        """The candidates InterPodAffinity and PodTopologySpread (DoNotSchedule) let through;
        raises TypeError/AttributeError/KeyError/ValueError on a spec it cannot read."""
        objs, pods_on = self.node_objs, self.pods_on
        holders = intree.anti_affinity_holders(pods_on) if self.anti else []
        eligible = self._eligible_for(pod) if spreads(pod.get("spec") or {}) else []
        return [n for n in names if intree.topology_spread(pod, objs[n], eligible, pods_on) is None
                and intree.inter_pod_affinity(pod, objs[n], objs, pods_on, holders) is None]

    def requests(self, pod: Mapping) -> dict[str, int] | None:
        """What NodeResourcesFit counts for the pod; None when no node reports allocatable."""
        return intree.pod_requests(pod) if self.fit_resources else None

    def refuse(self, node: str, want: Mapping[str, int]) -> str | None:
        """NodeResourcesFit's Filter (as hami.kubesched.intree.fit_resources) on the kept sums."""
        alloc = self.nodes[node].allocatable
        if not alloc:
            return None
        used = self.requested.get(node, {})
        reasons = []
        if "pods" in alloc and used.get("pods", 0) + 1 > alloc["pods"]:
            reasons.append(intree.ERR_TOO_MANY_PODS)
        for r in intree.RESOURCES:
            if want.get(r) and r in alloc and want[r] > alloc[r] - used.get(r, 0):
                reasons.append(f"Insufficient {r}")
        return ", ".join(reasons) or None

    def placed(self, uid: str, node: str, pod: dict, want: Mapping[str, int] | None) -> None:
        self.pods_on.setdefault(node, []).append(pod)
        self._placed_at[uid] = (node, pod)
        if want is not None:
            self._count(node, want, +1)
        if not self.anti and intree.anti_affinity_holders({node: [pod]}):
            self.anti = True

    def left(self, uid: str) -> None:
        placed = self._placed_at.pop(uid, None)
        if placed is None:
            return
        node, pod = placed
        self.pods_on[node] = [p for p in self.pods_on.get(node, []) if p is not pod]
        if self.fit_resources:
            self._count(node, intree.pod_requests(pod), -1)

    def _count(self, node: str, want: Mapping[str, int], sign: int) -> None:
        used = self.requested.setdefault(node, {})
        for r, v in want.items():
            used[r] = used.get(r, 0) + sign * v
        used["pods"] = used.get("pods", 0) + sign

    def _eligible_for(self, pod: Mapping) -> list[dict]:
        """Nodes passing the pod's nodeSelector and required node affinity (where spread counts)."""
        spec = pod.get("spec") or {}
        key = repr((sorted((spec.get("nodeSelector") or {}).items()), (spec.get("affinity") or {}).get("nodeAffinity")))
        hit = self._eligible.get(key)
        if hit is None:
            sel = spec.get("nodeSelector") or {}
            hit = self._eligible[key] = [
                self.node_objs[n] for n in sorted(self.nodes)
                if all(self.nodes[n].labels.get(k) == v for k, v in sel.items())
                and node_affinity_ok(spec, n, self.nodes[n].labels)]
        return hit
