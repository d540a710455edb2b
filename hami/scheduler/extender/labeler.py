"""The `hami.io/vgpu-node` pod label, written off the critical path after the binding.

HAMi sets this label beside the `hami.io/vgpu-node` annotation (util.PatchPodAnnotations). Its one
reader in HAMi v2.10 is the vGPU monitor (cmd/vGPUmonitor/metrics.go lists its node's pods by the
label to name running containers in its metrics); the device plugin finds the pod at Allocate by
the node lock and the annotations (util.GetPendingPod), the scheduler by the annotation. A
Binding cannot carry labels (kube-apiserver copies only topology labels, behind a feature gate),
so /bind does not wait for it: our node agent sets the label in the Allocate patch it makes
anyway, and this writer labels, `delay` seconds after the binding, only the bound pods still
without it (a node running HAMi's own device plugin), on the background lane.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from hami.device import codec
from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import background
from hami.obs.log import get_logger

log = get_logger(__name__)

LABEL = codec.VGPU_NODE_ANNOTATION
# Long enough for the node agent's Allocate patch (which labels the pod) to come first.
LABEL_DELAY = 30.0
MAX_PENDING = 100_000


def needs_label(pod: dict | None, node: str) -> bool:
    """A pod still bound to `node` whose label does not name it yet."""
    if pod is None or (pod.get("spec") or {}).get("nodeName") != node:
        return False
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL) != node


class PodLabeler:
    def __init__(self, client: KubeClient | None, lookup: Callable[[str, str], dict | None], *,
                 delay: float = LABEL_DELAY, max_pending: int = MAX_PENDING,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.lookup = lookup
        self.delay = delay
        self.clock = clock
        self._due: deque[tuple[float, str, str, str]] = deque(maxlen=max_pending)
        self._wake = asyncio.Event()
        self.queued = 0
        self.writes = 0
        self.skipped = 0  # labelled meanwhile (by the node agent), gone, or bound elsewhere
        self.failed = 0

    def bound(self, ns: str, name: str, node: str) -> None:
        """A binding that carried a placement: look at the pod's label after `delay` (O(1))."""
        was_empty = not self._due
        self._due.append((self.clock() + self.delay, ns, name, node))
        self.queued += 1
        if was_empty:  # entries come in due order (one delay): only an empty queue's writer sleeps unbounded
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._due)

    async def label_due(self) -> None:
        """Label every pod whose delay has passed and that still needs it (the writer's step)."""
        now = self.clock()
        while self._due and self._due[0][0] <= now:
            _, ns, name, node = self._due.popleft()
            if not needs_label(self.lookup(ns, name), node) or self.client is None:
                self.skipped += 1
                continue
            try:
                with background():
                    await self.client.patch_pod(ns, name, {"metadata": {"labels": {LABEL: node}}})
                self.writes += 1
            except ApiError as exc:
                self.failed += 1
                log.v(2).info("Could not label pod", pod=f"{ns}/{name}", label=LABEL, error=str(exc))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.label_due()
            wait = (self._due[0][0] - self.clock()) if self._due else None
            self._wake.clear()
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            await asyncio.wait(waiters, timeout=wait if wait is None or wait > 0 else 0,
                               return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
