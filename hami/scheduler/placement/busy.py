"""The decisions /filter holds until their bind, counted per node (pure, no I/O).

kube-scheduler answers /filter pod after pod and sends each /bind on its own goroutine, so in a
burst many pods have a decision (filter answered) whose bind has not arrived yet. `Held` keeps
them (the Placer's held decisions) with a count per node: this replica's pending work, which
contention.py weighs with its binds in flight and its node locks; `HeldView` is the read-only
face others get.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class HeldView(Mapping):
    """A read-only view of a `Held` (uid -> decision, and `per_node`) and of the DRA allocations held
    beside it (`claims`: claim key -> held allocation): what the readers of the held decisions get;
    only their owner (the Placer) changes them."""

    __slots__ = ("_held", "claims")

    def __init__(self, held: Held, claims: dict | None = None):
        self._held = held
        self.claims: Mapping = MappingProxyType(claims if claims is not None else {})

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
