"""--dra quota reservations: two pods admitted at once cannot both overflow a namespace's quota.

A pod turned into claims holds nothing countable until the resourceclaim controller creates its
claims. So the webhook reserves what the pod will ask (draquota.Amounts) before it admits it, on the
namespace's ResourceQuota itself (the first by name that limits a GPU resource): the annotation
`LEDGER_ANNOTATION` holds reservation id -> [GPUs, MiB, cores, expiry], written with the quota's
resourceVersion as precondition. Of two replicas (or two requests) reserving at once, one write
fails with 409, reads the other's reservation and decides again. A reservation stops counting when
a pod carrying its id (webhook.RESERVATION_ANNOTATION) has every claim it names in the scheduler's
claim cache (then the claims count), or after `TTL` (a pod the API server then refused, or never
created).

A device-plugin pod of a namespace that also has claims (a mixed namespace) reserves its GPU count
the same way: Kubernetes' own quota check counts `requests.nvidia.com/gpu` of pods but not claims, so
two such pods admitted at once could each fit beside the claims and together pass the limit. Its
reservation stops counting once the pod exists in the scheduler's cache: the API server's quota
admission has then added it to the quota's `status.used`, which the decision reads from the quota
it just fetched (the largest of that and the cached quotas' counts).

Tenants cannot reach the ledger: writing a ResourceQuota is the namespace admin's right, not a pod
creator's. Ids are random per admission, and only the webhook writes a pod's id: a pod creator who
sets, changes or removes the annotation is refused (it is one of the webhook's guarded keys with
--dra, hami.scheduler.admission.placementguard), so no pod can claim another pod's reservation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import orjson

from hami.dra import podclaims
from hami.kube.client import ApiError, KubeClient
from hami.obs.log import get_logger
from hami.scheduler.admission import draquota
from hami.scheduler.admission.draquota import Amounts, Limits

log = get_logger(__name__)

LEDGER_ANNOTATION = "hami.io/dra-quota-reservations"
TTL = 60.0
ATTEMPTS = 8


def satisfied(pods: Iterable[Mapping], claim_exists: Callable[[str], bool], annotation: str) -> set[str]:
    """Reservation ids that count elsewhere now: a claim pod's once all its claims exist (they count),
    a device-plugin pod's (no claims in its spec, which is immutable) once it exists (Kubernetes'
    quota usage counts it). Only the webhook writes the id (a guarded annotation)."""
    out = set()
    for pod in pods:
        rid = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation)
        if not rid:
            continue
        if not ((pod.get("spec") or {}).get("resourceClaims")):
            out.add(str(rid))
            continue
        names, waiting = podclaims.claim_names(pod)
        ns = (pod.get("metadata") or {}).get("namespace") or ""
        if names and not waiting and all(claim_exists(f"{ns}/{n}") for n in names):
            out.add(str(rid))
    return out


def parse(text: str | None, now: float) -> dict[str, list]:
    """One namespace's reservations, expired ones dropped; a corrupt entry is dropped, never trusted."""
    try:
        raw = orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}
    out = {}
    for rid, v in (raw.items() if isinstance(raw, dict) else ()):
        if (isinstance(v, list) and len(v) == 4
                and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v) and v[3] > now):
            out[str(rid)] = v
    return out


class QuotaLedger:
    def __init__(self, client: KubeClient, *, claims_of: Callable[[str], Iterable[Mapping]],
                 pods_of: Callable[[str], Iterable[Mapping]], claim_exists: Callable[[str], bool],
                 quotas_of: Callable[[str], Iterable[Mapping]], device_class: str, names: tuple[str, str, str],
                 memory_factor: int = 1, clock: Callable[[], float] = time.time,
                 others_of: Callable[[str], Amounts] | None = None):
        self.client = client
        self.others_of = others_of  # what the namespace's device-plugin pods hold (a mixed namespace)
        self.claims_of = claims_of
        self.pods_of = pods_of
        self.claim_exists = claim_exists
        self.quotas_of = quotas_of
        self.device_class = device_class
        self.names = names  # the count, memory and cores resource names
        self.memory_factor = memory_factor
        self.clock = clock
        self.conflicts = 0

    def _holder(self, ns: str) -> tuple[str, Limits]:
        """The ResourceQuota that holds the ledger (the first by name limiting a GPU resource) and the
        namespace's limits; ("", no limits) when none limits one."""
        quotas = sorted(self.quotas_of(ns), key=lambda q: (q.get("metadata") or {}).get("name", ""))
        limits = draquota.hard_limits(quotas, *self.names, memory_factor=self.memory_factor)
        for q in quotas:
            if draquota.hard_limits([q], *self.names).any:
                return str(q["metadata"]["name"]), limits
        return "", limits

    async def reserve(self, ns: str, rid: str, want: Amounts, annotation: str) -> str:
        """"" when reserved (or the namespace has no such limit), else the refusal's text."""
        holder, limits = self._holder(ns)
        if not holder:
            return ""
        for _ in range(ATTEMPTS):
            now = self.clock()
            try:
                quota = await self.client.get("resourcequotas", holder, ns)
            except ApiError as exc:
                log.warning("Could not read the quota holding DRA reservations", namespace=ns, quota=holder,
                            error=exc.message)
                return f"{draquota.EXCEEDING}: could not reserve: {exc.message}"
            limits = draquota.hard_limits([quota, *[q for q in self.quotas_of(ns)
                                                    if (q.get("metadata") or {}).get("name") != holder]],
                                          *self.names, memory_factor=self.memory_factor)
            meta = dict(quota.get("metadata") or {})
            annos = dict(meta.get("annotations") or {})
            done = satisfied(self.pods_of(ns), self.claim_exists, annotation)
            held = {k: v for k, v in parse(annos.get(LEDGER_ANNOTATION), now).items() if k not in done}
            used = draquota.namespace_usage(self.claims_of(ns), self.device_class)
            if self.others_of is not None:
                others = self.others_of(ns)
                # the quota just read counts a pod the cache may not show in its quotas yet
                fresh = draquota.device_plugin_usage([quota], self.names[0], 0, 0).gpus
                used += others._replace(gpus=max(others.gpus, fresh))
            for v in held.values():
                used += Amounts(int(v[0]), int(v[1]), int(v[2]))
            why = draquota.over(limits, used, want)
            if why:
                return f"{draquota.EXCEEDING}: {why}"
            held[rid] = [want.gpus, want.mem, want.cores, round(now + TTL, 3)]
            annos[LEDGER_ANNOTATION] = orjson.dumps(held).decode()
            meta["annotations"] = annos
            try:
                await self.client.replace("resourcequotas", holder, {**quota, "metadata": meta}, ns)
                return ""
            except ApiError as exc:
                if exc.status != 409:
                    return f"{draquota.EXCEEDING}: could not reserve: {exc.message}"
                self.conflicts += 1
        return f"{draquota.EXCEEDING}: could not reserve: the quota kept changing"
