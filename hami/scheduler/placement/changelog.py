"""Names of nodes whose score, registration or cordon changed, in order (pure, no imports).

`UsageIndex` owns one and `NodeUsage.invalidate()` appends to it; /filter's kept candidate order
(nodeorder.py) reads what changed since its last request instead of re-sorting every node.
"""

from __future__ import annotations


class ChangeLog:
    """Names whose node score or registration changed, appended in order; readers keep a cursor.

    Bounded: the oldest half is dropped past `limit` entries; a reader behind that re-sorts.
    """

    __slots__ = ("entries", "base", "limit")

    def __init__(self, limit: int = 8192):
        self.entries: list[str] = []
        self.base = 0  # log position of entries[0]
        self.limit = limit

    def touch(self, name: str) -> None:
        entries = self.entries
        entries.append(name)
        if len(entries) > self.limit:
            cut = len(entries) // 2
            del entries[:cut]
            self.base += cut

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def since(self, cursor: int) -> list[str] | None:
        """Names changed from `cursor` on; None when they were dropped (the reader must re-sort)."""
        if cursor < self.base:
            return None
        return self.entries[cursor - self.base:]
