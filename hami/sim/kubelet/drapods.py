"""Starting a pod's containers through DRA on a simulated node (the kubelet's DRA half).

Before the containers start: read each of the pod's claims (it must be reserved for this pod),
`NodePrepareResources` them over the plugin's gRPC socket (`hami.sim.kubelet.drakubelet`), then give
every container the CDI edits of the devices of the claims it references in
`resources.claims` (`hami.dra.cdi.resolve`: env and mounts, as a CDI runtime applies them).
On the pod's deletion the runner unprepares the same claims (`NodeUnprepareResources`).
`resources_status` is kubelet's `containerStatuses[].allocatedResourcesStatus` for the devices
each container's claims hold, from the plugin's health stream (KEP-4680).
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
    # pod claim name -> (pool, device, request names) the plugin prepared for it
    claim_devices: dict[str, list[tuple[str, str, tuple[str, ...]]]] = field(default_factory=dict)


# The pod claim name kubelet files the extended-resource claim under (KEP-5004: it has no entry in
# spec.resourceClaims; pod.status.extendedResourceClaimStatus names it and maps containers to requests).
EXTENDED_POD_CLAIM = "extended-resources"


def _claim_of_pod_claim(pod: Mapping) -> dict[str, str]:
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = {}
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = pc.get("resourceClaimName") or generated.get(pc.get("name"))
        if name:
            out[str(pc.get("name"))] = str(name)
    ext = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if isinstance(ext, Mapping) and ext.get("resourceClaimName"):
        out[EXTENDED_POD_CLAIM] = str(ext["resourceClaimName"])
    return out


def _extended_users(pod: Mapping) -> set[str]:
    """Containers the extended-resource claim serves (its request mappings)."""
    ext = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    return {str(m.get("containerName")) for m in (ext.get("requestMappings") or [] if isinstance(ext, Mapping) else [])
            if isinstance(m, Mapping)}


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
    for pod_claim, claim_name in by_pod_claim.items():
        if claim_name in uid_of:
            started.claim_devices[pod_claim] = list(results[uid_of[claim_name]].devices)
    spec = pod.get("spec") or {}
    extended_users = _extended_users(pod)
    for ctr in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        ids: list[str] = []
        pod_claims = [str(c.get("name")) for c in (ctr.get("resources") or {}).get("claims") or []]
        if ctr.get("name") in extended_users:
            pod_claims.append(EXTENDED_POD_CLAIM)
        for pod_claim in pod_claims:
            claim_name = by_pod_claim.get(pod_claim)
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


def resources_status(pod: Mapping, claim_devices: Mapping[str, list[tuple[str, str, tuple[str, ...]]]],
                     driver: str, health: Mapping[tuple[str, str], tuple[str, str]]) -> dict[str, list[dict]]:
    """container -> its `allocatedResourcesStatus`: one entry per claim it references (`claim:<pod
    claim>`, or `claim:<pod claim>/<request>` when it names a request), each device of the claim
    (of that request) as `<driver>/<pool>/<device>` with its health (Unknown until the plugin says)."""
    out: dict[str, list[dict]] = {}
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        entries = []
        for c in (ctr.get("resources") or {}).get("claims") or []:
            name, request = str(c.get("name")), c.get("request")
            devices = [d for d in claim_devices.get(name, ()) if not request or request in d[2]]
            if not devices:
                continue
            resources = []
            for pool, device, _ in devices:
                state, message = health.get((pool, device), ("Unknown", ""))
                r = {"resourceID": f"{driver}/{pool}/{device}", "health": state}
                if message:
                    r["message"] = message
                resources.append(r)
            entries.append({"name": f"claim:{name}/{request}" if request else f"claim:{name}",
                            "resources": resources})
        if entries:
            out[str(ctr.get("name"))] = entries
    return out
