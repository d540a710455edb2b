"""Starting a pod's containers through DRA on a simulated node (the kubelet's DRA half).

Before the containers start: read each of the pod's claims (it must be reserved for this pod),
`NodePrepareResources` them over the plugin's gRPC socket (`hami.sim.kubelet.drakubelet`), then give
every container the CDI edits of the devices of the claims it references in
`resources.claims` (`hami.dra.cdi.resolve`: env and mounts, as a CDI runtime applies them).
On the pod's deletion the runner unprepares the same claims (`NodeUnprepareResources`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hami.dra import cdi, podclaims
from hami.kube.client import ApiError, KubeClient
from hami.sim.kubelet.drakubelet import ClaimRef, DraKubelet


class DraStartError(RuntimeError):
    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


@dataclass
class Started:
    refs: list[ClaimRef] = field(default_factory=list)  # what to unprepare when the pod goes
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # container -> env from CDI
    mounts: dict[str, dict[str, str]] = field(default_factory=dict)  # container -> {container path: host path}
    cdi_ids: dict[str, list[str]] = field(default_factory=dict)  # container -> CDI devices


def _claim_of_pod_claim(pod: Mapping) -> dict[str, str]:
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = {}
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = pc.get("resourceClaimName") or generated.get(pc.get("name"))
        if name:
            out[str(pc.get("name"))] = str(name)
    return out


async def prepare_pod(client: KubeClient, kubelet: DraKubelet, cdi_root: str, pod: Mapping) -> Started:
    meta = pod.get("metadata") or {}
    ns, uid = meta.get("namespace", ""), meta.get("uid", "")
    by_pod_claim = _claim_of_pod_claim(pod)
    started = Started()
    uid_of: dict[str, str] = {}
    for claim_name in dict.fromkeys(by_pod_claim.values()):
        try:
            claim = await client.get("resourceclaims", claim_name, ns)
        except ApiError as exc:
            raise DraStartError("ResourceClaimNotFound", f"resourceclaim {ns}/{claim_name}: {exc.message}") from None
        if not any(r.get("uid") == uid for r in podclaims.reserved_for(claim)):
            raise DraStartError("ResourceClaimNotReserved",
                                f"resourceclaim {ns}/{claim_name} is not reserved for pod {ns}/{meta.get('name')}")
        uid_of[claim_name] = claim["metadata"]["uid"]
        started.refs.append(ClaimRef(ns, claim_name, claim["metadata"]["uid"]))
    results = await kubelet.prepare(started.refs) if started.refs else {}
    for ref in started.refs:
        r = results[ref.uid]
        if r.error:
            raise DraStartError("PrepareResourcesFailed", f"NodePrepareResources for claim {ref.namespace}/"
                                                          f"{ref.name} failed: {r.error}")
    spec = pod.get("spec") or {}
    for ctr in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        ids: list[str] = []
        for c in (ctr.get("resources") or {}).get("claims") or []:
            claim_name = by_pod_claim.get(str(c.get("name")))
            if claim_name is not None:
                ids += [i for i in results[uid_of[claim_name]].cdi_ids if i not in ids]
        if not ids:
            continue
        try:
            env, mounts = cdi.resolve(cdi_root, ids)
        except cdi.CdiError as exc:
            raise DraStartError("CreateContainerError", str(exc)) from None
        started.envs[ctr["name"]] = env
        started.mounts[ctr["name"]] = {m["containerPath"]: m["hostPath"] for m in mounts}
        started.cdi_ids[ctr["name"]] = ids
    return started
