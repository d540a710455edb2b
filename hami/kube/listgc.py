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

When the last LIST ends it also hands the C heap's free pages back to the system (glibc's
`malloc_trim`): each LIST page is read into a buffer of half a megabyte or more, and once glibc has
seen one that size it serves the next ones from its heap and keeps what they leave free; at 40,000
pods that was 4 MiB of resident memory holding nothing, given back in under a millisecond. After a
re-list of 80,000-100,000 pods the trim walks a heap full of the old objects' holes: 1-7 ms, one C
call that cannot be cut. So in an event loop it runs in a loop turn of its own (`call_soon`), not on
top of the LIST's last step and the watch that follows; a thread would not help, as glibc holds the
arena's lock for the whole walk and the loop's next large allocation waits on it (measured: the
main thread blocked for all of a 114 ms trim). A LIST that begins before that turn leaves the trim
to its own end.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
from collections.abc import Callable


def heap_trimmer() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class GcAroundLists:
    """`Informer.on_list` for every informer of a process: collection paused while any lists."""

    __slots__ = ("listing", "resume", "pauses", "trim", "trims")

    def __init__(self, trim: Callable[[], object] | None = None) -> None:
        self.listing = 0
        self.resume = True  # whether collection was on when the first LIST began
        self.pauses = 0
        self.trim = trim if trim is not None else heap_trimmer()
        self.trims = 0

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
            if self.trim is not None:
                try:
                    asyncio.get_running_loop().call_soon(self.trim_heap)
                except RuntimeError:  # no event loop to give a turn to: now
                    self.trim_heap()

    def trim_heap(self) -> None:
        """The heap trim, unless a LIST began meanwhile (its end trims)."""
        if self.listing == 0 and self.trim is not None:
            self.trim()
            self.trims += 1
