"""`score.select_node`'s answer for a replay, kept between pods instead of rebuilt per pod (pure).

`select_node` sorts the candidates by node score (binpack: highest first, spread: lowest first;
ties to the earlier name) and fits them in that order with `fit.try_pod` until one fits. Per
pod that is a sort of every node and a fit on each node tried before the winner: with binpack
on a filling cluster, the full nodes at the top fail one by one for every pod.

A replay changes one node per placed pod, and only through the engine, so two things are kept:

- the order, per node-policy direction: sorted `(key, position, name)` entries, where a placement
  moves one node (a bisect) instead of a sort of all of them;
- the fit's failures: `try_pod` is a pure function of the node's usage (devices, cordons, pair
  scores, MIG placements in use) and the pod request, so a node that refused a request refuses an
  equal request again until its usage changes. Failures are remembered per request key with the
  node's version (bumped by `touched`), and replayed as the same reason text.

The request key is the `PodRequest` (frozen, compared field by field) with the quota view swapped
for the namespace quota's numbers at that moment, plus the pod's annotations when a container asks
for another vendor (those fits read their use/nouse annotations, which `PodRequest` leaves out of
its comparison). The answer, including `failed_nodes` when nothing fits, is the one `select_node`
gives (tests/whatif/test_picker.py replays the same queues both ways).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from hami.device.model import NVIDIA
from hami.scheduler.fit import PodRequest, try_pod
from hami.scheduler.policy import node_order_descending
from hami.scheduler.score import Selection
from hami.scheduler.usage import NodeUsage


def request_key(pod: PodRequest) -> object:
    """What a fit's answer depends on besides the node (see the module docstring)."""
    opts = pod.options
    quota = opts.quota
    qstate = None
    if quota is not None:
        m, c = quota.mem, quota.cores
        qstate = (m.used, m.limit) if m is not None else None, (c.used, c.limit) if c is not None else None, \
            quota.memory_factor
        pod = replace(pod, options=replace(opts, quota=None))
    vendor_annos = None
    for r in pod.requests:
        if r is None:
            continue
        for one in (r if r.__class__ is tuple else (r,)):
            if one.type != NVIDIA:
                vendor_annos = tuple(sorted((opts.annotations or {}).items()))
                break
    return pod, qstate, vendor_annos


class Picker:
    """Candidates of one replay in HAMi's preference order, with remembered fit failures."""

    def __init__(self, nodes: Mapping[str, NodeUsage], names: Sequence[str]):
        self.nodes = nodes
        self.names = [n for n in names if n in nodes]
        self.pos = {n: i for i, n in enumerate(self.names)}
        self.version = dict.fromkeys(self.names, 0)
        self._orders: dict[bool, list[tuple[float, int, str]]] = {}
        self._keys: dict[bool, dict[str, tuple[float, int, str]]] = {}
        self._failed: dict[object, dict[str, tuple[int, str]]] = {}

    def _entry(self, name: str, descending: bool) -> tuple[float, int, str]:
        s = self.nodes[name].score_value
        return (-s if descending else s, self.pos[name], name)

    def _order(self, descending: bool) -> list[tuple[float, int, str]]:
        order = self._orders.get(descending)
        if order is None:
            keys = {n: self._entry(n, descending) for n in self.names}
            self._keys[descending] = keys
            order = self._orders[descending] = sorted(keys.values())
        return order

    def touched(self, name: str) -> None:
        """`name`'s usage changed (a pod was added): move it in each order, forget its failures."""
        if name not in self.pos:
            return
        self.version[name] += 1
        for descending, order in self._orders.items():
            keys = self._keys[descending]
            old = keys[name]
            new = self._entry(name, descending)
            if new != old:
                del order[bisect_left(order, old)]
                insort(order, new)
                keys[name] = new

    def select(self, pod: PodRequest, allowed: Collection[str] | None = None) -> Selection:
        """The node `select_node(nodes, candidates, pod)` would choose, where the candidates are
        this picker's names (in their order), only those in `allowed` when it is given."""
        failed: dict[str, str] = {}
        memo = self._failed.setdefault(request_key(pod), {})
        version = self.version
        nodes = self.nodes
        tried = 0
        for _, _, name in self._order(node_order_descending(pod.node_policy)):
            if allowed is not None and name not in allowed:
                continue
            v = version[name]
            seen = memo.get(name)
            if seen is not None and seen[0] == v:
                failed[name] = seen[1]
                continue
            tried += 1
            n = nodes[name]
            r = try_pod(n, pod)
            if r.__class__ is str:
                memo[name] = (v, r)
                failed[name] = r
            else:
                return Selection(name, r[0], n.score_value, r[1], failed, tried)
        return Selection(None, (), 0.0, (), failed, tried)
