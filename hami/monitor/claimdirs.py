"""DRA claims' HAMi-core cache dirs: find them and name the pod and container each belongs to.

The kubelet DRA plugin (hami.dra.plugin, as HAMi's k8s-dra-driver) gives every prepared
ResourceClaim one host dir, `<hook>/vgpu/claims/<claim uid>/`, holding one shared region
(`<claim uid>.cache`) for every container that uses the claim. The dir names no pod, so the
monitor maps it through the claim:

    claim uid -> ResourceClaim -> the pod it is reserved for (status.reservedFor; the owning pod
    for a claim generated from a template) -> the pod's spec.resourceClaims entry that resolves
    to this claim (resourceClaimName, or status.resourceClaimStatuses for a template) -> the
    containers whose resources.claims name that entry.

One region is one series: a claim shared by several containers (or pods) is reported once, under
its first container (spec order) of its first pod (reservedFor order), so sums over pods stay
true. Everything here is pure except `list_claim_dirs`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami.monitor.scan import ContainerDir


def claims_dir_for(cache_dir: str) -> str:
    """`<hook>/vgpu/containers` -> `<hook>/vgpu/claims` (HAMi's two layouts are siblings)."""
    return os.path.join(os.path.dirname(os.path.normpath(cache_dir)), "claims")


@dataclass(frozen=True, slots=True)
class ClaimDir:
    uid: str  # the dir name: the claim's metadata.uid
    path: str
    mtime: float


def list_claim_dirs(claims_dir: str) -> list[ClaimDir]:
    """Sub-directories of `claims_dir` (missing or unreadable: none), sorted by name."""
    out: list[ClaimDir] = []
    try:
        it = os.scandir(claims_dir)
    except OSError:
        return out
    with it:
        for entry in it:
            try:
                if not entry.is_dir(follow_symlinks=False) or entry.name.startswith("."):
                    continue
                out.append(ClaimDir(entry.name, entry.path, entry.stat(follow_symlinks=False).st_mtime))
            except OSError:
                continue
    out.sort(key=lambda d: d.uid)
    return out


def _meta(obj: Mapping) -> Mapping:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _list(value) -> list:
    return [x for x in value if isinstance(x, Mapping)] if isinstance(value, list) else []


def claims_by_uid(claims: Iterable[Mapping]) -> dict[str, Mapping]:
    out: dict[str, Mapping] = {}
    for c in claims:
        uid = _meta(c).get("uid")
        if isinstance(uid, str) and uid:
            out[uid] = c
    return out


def consumer_pod_uids(claim: Mapping) -> list[str]:
    """Pods using the claim: status.reservedFor (resource pods, in order), else the owning Pod."""
    status = claim.get("status") if isinstance(claim.get("status"), Mapping) else {}
    uids = [r.get("uid") for r in _list(status.get("reservedFor"))
            if r.get("resource") == "pods" and not r.get("apiGroup")]
    if not uids:  # a template's claim before the scheduler reserved it: its owner is the pod
        uids = [o.get("uid") for o in _list(_meta(claim).get("ownerReferences"))
                if o.get("kind") == "Pod" and o.get("apiVersion") == "v1" and o.get("controller")]
    return [u for u in uids if isinstance(u, str) and u]


def pod_claim_entries(pod: Mapping, claim_name: str) -> set[str]:
    """Names of the pod's spec.resourceClaims entries that resolve to the claim `claim_name`."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    generated = {s["name"]: s.get("resourceClaimName") for s in _list(status.get("resourceClaimStatuses"))
                 if isinstance(s.get("name"), str)}
    out = set()
    for entry in _list(spec.get("resourceClaims")):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if entry.get("resourceClaimName") == claim_name or (
                entry.get("resourceClaimTemplateName") and generated.get(name) == claim_name):
            out.add(name)
    return out


def claim_containers(pod: Mapping, entries: set[str]) -> list[str]:
    """Containers (spec order) whose resources.claims name one of `entries`."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    out = []
    for c in _list(spec.get("containers")):
        res = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
        used = {r.get("name") for r in _list(res.get("claims")) if isinstance(r.get("name"), str)}
        if used & entries and isinstance(c.get("name"), str):
            out.append(c["name"])
    return out


def claim_owner(claim: Mapping, pods: Mapping[str, Mapping]) -> tuple[str, str] | None:
    """(pod uid, container) the claim's region is reported under; None when no pod of `pods` uses it.

    The pod must be in the claim's namespace (reservedFor names pods of the claim's namespace), so a
    claim cannot label its usage with another namespace's pod.
    """
    name, ns = _meta(claim).get("name"), _meta(claim).get("namespace")
    for uid in consumer_pod_uids(claim):
        pod = pods.get(uid)
        if pod is None or _meta(pod).get("namespace") != ns:
            continue
        containers = claim_containers(pod, pod_claim_entries(pod, name)) if isinstance(name, str) else []
        if containers:
            return uid, containers[0]
    return None


def claim_container_dirs(dirs: Iterable[ClaimDir], claims: Mapping[str, Mapping],
                         pods: Mapping[str, Mapping]) -> list[ContainerDir]:
    """Claim dirs as the monitor's ContainerDirs (named `claims/<uid>`), for claims a known pod uses."""
    out = []
    for d in dirs:
        claim = claims.get(d.uid)
        owner = claim_owner(claim, pods) if claim is not None else None
        if owner is not None:
            out.append(ContainerDir(f"claims/{d.uid}", d.path, owner[0], owner[1], d.mtime))
    return out


@dataclass
class ClaimReaper:
    """Which claim dirs to remove: those whose claim has been gone for `grace` seconds.

    A dir whose claim exists is never a candidate (whatever its pods do). Absence is timed from the
    first tick that saw the dir without its claim, and the dir must also be untouched for `grace`
    (a dir prepared just now for a claim the informer has not delivered yet is left alone).
    """

    grace: float
    missing_since: dict[str, float] = field(default_factory=dict)

    def candidates(self, dirs: Iterable[ClaimDir], known: Iterable[str], now: float) -> list[ClaimDir]:
        known = set(known)
        out, missing = [], {}
        for d in dirs:
            if d.uid in known:
                continue
            since = missing[d.uid] = self.missing_since.get(d.uid, now)
            if since + self.grace <= now and d.mtime + self.grace <= now:
                out.append(d)
        self.missing_since = missing  # dirs gone or claims back are forgotten
        return out
