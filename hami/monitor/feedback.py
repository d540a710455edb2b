"""HAMi's priority feedback loop (spec node.md §3.4): the only writes the monitor makes to a region.

Every tick (5 s), for the containers with a readable region:

1. decay: `recent_kernel > 0` is decremented and written back; if still > 0 the container is
   "recently active": for each of its set UUIDs, `active[uuid][priority] += 1` (priority >= 0).
2. blocking: a container with an active container at a numerically lower priority (0 is the
   highest) on one of its GPUs gets `recent_kernel = -1` (if it was >= 0), which makes HAMi-core's
   rate limiter sleep; otherwise a negative `recent_kernel` is reset to 0.
3. utilization switch: blocked, or sharing a GPU with another active task of the same priority ->
   `utilization_switch = 1` (enforce the SM limit); else 0 (alone: may use the whole GPU).

`observe` is pure; `apply` writes the int32 fields that changed with `os.pwrite`.

Two deliberate differences from HAMi's Go code: blocking looks at every GPU of the container
(HAMi's CheckBlocking stops at the first of its UUIDs that has any active task), and priorities
above 1 are counted instead of indexing past HAMi's two-entry per-GPU slice.
"""

from __future__ import annotations

import os
import struct
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from hami.monitor.shm import Region, layout_of

TICK_SECONDS = 5.0
MIG_APPLY_LOCK = "/tmp/hami/hami-mig-apply.lock"


@dataclass(frozen=True, slots=True)
class Container:
    key: str  # the cache file path
    uuids: tuple[str, ...]  # the region's set UUIDs
    priority: int
    recent_kernel: int
    utilization_switch: int


@dataclass(frozen=True, slots=True)
class Decision:
    recent_kernel: int
    utilization_switch: int


def from_region(key: str, region: Region) -> Container:
    return Container(key, tuple(region.valid_uuids()), region.priority, region.recent_kernel,
                     region.utilization_switch)


def observe(containers: Iterable[Container]) -> dict[str, Decision]:
    """The new (recent_kernel, utilization_switch) of every container, HAMi's Observe()."""
    items = list(containers)
    rk = {c.key: c.recent_kernel for c in items}
    active: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for c in items:
        if rk[c.key] > 0:
            rk[c.key] -= 1
            if rk[c.key] > 0 and c.priority >= 0:
                for u in c.uuids:
                    active[u][c.priority] += 1
    out: dict[str, Decision] = {}
    for c in items:
        on_gpus = [active[u] for u in c.uuids if u in active]
        blocked = any(n > 0 for per in on_gpus for p, n in per.items() if p < c.priority)
        if blocked:
            if rk[c.key] >= 0:
                rk[c.key] = -1
        elif rk[c.key] < 0:
            rk[c.key] = 0
        crowded = any(per.get(c.priority, 0) > 1 for per in on_gpus)
        out[c.key] = Decision(rk[c.key], 1 if blocked or crowded else 0)
    return out


def apply(regions: Iterable[tuple[str, Region]], decisions: dict[str, Decision]) -> int:
    """Write the fields that changed; returns the number of int32 writes made. OSErrors propagate."""
    writes = 0
    for path, region in regions:
        d = decisions.get(path)
        if d is None:
            continue
        lay = layout_of(region)
        changes = []
        if d.recent_kernel != region.recent_kernel:
            changes.append((lay.recent_kernel, d.recent_kernel))
        if d.utilization_switch != region.utilization_switch:
            changes.append((lay.utilization_switch, d.utilization_switch))
        if not changes:
            continue
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < lay.size:
                continue  # shrank since we read it: never extend a file by writing past its end
            for off, value in changes:
                os.pwrite(fd, struct.pack("<i", value), off)
                writes += 1
        finally:
            os.close(fd)
    return writes
