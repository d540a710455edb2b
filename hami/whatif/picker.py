"""`score.select_node`'s answer for a replay, with the fit's refusals remembered between pods (pure).

`select_node` sorts the candidates by node score (binpack: highest first, spread: lowest first;
ties to the earlier name) and fits them in that order with `fit.try_pod` until one fits. /filter
keeps that order between requests (`hami.scheduler.placement.nodeorder`: a `NameList` per candidate list,
patched from the `UsageIndex`'s change log, passing by nodes whose cards lack the memory asked);
the replay walks it with the same `first_fit`.

What the replay adds: with binpack on a filling cluster the full nodes at the top of the order
refuse every pod, one fit each. `try_pod` is a pure function of the node's usage (devices, cordons,
pair scores, MIG placements in use) and the pod request, so a node that refused a request refuses
an equal request again until its usage changes. Refusals are remembered per request key with the
node's version (bumped for every name the index's change log reports), and answered with the same
reason text.

The request key is the `PodRequest` (frozen, compared field by field) with the quota view swapped
for the namespace quota's numbers at that moment, plus the pod's annotations when a container asks
for another vendor (those fits read their use/nouse annotations, which `PodRequest` leaves out of
its comparison). The answer, including `failed_nodes` when nothing fits, is the one `select_node`
gives (tests/whatif/test_picker.py replays the same queues both ways).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hami.device.model import NVIDIA
from hami.scheduler.placement.fit import PodRequest, memory_need, try_pod
from hami.scheduler.placement.nodeorder import NameList, first_fit
from hami.scheduler.placement.policy import node_order_descending
from hami.scheduler.placement.score import Selection
from hami.scheduler.placement.usage import UsageIndex


def request_key(pod: PodRequest) -> object:
    """What a fit's answer depends on besides the node (see the module docstring)."""
    opts = pod.options
    quota = opts.quota
    qstate = None
    if quota is not None:
        m, c = quota.mem, quota.cores
        qstate = ((m.used, m.limit) if m is not None else None, (c.used, c.limit) if c is not None else None,
                  quota.memory_factor)
        pod = replace(pod, options=replace(opts, quota=None))
    vendor_annos = None
    for r in pod.requests:
        if r is None:
            continue
        if any(one.type != NVIDIA for one in (r if r.__class__ is tuple else (r,))):
            vendor_annos = tuple(sorted((opts.annotations or {}).items()))
            break
    return pod, qstate, vendor_annos


class Picker:
    """The replay's node choice: `first_fit` over kept orders, refusals remembered per request."""

    def __init__(self, index: UsageIndex):
        self.index = index
        self.version: dict[str, int] = {}
        self._cursor = index.changes.end
        self._lists: dict[object, NameList] = {}
        self._refused: dict[object, dict[str, tuple[int, str]]] = {}

    def _catch_up(self) -> None:
        """Bump the version of every node whose usage changed since the last pod."""
        log = self.index.changes
        changed = log.since(self._cursor)
        if changed is None:  # the log dropped entries we had not read: forget every refusal
            self._refused.clear()
        else:
            version = self.version
            for name in changed:
                version[name] = version.get(name, 0) + 1
        self._cursor = log.end

    def select(self, pod: PodRequest, names: Sequence[str], names_key: object = None,
               screen: Callable[[str], str | None] | None = None, screen_key: object = None) -> Selection:
        """What `select_node(index.nodes, names, pod)` answers. `names_key` names the candidate
        list when it is used again (its order is kept under that key). `screen(name)`, a refusal
        before HAMi's fit (kube-scheduler's resource fit) or None, is asked of each node walked;
        `screen_key` says what its answer depends on besides the node's usage."""
        self._catch_up()
        lst = self._lists.get(names_key) if names_key is not None else None
        if lst is None:
            lst = NameList(names)
            if names_key is not None:
                self._lists[names_key] = lst
        refused = self._refused.setdefault((request_key(pod), screen_key), {})
        version = self.version

        def try_fit(n):
            v = version.get(n.name, 0)
            seen = refused.get(n.name)
            if seen is not None and seen[0] == v:
                return seen[1]
            r = screen(n.name) if screen is not None else None
            if r is None:
                r = try_pod(n, pod)
            if r.__class__ is str:
                refused[n.name] = (v, r)
            return r

        index = self.index
        walk = first_fit(lst, index.nodes, index.changes, node_order_descending(pod.node_policy), try_fit,
                         need=memory_need(pod))
        if walk.node is None:
            return Selection(None, (), 0.0, (), walk.failed, walk.tried)
        devices, mig = walk.fit
        return Selection(walk.node, devices, walk.usage.score_value, mig, walk.failed, walk.tried)
