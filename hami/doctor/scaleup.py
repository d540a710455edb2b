"""Can this pending pod make Cluster Autoscaler add a node, and if not, why not? Pure.

Cluster Autoscaler decides with kube-scheduler's in-tree filters on copies of the node groups' nodes
(hami.kubesched.autoscale), never with HAMi's extender. For a pending pod asking extended resources
(the GPU-share ones: `nvidia.com/gpumem`, `nvidia.com/gpucores`, ...) the answer, first match wins:

1. a resource it asks that no node advertises in `status.allocatable`: no template can fit it (for
   gpumem/gpucores the node agents' `--report-node-capacity` is off; a memory percentage is never
   reported);
2. no node group's template (a copy of its first node, groups as their labels tell) fits it: each
   group's in-tree refusal;
3. an existing node has room for it by the in-tree count (gpumem counted once per pod, not per GPU):
   Cluster Autoscaler leaves it to the scheduler and does not scale up, though HAMi refused it;
4. else a scale-up can be triggered, naming the groups whose template fits.

Cluster Autoscaler's own verdict, when its Events are there (TriggeredScaleUp, NotTriggerScaleUp), is
quoted too. docs/autoscaling.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami.kubesched import autoscale, intree

from .tree import EventFact

CA_REASONS = ("TriggeredScaleUp", "NotTriggerScaleUp", "FailedScaleUp")


def _on_node(pods: Sequence[Mapping]) -> dict[str, list[Mapping]]:
    out: dict[str, list[Mapping]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            out.setdefault(node, []).append(p)
    return out


def scale_up_line(pod: Mapping, nodes: Sequence[Mapping], pods: Sequence[Mapping],
                  events: Sequence[EventFact] = ()) -> str | None:
    """The doctor's `scale-up:` line for a pending pod that asks extended resources; None otherwise."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    asked = {r for r, v in intree.extended_requests(pod).items() if v > 0}
    if not asked:
        return None
    ca = [e for e in sorted(events, key=lambda e: e.time) if e.reason in CA_REASONS]
    said = f" (Cluster Autoscaler said: {ca[-1].reason}: {ca[-1].message})" if ca else ""
    advertised = set().union(*(intree.extended_allocatable(n) for n in nodes)) if nodes else set()
    missing = sorted(asked - advertised)
    if missing:
        hint = []
        if any(r.endswith(("/gpumem", "/gpucores")) for r in missing):
            hint.append("start the node agents with --report-node-capacity "
                        "(chart: devicePlugin.reportNodeCapacity=true)")
        if any(r.endswith("/gpumem-percentage") for r in missing):
            hint.append("ask nvidia.com/gpumem in MiB instead of a percentage: no node reports a percentage")
        return (f"cannot trigger a scale-up: no node in the cluster advertises {', '.join(missing)} in its "
                f"allocatable, so no node group's template fits this pod"
                + (f"; {'; '.join(hint)}" if hint else "") + said)
    req = intree.Requests()
    groups, _ = autoscale.groups_from_nodes(nodes)
    refusals = {g.name: autoscale.template_refusal(pod, g, req) for g in groups}
    fitting = sorted(g for g, why in refusals.items() if why is None)
    if not fitting:
        shown = "; ".join(f"{g}: {why}" for g, why in sorted(refusals.items())[:5])
        more = f" (and {len(refusals) - 5} more)" if len(refusals) > 5 else ""
        return f"cannot trigger a scale-up: no node group's template would fit it: {shown}{more}{said}"
    usable = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")]
    room = autoscale.fits_existing(pod, usable, _on_node(pods), req)
    if room is not None:
        return (f"will not trigger a scale-up: node {room} has room for it by the in-tree count (a pod's "
                f"gpumem counts once, not per GPU), so Cluster Autoscaler leaves it to the scheduler, which "
                f"refuses it; free GPU memory on one card, or see `hami whatif --scale-up`{said}")
    return (f"can trigger a scale-up: the template of {', '.join(fitting[:5])} fits it "
            f"(`hami whatif --scale-up` counts the nodes){said}")
