"""Which of the best fitting nodes a replica takes while a burst is pending (pure, no I/O).

Two scheduler replicas do not see each other's held decisions (busy.py counts only this
replica's), so in a burst both answer /filter with the same best node and their binds race for
its lock: the loser's compare-and-swap is a 409, a wasted critical write, and its pod then waits
for the winner's Allocate. While something is pending on this replica, it takes among the first
`SPREAD_TOP` fits (binpack's order) the one its own salt ranks highest (rendezvous hashing): two
replicas with different salts pick different nodes most of the time, each keeps preferring the
same nodes (so each queues behind its own binds, never the other's), and with nothing pending
the best fit is taken as before, so binpack packs once the burst drains.
"""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Sequence
from typing import TypeVar

# How many of the best fits a replica chooses among: two replicas agree on about 1 in SPREAD_TOP.
SPREAD_TOP = 4

T = TypeVar("T")


def new_salt() -> bytes:
    """A replica's identity for the ranking: random per process (replicas need only differ)."""
    return secrets.token_bytes(8)


def rank(salt: bytes, node: str) -> int:
    """This replica's stable preference for `node` (higher = preferred)."""
    return zlib.crc32(node.encode(), zlib.crc32(salt))


def pick(fits: Sequence[T], salt: bytes, node_of=lambda f: f.node, top: int = SPREAD_TOP) -> T:
    """Among the first `top` of `fits` (best first, non-empty), the one `salt` ranks highest."""
    head = fits[:top]
    return max(head, key=lambda f: rank(salt, node_of(f)))
