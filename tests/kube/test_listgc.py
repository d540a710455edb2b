"""The collector and the C heap around informer LISTs (hami.kube.listgc): collection paused while
any LIST runs and restored after the last, and the heap's free pages handed back once, when the last
of overlapping LISTs ends: in an event loop in a turn of its own, skipped if a LIST began before it."""

from __future__ import annotations

import asyncio
import gc
import platform

from hami.kube.listgc import GcAroundLists, heap_trimmer


def test_the_heap_is_trimmed_once_when_the_last_of_overlapping_lists_ends():
    calls: list[bool] = []
    around = GcAroundLists(trim=lambda: calls.append(gc.isenabled()))
    was = gc.isenabled()
    try:
        around(True)
        around(True)  # a second informer lists meanwhile
        around(False)
        assert calls == [] and not gc.isenabled()
        around(False)
        assert calls == [was] and gc.isenabled() == was and around.trims == 1  # after the collector is back
        around(True)
        around(False)
        assert around.trims == 2 and around.pauses == 2
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


async def test_in_an_event_loop_the_trim_runs_in_a_turn_of_its_own():
    listing_at_trim: list[int] = []
    around = GcAroundLists(trim=lambda: listing_at_trim.append(around.listing))
    was = gc.isenabled()
    try:
        around(True)
        around(False)
        assert listing_at_trim == [] and gc.isenabled() == was  # not on top of the LIST's last step
        await asyncio.sleep(0)
        assert listing_at_trim == [0] and around.trims == 1
        around(True)
        around(False)
        around(True)  # a LIST begins before the trim's turn: its end trims instead
        await asyncio.sleep(0)
        assert around.trims == 1
        around(False)
        await asyncio.sleep(0)
        assert listing_at_trim == [0, 0] and around.trims == 2
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def test_glibc_has_the_trimmer_and_it_runs():
    trim = heap_trimmer()
    if platform.libc_ver()[0] != "glibc":
        assert trim is None or trim() in (0, 1)
        return
    assert trim is not None
    junk = [bytes(600_000) for _ in range(8)]  # freed heap memory for it to hand back
    del junk
    assert trim() in (0, 1)
