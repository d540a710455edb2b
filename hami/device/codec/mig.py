"""MIG on the wire: the `migProfiles` of the register annotation and `hami.io/vgpu-mig-allocations`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    INT32,
    INT64,
    JSON_KIND,
    UINT32,
    fold_keys,
    go_json_string,
    int_field,
    json_loads,
    require_str,
    str_field,
    type_error,
)
from hami.device.codec.keys import (
    MIG_ALLOCATIONS_ANNOTATION,
)
from hami.device.model import (
    MigPlacement,
    MigProfile,
)


def _encode_mig_profile(p: MigProfile) -> str:
    if p.placements:
        placements = "[" + ",".join(f'{{"start":{x.start},"size":{x.size}}}' for x in p.placements) + "]"
    else:
        placements = "null"  # a Go nil slice
    return (
        f'{{"name":{go_json_string(p.name)},"memoryMB":{p.memory_mb},"core":{p.core},'
        f'"sliceCount":{p.slice_count},"placements":{placements}}}'
    )


def encode_mig_profiles(profiles: Iterable[MigProfile]) -> str:
    """JSON of []MigProfile (HAMi's compact MIG wire format)."""
    return "[" + ",".join(_encode_mig_profile(p) for p in profiles) + "]"


_MIG_FIELDS = ("name", "memoryMB", "core", "sliceCount", "placements")
_MIG_KEYS = frozenset(_MIG_FIELDS)
_PLACEMENT_FIELDS = ("start", "size")


def _decode_placements(raw, field: str, text: str) -> tuple[MigPlacement, ...]:
    if raw is None:
        return ()
    if type(raw) is not list:
        raise type_error(raw, "MigProfile.placements", "[]device.MigPlacement", field, text)
    out = []
    for p in raw:
        if p is None:
            out.append(MigPlacement(0, 0))
            continue
        if type(p) is not dict:
            raise type_error(p, "MigProfile.placements", "device.MigPlacement", field, text)
        if not p.keys() <= {"start", "size"}:
            p = fold_keys(p, _PLACEMENT_FIELDS)
        start = int_field(p, "start", UINT32, "MigPlacement.start", "uint32", field, text)
        size = int_field(p, "size", UINT32, "MigPlacement.size", "uint32", field, text)
        out.append(MigPlacement(start, size))
    return tuple(out)


def decode_mig_profiles(raw, field: str, text: str) -> tuple[MigProfile, ...]:
    if raw is None:
        return ()
    if type(raw) is not list:
        raise type_error(raw, "DeviceInfo.migProfiles", "[]device.MigProfile", field, text)
    out = []
    for m in raw:
        if m is None:
            out.append(MigProfile(""))
            continue
        if type(m) is not dict:
            raise type_error(m, "DeviceInfo.migProfiles", "device.MigProfile", field, text)
        if not m.keys() <= _MIG_KEYS:
            m = fold_keys(m, _MIG_FIELDS)
        out.append(
            MigProfile(
                name=str_field(m, "name", "MigProfile.name", field, text),
                memory_mb=int_field(m, "memoryMB", INT32, "MigProfile.memoryMB", "int32", field, text),
                core=int_field(m, "core", INT32, "MigProfile.core", "int32", field, text),
                slice_count=int_field(m, "sliceCount", UINT32, "MigProfile.sliceCount", "uint32", field, text),
                placements=_decode_placements(m.get("placements"), field, text),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One entry of `hami.io/vgpu-mig-allocations` (Go nvidia.MigAllocation)."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


_MIG_ALLOC_FIELDS = (
    "containerIndex", "deviceIndex", "gpuUUID", "profile", "placement", "migUUID", "gpuInstanceID",
    "computeInstanceID",
)


def encode_mig_allocations(allocations: Iterable[MigAllocation]) -> str:
    """Go json.Marshal([]MigAllocation); "" for none (the scheduler then omits the key)."""
    out = []
    for a in allocations:
        s = (
            f'{{"containerIndex":{a.container_index},"deviceIndex":{a.device_index},'
            f'"gpuUUID":{go_json_string(a.gpu_uuid)},"profile":{go_json_string(a.profile)},'
            f'"placement":{{"start":{a.placement.start},"size":{a.placement.size}}}'
        )
        if a.mig_uuid:
            s += ',"migUUID":' + go_json_string(a.mig_uuid)
        if a.gpu_instance_id is not None:
            s += f',"gpuInstanceID":{a.gpu_instance_id}'
        if a.compute_instance_id is not None:
            s += f',"computeInstanceID":{a.compute_instance_id}'
        out.append(s + "}")
    return "[" + ",".join(out) + "]" if out else ""


def decode_mig_allocations(text: str | None) -> tuple[MigAllocation, ...]:
    """Go DecodeMigAllocations, with its completeness, all-or-none runtime identity and
    duplicate checks."""
    require_str(text, MIG_ALLOCATIONS_ANNOTATION, none_ok=True)
    field = MIG_ALLOCATIONS_ANNOTATION
    if not text:
        return ()
    doc = json_loads(text, field)
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError(
            f"json: cannot unmarshal {JSON_KIND.get(type(doc), 'value')} into Go value of type []nvidia.MigAllocation",
            field=field, text=text,
        )
    out = []
    seen: set[tuple[int, int]] = set()
    for i, obj in enumerate(doc):
        if obj is None:
            obj = {}
        if type(obj) is not dict:
            raise type_error(obj, "MigAllocations", "nvidia.MigAllocation", f"{field}[{i}]", text)
        if not obj.keys() <= set(_MIG_ALLOC_FIELDS):
            obj = fold_keys(obj, _MIG_ALLOC_FIELDS)
        f = f"{field}[{i}]"
        ci = int_field(obj, "containerIndex", INT64, "MigAllocation.containerIndex", "int", f, text)
        di = int_field(obj, "deviceIndex", INT64, "MigAllocation.deviceIndex", "int", f, text)
        gpu = str_field(obj, "gpuUUID", "MigAllocation.gpuUUID", f, text)
        profile = str_field(obj, "profile", "MigAllocation.profile", f, text)
        placement = MigPlacement(0, 0)
        raw = obj.get("placement")
        if raw is not None:
            if type(raw) is not dict:
                raise type_error(raw, "MigAllocation.placement", "device.MigPlacement", f, text)
            placement = _decode_placements([raw], f, text)[0]
        mig_uuid = str_field(obj, "migUUID", "MigAllocation.migUUID", f, text)
        gi = obj.get("gpuInstanceID")
        ci_id = obj.get("computeInstanceID")
        for name, value in (("gpuInstanceID", gi), ("computeInstanceID", ci_id)):
            if value is not None and (type(value) is not int or not UINT32[0] <= value <= UINT32[1]):
                raise type_error(value, f"MigAllocation.{name}", "uint32", f, text)
        if ci < 0 or di < 0 or not gpu or not profile or placement.size == 0:
            raise CodecError(f"MIG allocation {i} is incomplete", field=f, text=text)
        runtime = sum((bool(mig_uuid), gi is not None, ci_id is not None))
        if runtime not in (0, 3):
            raise CodecError(f"MIG allocation {i} has partial runtime identity", field=f, text=text)
        if (ci, di) in seen:
            raise CodecError(f"duplicate MIG allocation for container {ci} device {di}", field=f, text=text)
        seen.add((ci, di))
        out.append(MigAllocation(ci, di, gpu, profile, placement, mig_uuid, gi, ci_id))
    return tuple(out)
