"""Candidate nodes kept in HAMi's preference order between /filter requests (pure, no I/O).

`score.select_node` gives the answer HAMi would give: candidates sorted by node score (binpack:
highest first, spread: lowest first; ties to the earlier name in the request) and the first
that fits wins. Done per request, that is a dict lookup per name and a sort of 1,000 nodes for a
pod that usually fits on the first node tried. kube-scheduler sends the same name list request
after request and a placement changes one node's score, so the order is kept here instead:

- `NameList`: one validated `NodeNames` list (names, and each name's position for ties).
- `ChangeLog`: the names whose score or presence changed, in order: `UsageIndex` logs a node's
  registration and removal, and `NodeUsage.invalidate()` (the one place a node score changes)
  logs the node while it is in the index.
- `ScoreOrder`: one NameList's registered candidates as sorted `(key, position)` pairs for one
  node policy, brought up to date from the log (a bisect per changed name) before each walk.
- `first_fit(order, nodes, pod, busy)`: the node `select_node` would choose, busy (mid-allocation)
  nodes only when no other node fits, as /filter's avoid-locked rule does; FailedNodes complete,
  in `select_node`'s order, when nothing fits.

Every entry the walk fits is also checked against the live node's score (a pending node it passes
by, when it is fitted: no idle node fit); a mismatch (a change the log missed) re-sorts and walks
again (tests/scheduler/test_nodeorder.py compares with `select_node`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Mapping, Sequence
from operator import itemgetter
from typing import Any

from hami.scheduler.placement.changelog import ChangeLog
from hami.scheduler.placement.fit import free_memory_bound

# Re-sort from scratch instead of patching when this share of the candidates changed.
_REBUILD_SHARE = 8


class NameList:
    """One `NodeNames` list as the request gave it, validated once (every member a string)."""

    __slots__ = ("names", "pos", "orders", "ranked")

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        pos: dict[str, int] = {}
        for i, n in enumerate(self.names):
            pos.setdefault(n, i)  # a repeated name keeps its first place (stable sort's answer)
        self.pos = pos
        self.orders: dict[bool, ScoreOrder] = {}
        # (tie_rank, its answers by position, None where not asked yet): a tie is walked decision
        # after decision over the same names, so each name is ranked once (`ranks`)
        self.ranked: tuple[Callable[[str], int], list[int | None]] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def ranks(self, tie_rank: Callable[[str], int]) -> list[int | None]:
        """`tie_rank`'s answers by position, filled as they are asked (`tie_rank` must answer the
        same for a name every time, as a replica's rank does)."""
        ranked = self.ranked
        if ranked is None or ranked[0] != tie_rank:
            ranked = self.ranked = (tie_rank, [None] * len(self.names))
        return ranked[1]

    def order(self, descending: bool) -> ScoreOrder:
        o = self.orders.get(descending)
        if o is None:
            o = self.orders[descending] = ScoreOrder(self, descending)
        return o


class ScoreOrder:
    """A NameList's registered nodes sorted by (score key, position); key = -score for binpack."""

    __slots__ = ("names", "descending", "log", "cursor", "entries", "keys", "caps", "usages", "nodes_of",
                 "rebuilds")

    def __init__(self, names: NameList, descending: bool):
        self.names = names
        self.descending = descending
        self.log: ChangeLog | None = None
        self.cursor = 0
        self.entries: list[tuple[float, int]] = []
        self.keys: list[float | None] = []  # by position: the key filed, None = not registered
        self.caps: list[int] = []  # by position: fit.free_memory_bound of the node
        # by position: the node's usage in `nodes_of` as last logged (the walk reads it by position
        # instead of looking the name up; a change the log missed still shows in its score)
        self.usages: list[Any] = []
        self.nodes_of: Mapping[str, Any] | None = None
        self.rebuilds = 0

    def _key(self, node: Any) -> float:
        return -node.score_value if self.descending else node.score_value

    def rebuild(self, nodes: Mapping[str, Any], log: ChangeLog) -> None:
        self.rebuilds += 1
        names = self.names
        keys: list[float | None] = [None] * len(names.names)
        caps = [-1] * len(names.names)
        usages: list[Any] = [None] * len(names.names)
        entries = []
        get = nodes.get
        for name, p in names.pos.items():
            n = get(name)
            if n is not None:
                k = -n.score_value if self.descending else n.score_value
                keys[p] = k
                caps[p] = free_memory_bound(n)
                usages[p] = n
                entries.append((k, p))
        entries.sort()
        self.entries, self.keys, self.caps, self.usages = entries, keys, caps, usages
        self.log, self.cursor, self.nodes_of = log, log.end, nodes

    def refresh(self, nodes: Mapping[str, Any], log: ChangeLog) -> None:
        """Bring the order up to date with the changes logged since the last refresh."""
        changed = log.since(self.cursor) if self.log is log and self.nodes_of is nodes else None
        if changed is None or len(changed) * _REBUILD_SHARE > len(self.names.names) + 64:
            self.rebuild(nodes, log)
            return
        if not changed:
            return
        pos, keys, entries, caps, usages = self.names.pos, self.keys, self.entries, self.caps, self.usages
        for name in (changed if len(changed) == 1 else set(changed)):
            p = pos.get(name)
            if p is None:
                continue
            old = keys[p]
            if old is not None:
                del entries[bisect_left(entries, (old, p))]
            n = usages[p] = nodes.get(name)
            if n is None:
                keys[p] = None
            else:
                k = keys[p] = -n.score_value if self.descending else n.score_value
                caps[p] = free_memory_bound(n)
                insort(entries, (k, p))
        self.cursor = log.end


class Walk:
    """What `first_fit` found: the node (None when nothing fits), its fit, and FailedNodes."""

    __slots__ = ("node", "usage", "fit", "failed", "tried")

    def __init__(self, node: str | None, usage: Any, fit: Any, failed: dict[str, str], tried: int):
        self.node, self.usage, self.fit, self.failed, self.tried = node, usage, fit, failed, tried


def first_fit(
    names: NameList,
    nodes: Mapping[str, Any],
    log: ChangeLog,
    descending: bool,
    try_fit: Callable[[Any], Any],
    busy: Container[str] = (),
    unregistered_reason: str = "node unregistered",
    need: int | None = None,
    pending: Callable[[str], int] | None = None,
    tie_rank: Callable[[str], int] | None = None,
) -> Walk:
    """The node `select_node` picks among `names` (see the module docstring).

    `try_fit(node_usage)` returns a reason string or the fit. A node in `busy` is taken only when
    no other node fits: then the first fitting busy node in order (what select_node over every
    name gives when no free name fits). With `pending(name)` (how much is queued on a node, 0 =
    idle) the busy nodes are those with anything pending; they are passed by without being
    fitted and, when no idle node fits, fitted least pending first (in order within a level). `need` (fit.memory_need)
    lets the walk pass by nodes whose `free_memory_bound` is below it without fitting them. `failed` is complete only
    when nothing fits (then every node is fitted, in order, for its reason). Kept whole: one walk whose
    levels (idle, busy) and memory bound are state every branch shares.
    """
    order = names.order(descending)
    order.refresh(nodes, log)
    for attempt in range(3):
        failed: dict[str, str] = {}
        busy_fit: tuple[str, Any, Any] | None = None
        tried = 0
        stale = False
        name_of = names.names
        usages = order.usages
        caps = order.caps
        skip = need is not None
        skipped = False
        passed = False  # a pending node passed by (gathered again only when no idle node fits)
        for k, p in order.entries:
            if skip and caps[p] < need:
                skipped = True
                continue
            name = name_of[p]
            # (a pending node passed by is not fitted here, so its score is checked when it is)
            if pending is not None and pending(name):
                passed = True
                continue
            n = usages[p]  # nodes[name]: the index logs each node it adds, replaces or removes
            if attempt == 0 and (n is None or k != (-n.score_value if descending else n.score_value)):
                stale = True  # a change the log missed: re-sort and walk again
                break
            tried += 1
            r = try_fit(n)
            if r.__class__ is str:
                failed[name] = r
                continue
            if busy and name in busy:
                if busy_fit is None:
                    busy_fit = (name, n, r)
                continue
            if passed and tie_rank is not None:
                return _ranked_tie(order, k, p, name, n, r, failed, tried, nodes, try_fit, pending, tie_rank)
            return Walk(name, n, r, failed, tried)
        if stale:
            order.rebuild(nodes, log)
            continue
        if busy_fit is not None:
            return Walk(busy_fit[0], busy_fit[1], busy_fit[2], failed, tried)
        deferred = _passed_by(order, need if skip else None, pending, attempt == 0) if passed else []
        if deferred is None:
            order.rebuild(nodes, log)
            continue
        if deferred:
            walked = dict.fromkeys(d[1] for d in deferred)
            deferred.sort(key=itemgetter(0))  # stable: within a level, in walk order
            for _, name, n in deferred:
                tried += 1
                r = try_fit(n)
                if r.__class__ is not str:
                    return Walk(name, n, r, failed, tried)
                walked[name] = r
            if skipped:  # nothing fits: the full walk below gives FailedNodes in order
                need = None
                continue
            failed = {**failed, **walked} if not failed else _in_walk_order(order, name_of, failed, walked)
        if skipped:
            need = None  # nothing fits: fit every node for FailedNodes
            continue
        if len(order.entries) != len(names.pos) or len(names.pos) != len(name_of):
            # select_node's FailedNodes: unregistered names first, in request order.
            head = {n: unregistered_reason for n in name_of if n not in nodes}
            if head:
                head.update(failed)
                failed = head
        return Walk(None, None, None, failed, tried)
    raise AssertionError("unreachable: a walk after a re-sort is never stale")  # pragma: no cover


def _passed_by(order: ScoreOrder, need: int | None, pending: Callable[[str], int],
               check: bool) -> list[tuple[int, str, Any]] | None:
    """The pending nodes `first_fit` passed by, as (pending, name, usage) in walk order: gathered
    again only when no idle node fits (a burst's walk passes dozens and nearly always fits an idle
    one). None when one's score is stale (`check`: the first walk), as the walk answers for a fit."""
    name_of, usages, caps, descending = order.names.names, order.usages, order.caps, order.descending
    out = []
    for k, p in order.entries:
        if need is not None and caps[p] < need:
            continue
        name = name_of[p]
        queued = pending(name)
        if queued:
            n = usages[p]
            if check and (n is None or k != (-n.score_value if descending else n.score_value)):
                return None
            out.append((queued, name, n))
    return out


def _ranked_tie(order, key, pos, name, usage, fit, failed, tried, nodes, try_fit, pending, tie_rank) -> Walk:
    """Among the idle nodes that fit with the same score key as `name` (the walk's first idle fit),
    the one `tie_rank` ranks highest (the earliest in the walk among equal ranks).

    Only a node ranked above the best fit so far can change the answer, so only those are asked
    whether they are pending and fitted: with T nodes of equal score (identical nodes, a fresh
    cluster) that is a few fits, the record ranks of the walk, instead of T fits; the rest cost a
    rank each, read by position from the NameList's (`NameList.ranks`: asked of `tie_rank` once)."""
    ranks = order.names.ranks(tie_rank)
    best_rank = ranks[pos]
    if best_rank is None:
        best_rank = ranks[pos] = tie_rank(name)
    best = (name, usage, fit)
    name_of, entries = order.names.names, order.entries
    for i in range(bisect_left(entries, (key, pos)) + 1, len(entries)):
        k, p = entries[i]
        if k != key:
            break
        rank = ranks[p]
        if rank is None:
            rank = ranks[p] = tie_rank(name_of[p])
        if rank <= best_rank:
            continue
        other = name_of[p]
        if pending(other):
            continue
        n = nodes.get(other)
        if n is None:
            continue
        r = try_fit(n)
        tried += 1
        if r.__class__ is not str:
            best_rank, best = rank, (other, n, r)
    return Walk(best[0], best[1], best[2], failed, tried)


def _in_walk_order(order, name_of, *parts: dict[str, str]) -> dict[str, str]:
    """The refusals of the idle and the busy nodes merged back into the walk's order."""
    merged: dict[str, str] = {}
    for _, p in order.entries:
        name = name_of[p]
        for part in parts:
            if name in part:
                merged[name] = part[name]
    return merged
