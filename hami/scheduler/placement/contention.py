"""When a burst may leave the policy's best node, and for which node (pure, no I/O).

The node and GPUs /filter chooses are HAMi's (score.py: the policy's order, the first that fits)
unless the policy's best node is contended. Then the pod takes the next node in the same policy's
order that is not contended; when every fitting node is contended, the one given a pod longest
ago (ties: the policy's order). Nothing random: the choice depends only on the cluster as this
replica sees it and on its own pending work, so HAMi's policy cases give HAMi's answer whatever
was placed before them (tests/scheduler/test_policy_replay.py).

Contended means this replica's own burst would queue there, which is narrower than "anything
pending": a node's binds are served one at a time (lock, binding, the device plugin's Allocate,
unlock), so a burst needs about as many nodes as it keeps locked at once (bind rate x lock hold,
Little's law), and no more. kube-scheduler sends the binds in the order /filter answered, so a
node given a pod `width` or more decisions ago is free again by the time this pod's bind reaches
it, however long the binds queue behind the API rate limit. A node is contended when this replica
has pending work on it (a decision held until its bind, a bind in flight, the node lock held by
one of its binds) AND gave it a pod within the last `width` decisions. `width` is the node lock's
parallelism: the decisions made within one lock hold (`LockHold`, measured on the node watch),
at most `spread` (--burst-spread) x the critical lane's sustained bind rate x the hold (the
median of the latest holds seen). A binpack
burst then packs onto about that many nodes instead of touching every node; `spread` 0 never
leaves the policy's best node (every pod queues for its lock).

Two replicas do not see each other's held decisions; deciding the same way from the same view,
they would walk the same nodes in step and race for every lock. So while this replica has a burst
pending, a node another scheduler is binding to (its lock on the node now, or released within two
holds) counts as contended too, a replica leaving a contended node takes, among the next nodes of
equal score, the one its identity ranks first (`rank`): the replicas part ways, and while another
scheduler's locks have been seen within OTHERS_SEEN_S the width is every node (`WIDE`): packing
one replica's burst onto the lock's parallelism would queue it behind binds it cannot see, so
there a burst spreads as it did before packing (measured: docs/performance.md).
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import TypeVar

# The node lock's hold before enough are seen released: kubelet's admission, the device plugin's
# Allocate and its unlock (docs/kube-client.md measures ~0.35 s at 300 ms admission).
HOLD_PRIOR_S = 0.35
# The hold is the median of the last HOLD_WINDOW holds seen (a mean would follow the slow tail of a
# burst's holds, and a running median that steps towards each hold wanders with the noise: it sets
# the burst's width, so a wider estimate opens nodes the burst does not need). Until HOLD_MIN holds
# are seen the prior stands: a burst's first wave of holds (every kubelet and Allocate starting at
# once) runs longer than its steady ones, and a median of that wave alone widened a first burst
# to 71 nodes where its steady rate needed 53 (docs/performance.md).
HOLD_WINDOW = 255
HOLD_MIN = 128
# Critical writes a bind makes: the node lock and the Binding.
WRITES_PER_BIND = 2
# How long after another scheduler's lock went away its next bind there is expected, in holds.
FOREIGN_HOLDS = 2.0
# Another scheduler's lock seen within this long (seconds): a burst is not packed (module docstring).
OTHERS_SEEN_S = 5.0
WIDE = 1 << 30  # the width while another scheduler binds: every node this replica has work on is contended
# Decision sequence numbers kept for nodes not decided for this long (decisions) are dropped.
FORGET_AFTER = 65536
# The latest decisions kept in order (`Contention.latest`): a width up to this is answered
# from them.
RECENT_DECISIONS = 8192

T = TypeVar("T")


class LockHold:
    """How long node locks stay on nodes (the node watch, any holder): the median of the last
    HOLD_WINDOW holds, and who released each node's lock last and when.

    A burst's opening wave is left out: the locks taken after every node was free and before the
    first release are held longer than the burst's steady ones (every kubelet and Allocate starts
    at once), and the width sized on them opens nodes the burst keeps for its whole length
    (docs/performance.md). A lone lock taken from idle is a pod placed on its own: it counts."""

    __slots__ = ("seconds", "since", "released", "_window", "_sorted", "_opening", "_uncounted")

    def __init__(self) -> None:
        self.seconds = HOLD_PRIOR_S
        self.since: dict[str, float] = {}
        self.released: dict[str, tuple[float, str]] = {}  # node -> (when, "ns/name" of the holder)
        self._window: deque[float] = deque()  # the latest holds, in the order seen
        self._sorted: list[float] = []  # the same holds, sorted
        self._opening: set[str] | None = None  # nodes locked since every node was free, until a release
        self._uncounted: set[str] = set()  # nodes still held by an opening wave of more than one lock

    def seen(self, node: str, locked: bool, now: float, holder: str = "") -> None:
        """The node watch's view of `node`: locked or not (`holder`: who held it until now)."""
        if locked:
            if node not in self.since:
                if not self.since:
                    self._opening = set()
                if self._opening is not None:
                    self._opening.add(node)
                self.since[node] = now
            return
        start = self.since.pop(node, None)
        if start is None or now < start:
            return
        self.released[node] = (now, holder)
        if self._opening is not None:  # the busy period's first release closes its opening wave
            wave, self._opening = self._opening, None
            if len(wave) > 1:
                self._uncounted = wave - {node}
                return
        elif node in self._uncounted:
            self._uncounted.discard(node)
            return
        self._add(now - start)

    def _add(self, held: float) -> None:
        window, ordered = self._window, self._sorted
        window.append(held)
        insort(ordered, held)
        if len(window) > HOLD_WINDOW:
            del ordered[bisect_left(ordered, window.popleft())]
        if len(ordered) >= HOLD_MIN:
            self.seconds = ordered[len(ordered) // 2]

    def forget(self, node: str) -> None:
        self.since.pop(node, None)
        self.released.pop(node, None)
        self._uncounted.discard(node)
        if self._opening is not None:
            self._opening.discard(node)


class Contention:
    """This replica's decisions in sequence and the burst's width (see the module docstring)."""

    __slots__ = ("spread", "lane_rate", "seq", "last", "recent", "width", "nodes", "window", "window_width",
                 "window_of")

    def __init__(self, spread: float = 2.0, lane_rate: float = 0.0):
        self.spread = spread
        self.lane_rate = lane_rate  # binds/s the critical lane sustains (0: unlimited)
        self.seq = 0  # decisions made so far
        self.last: dict[str, int] = {}  # node -> seq of the latest decision for it
        self.recent: deque[float] = deque()  # times of the decisions within the last hold
        self.width = 0
        self.nodes: deque[tuple[int, str]] = deque(maxlen=RECENT_DECISIONS)  # (seq, node) of the latest decisions
        # node -> seq of its latest decision among the latest `window_width` decisions of `window_of`
        # (`nodes`), kept up to date decision by decision (`latest`); None until first asked
        self.window: dict[str, int] | None = None
        self.window_width = 0
        self.window_of: deque | None = None

    def observe(self, hold: float, now: float, others_active: bool = False) -> int:
        """The width for the next decision, from the lock hold and the decisions made within it
        (`others_active`: another scheduler binds here too: WIDE)."""
        recent = self.recent
        while recent and now - recent[0] > hold:
            recent.popleft()
        if self.spread <= 0:
            self.width = 0
            return 0
        if others_active:
            self.width = WIDE
            return WIDE
        width = len(recent)  # binds as fast as decisions: the nodes one hold's decisions lock
        if self.lane_rate > 0:
            width = min(width, math.ceil(self.spread * self.lane_rate * hold))
        self.width = max(1, width)
        return self.width

    def decided(self, node: str, now: float) -> None:
        """A pod was placed on `node` (held until its bind)."""
        self.seq += 1
        self.last[node] = self.seq
        self.recent.append(now)
        self.nodes.append((self.seq, node))
        window = self.window
        if window is not None:  # the decision enters the window, the one `window_width` before leaves it
            window[node] = self.seq
            width, nodes = self.window_width, self.nodes
            if self.seq > width:
                if len(nodes) > width and nodes is self.window_of:
                    seq, out = nodes[-width - 1]
                    if window.get(out) == seq:
                        del window[out]
                else:  # (the decision leaving is no longer kept: built again when next asked)
                    self.window = None
        if len(self.last) > 4 * FORGET_AFTER:  # nodes that went away: keep only the recent ones
            floor = self.seq - FORGET_AFTER
            self.last = {n: s for n, s in self.last.items() if s > floor}

    def latest(self, own_pending: Callable[[str], int], held: Mapping[str, int]) -> dict[str, int] | None:
        """The burst's contended nodes for one decision, read by the walk with one dict read a node
        (`key`'s answer in another unit): every node this replica decided for within the width,
        with the sequence number of its latest decision there, or 0 when its work is not pending
        (`held`: the decisions held per node, counts above 0; `own_pending` is asked only of the
        window's other nodes). A node's number is its key plus (seq - width), one shift for every
        node, so both rank and test the nodes alike (the walk and `choose` only compare them and
        test them for 0). None when the width is 0 or reaches past the decisions kept (then
        `keyer`). The window is kept from decision to decision (`decided`) and only its nodes
        without a held decision are asked, so a decision costs no key worked out per node. The answer
        is the window itself unless one of its nodes' work is no longer pending (then a copy with
        those at 0): read it for this decision only, as `decided` changes the window."""
        width, nodes = self.width, self.nodes
        if width <= 0 or width > len(nodes):
            return None
        window = self.window
        if window is None or self.window_of is not nodes or abs(width - self.window_width) * 2 > width:
            window = {}
            for decided, node in islice(reversed(nodes), width):
                if node not in window:  # the node's latest decision comes first
                    window[node] = decided
            self.window, self.window_width, self.window_of = window, width, nodes
        elif width > self.window_width:  # older decisions come into the window
            for decided, node in islice(reversed(nodes), self.window_width, width):
                if node not in window:
                    window[node] = decided
            self.window_width = width
        elif width < self.window_width:  # the oldest leave it, with the nodes whose latest they were
            for decided, node in islice(reversed(nodes), width, self.window_width):
                if window.get(node) == decided:
                    del window[node]
            self.window_width = width
        out = window  # copied only when a node's work is no longer pending (the walk only reads it)
        if held.keys() >= window.keys():  # (a burst's usual case: every node of the window holds a decision)
            return out
        for node in window.keys() - held.keys():
            if not own_pending(node):
                if out is window:
                    out = dict(window)
                out[node] = 0
        return out

    def since(self, node: str) -> int:
        """Decisions made after the latest one for `node` (0: it was the latest)."""
        last = self.last.get(node)
        return self.seq + 1 if last is None else self.seq - last

    def key(self, node: str, own_pending: int) -> int:
        """0 when `node` is not contended by this replica; else how soon it frees, in decisions
        (lower: sooner)."""
        if not own_pending:
            return 0
        gap = self.since(node)
        return self.width - gap if gap < self.width else 0

    def keyer(self, own_pending: Callable[[str], int],
              foreign: Callable[[str], bool] = lambda node: False) -> Callable[[str], int] | None:
        """The contention key of every node for one decision (None: no node is contended, the
        policy decides): `key`'s, else `width` (last in line) for a node another scheduler is
        binding to. The walk asks it of every node ahead of its fit (the burst's ~width nodes), so
        it costs one call and a dict read for a node outside the width, and asks `own_pending`
        only of the nodes inside it."""
        if self.width <= 0:
            return None
        width, seq, last = self.width, self.seq, self.last

        def key(node: str) -> int:
            latest = last.get(node)
            gap = seq + 1 if latest is None else seq - latest
            if gap < width and own_pending(node):
                return width - gap
            return width if foreign(node) else 0

        return key


def rank(identity: str, node: str) -> int:
    """A replica's fixed preference among nodes of equal score (higher first): two replicas that
    both leave a contended node part ways instead of walking the same order in step."""
    # A keyed hash, not a CRC: a CRC seeded per replica orders equal-length names alike for every seed.
    return int.from_bytes(hashlib.blake2b(node.encode(), digest_size=8, key=identity.encode()[:64]).digest(), "big")


def choose(fits: Sequence[T], key: Callable[[str], int] | None, tie_rank: Callable[[str], int] | None = None,
           node_of=lambda f: f.node, score_of=lambda f: f.score) -> T:
    """Among `fits` (the policy's order, best first, non-empty): the first not contended, else the
    least contended (earliest in the policy's order among equals). Having passed a contended node
    by, the first not contended is the one `tie_rank` ranks highest among those of its score."""
    if key is None:
        return fits[0]
    best, best_key = None, None
    for i, f in enumerate(fits):
        k = key(node_of(f))
        if not k:  # 0, or None from the window's get: not contended
            if i == 0 or tie_rank is None:
                return f
            tied = [g for g in fits[i:] if score_of(g) == score_of(f) and not key(node_of(g))]
            return max(tied, key=lambda g: tie_rank(node_of(g)))  # max keeps the first of equal ranks
        if best_key is None or k < best_key:
            best, best_key = f, k
    return best


def own_pending(held: Mapping[str, int], in_flight: Mapping[str, int],
                own_lock: Callable[[str], bool]) -> Callable[[str], int]:
    """Whether a node has pending work of this replica (0: none): decisions held, binds in flight,
    its lock if ours, asked in that order until one answers."""
    return lambda node: held.get(node, 0) or in_flight.get(node, 0) or own_lock(node)
