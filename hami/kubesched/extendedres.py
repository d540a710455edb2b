"""Extended resources backed by DRA (KEP-5004, DRAExtendedResource: beta and on in 1.36), pure.

A DeviceClass maps an extended resource to itself with `spec.extendedResourceName` (and every class
answers to its implicit name `deviceclass.resource.kubernetes.io/<class>`). A pod asking such a
resource on a node whose allocatable does not list it (no device plugin serves it there) is served
by DRA: kube-scheduler's DynamicResources plugin builds a claim for the pod, allocates it with the
pod's other claims, and at PreBind creates it (`generateName: <pod>-extended-resources-`, annotated
`resource.kubernetes.io/extended-resource-claim: "true"`, owned by the pod) and records it in the
pod's `status.extendedResourceClaimStatus` with which container's resource maps to which request.

The claim's requests are upstream's: one `ExactCount` request per container and resource, named
`container-<i>-request-<j>` (i: the container's index in initContainers + containers; j: the
resource's index in the container's sorted resource names), sorted by name. Init containers that
are not sidecars run one at a time, so only the largest of their requests for a resource is kept
and every such container maps to it. Not modelled: upstream's reuse of a later long-lived
container's request by an earlier init container (an init container here always gets its own
request or shares the largest init request), pod-level resources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

__all__ = ("ANNOTATION", "CLASS_PREFIX", "class_mapping", "find_claim", "needs_dra", "pod_wants", "special_claim")


def class_mapping(classes: Iterable[Mapping]) -> dict[str, str]:
    """extended resource name -> DeviceClass name (explicit names win over implicit ones; of two
    classes naming one resource, the first by name, as upstream's cache keeps one)."""
    ordered = sorted(classes, key=lambda c: str((c.get("metadata") or {}).get("name", "")))
    implicit: dict[str, str] = {}
    explicit: dict[str, str] = {}
    for c in ordered:
        name = str((c.get("metadata") or {}).get("name", ""))
        if not name:
            continue
        implicit[CLASS_PREFIX + name] = name
        ext = (c.get("spec") or {}).get("extendedResourceName")
        if isinstance(ext, str) and ext:
            explicit.setdefault(ext, name)
    return {**implicit, **explicit}


def _amount(ctr: Mapping, resource: str) -> int:
    res = ctr.get("resources") or {}
    raw = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
    try:
        return max(int(str(raw)), 0) if raw is not None else 0
    except ValueError:
        return 0  # extended resources are whole numbers; the API server refuses others


def _containers(pod: Mapping) -> list[tuple[Mapping, bool]]:
    """(container, long-lived) for initContainers then containers."""
    spec = pod.get("spec") or {}
    out = [(c, c.get("restartPolicy") == "Always") for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    return out + [(c, True) for c in spec.get("containers") or [] if isinstance(c, Mapping)]


def pod_wants(pod: Mapping, mapping: Mapping[str, str]) -> dict[str, int]:
    """Resources the pod asks for that a DeviceClass maps: the pod's effective request of each."""
    out: dict[str, int] = {}
    for resource in mapping:
        long_lived = sum(_amount(c, resource) for c, long in _containers(pod) if long)
        short = max((_amount(c, resource) for c, long in _containers(pod) if not long), default=0)
        if max(long_lived, short) > 0:
            out[resource] = max(long_lived, short)
    return out


def needs_dra(wants: Mapping[str, int], node: Mapping) -> set[str]:
    """The wanted resources this node's allocatable does not list: DRA serves them there."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {r for r in wants if str(alloc.get(r, "0")) in ("0", "")}


def special_claim(pod: Mapping, resources: Iterable[str], mapping: Mapping[str, str],
                  name: str) -> tuple[dict, list[dict]]:
    """The claim kube-scheduler builds for `resources` (named `name` until PreBind creates it), and
    the container -> request mappings for `status.extendedResourceClaimStatus`."""
    meta = pod.get("metadata") or {}
    requests: list[dict] = []
    mappings: list[dict] = []
    containers = _containers(pod)
    for resource in sorted(resources):
        short_best: dict | None = None
        short_maps: list[dict] = []
        for i, (ctr, long) in enumerate(containers):
            count = _amount(ctr, resource)
            if count <= 0:
                continue
            res = ctr.get("resources") or {}
            keys = sorted({*(res.get("requests") or {}), *(res.get("limits") or {})})
            req = {"name": f"container-{i}-request-{keys.index(resource)}",
                   "exactly": {"deviceClassName": mapping[resource], "allocationMode": "ExactCount",
                               "count": count}}
            entry = {"containerName": ctr.get("name", ""), "resourceName": resource, "requestName": req["name"]}
            if long:
                requests.append(req)
                mappings.append(entry)
            else:
                short_maps.append(entry)
                if short_best is None or short_best["exactly"]["count"] < count:
                    short_best = req
        if short_best is not None:
            requests.append(short_best)
            mappings.extend({**m, "requestName": short_best["name"]} for m in short_maps)
    requests.sort(key=lambda r: r["name"])
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": meta.get("namespace", ""),
                     "generateName": f"{meta.get('name', '')}-extended-resources-",
                     "annotations": {ANNOTATION: "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""),
                                          "uid": meta.get("uid", ""), "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"devices": {"requests": requests}},
    }
    return claim, mappings


def find_claim(pod: Mapping, claims: Iterable[Mapping]) -> Mapping | None:
    """The pod's extended-resource claim already in the API (annotated, controlled by the pod)."""
    uid = (pod.get("metadata") or {}).get("uid")
    for c in claims:
        meta = c.get("metadata") or {}
        if (meta.get("annotations") or {}).get(ANNOTATION) == "true" and any(
                o.get("controller") is True and o.get("uid") == uid for o in meta.get("ownerReferences") or []):
            return c
    return None
