"""Shared asyncio helpers for the simulated kubelets."""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")
STOPPED = object()  # returned by next_or_stop once stop is set


async def next_or_stop(queue: asyncio.Queue[T], stop: asyncio.Event) -> T | object:
    """The queue's next item, or `STOPPED` once `stop` is set first (the get is cancelled, nothing lost)."""
    getter = asyncio.create_task(queue.get())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if getter not in done:
        getter.cancel()
        return STOPPED
    return getter.result()

