"""The simulated kubelet's stop half: finish graceful pod deletions as kubelet does.

A pod the API server marked for deletion (`metadata.deletionTimestamp`, `deletionGracePeriodSeconds`,
as an eviction leaves it: hami.sim.apiserver.store.Store.delete_gracefully) keeps running, and holding its
GPUs, while its containers stop. Kubelet sends SIGTERM, waits until they exit or the grace period
ends (then SIGKILL), and deletes the pod object with grace 0. Here the containers take
`stop_seconds` to exit after SIGTERM (`--sim-pod-stop-seconds`: 0 = at once), never longer than the
pod's grace, so a pod leaves `min(stop_seconds, deletionGracePeriodSeconds)` after its deletion
started. The final DELETE carries the pod's UID as a precondition, so a pod recreated by name
in the meantime is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib

from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.obs.log import get_logger

log = get_logger(__name__)


def stop_delay(pod: dict, stop_seconds: float) -> float | None:
    """Seconds from the deletion's start until the pod is gone; None when it is not terminating
    on a node (pure)."""
    meta = pod.get("metadata") or {}
    if not meta.get("deletionTimestamp") or not (pod.get("spec") or {}).get("nodeName"):
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    grace = grace if isinstance(grace, int) and grace >= 0 else 30
    return max(0.0, min(float(stop_seconds), float(grace)))


class PodTerminator:
    def __init__(self, client: KubeClient, *, stop_seconds: float = 0.0, field_selector: str | None = None):
        self.client = client
        self.stop_seconds = stop_seconds
        self.pods = Informer(client, "pods", field_selector=field_selector, handler=self._on_pod)
        self._stopping: dict[str, asyncio.Task] = {}  # uid -> the task ending it
        self.stopped = 0

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            return  # a task still waiting finds the pod gone (404) and ends
        delay = stop_delay(new, self.stop_seconds)
        uid = new["metadata"].get("uid", "")
        if delay is None or uid in self._stopping:
            return
        meta = new["metadata"]
        self._stopping[uid] = asyncio.get_running_loop().create_task(
            self._finish(meta.get("namespace", "default"), meta["name"], uid, delay),
            name=f"kubelet-stop:{meta.get('namespace')}/{meta['name']}")

    async def _finish(self, ns: str, name: str, uid: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        try:
            await self.client.request("delete", "pods", "DELETE", resource_path("pods", ns, name),
                                      body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                            "preconditions": {"uid": uid}}, content_type="application/json")
            self.stopped += 1
            log.v(2).info("Pod stopped", pod=f"{ns}/{name}", after_seconds=delay)
        except ApiError as exc:
            if exc.code not in (404, 409):
                log.warning("Could not delete a stopped pod", pod=f"{ns}/{name}", error=str(exc))
        finally:
            self._stopping.pop(uid, None)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self.pods.run(stop)
        finally:
            tasks = list(self._stopping.values())
            for t in tasks:
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
