"""Allocate, as HAMi v2.10's device plugin answers it. Pure: pod dict in, envs and mounts out.

Spec node.md §2.3-§2.5. For each container request kubelet sends, the first non-empty container
slot of `hami.io/vgpu-devices-to-allocate` is served and blanked; the number of devices must match
the number of IDs kubelet handed over. The I/O layer (deviceplugin.py) creates the cache dir and
`/tmp/vgpulock`, patches the pod with `remaining_text`, and marks success when `done`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hami.agent.register import physical_id
from hami.device import codec
from hami.device.model import MODE_MIG, ContainerDevice, ContainerDevices, PodDevices
from hami.device.nodeconfig import DeviceSettings
from hami.device.sharecontract import VGPU_LOCK_DIR as VGPU_LOCK_DIR  # re-exported: deviceplugin
from hami.device.sharecontract import Mount, share_contract

ANN_TO_ALLOCATE = codec.TO_ALLOCATE_ANNOTATION
ANN_BIND_PHASE = codec.BIND_PHASE_ANNOTATION
ANN_BIND_TIME = codec.BIND_TIME_ANNOTATION
ANN_VGPU_NODE = codec.VGPU_NODE_ANNOTATION
ANN_NODE_LOCK = codec.NODE_LOCK_ANNOTATION
PHASE_ALLOCATING, PHASE_SUCCESS, PHASE_FAILED = "allocating", "success", "failed"



class AllocationError(ValueError):
    """Allocate cannot be answered for this pod; the message is what kubelet shows."""


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    container: str
    devices: ContainerDevices
    envs: Mapping[str, str]
    mounts: tuple[Mount, ...]
    cache_dir: str  # host directory to (re)create, "" in MIG mode
    annotations: Mapping[str, str] = field(default_factory=dict)  # CDI annotations (cdi.py)
    cdi_devices: tuple[str, ...] = ()  # CDI device names for the cdi_devices field (cdi.py)


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    containers: tuple[ContainerAllocation, ...]
    remaining: PodDevices
    remaining_text: str  # new value of hami.io/vgpu-devices-to-allocate
    done: bool  # nothing left to allocate: bind-phase success, release the node lock


def pod_ref(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _annotations(pod: Mapping) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _containers(pod: Mapping) -> list[Mapping]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def parse_go_bool(text: str) -> bool | None:
    """Go strconv.ParseBool (codec.parse_go_bool): None when it does not parse."""
    try:
        return codec.parse_go_bool(text)
    except codec.CodecError:
        return None


def control_disabled(container: Mapping) -> bool:
    """The container sets CUDA_DISABLE_CONTROL to a true value (honoured only where the node allows it)."""
    return any(
        e.get("name") == "CUDA_DISABLE_CONTROL" and parse_go_bool(str(e.get("value", ""))) is True
        for e in container.get("env") or []
    )


def container_response(
    devices: ContainerDevices,
    container: Mapping,
    pod_uid: str,
    settings: DeviceSettings,
    hook_path: str,
    *,
    cache_name: str,
    lib_path: str = "",
    license_exists: bool = False,
) -> ContainerAllocation:
    """Envs and mounts for one container (HAMi server.go Allocate, non-MIG additions)."""
    name = str(container.get("name", ""))
    cache_dir = "" if settings.mode == MODE_MIG else \
        f"{hook_path.rstrip('/') or ''}/vgpu/containers/{pod_uid}_{name}"
    envs, mounts = share_contract(
        devices, settings, hook_path, cache_file=f"{cache_name}.cache", cache_dir=cache_dir,
        lib_path=lib_path, license_exists=license_exists,
        # A tenant's env never drops the preload (its slice stays counted): only the operator's node config may.
        preload=not (settings.allow_disable_control and control_disabled(container)))
    return ContainerAllocation(name, devices, envs, mounts, cache_dir)


def pod_devices_to_allocate(pod: Mapping) -> PodDevices:
    text = _annotations(pod).get(ANN_TO_ALLOCATE)
    if text is None:
        raise AllocationError(f"pod {pod_ref(pod)} has no {ANN_TO_ALLOCATE} annotation (device request not found)")
    try:
        return tuple(codec.decode_pod_devices(text))
    except codec.CodecError as exc:
        raise AllocationError(f"pod {pod_ref(pod)}: bad {ANN_TO_ALLOCATE} annotation {text!r}: {exc}") from None


def plan_allocation(
    pod: Mapping,
    requests: Sequence[Sequence[str]],
    settings: DeviceSettings,
    hook_path: str,
    *,
    new_cache_name: Callable[[], str],
    lib_path: str = "",
    license_exists: bool = False,
) -> AllocationPlan:
    """Serve kubelet's container requests (device ID lists) from the pod's annotation."""
    slots = list(pod_devices_to_allocate(pod))
    containers = _containers(pod)
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    out = []
    for ids in requests:
        if not ids:  # HAMi server.go Allocate guard (TestAllocateRejectsEmptyDeviceIDs)
            raise AllocationError(f"pod {pod_ref(pod)}: invalid allocation request with no devices requested")
        k = next((i for i, slot in enumerate(slots) if slot), None)
        if k is None:
            raise AllocationError(
                f"pod {pod_ref(pod)}: no pending device allocation found: no devices left in {ANN_TO_ALLOCATE} "
                f"for a request of {len(ids)} device(s)"
            )
        devices = slots[k]
        if k >= len(containers):
            raise AllocationError(
                f"pod {pod_ref(pod)}: {ANN_TO_ALLOCATE} has devices for container slot {k}, "
                f"but the pod has {len(containers)} container(s)"
            )
        if len(devices) != len(ids):
            raise AllocationError(
                f"device number not matched: pod {pod_ref(pod)} container "
                f"{containers[k].get('name', '')!r} has {len(devices)} device(s) in {ANN_TO_ALLOCATE}, "
                f"kubelet allocated {len(ids)}"
            )
        if settings.enable_get_preferred_allocation and settings.mode != MODE_MIG:
            devices = tuple(
                ContainerDevice(physical_id(i), d.type, d.usedmem, d.usedcores, d.idx)
                for d, i in zip(devices, ids, strict=True)
            )
        out.append(
            container_response(
                devices, containers[k], uid, settings, hook_path,
                cache_name=new_cache_name(), lib_path=lib_path, license_exists=license_exists,
            )
        )
        slots[k] = ()
    remaining = tuple(slots)
    return AllocationPlan(tuple(out), remaining, codec.encode_pod_devices(remaining), not any(remaining))


# --------------------------------------------------------------------------- finding the pod


def has_devices_left(pod: Mapping) -> bool:
    return bool(_annotations(pod).get(ANN_TO_ALLOCATE, "").strip(";"))


def lock_owner(node: Mapping | None) -> tuple[str, str] | None:
    """(namespace, name) of the pod holding the node lock, None if unlocked or a legacy lock."""
    if not node:
        return None
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(ANN_NODE_LOCK)
    if not text:
        return None
    try:
        lock = codec.decode_node_lock(text)
    except codec.CodecError:
        return None
    if lock.legacy:
        return None
    return lock.namespace, lock.name


def no_lock_holder_message(node_name: str, claimants: Sequence[Mapping]) -> str:
    """Why Allocate served nothing: no pod holds the node lock (only its holder is ever served)."""
    text = (f"no binding pod found on node {node_name}: Allocate serves only the pod holding the node lock "
            f"{ANN_NODE_LOCK}, and none does")
    if claimants:
        text += (f"; pod {', '.join(pod_ref(p) for p in claimants[:5])} claims {ANN_BIND_PHASE}=allocating here "
                 f"without it (a placement hami's scheduler did not make)")
    return text


def unlocked_claim_message(node_name: str, pod: Mapping) -> str:
    return (f"Allocate on node {node_name} refused: this pod claims {ANN_BIND_PHASE}=allocating but does not hold "
            f"the node lock {ANN_NODE_LOCK}; only pods placed by hami's scheduler are served")


def age_key(pod: Mapping) -> tuple:
    meta = pod.get("metadata") or {}
    bt = (meta.get("annotations") or {}).get(ANN_BIND_TIME, "")
    try:  # strconv.ParseInt(bt, 10, 64), the codec's one reader (int() would take " 5" and "1_0")
        bind_time = codec.decode_unix_seconds(bt, field=ANN_BIND_TIME)
    except codec.CodecError:
        bind_time = 1 << 62
    return (bind_time, meta.get("creationTimestamp") or "", meta.get("namespace", ""), meta.get("name", ""))


def allocating_pods(pods: Iterable[Mapping], node_name: str) -> list[Mapping]:
    """Pods on the node waiting for Allocate, oldest bind first."""
    out = []
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") not in (None, "", node_name):
            continue
        anns = _annotations(p)
        if anns.get(ANN_BIND_PHASE) not in (PHASE_ALLOCATING, PHASE_SUCCESS) or not has_devices_left(p):
            continue  # HAMi GetPendingPod accepts both phases (multi-container pods)
        if anns.get(ANN_VGPU_NODE) != node_name:
            continue  # HAMi GetPendingPod: hami.io/vgpu-node must name this node
        if (p.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if (p.get("status") or {}).get("phase") not in (None, "", "Pending"):
            continue  # HAMi: Pending only (e.g. never a pod kubelet rejected after an Allocate that died)
        if ANN_BIND_TIME not in anns:
            continue  # HAMi GetPendingPod: bind-time must be present
        out.append(p)
    out.sort(key=age_key)
    return out
