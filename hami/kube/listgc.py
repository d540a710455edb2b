"""The garbage collector around informer LISTs (process policy, set by the role that owns the caches).

A re-list after 410 Gone allocates every object of the kind again (40,000 pods at 5,000 nodes, half
a million dicts and strings). The cyclic collector, with the caches frozen out of its way after the
first sync, then runs full collections over those young objects while they arrive: hundreds of
milliseconds each, with the event loop (and /filter) held. `GcAroundLists` pauses automatic
collection while any informer lists and, when the last LIST ends, freezes what was allocated
meanwhile (the new caches) without looking at it: a collection of it, even of the young
generations it all sits in, would be the very stall avoided. The objects the LIST replaced are
freed by reference counting; a cycle made during the LIST stays until the process ends (the
caches are JSON trees, without cycles).
"""

from __future__ import annotations

import gc


class GcAroundLists:
    """`Informer.on_list` for every informer of a process: collection paused while any lists."""

    __slots__ = ("listing", "resume", "pauses")

    def __init__(self) -> None:
        self.listing = 0
        self.resume = True  # whether collection was on when the first LIST began
        self.pauses = 0

    def __call__(self, starting: bool) -> None:
        if starting:
            if self.listing == 0:
                self.resume = gc.isenabled()
                gc.disable()
                self.pauses += 1
            self.listing += 1
            return
        self.listing = max(0, self.listing - 1)
        if self.listing == 0:
            gc.freeze()
            if self.resume:
                gc.enable()
