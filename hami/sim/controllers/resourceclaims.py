"""The resourceclaim controller of the embedded cluster (kube-controller-manager's, minimal).

- A pod whose `spec.resourceClaims[]` names a `resourceClaimTemplateName` gets a claim made from
  that template, owned by the pod (reused when one already is, so a restart makes no second),
  recorded in `pod.status.resourceClaimStatuses`.
- A pod that is gone (deleted, or Succeeded/Failed) leaves every claim's `status.reservedFor`; a
  claim no pod reserves any more is deallocated (its allocation cleared), and a claim the pod
  owned is deleted with it (the garbage collector's part), which frees its devices' capacity; so is
  the claim kube-scheduler made for the pod's extended resources (`status.extendedResourceClaimStatus`).

Failures (a missing template, a refused write) are logged once per pod and retried on the next
event of that pod or template, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib

from hami.dra import podclaims
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.obs.log import get_logger

log = get_logger(__name__)


def _gone(pod: dict | None) -> bool:
    return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class ResourceClaimController:
    def __init__(self, client: KubeClient, *, workers: int = 8):
        self.client = client
        self.workers = workers  # concurrent syncs, as kube-controller-manager runs several
        self._locks: dict[str, asyncio.Lock] = {}
        # (pod uid, pod claim) -> the claim made, until the informers show it (no second claim meanwhile)
        self._made: dict[tuple[str, str], dict] = {}
        self.pods = Informer(client, "pods", handler=self._on_pod)
        self.claims = Informer(client, "resourceclaims")
        self.templates = Informer(client, "resourceclaimtemplates", handler=self._on_template)
        self._work: asyncio.Queue[tuple[str, dict | None, dict | None]] = asyncio.Queue()
        self._warned: set[str] = set()
        self.created = 0
        self.deleted = 0

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        pod = new or old or {}
        # a pod with claims, or whose extended resources kube-scheduler served with a claim (KEP-5004)
        if not (pod.get("spec") or {}).get("resourceClaims") and \
                not (pod.get("status") or {}).get("extendedResourceClaimStatus"):
            return
        if _gone(new):
            if not _gone(old):
                self._work.put_nowait(("release", old or new, None))
            return
        _, waiting = podclaims.claim_names(new)
        if waiting:
            self._work.put_nowait(("create", new, None))

    def _on_template(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            return
        ns = (new.get("metadata") or {}).get("namespace")
        for pod in list(self.pods.store.values()):
            if (pod.get("metadata") or {}).get("namespace") == ns and not _gone(pod) and \
                    podclaims.claim_names(pod)[1]:
                self._work.put_nowait(("create", pod, None))

    async def run(self, stop: asyncio.Event) -> None:
        informers = (self.claims, self.templates, self.pods)
        tasks = [asyncio.create_task(i.run(stop), name=f"resourceclaim-controller:{i.kind}") for i in informers]
        workers: list[asyncio.Task] = []
        try:
            for i in informers:
                await i.wait_synced()
            workers = [asyncio.create_task(self._worker(), name=f"resourceclaim-controller:worker{n}")
                       for n in range(self.workers)]
            await stop.wait()
        finally:
            for t in tasks + workers:
                t.cancel()
            await asyncio.gather(*tasks, *workers, return_exceptions=True)

    async def _worker(self) -> None:
        """One of `workers` concurrent syncs; one pod is never synced by two at once."""
        while True:
            what, pod, _ = await self._work.get()
            key = podclaims.pod_key(pod)
            lock = self._locks.setdefault(key, asyncio.Lock())
            try:
                async with lock:
                    if what == "create":
                        await self._create_claims(self.pods.store.get(key, pod))
                    else:
                        await self._release(pod)
            except ApiError as exc:
                self._warn(key, f"{what} failed: {exc.message}")
            finally:
                if not lock.locked() and self._locks.get(key) is lock:
                    del self._locks[key]

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("Resource claim controller could not act on a pod", pod=key, error=message)

    async def _create_claims(self, pod: dict) -> None:
        if _gone(pod):
            return
        meta = pod["metadata"]
        ns, uid = meta.get("namespace", ""), meta.get("uid", "")
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        done = {s.get("name") for s in statuses}
        added = False
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            if not pc.get("resourceClaimTemplateName") or pc.get("name") in done:
                continue
            existing = self._made.get((uid, pc.get("name"))) or next((c for c in self.claims.store.values()
                             if podclaims.owned_by(c, uid) and ((c.get("metadata") or {}).get("annotations") or {})
                             .get(podclaims.POD_CLAIM_ANNOTATION) == pc.get("name")), None)
            if existing is None:
                template = self.templates.store.get(f"{ns}/{pc['resourceClaimTemplateName']}")
                if template is None:
                    self._warn(podclaims.pod_key(pod), f"ResourceClaimTemplate {ns}/{pc['resourceClaimTemplateName']} "
                                                       "not found")
                    continue
                existing = await self.client.create("resourceclaims", podclaims.generated_claim(pod, pc, template), ns)
                self._made[(uid, pc["name"])] = existing
                self.created += 1
            statuses.append({"name": pc["name"], "resourceClaimName": existing["metadata"]["name"]})
            added = True
        if added:
            await self.client.request(
                "patch", "pods/status", "PATCH", resource_path("pods", ns, meta["name"], "status"),
                body={"status": {"resourceClaimStatuses": statuses}}, content_type="application/merge-patch+json")

    async def _release(self, pod: dict) -> None:
        meta = pod.get("metadata") or {}
        ns, uid = meta.get("namespace", ""), meta.get("uid", "")
        names, _ = podclaims.claim_names(pod)
        for made in [k for k in self._made if k[0] == uid]:
            names.append(self._made.pop(made)["metadata"]["name"])
        owned = [c for c in self.claims.store.values() if podclaims.owned_by(c, uid)]
        for name in dict.fromkeys(names + [c["metadata"]["name"] for c in owned]):
            claim = self.claims.store.get(f"{ns}/{name}")
            if claim is None:
                continue
            if podclaims.owned_by(claim, uid):
                with contextlib.suppress(ApiError):  # already gone is fine
                    await self.client.delete("resourceclaims", name, ns)
                    self.deleted += 1
                continue
            status = podclaims.release(claim, uid)
            if status is not None:
                body = {**claim, "status": status}
                await self.client.request("replace", "resourceclaims/status", "PUT",
                                          resource_path("resourceclaims", ns, name, "status"), body=body,
                                          content_type="application/json")
