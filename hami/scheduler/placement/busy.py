"""Which nodes /filter steers a pod away from during a burst (pure, no I/O).

kube-scheduler answers /filter pod after pod and sends each /bind on its own goroutine, so in a
burst many pods have a decision (filter answered) whose bind has not arrived yet. Each of them will
take the node lock, and a node's binds are served one after another (lock, binding, the device
plugin's Allocate, unlock). A node is busy by as many as it has of: decisions held (`Held`, the
extender's `assumed`), binds of ours in flight, a lock seen on the node watch. /filter prefers
the least busy nodes that fit (`avoid`): with spare nodes those with nothing pending, once every
node has some, those with the fewest; when none of them fits, every node is considered again, so
binpack packs as soon as the burst drains and a pod never fails for being steered.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType


class Held(dict):
    """uid -> held decision (anything with a `.node`), counting decisions per node as they come
    and go (set, pop, del, clear are the only ways in and out)."""

    def __init__(self) -> None:
        super().__init__()
        self.per_node: dict[str, int] = {}

    def __setitem__(self, uid, decision) -> None:
        old = super().get(uid)
        if old is not None:
            self._drop(old.node)
        super().__setitem__(uid, decision)
        self.per_node[decision.node] = self.per_node.get(decision.node, 0) + 1

    def __delitem__(self, uid) -> None:
        old = super().pop(uid)
        self._drop(old.node)

    def pop(self, uid, *default):
        if uid not in self:
            if default:
                return default[0]
            raise KeyError(uid)
        old = super().pop(uid)
        self._drop(old.node)
        return old

    def clear(self) -> None:
        super().clear()
        self.per_node.clear()

    def _drop(self, node: str) -> None:
        left = self.per_node.get(node, 0) - 1
        if left > 0:
            self.per_node[node] = left
        else:
            self.per_node.pop(node, None)


class Busy:
    """The candidates to try last: every node with more pending (held decisions + binds in flight
    + 1 for a held lock) than the least pending candidate; while some candidate has nothing
    pending, every node with anything pending. Membership is computed per node asked (no merged
    table is built: /filter asks about a few nodes, or walks the candidates once)."""

    __slots__ = ("held", "in_flight", "locked", "floor")

    def __init__(self, held: Mapping[str, int], in_flight: Mapping[str, int], locked: Collection[str],
                 candidates: Collection[str]):
        self.held, self.in_flight, self.locked = held, in_flight, locked
        if len(held) + len(in_flight) + len(locked) < len(candidates):
            self.floor = 0  # some candidate has nothing pending (a subset of candidates: the
            # fallback to every node covers it)
        else:
            self.floor = min((self.pending(n) for n in candidates), default=0)

    def pending(self, node: str) -> int:
        return self.held.get(node, 0) + self.in_flight.get(node, 0) + (node in self.locked)

    def __contains__(self, node: object) -> bool:
        return isinstance(node, str) and self.pending(node) > self.floor

    def __bool__(self) -> bool:
        return bool(self.held or self.in_flight or self.locked)

    def nodes(self) -> frozenset[str]:
        return frozenset(n for n in (*self.held, *self.in_flight, *self.locked) if n in self)


class HeldView(Mapping):
    """A read-only view of a `Held` (uid -> decision, and `per_node`): what the readers of the
    held decisions get; only their owner (the Placer) changes them."""

    __slots__ = ("_held",)

    def __init__(self, held: Held):
        self._held = held

    def __getitem__(self, uid):
        return self._held[uid]

    def __iter__(self):
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, uid: object) -> bool:
        return uid in self._held

    def get(self, uid, default=None):
        return self._held.get(uid, default)

    @property
    def per_node(self) -> Mapping[str, int]:
        return MappingProxyType(self._held.per_node)
