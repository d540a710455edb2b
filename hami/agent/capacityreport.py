"""`--report-node-capacity`'s writer: keeps the Node's reported gpumem/gpucores in step with the
registered GPUs through `nodes/status` (what to write: hami.agent.capacity, pure).

Called by the node agent's device loop every tick with the Node from its informer:
* on: patch where capacity/allocatable differ from the healthy registered GPUs; the same values are
  not sent again until the watch shows the Node changed (another writer may have removed them);
* off: remove what a run with the flag left, once per start;
* a refused patch (a chart without the `nodes/status` grant, a refusing policy) is logged once per
  distinct error and retried after `retry_after` seconds: reporting is for Cluster Autoscaler and
  dashboards and never holds up the registration, Allocate or readiness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from hami.agent.capacity import node_capacity, status_patch
from hami.device.model import DeviceInfo
from hami.kube.client import ApiError
from hami.kube.lanes import background
from hami.obs.log import get_logger

log = get_logger(__name__)


class CapacityReporter:
    def __init__(self, client, node_name: str, enabled: bool, resources: tuple[str, str], retry_after: float):
        self.client = client
        self.node_name = node_name
        self.enabled = enabled
        self.resources = resources  # (memory, cores): the names pods ask for
        self.retry_after = retry_after
        self.patches = 0
        self.refusals = 0
        self.error = ""  # the last refused patch, "" once one works
        self._retry_at = 0.0
        # What the last patch sent and the Node's resourceVersion then.
        self._sent: tuple[dict | None, str] | None = None
        self._cleared = False

    async def sync(self, node: Mapping | None, devices: Sequence[DeviceInfo]) -> None:
        if node is None or (not self.enabled and self._cleared):
            return
        if self.error and asyncio.get_running_loop().time() < self._retry_at:
            return  # refused a moment ago: not a write every tick while it stays refused
        want = node_capacity(devices, *self.resources) if self.enabled else None
        patch = status_patch(node, want, self.resources)
        rv = (node.get("metadata") or {}).get("resourceVersion", "")
        if patch is None or self._sent == (want, rv):
            self._cleared = not self.enabled
            return
        try:
            with background():
                await self.client.patch_node_status(self.node_name, patch)
        except ApiError as exc:
            error = f"{exc.status} {exc.reason}: {exc.message}"[:300]
            if error != self.error:
                log.warning("Could not report GPU capacity on node (nodes/status patch)", node=self.node_name,
                            error=error)
            self.error = error
            self.refusals += 1
            self._retry_at = asyncio.get_running_loop().time() + self.retry_after
            return
        self.error = ""
        self._sent = (want, rv)
        self._cleared = not self.enabled
        self.patches += 1
        log.info("Reported GPU capacity on node" if want else "Removed reported GPU capacity from node",
                 node=self.node_name, **({k.rsplit("/", 1)[-1]: v for k, v in want.items()} if want else {}))
