"""Can this pod's GPU request ever fit the cluster, whatever else runs? Pure.

The doctor asks this before anything else: a pod asking 50,000 MiB per GPU on cards that register
40,960 MiB waits forever, and "wait for pods to finish" is the wrong advice for it. Each container's
NVIDIA request (`hami.device.request.pod_requests`) is held against the best the registered nodes
offer on an empty cluster: the most GPUs one node has, the most memory and cores one card has, and
whether one node has enough cards that large at once. The first impossibility is one line with the
numbers; over-commit is offered only by that name, with what it risks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami.device.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo


@dataclass(frozen=True, slots=True)
class NeverFits:
    container: int  # index in init containers + containers, as the pod device string counts them
    what: str  # "gpus" | "memory" | "cores"
    line: str  # the one-line verdict with the numbers
    fix: str


def never_fits(requests: Sequence[ContainerDeviceRequest | None],
               nodes: Mapping[str, Sequence[DeviceInfo]]) -> NeverFits | None:
    """The first container request no node of `nodes` (name -> registered GPUs) could hold even when idle.

    None when every request fits somewhere on an empty cluster, or when no node registers GPUs (the
    registration problem is the doctor's other branch).
    """
    cards = {name: list(devs) for name, devs in nodes.items() if devs}
    if not cards:
        return None
    most_gpus = max(len(d) for d in cards.values())
    biggest_mem = max(d.devmem for devs in cards.values() for d in devs)
    most_cores = max(d.devcore for devs in cards.values() for d in devs)
    for i, r in enumerate(requests):
        if r is None or r.nums <= 0:
            continue
        if r.nums > most_gpus:
            return NeverFits(i, "gpus", f"container {i} asks for {r.nums} GPUs; the largest node registers "
                             f"{most_gpus}, so it can never fit", f"ask for at most {most_gpus} GPUs per container, "
                             f"or add a node with {r.nums} or more GPUs")
        if r.memreq > biggest_mem:
            need = r.memreq / biggest_mem
            return NeverFits(
                i, "memory",
                f"container {i} asks for {r.memreq} MiB per GPU; the largest card registers {biggest_mem} MiB, "
                "so it can never fit",
                f"ask for at most {biggest_mem} MiB (nvidia.com/gpumem), or add nodes with larger cards. "
                f"Only by over-commit: deviceMemoryScaling of at least {need:.2f} on those nodes would register "
                f"the cards that large, but then a card promises more memory than it has, and pods that use "
                "what they were promised can run out of memory on the card")
        if r.coresreq > most_cores:
            return NeverFits(i, "cores", f"container {i} asks for {r.coresreq} cores (percent) per GPU; the most "
                             f"one card registers is {most_cores}, so it can never fit",
                             f"ask for at most {most_cores} nvidia.com/gpucores")
        mem = r.memreq if r.mempercentagereq == PERCENTAGE_UNSET else 0
        best = max(sum(1 for d in devs if d.devmem >= mem and d.devcore >= r.coresreq) for devs in cards.values())
        if best < r.nums:
            return NeverFits(i, "gpus", f"container {i} asks for {r.nums} GPUs of {mem} MiB and {r.coresreq} cores "
                             f"each; no node has that many such cards (the best has {best}), so it can never fit",
                             "ask for fewer or smaller GPUs, or add a node with enough large cards")
    return None
