"""/preempt victim selection (pure): the fewest pods to evict so the preemptor fits under HAMi's
fit rules (slots, memory, cores, MIG, NUMA, quota as /filter checks them).

It follows kube-scheduler's `selectVictimsOnNode` (defaultpreemption/default_preemption.go) with
HAMi's fit in place of the in-tree filters: take every candidate victim off a copy of the node; if
the preemptor does not fit even then, no victim set helps and the node is dropped. Otherwise put
the victims back one at a time, PDB-violating ones first, each group from the most important pod
down (higher priority, then the earlier start), keeping a pod off the node only when putting it
back would make the preemptor not fit. Since a GPU's usage only grows as pods come back, the set
left is minimal: no victim in it can be spared given the others.

`select_victims(nvidia, node, devices, cordoned, on_node, candidates, violating, request)` ->
`(victim uids, PDB violations among them)` or None when the node cannot help.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hami.device.model import DeviceInfo, NvidiaConfig

from .fit import PodRequest, try_pod
from .usage import PodRecord, UsageIndex


def _fits(index: UsageIndex, node: str, request: PodRequest) -> bool:
    usage = index.node(node)
    return usage is not None and try_pod(usage, request).__class__ is not str


def _add(index: UsageIndex, uid: str, node: str, rec: PodRecord) -> None:
    index.add_pod(uid, node, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                  init_released=rec.init_released, mig=rec.mig)


def select_victims(nvidia: NvidiaConfig, node: str, devices: Sequence[DeviceInfo], cordoned: Iterable[str],
                   on_node: Mapping[str, PodRecord], candidates: Sequence[str], violating: set[str],
                   request: PodRequest) -> tuple[list[str], int] | None:
    """`candidates`: victim uids, most important first; `violating`: those whose eviction breaks a PDB."""
    index = UsageIndex(nvidia)
    index.set_node(node, devices, cordoned)
    pool = set(candidates)
    for uid, rec in on_node.items():
        if uid not in pool:
            _add(index, uid, node, rec)
    if not _fits(index, node, request):
        return None
    order = [u for u in candidates if u in violating] + [u for u in candidates if u not in violating]
    victims: list[str] = []
    for uid in order:
        rec = on_node.get(uid)
        if rec is None:
            continue  # not using HAMi devices here: evicting it frees nothing the fit counts
        _add(index, uid, node, rec)
        if not _fits(index, node, request):
            index.remove_pod(uid)
            victims.append(uid)
    return victims, sum(1 for u in victims if u in violating)
