"""The pod annotations that carry an allocation, for every vendor of the table (pure, no I/O).

HAMi keeps one pod device string per vendor (`PodDevices` is a map vendor -> containers): NVIDIA's
under `hami.io/vgpu-devices-to-allocate` / `-allocated`, every other vendor's under its own keys
(`allocation.toAllocate` / `allocation.allocated` in the table), each listing every container
(init first) with only that vendor's devices. Some vendors add their own annotation (each
vendor's `PatchAnnotations`):

* Ascend: `huawei.com/<commonWord>` = each device's vNPU template (none for a whole card), memory
  and cores (codec.ascend; HAMi v2.10.0 PR #2035), no template when the pod runs
  `huawei.com/vnpu-mode: hami-core`, and
  `predicate-time` = unix seconds;
* AWS Neuron: `AWS_NEURON_IDS` (device indexes or core ids), `NEURON_RESOURCE_TYPE`,
  `NEURON_ALLOC_TIME`, `NEURON_ALLOCATED`, `aws.amazon.com/predicate-node` (codec.awsneuron);
* Kunlunxin: `BAIDU_COM_DEVICE_IDX` (card indexes);
* MetaX sGPU: `metax-tech.com/gpu-devices-allocated` (JSON per container) and
  `metax-tech.com/predicate-time`;
* Cambricon: `CAMBRICON_DSMLU_PROFILE` = `<idx>_<cores>_<mem/256>` of the first device and
  `CAMBRICON_DSMLU_ASSIGNED` = `false` (codec.cambricon).

`allocation_annotations(devices, table, now)` builds them; for a pod of NVIDIA devices only the
result is exactly the two NVIDIA keys. `allocated_devices(annotations, table)` reads them back
(one PodDevices, vendors merged per container) for usage accounting.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from hami.device import codec
from hami.device.codec import ascend as ascend_codec
from hami.device.codec import awsneuron as neuron_codec
from hami.device.codec import cambricon as cambricon_codec
from hami.device.codec import enflame as enflame_codec
from hami.device.codec import kunlunxin as kunlun_codec
from hami.device.codec import metax as metax_codec
from hami.device.model import NVIDIA, ContainerDevice, PodDevices
from hami.device.request import quantity_as_int64
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import Vendor, VendorTable

VNPU_MODE = "huawei.com/vnpu-mode"  # Ascend: `hami-core` runs HAMi-core soft partitioning


def vendors_of(devices: PodDevices) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for ctr in devices:
        for cd in ctr:
            seen.setdefault(cd.type, None)
    return tuple(seen)


def only(devices: PodDevices, vendor: str) -> PodDevices:
    """The pod's containers with only `vendor`'s devices (every container kept)."""
    return tuple(tuple(cd for cd in ctr if cd.type == vendor) for ctr in devices)


def allocation_annotations(devices: PodDevices, table: VendorTable | None, now: float,
                           node: str = "", pod: Mapping | None = None, drs=None, node_usage=None) -> dict[str, str]:
    """`drs`: the node's Enflame DRS profiles and cards (codec.enflame.DrsNode), for its annotations;
    `node_usage`: the node's devices by id (`.by_id[uuid].type`), for AMD's product types."""
    vendors = vendors_of(devices)
    if not vendors or vendors == (NVIDIA,) or table is None:
        text = codec.encode_pod_devices(devices)
        return {codec.TO_ALLOCATE_ANNOTATION: text, codec.ALLOCATED_ANNOTATION: text}
    out: dict[str, str] = {}
    for name in vendors:
        part = only(devices, name)
        v = table.get(name)
        if v is not None and HOOKS[v.hook].card_type_in_string and node_usage is not None:
            # HAMi's AMD Fit keeps the card's registered product type in the device string (its
            # design doc 4.2: "The type field uses device product name"); the vendor stays AMD here.
            part = tuple(tuple(_with_card_type(cd, node_usage) for cd in ctr) for ctr in part)
        text = codec.encode_pod_devices(part)
        if name == NVIDIA or v is None or HOOKS[v.hook].nvidia:
            out[codec.TO_ALLOCATE_ANNOTATION] = text
            out[codec.ALLOCATED_ANNOTATION] = text
            continue
        if v.to_allocate_key:
            out[v.to_allocate_key] = text
        out[v.allocated_key] = text
        extras = OWN_EXTRAS.get(v.hook)
        if extras is not None:
            out.update(extras(v, part, now, node, pod or {}, drs))
    return out


def allocation_keys(table: VendorTable | None) -> frozenset[str]:
    """Every annotation key `allocation_annotations` writes a device string or vNPU template
    under, for every vendor of the table (not the vendors' timestamps and hints)."""
    keys = {codec.TO_ALLOCATE_ANNOTATION, codec.ALLOCATED_ANNOTATION, codec.MIG_ALLOCATIONS_ANNOTATION}
    for v in (table.vendors if table is not None else ()):
        keys.update(k for k in (v.to_allocate_key, v.allocated_key, v.allocation_key) if k)
    return frozenset(keys)


def _with_card_type(cd: ContainerDevice, node_usage) -> ContainerDevice:
    card = node_usage.by_id.get(cd.uuid)
    if card is None or not card.type or card.type == cd.type:
        return cd
    return ContainerDevice(cd.uuid, card.type, cd.usedmem, cd.usedcores, cd.idx)


def _neuron(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    return _neuron_extras(v, part, now, node, pod)


def _metax(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    return {metax_codec.ALLOCATED: metax_codec.encode_allocated(part),
            metax_codec.PREDICATE_TIME: str(int(now) * 1_000_000_000 + int(now % 1 * 1e9))}


def _kunlunxin(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    if v.memory_resource:  # vXPU slices: the device string says it all
        return {}
    last = [ctr for ctr in part if ctr]  # whole XPUs: the last container's card indexes
    return {kunlun_codec.DEVICE_IDX: ",".join(str(cd.idx) for cd in last[-1])} if last else {}


def _mthreads(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    # The card indexes of the last container with devices, the placement time in ns and node.
    last = [ctr for ctr in part if ctr]
    if not last:
        return {}
    return {"mthreads.com/gpu-index": ",".join(str(cd.idx) for cd in last[-1]),
            "mthreads.com/predicate-time": str(int(now) * 1_000_000_000 + int(now % 1 * 1e9)),
            "mthreads.com/predicate-node": node}


def _ascend(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    flat = [cd for ctr in part for cd in ctr]
    pod_annotations = (pod.get("metadata") or {}).get("annotations") or {}
    extras = {"predicate-time": codec.encode_unix_seconds(now)}
    if v.allocation_key and pod_annotations.get(VNPU_MODE) == "hami-core":
        # HAMi-core soft partitioning: each NPU's memory and cores instead of a template.
        extras[v.allocation_key] = ascend_codec.encode_runtime_info(
            (cd.uuid, "", cd.usedmem, cd.usedcores) for cd in flat)
    elif v.allocation_key:
        # v2.10.0 (PR #2035): the template name and the device's memory and cores too.
        extras[v.allocation_key] = ascend_codec.encode_runtime_info(
            (cd.uuid, v.trim_memory(cd.usedmem)[1], cd.usedmem, cd.usedcores) for cd in flat)
    return extras


def _cambricon(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    flat = [cd for ctr in part for cd in ctr]
    if not flat:
        return {}
    first = flat[0]
    return {cambricon_codec.DSMLU_ASSIGNED: "false",
            cambricon_codec.DSMLU_PROFILE: cambricon_codec.encode_dsmlu_profile(
                first.idx, first.usedcores, first.usedmem)}


def _enflame(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping, drs) -> dict[str, str]:
    return _drs_extras(part, now, pod, drs)


def _drs_extras(part: PodDevices, now: float, pod: Mapping, drs) -> dict[str, str]:
    """Enflame DRS's PatchAnnotations (pkg/device/enflame/device.go at v2.10.0): not yet assigned,
    the time in ns, per container with a card (by name, init containers first) its request in
    slices and the profile's name and id (`assigned-containers`, Go's json.Marshal of the map), and
    the first such container's card index, minor and slice count."""
    spec = pod.get("spec") or {}
    names = [(c or {}).get("name", "") if isinstance(c, Mapping) else ""
             for c in list(spec.get("initContainers") or ()) + list(spec.get("containers") or ())]
    out = {enflame_codec.ASSIGNED: "false",
           enflame_codec.ASSIGNED_TIME: str(int(now) * 1_000_000_000 + int(now % 1 * 1e9))}
    assigned: dict[str, str] = {}
    for i, ctr in enumerate(part):
        if not ctr:
            continue
        chosen = ctr[0]
        profile = enflame_codec.profile_of(drs, chosen.usedmem, chosen.usedcores)
        size = profile.size if profile is not None and profile.size > 0 else 1
        name = names[i] if i < len(names) and names[i] else f"container-{i}"
        fields = [f'"allocated":false,"request":{min(size, (1 << 31) - 1)}']
        if profile is not None and profile.id:
            fields.append('"profileID":' + codec.go_json_string(profile.id))
        if profile is not None and profile.name:
            fields.append('"profileName":' + codec.go_json_string(profile.name))
        assigned[name] = "{" + ",".join(fields) + "}"
        index, minor = drs.cards.get(chosen.uuid, ("", "")) if drs is not None else ("", "")
        if index and enflame_codec.ASSIGNED_INDEX not in out:
            out[enflame_codec.ASSIGNED_INDEX] = out[enflame_codec.ASSIGNED_ID] = index
        if minor and enflame_codec.ASSIGNED_MINOR not in out:
            out[enflame_codec.ASSIGNED_MINOR] = minor
        out.setdefault(enflame_codec.REQUEST_SIZE, str(size))
    if assigned:
        out[enflame_codec.ASSIGNED_CONTAINERS] = "{" + ",".join(
            codec.go_json_string(k) + ":" + assigned[k] for k in sorted(assigned)) + "}"
    return out


def _neuron_extras(v: Vendor, part: PodDevices, now: float, node: str, pod: Mapping) -> dict[str, str]:
    """AWS Neuron's PatchAnnotations: the device indexes of containers that asked for devices, the
    core ids (`coresPerCard * index + bit`) of those that asked for cores, over all containers."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("initContainers") or ()) + list(spec.get("containers") or ())
    ids: list[str] = []
    out: dict[str, str] = {}
    for i, ctr_devs in enumerate(part):
        if not ctr_devs or i >= len(containers):
            continue
        limits = ((containers[i] or {}).get("resources") or {}).get("limits") or {}
        whole = v.count_resource in limits and (quantity_as_int64(limits[v.count_resource]) or 0) > 0
        for cd in ctr_devs:
            if whole:
                ids.append(str(cd.idx))
                continue
            cores = neuron_codec.core_ids(cd.idx, cd.usedcores, v.cores_per_card)
            if cores:
                out[neuron_codec.RESOURCE_TYPE] = v.core_resource
            ids.extend(str(c) for c in cores)
    if ids:
        out[neuron_codec.ASSIGNED_IDS] = ",".join(ids)
        out[neuron_codec.ALLOC_TIME] = str(int(now) * 1_000_000_000 + int(now % 1 * 1e9))
        out[neuron_codec.ALLOCATED] = "false"
        out[neuron_codec.PREDICATE_NODE] = node
    return out


# A hook's own allocation annotations beside its device string (HAMi's PatchAnnotations): (row, the
# pod's devices of the row, now, node, pod, the node's DRS profiles) -> annotations. Others add none.
OWN_EXTRAS = MappingProxyType({
    "awsneuron": _neuron,
    "metax": _metax,
    "kunlunxin": _kunlunxin,
    "mthreads": _mthreads,
    "ascend": _ascend,
    "cambricon": _cambricon,
    "enflame": _enflame,
})


def takes_node_lock(devices: PodDevices, table: VendorTable | None) -> bool:
    """Whether binding these devices takes `hami.io/mutex.lock`, as each vendor's LockNode does:
    NVIDIA, Ascend, Hygon and Iluvatar use it (their plugins release it after Allocate); Mthreads
    takes none and Cambricon its own `cambricon.com/dsmlu.lock`, so a lock taken for them would
    never be released. Unknown types lock (the safe side)."""
    for ctr in devices:
        for cd in ctr:
            v = table.get(cd.type) if table is not None else None
            if v is None or v.node_lock_key == codec.NODE_LOCK_ANNOTATION:
                return True
    return False


def own_node_locks(devices: PodDevices, table: VendorTable | None) -> tuple[str, ...]:
    """The vendors' own node-lock annotations these devices need (Cambricon's
    `cambricon.com/dsmlu.lock`), sorted (HAMi locks vendors in sorted order)."""
    keys = set()
    for ctr in devices:
        for cd in ctr:
            v = table.get(cd.type) if table is not None else None
            if v is not None and v.node_lock_key and v.node_lock_key != codec.NODE_LOCK_ANNOTATION:
                keys.add(v.node_lock_key)
    return tuple(sorted(keys))


def allocated_devices(annotations: Mapping[str, str], table: VendorTable | None) -> PodDevices:
    """Every vendor's `allocated` annotation of a pod, merged per container (NVIDIA's first).
    Raises CodecError naming the key of a string that does not decode."""
    text = annotations.get(codec.ALLOCATED_ANNOTATION, "")
    merged: list[tuple[ContainerDevice, ...]] = list(codec.decode_pod_devices(text)) if text else []
    if table is None:
        return tuple(merged)
    for key, vendor in table.other_allocated:
        other = annotations.get(key)
        if not other:
            continue
        part = codec.decode_pod_devices(other, field=key)
        if HOOKS[vendor.hook].card_type_in_string:  # product types in the string: the devices are the row's
            part = tuple(tuple(cd if cd.type == vendor.name else ContainerDevice(cd.uuid, vendor.name, cd.usedmem,
                                                                              cd.usedcores, cd.idx) for cd in ctr)
                         for ctr in part)
        for i, ctr in enumerate(part):
            if i < len(merged):
                merged[i] = merged[i] + ctr
            else:
                merged.append(ctr)
    return tuple(merged)
