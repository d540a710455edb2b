"""MetaX sGPU wire formats (pkg/device/metax protocol.go).

The sGPU device plugin registers `metax-tech.com/node-gpu-devices`: Go `json.Marshal` of
`[]MetaxSDeviceInfo` (`uuid`, `bdf`, `model`, `totalDevCount`, `totalCompute`, `totalVRam`,
`available*`, `numa`, `healthy`, `qosPolicy`, `linkZone`; all but `uuid` omitempty). HAMi's
device i: id = uuid, index = i, count = totalDevCount, devmem = totalVRam (MiB), devcore =
totalCompute, numa, health = healthy; the card's current QoS policy (`best-effort`,
`fixed-share`, `burst-share`, or none) is carried as the device's mode, its MetaLink zone
(`linkZone`, 0: none) as custom_info `{"LinkZone":n}` (`link_zones` reads it back).

At allocation the scheduler writes `metax-tech.com/gpu-devices-allocated`: `[][]{uuid, compute,
vRam}` per container (omitempty numbers), and `metax-tech.com/predicate-time` (unix ns).
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import go_json_string, json_loads
from hami.device.model import ContainerDevice, DeviceInfo

REGISTER = "metax-tech.com/node-gpu-devices"
ALLOCATED = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME = "metax-tech.com/predicate-time"
SGPU = "Metax-SGPU"
LINK_ZONE = "LinkZone"  # the custom_info key HAMi's convertMetaxSDeviceToHAMIDevice uses
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _int32(obj: dict, key: str, i: int, text: str, field: str) -> int:
    v = obj.get(key)
    if v is None:
        return 0
    if type(v) is not int or not _INT32[0] <= v <= _INT32[1]:
        raise CodecError(f"json: cannot unmarshal {v!r} into Go struct field MetaxSDeviceInfo.{key} of type int32",
                         field=f"{field}[{i}].{key}", text=text)
    return v


def decode_sdevices(text: str, *, field: str = REGISTER, vendor: str = SGPU) -> tuple[DeviceInfo, ...]:
    """The register annotation as HAMi's devices; `null` is no device."""
    doc = json_loads(text, field)
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError("json: cannot unmarshal into Go value of type []*metax.MetaxSDeviceInfo", field=field,
                         text=text)
    out = []
    for i, obj in enumerate(doc):
        if type(obj) is not dict:
            raise CodecError(f"sdevice entry {i} is not an object", field=f"{field}[{i}]", text=text)
        strs = {}
        for key in ("uuid", "qosPolicy"):
            v = obj.get(key)
            if v is not None and type(v) is not str:
                raise CodecError(f"json: cannot unmarshal {v!r} into Go struct field MetaxSDeviceInfo.{key} of "
                                 "type string", field=f"{field}[{i}].{key}", text=text)
            strs[key] = v or ""
        zone = _int32(obj, "linkZone", i, text, field)
        healthy = obj.get("healthy")
        if healthy is not None and type(healthy) is not bool:
            raise CodecError(f"json: cannot unmarshal {healthy!r} into Go struct field MetaxSDeviceInfo.healthy of "
                             "type bool", field=f"{field}[{i}].healthy", text=text)
        out.append(DeviceInfo(
            id=strs["uuid"], count=_int32(obj, "totalDevCount", i, text, field),
            devmem=_int32(obj, "totalVRam", i, text, field), devcore=_int32(obj, "totalCompute", i, text, field),
            type=vendor, index=i, numa=_int32(obj, "numa", i, text, field), mode=strs["qosPolicy"],
            health=bool(healthy), vendor=vendor, custom_info=f'{{"{LINK_ZONE}":{zone}}}' if zone else ""))
    return tuple(out)


def link_zones(devices: Iterable[DeviceInfo]) -> dict[str, int] | None:
    """{device id: MetaLink zone} for the devices in a zone (None when none is)."""
    out = {}
    for d in devices:
        if d.custom_info and LINK_ZONE in d.custom_info:
            zone = orjson.loads(d.custom_info).get(LINK_ZONE)
            if type(zone) is int and zone:
                out[d.id] = zone
    return out or None


def encode_sdevices(devices: Iterable[DeviceInfo]) -> str:
    """The fields HAMi reads, as the plugin's Go `json.Marshal` writes them (omitempty)."""
    parts = []
    for d in devices:
        fields = ['"uuid":' + go_json_string(d.id)]
        for key, value in (("totalDevCount", d.count), ("totalCompute", d.devcore), ("totalVRam", d.devmem),
                           ("numa", d.numa)):
            if value:
                fields.append(f'"{key}":{value}')
        if d.health:
            fields.append('"healthy":true')
        if d.mode:
            fields.append('"qosPolicy":' + go_json_string(d.mode))
        zone = link_zones((d,))
        if zone:
            fields.append(f'"linkZone":{zone[d.id]}')
        parts.append("{" + ",".join(fields) + "}")
    return "[" + ",".join(parts) + "]"


def encode_allocated(containers: Iterable[Iterable[ContainerDevice]]) -> str:
    """`metax-tech.com/gpu-devices-allocated`: per container `{uuid, compute, vRam}` (omitempty)."""
    ctrs = []
    for ctr in containers:
        devs = []
        for cd in ctr:
            fields = ['"uuid":' + go_json_string(cd.uuid)]
            if cd.usedcores:
                fields.append(f'"compute":{cd.usedcores}')
            if cd.usedmem:
                fields.append(f'"vRam":{cd.usedmem}')
            devs.append("{" + ",".join(fields) + "}")
        ctrs.append("[" + ",".join(devs) + "]")
    return "[" + ",".join(ctrs) + "]"
