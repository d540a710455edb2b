"""`hami whatif --scale-up`: how many nodes of which node group would place the pending pods. Pure.

Two answers per group, from the same snapshot:

* Cluster Autoscaler's (hami.kubesched.autoscale): the pending pods that fit no existing node by the
  in-tree filters, packed onto copies of the group's template node with the in-tree filters only. A
  pod asking `nvidia.com/gpumem` fits no template unless the group's nodes report it
  (`--report-node-capacity`); its gpumem counts once however many GPUs it asks for;
* HAMi's: the least number of template copies with which the scheduler's own replay
  (hami.whatif.engine: webhook, fit, score, usage) places as many of the pending pods as it can
  with that group at all. Where it is larger than CA's, Cluster Autoscaler adds too few nodes at
  first and scales up again for the pods left pending.

Groups are known only from their Nodes (hami.kubesched.autoscale.groups_from_nodes: a node-group
label, else the instance type, else the node alone); their max sizes are not, so neither answer is
capped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from hami.kubesched import autoscale, intree
from hami.kubesched.taints import UNSCHEDULABLE

from .cluster import Cluster, NodeInfo, PodInfo
from .engine import SchedulerDefaults, run_plan
from .scenario import Plan, Scenario

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class GroupAnswer:
    group: str
    template: str  # the node the template copies
    size: int
    ca_nodes: int  # Cluster Autoscaler's estimate
    ca_placed: int
    ca_refused: Mapping[str, int] = field(default_factory=dict)  # reason -> pods
    hami_nodes: int = 0  # the replay's least node count placing `hami_placed`
    hami_placed: int = 0

    def as_dict(self) -> dict:
        return {"group": self.group, "template": self.template, "size": self.size,
                "clusterAutoscaler": {"nodes": self.ca_nodes, "pods": self.ca_placed, "refused": dict(self.ca_refused)},
                "hami": {"nodes": self.hami_nodes, "pods": self.hami_placed}}


@dataclass(frozen=True)
class ScaleUpReport:
    pending: int
    on_existing: tuple[str, ...]  # pending pods CA leaves to the scheduler: they fit a node in-tree
    answers: tuple[GroupAnswer, ...]
    chosen: str | None  # the group Cluster Autoscaler's most-pods expander would grow

    def as_dict(self) -> dict:
        return {"pending": self.pending, "fitsExistingNodeInTree": list(self.on_existing),
                "chosen": self.chosen, "groups": [a.as_dict() for a in self.answers]}


def node_object(info: NodeInfo) -> dict:
    """The snapshot node as the in-tree filters read it (labels, taints, allocatable)."""
    alloc = {r: (f"{v}m" if r == "cpu" else str(v)) for r, v in info.allocatable.items()}
    alloc.update({r: str(v) for r, v in info.extended.items()})
    taints = [{"key": k, "value": v, "effect": e} for k, v, e in info.taints if (k, v, e) != UNSCHEDULABLE]
    return {"metadata": {"name": info.name, "labels": dict(info.labels)},
            "spec": {"taints": taints, **({"unschedulable": True} if info.unschedulable else {})},
            "status": {"allocatable": alloc}}


def _pending(cluster: Cluster) -> list[PodInfo]:
    return [p for p in cluster.pods if not p.node and not p.bound_node and p.phase not in TERMINAL]


def _copies(template: NodeInfo, group: str, n: int) -> dict[str, NodeInfo]:
    out = {}
    for i in range(n):
        name = f"whatif-{group.replace('=', '-').replace('/', '-')}-{i}"
        devices = tuple(replace(d, id=f"GPU-whatif-{name}-{d.index}") for d in template.devices)
        out[name] = replace(template, name=name, devices=devices, cordoned=frozenset(), pair_scores={},
                            unschedulable=False, labels={**template.labels, "kubernetes.io/hostname": name})
    return out


def _placed(cluster: Cluster, extra: dict[str, NodeInfo], keys: set[str], defaults: SchedulerDefaults) -> int:
    scenario = replace(cluster, nodes={**cluster.nodes, **extra})
    result = run_plan(scenario, Plan(scenarios=(Scenario("baseline"),)), defaults)[0]
    return sum(1 for o in result.outcomes if o.node and o.pod in keys)


def hami_nodes(cluster: Cluster, template: NodeInfo, group: str, pending: list[PodInfo],
               defaults: SchedulerDefaults) -> tuple[int, int]:
    """(least copies, pods placed with them): the fewest copies placing as many pending pods as any
    number of copies would (at most one new node per pending pod)."""
    keys = {f"{p.namespace}/{p.name}" for p in pending}
    best = _placed(cluster, _copies(template, group, len(pending)), keys, defaults)
    lo, hi = 0, len(pending)
    while lo < hi:
        mid = (lo + hi) // 2
        if _placed(cluster, _copies(template, group, mid), keys, defaults) >= best:
            hi = mid
        else:
            lo = mid + 1
    return lo, best


def scale_up(cluster: Cluster, defaults: SchedulerDefaults = SchedulerDefaults()) -> ScaleUpReport:
    pending = _pending(cluster)
    nodes = {name: node_object(info) for name, info in cluster.nodes.items()}
    req = intree.Requests()
    pods_on: dict[str, list[dict]] = {}
    for p in cluster.pods:
        where = p.bound_node or p.node
        if where and p.phase not in TERMINAL:
            pods_on.setdefault(where, []).append(p.obj)
    usable = [n for n in nodes.values() if not (n["spec"].get("unschedulable"))]
    on_existing, rest = [], []
    for p in pending:
        target = autoscale.fits_existing(p.obj, usable, pods_on, req)
        if target is None:
            rest.append(p)
        else:
            on_existing.append(f"{p.namespace}/{p.name}")
            pods_on.setdefault(target, []).append(p.obj)
    groups, sizes = autoscale.groups_from_nodes(nodes.values())
    ranked = autoscale.scale_up_options([p.obj for p in rest], groups, sizes, req)
    options = {o.group: o for o in ranked}
    answers = []
    for g in groups:
        first = min((n for n in cluster.nodes.values() if autoscale.group_of(nodes[n.name]) == g.name),
                    key=lambda n: n.name)
        opt = options[g.name]
        refused: dict[str, int] = {}
        for why in opt.refused.values():
            refused[why] = refused.get(why, 0) + 1
        h_nodes, h_placed = hami_nodes(cluster, first, g.name, rest, defaults) if rest else (0, 0)
        answers.append(GroupAnswer(g.name, first.name, sizes[g.name], opt.nodes, len(opt.placed), refused,
                                   h_nodes, h_placed))
    best = autoscale.best_option(ranked)
    return ScaleUpReport(len(pending), tuple(on_existing), tuple(answers), best.group if best else None)


def render_scale_up(report: ScaleUpReport) -> str:
    lines = ["== scale-up (Cluster Autoscaler: in-tree filters on a copy of each group's node; "
             "HAMi: the scheduler's replay on the same copies)"]
    lines.append(f"pending pods: {report.pending}")
    if report.on_existing:
        lines.append(f"  {len(report.on_existing)} fit an existing node by the in-tree filters, so Cluster "
                     f"Autoscaler leaves them to the scheduler: {', '.join(report.on_existing)}")
    if not report.answers:
        lines.append("  no node with HAMi's registration: no group to copy")
    for a in report.answers:
        lines.append(f"  {a.group} (size {a.size}, template {a.template}): Cluster Autoscaler adds {a.ca_nodes} "
                     f"node(s) for {a.ca_placed} pod(s); HAMi needs {a.hami_nodes} node(s) for {a.hami_placed} pod(s)")
        for why, n in sorted(a.ca_refused.items()):
            lines.append(f"    {n} pod(s) fit no template: {why}")
        if a.hami_nodes > a.ca_nodes and a.ca_nodes:
            lines.append("    Cluster Autoscaler's count is low (gpumem counts once per pod, not per GPU): "
                         "it scales up again for the pods left pending")
    lines.append(f"chosen (most pods, then fewest nodes): {report.chosen or 'none: no group fits a pending pod'}")
    return "\n".join(lines) + "\n"
