"""The requeue waker's pass over pending pods gives the event loop turns: a re-list that frees
capacity on thousands of nodes at once makes one pass judge every parked pod against all of them,
which must not hold /filter. Each pod here takes at least 1 ms to judge, so no turn can judge more
than WAKE_BUDGET / 1 ms + 1 of them (a slower machine only makes it fewer)."""

from __future__ import annotations

import asyncio
import time

from hami.device.model import ContainerDeviceRequest, NvidiaConfig
from hami.scheduler.cache import requeue, waker
from hami.scheduler.placement import fit
from hami.scheduler.placement.usage import UsageIndex
from tests.kube.helpers import LoopTurns, eventually


async def test_a_long_wake_pass_yields_the_loop_within_its_budget():
    turns = LoopTurns()

    def labels_of(node: str) -> dict:
        time.sleep(0.001)  # judging a pod against a changed node takes time
        turns.count()
        return {}

    w = waker.Waker(None, UsageIndex(NvidiaConfig()), debounce=0.0, labels_of=labels_of)
    r = ContainerDeviceRequest(nums=1, type="NVIDIA", memreq=1000, mempercentagereq=101, coresreq=0)
    for i in range(20):
        w.book.record(f"p{i}", "d", f"p{i}", fit.pod_request([r], 0, {}), ["n0"],
                      {"n0": "1/1 CardInsufficientMemory"}, now=float(i))
    stop = asyncio.Event()
    running = asyncio.create_task(w.run(stop))

    try:
        async with turns:
            w.capacity_changed("n9", requeue.DEVICES)  # a node no pod had as a candidate registered devices
            await eventually(lambda: turns.total() == 20 and w.idle, timeout=10)
            assert waker.WAKE_BUDGET <= 0.005  # well under the 20 ms this pass takes
            assert turns.most() <= int(waker.WAKE_BUDGET / 0.001) + 1, turns.per_turn
    finally:
        stop.set()
        await running
