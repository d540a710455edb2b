"""/preempt victim selection (pure): the fewest pods to evict so the preemptor fits under HAMi's
fit rules (slots, memory, cores, MIG, NUMA, quota as /filter checks them).

It follows kube-scheduler's `SelectVictimsOnNode` (defaultpreemption/default_preemption.go) with
HAMi's fit in place of the in-tree filters: take every candidate victim off a copy of the node; if
the preemptor does not fit even then, no victim set helps and the node is dropped. Otherwise put
the victims back one at a time, PDB-violating ones first, each group from the most important pod
down (higher priority, then the earlier start), keeping a pod off the node only when putting it
back would make the preemptor not fit. Since a GPU's usage only grows as pods come back, the set
left is minimal: no victim in it can be spared given the others.

kube-scheduler's candidates are the victims its in-tree dry run needs (cpu, memory, pods,
affinity); the GPU shares it does not count. So /preempt narrows them to the GPU-minimal set, adds
the node's other lower-priority pods only when the candidates alone free too little (kube-scheduler's
`convertToVictims` takes any pod on the node), and hands the candidates back unchanged when the
preemptor's GPUs fit without evicting anyone (the shortage is an in-tree one, not ours to veto).

Quota: a victim in the preemptor's namespace gives its share of that namespace's ResourceQuota
back when evicted (HAMi's fitQuota counts the namespace's placed pods), so the search checks the
quota against a private ledger: the live usage less the victims currently off the node.

`select_victims(nvidia, node, devices, cordoned, on_node, candidates, violating, request)` ->
`(victim uids, PDB violations among them)` or None when the node cannot help.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from hami.device.model import NVIDIA, DeviceInfo, NvidiaConfig
from hami.scheduler.placement.fit import PodRequest, try_pod
from hami.scheduler.placement.usage import PodRecord, Quota, QuotaView, UsageIndex


def _fits(index: UsageIndex, node: str, request: PodRequest) -> bool:
    usage = index.node(node)
    return usage is not None and try_pod(usage, request).__class__ is not str


def _add(index: UsageIndex, uid: str, node: str, rec: PodRecord) -> None:
    index.add_pod(uid, node, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                  init_released=rec.init_released, mig=rec.mig, app_class=rec.app_class)


class _QuotaLedger:
    """The preemptor's namespace quota with the victims taken off the node credited back."""

    def __init__(self, request: PodRequest):
        live = request.options.quota
        self.namespace = request.namespace
        self.view: QuotaView | None = None
        if live is not None:
            self.view = QuotaView(Quota(live.mem.used, live.mem.limit) if live.mem is not None else None,
                                  Quota(live.cores.used, live.cores.limit) if live.cores is not None else None,
                                  live.memory_factor)

    def request(self, request: PodRequest) -> PodRequest:
        if self.view is None:
            return request
        return replace(request, options=replace(request.options, quota=self.view))

    def move(self, rec: PodRecord, sign: int) -> None:
        """sign -1: the pod leaves the node (its quota share is free); +1: it is put back."""
        if self.view is None or rec.namespace != self.namespace:
            return
        nvidia = {cd.uuid for ctr in rec.devices for cd in ctr if cd.type == NVIDIA}
        mem = sum(u[1] for u in rec.usage if u[0] in nvidia)
        cores = sum(u[2] for u in rec.usage if u[0] in nvidia)
        for q, v in ((self.view.mem, mem), (self.view.cores, cores)):
            if q is not None:
                q.used = max(0, q.used + sign * v)


def select_victims(nvidia: NvidiaConfig, node: str, devices: Sequence[DeviceInfo], cordoned: Iterable[str],
                   on_node: Mapping[str, PodRecord], candidates: Sequence[str], violating: set[str],
                   request: PodRequest, extra: Sequence[str] = ()) -> tuple[list[str], int] | None:
    """`candidates`: victim uids, most important first; `violating`: those whose eviction breaks a PDB;
    `extra`: the node's other lower-priority pods, most important first, which may go too when the
    candidates are not enough. They are put back first, so any candidate is evicted before one of them."""
    index = UsageIndex(nvidia)
    index.set_node(node, devices, cordoned)
    ledger = _QuotaLedger(request)
    request = ledger.request(request)
    pool = set(candidates) | set(extra)
    for uid, rec in on_node.items():
        if uid not in pool:
            _add(index, uid, node, rec)
        else:
            ledger.move(rec, -1)
    if not _fits(index, node, request):
        return None
    order = [u for group in (extra, candidates) for u in
             [u for u in group if u in violating] + [u for u in group if u not in violating]]
    victims: list[str] = []
    for uid in order:
        rec = on_node.get(uid)
        if rec is None:
            continue  # not using HAMi devices here: evicting it frees nothing the fit counts
        _add(index, uid, node, rec)
        ledger.move(rec, +1)
        if not _fits(index, node, request):
            index.remove_pod(uid)
            ledger.move(rec, -1)
            victims.append(uid)
    return victims, sum(1 for u in victims if u in violating)
