"""What Cluster Autoscaler decides, with kube-scheduler's in-tree filters only. Pure.

Cluster Autoscaler (kubernetes/autoscaler, cluster-autoscaler 1.31) runs the scheduler framework's
Filter plugins against nodes, real and imagined; scheduler extenders are never called. Modelled here:

* the filters: NodeUnschedulable and TaintToleration (NoSchedule/NoExecute), NodeAffinity
  (nodeSelector, required terms) and NodeResourcesFit with every extended resource checked (CA runs
  the default profile: HAMi's `ignoredByScheduler` managedResources belong to HAMi's own profile).
  A pod asking `nvidia.com/gpumem` therefore fits only a node that reports `nvidia.com/gpumem` in
  allocatable, which the node agent's `--report-node-capacity` does (docs/autoscaling.md);
* scale-up (core/scaleup, estimator/binpacking_estimator.go): pods that fit an existing node by these
  filters are left to the scheduler ("filter out schedulable"); for each node group the rest are packed
  first fit, largest first, onto copies of the group's template node, never past the group's max size;
  the option placing most pods, then needing fewest nodes, then by name is taken (CA's `most-pods`
  expander with a fixed tie-break, where CA's default `random` would pick among equals);
* scale-down (core/scaledown, simulator/drain.go): a group's node above min size may go when every pod
  on it (DaemonSet and mirror pods aside) has a controller, is not `safe-to-evict: "false"`, is
  allowed a disruption by its PodDisruptionBudgets and fits some other node by the same filters,
  the node's pods placed one after another. A node with no such pod is empty.

Not modelled: inter-pod affinity, topology spread and volumes in the simulation, the utilization
threshold (every node of a group is a scale-down candidate), the cloud's instance limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hami.kubesched import intree, nodeaffinity, pdb, taints

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
GROUP_LABEL = "node.hami.io/node-group"  # which group a node belongs to (a cloud provider's own record)
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
# Where a node's group shows outside the cloud's API, in the order tools that only see Nodes (hami doctor,
# hami whatif) look: the embedded cluster's, then the managed clouds', Karpenter's, the instance type.
GROUP_LABELS = (GROUP_LABEL, "eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool",
                "kubernetes.azure.com/agentpool", "karpenter.sh/nodepool", "node.kubernetes.io/instance-type")
UNKNOWN_MAX = 1000  # a group's max size where only its Nodes are known


@dataclass(frozen=True)
class NodeGroup:
    name: str
    min_size: int
    max_size: int
    template: Mapping  # a Node as the group's next one will be: labels, taints, status.allocatable


@dataclass(frozen=True)
class ScaleUpOption:
    group: str
    nodes: int  # new nodes the group would add
    placed: tuple[str, ...]  # the pending pods (namespace/name) they would hold
    refused: Mapping[str, str] = field(default_factory=dict)  # pod -> why the group cannot take it


def template_from_node(node: Mapping, group: str) -> dict:
    """CA's sanitized copy of a group's node (TemplateNodeInfo from a real node): its labels, its taints
    but CA's own, its capacity and allocatable; no pods."""
    meta = node.get("metadata") or {}
    name = f"{group}-template"
    labels = {**(meta.get("labels") or {}), "kubernetes.io/hostname": name}
    taints = [t for t in ((node.get("spec") or {}).get("taints") or [])
              if isinstance(t, Mapping) and t.get("key") != TO_BE_DELETED]
    status = node.get("status") or {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints} if taints else {},
            "status": {"capacity": dict(status.get("capacity") or {}),
                       "allocatable": dict(status.get("allocatable") or {}),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def group_of(node: Mapping) -> str:
    """`label=value` of the first GROUP_LABELS label the node has, else `node=<name>` (a group of one)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key in GROUP_LABELS:
        if labels.get(key):
            return f"{key}={labels[key]}"
    return f"node={meta.get('name', '')}"


def groups_from_nodes(nodes: Iterable[Mapping]) -> tuple[list[NodeGroup], dict[str, int]]:
    """Node groups as far as the Nodes tell (their labels): each group's template is a copy of its
    first node by name, its max size unknown. Also each group's size."""
    members: dict[str, list[Mapping]] = {}
    for n in nodes:
        members.setdefault(group_of(n), []).append(n)
    groups = []
    for g, ns in sorted(members.items()):
        first = min(ns, key=lambda n: (n.get("metadata") or {}).get("name", ""))
        groups.append(NodeGroup(g, 0, UNKNOWN_MAX, template_from_node(first, g)))
    return groups, {g: len(ns) for g, ns in members.items()}


def pod_key(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def filter_node(pod: Mapping, node: Mapping, on_node: Sequence[Mapping], req: intree.Requests) -> str | None:
    """The in-tree Filter plugins Cluster Autoscaler runs: None when the node passes, else why not."""
    spec = pod.get("spec") or {}
    for taint in taints.node_taints(node):
        if not taints.tolerates(spec.get("tolerations"), taint):
            return f"node(s) had untolerated taint {{{taint[0]}: {taint[1]}}}"
    meta = node.get("metadata") or {}
    if not nodeaffinity.node_matches(spec.get("nodeSelector"), nodeaffinity.required_terms(pod),
                                     meta.get("labels") or {}, meta.get("name", "")):
        return "node(s) didn't match Pod's node affinity/selector"
    verdict = intree.fit_resources(pod, node, on_node, req, extended=True)
    return ", ".join(verdict.reasons) if verdict else None


def template_refusal(pod: Mapping, group: NodeGroup, req: intree.Requests | None = None) -> str | None:
    """Why the group's empty template node cannot take the pod (None: it can)."""
    return filter_node(pod, group.template, (), req or intree.Requests())


def fits_existing(pod: Mapping, nodes: Sequence[Mapping], pods_on: Mapping[str, Sequence[Mapping]],
                  req: intree.Requests) -> str | None:
    """The existing node the in-tree filters would place the pod on, or None."""
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        if filter_node(pod, node, pods_on.get(name, ()), req) is None:
            return name
    return None


def _size(pod: Mapping, req: intree.Requests) -> tuple:
    r = req.of(pod)
    return (-r.get("cpu", 0), -r.get("memory", 0), -sum(req.extended(pod).values()), pod_key(pod))


def estimate(pods: Sequence[Mapping], group: NodeGroup, size: int, req: intree.Requests | None = None) -> ScaleUpOption:
    """BinpackingNodeEstimator: the pods packed first fit onto new template nodes, at most max - size."""
    req = req or intree.Requests()
    room = max(0, group.max_size - size)
    bins: list[list[Mapping]] = []
    placed, refused = [], {}
    for pod in sorted(pods, key=lambda p: _size(p, req)):
        why = template_refusal(pod, group, req)
        if why is not None:
            refused[pod_key(pod)] = why
            continue
        for b in bins:
            if filter_node(pod, group.template, b, req) is None:
                b.append(pod)
                placed.append(pod_key(pod))
                break
        else:
            if len(bins) >= room:
                refused[pod_key(pod)] = f"node group {group.name} is at its max size {group.max_size}"
                continue
            bins.append([pod])
            placed.append(pod_key(pod))
    return ScaleUpOption(group.name, len(bins), tuple(placed), refused)


def scale_up_options(pods: Sequence[Mapping], groups: Sequence[NodeGroup], sizes: Mapping[str, int],
                     req: intree.Requests | None = None) -> list[ScaleUpOption]:
    """One option per group, best first (most pods placed, then fewest nodes, then name)."""
    req = req or intree.Requests()
    options = [estimate(pods, g, sizes.get(g.name, 0), req) for g in groups]
    return sorted(options, key=lambda o: (-len(o.placed), o.nodes, o.group))


def best_option(options: Sequence[ScaleUpOption]) -> ScaleUpOption | None:
    return next((o for o in options if o.nodes > 0), None)


# ---------------------------------------------------------------------------- scale-down


def _controlled(pod: Mapping) -> Mapping | None:
    return next((o for o in (pod.get("metadata") or {}).get("ownerReferences") or []
                 if isinstance(o, Mapping) and o.get("controller")), None)


def counted_pods(pods: Iterable[Mapping]) -> list[Mapping]:
    """The pods a drain moves: running or pending ones, DaemonSet and mirror pods aside."""
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            continue
        owner = _controlled(p)
        if (owner or {}).get("kind") == "DaemonSet" or "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        out.append(p)
    return out


def removal_blocker(node: str, nodes: Sequence[Mapping], pods_on: Mapping[str, Sequence[Mapping]],
                    pdbs: Sequence[Mapping], all_pods: Sequence[Mapping], req: intree.Requests | None = None,
                    leaving: Iterable[str] = ()) -> str | None:
    """Why Cluster Autoscaler would keep `node` (None: it may drain and remove it). `leaving` names
    other nodes on their way out: no pod moves there."""
    req = req or intree.Requests()
    gone = {node, *leaving}
    others = [n for n in nodes if (n.get("metadata") or {}).get("name") not in gone]
    placed = {k: list(v) for k, v in pods_on.items()}
    allowed = [pdb.disruptions_allowed(b, all_pods) for b in pdbs]
    for pod in counted_pods(pods_on.get(node, ())):
        key = pod_key(pod)
        if ((pod.get("metadata") or {}).get("annotations") or {}).get(SAFE_TO_EVICT) == "false":
            return f"pod {key} is annotated {SAFE_TO_EVICT}=false"
        if _controlled(pod) is None:
            return f"pod {key} is not replicated (no controller would recreate it)"
        for i, b in enumerate(pdbs):
            if pdb.selects(b, pod):
                allowed[i] -= 1
                if allowed[i] < 0:
                    name = (b.get("metadata") or {}).get("name", "")
                    return f"pod {key}: not enough pod disruption budget ({name}) to move it"
        target = fits_existing(pod, others, placed, req)
        if target is None:
            return f"pod {key} fits no other node by the in-tree filters"
        placed.setdefault(target, []).append(pod)
    return None
