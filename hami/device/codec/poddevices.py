"""Pod device strings (`hami.io/vgpu-devices-to-allocate` / `-allocated`): `UUID,TYPE,MEM,CORES:`
per device, `;` after every container; decoding keeps empty containers.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    INT32,
    go_int,
    go_quote,
    item_offset,
    require_str,
    shared_int,
)
from hami.device.codec.keys import (
    TO_ALLOCATE_ANNOTATION,
    UNSET_CONTAINER_DEVICE_IDX,
)
from hami.device.model import (
    ContainerDevice,
    ContainerDevices,
    PodDevices,
)


def encode_container_devices(devices: Iterable[ContainerDevice]) -> str:
    """One container: `UUID,TYPE,USEDMEM,USEDCORES:` per device (Go EncodeContainerDevices)."""
    return "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in devices)


def encode_container_device_type(devices: Iterable[ContainerDevice], type_: str) -> str:
    """Other vendors' separator-between form of one type (Go EncodeContainerDeviceType)."""
    return ":".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}" for d in devices if d.type == type_)


def encode_pod_devices(pod: Iterable[Iterable[ContainerDevice]]) -> str:
    """The whole pod, every container followed by `;` (Go EncodePodSingleDevice)."""
    return "".join(encode_container_devices(c) + ";" for c in pod)


def _check_device_field(value: str, what: str) -> None:
    if not value or any(c in value for c in ",:;"):
        raise CodecError(
            f"pod device {what} {go_quote(value)} is empty or contains one of , : ;",
            field=f"pod device {what}", text=value,
        )


def encode_pod_devices_checked(pod: Iterable[Iterable[ContainerDevice]]) -> str:
    """encode_pod_devices, refusing values that could not be decoded back (the scheduler's path)."""
    pod = tuple(tuple(c) for c in pod)
    for container in pod:
        for d in container:
            _check_device_field(d.uuid, "uuid")
            _check_device_field(d.type, "type")
            for what, value in (("usedmem", d.usedmem), ("usedcores", d.usedcores)):
                if not 0 <= value <= INT32[1]:
                    raise CodecError(
                        f"pod device {what} {value} is outside 0..2147483647", field=f"pod device {what}",
                        text=str(value),
                    )
    return encode_pod_devices(pod)


def decode_container_devices(text: str, *, field: str = TO_ALLOCATE_ANNOTATION, base: int = 0) -> ContainerDevices:
    """Go DecodeContainerDevices: devices of one container; empty segments are skipped."""
    require_str(text, field)
    if not text:
        return ()
    out = []
    pos = base
    for seg in text.split(":"):
        start = pos
        pos += len(seg) + 1
        if not seg:
            continue
        if "," not in seg:
            raise CodecError(
                f"malformed container device annotation segment: {go_quote(seg)}",
                field=field, text=seg, position=start,
            )
        items = seg.split(",")
        if len(items) < 4:
            raise CodecError(
                "pod annotation format error, missing fields, do not use nodeName in task spec",
                field=field, text=seg, position=start,
            )
        uuid, type_, mem, cores = items[0], items[1], items[2], items[3]
        if not uuid:
            raise CodecError("pod annotation format error, missing device UUID", field=field, text=seg, position=start)
        if not type_:
            raise CodecError("pod annotation format error, missing device type", field=field, text=seg, position=start)
        # Fast path: plain digits that fit int32 (what HAMi writes); anything else is checked
        # the strconv way and reported with its position.
        if len(mem) < 10 and len(cores) < 10 and mem.isdigit() and cores.isdigit() and (mem + cores).isascii():
            out.append(ContainerDevice(uuid, type_, shared_int(int(mem)), int(cores), UNSET_CONTAINER_DEVICE_IDX))
            continue
        nums = []
        for idx, name in ((2, "memory"), (3, "core")):
            value = go_int(items[idx], INT32, "ParseInt")
            where = start + item_offset(items, idx)
            if isinstance(value, str):
                raise CodecError(f"invalid {name} field: {value}", field=field, text=items[idx], position=where)
            if value < 0:
                raise CodecError(
                    f"{name} field must not be negative: {value}", field=field, text=items[idx], position=where
                )
            nums.append(value)
        out.append(ContainerDevice(uuid, type_, nums[0], nums[1], UNSET_CONTAINER_DEVICE_IDX))
    return tuple(out)


def decode_pod_devices(text: str, *, field: str = TO_ALLOCATE_ANNOTATION) -> PodDevices:
    """Go DecodePodDevices for one vendor: split on `;` keeping empty containers, so index i is
    container i in init-then-app order and a trailing `;` yields one extra empty container."""
    require_str(text, field)
    out = []
    pos = 0
    for chunk in text.split(";"):
        out.append(decode_container_devices(chunk, field=field, base=pos) if chunk else ())
        pos += len(chunk) + 1
    return tuple(out)
