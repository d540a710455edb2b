"""The embedded cluster's Job controller: `hami.sim.controllers.jobspec.job_plan` run on every change of a Job or its
pods.

Pods carry the Job's labels (`batch.kubernetes.io/job-name`, `controller-uid`) and an ownerReference,
and go when the Job goes (the garbage collector's part on a cluster).
"""

from __future__ import annotations

import asyncio

from hami.kube.client import ApiError, KubeClient
from hami.kube.informer import Informer
from hami.obs.log import get_logger
from hami.sim.controllers.jobspec import JOB_NAME_LABEL, UID_LABEL, job_plan, pod_for

log = get_logger(__name__)


class JobController:
    """Keeps each Job's pods and status in line with `job_plan`; deletes a deleted Job's pods."""

    def __init__(self, client: KubeClient):
        self.client = client
        self.jobs = Informer(client, "jobs", handler=self._on_job)
        self.pods = Informer(client, "pods", label_selector=JOB_NAME_LABEL, handler=self._on_pod)
        self._dirty: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    def _on_job(self, etype, old, new) -> None:
        meta = (new or old or {}).get("metadata") or {}
        self._dirty.put_nowait((meta.get("namespace", ""), meta.get("name", "")))

    def _on_pod(self, etype, old, new) -> None:
        meta = (new or old or {}).get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        if job:
            self._dirty.put_nowait((meta.get("namespace", ""), job))

    def _owned(self, ns: str, job: dict | None, name: str) -> list[dict]:
        uid = ((job or {}).get("metadata") or {}).get("uid")
        return [p for p in self.pods.store.values()
                if (p.get("metadata") or {}).get("namespace") == ns
                and ((p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name)
                and (uid is None or p["metadata"]["labels"].get(UID_LABEL) == uid)]

    async def sync(self, ns: str, name: str) -> None:
        job = self.jobs.store.get(f"{ns}/{name}")
        pods = self._owned(ns, job, name)
        if job is None:  # deleted: its pods go too (the garbage collector's job on a cluster)
            for p in pods:
                try:
                    await self.client.delete("pods", p["metadata"]["name"], ns)
                except ApiError as exc:
                    if not exc.not_found:
                        log.warning("Could not delete a deleted Job's pod", job=f"{ns}/{name}", error=str(exc))
            return
        plan = job_plan(job, pods)
        for _ in range(plan.create):
            await self.client.create("pods", pod_for(job), ns)
        if (job.get("status") or {}) != {**(job.get("status") or {}), **plan.status}:
            await self.client.request("patch", "jobs/status", "PATCH",
                                      f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                                      body={"status": plan.status}, content_type="application/merge-patch+json")

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self.jobs.run(stop)), asyncio.create_task(self.pods.run(stop))]
        try:
            await self.jobs.synced.wait()
            await self.pods.synced.wait()
            while not stop.is_set():
                getter = asyncio.create_task(self._dirty.get())
                stopper = asyncio.create_task(stop.wait())
                done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if getter not in done:
                    getter.cancel()
                    break
                ns, name = getter.result()
                await asyncio.sleep(0)  # let the informers take in what this change brought
                try:
                    await self.sync(ns, name)
                except ApiError as exc:
                    log.warning("Job sync failed; retried on the next change", job=f"{ns}/{name}", error=str(exc))
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
