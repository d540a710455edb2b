"""`hami.io/node-nvidia-register`: the JSON form HAMi >= v2.8 writes (Go `encoding/json` of
`[]DeviceInfo`, byte for byte) and the legacy colon form, plus a memo for the scheduler.

A vendor whose register format differs gets its own module beside this one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields as dataclass_fields
from sys import intern

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    GO_BOOLS,
    INT32,
    INT64,
    JSON_KIND,
    UINT64,
    fold_keys,
    go_int,
    go_json_string,
    go_json_value,
    go_quote,
    int_field,
    item_offset,
    json_loads,
    require_str,
    shared_int,
    str_field,
    type_error,
)
from hami.device.codec.keys import (
    REGISTER_ANNOTATION,
)
from hami.device.codec.mig import decode_mig_profiles, encode_mig_profiles
from hami.device.model import (
    NVIDIA,
    DeviceInfo,
)


def _encode_device_json(d: DeviceInfo) -> str:
    parts = []
    if d.id:
        parts.append('"id":' + go_json_string(d.id))
    if d.index:
        parts.append(f'"index":{d.index}')
    if d.count:
        parts.append(f'"count":{d.count}')
    if d.devmem:
        parts.append(f'"devmem":{d.devmem}')
    if d.devcore:
        parts.append(f'"devcore":{d.devcore}')
    if d.type:
        parts.append('"type":' + go_json_string(d.type))
    if d.numa:
        parts.append(f'"numa":{d.numa}')
    if d.mode:
        parts.append('"mode":' + go_json_string(d.mode))
    if d.mig_profiles:
        parts.append('"migProfiles":' + encode_mig_profiles(d.mig_profiles))
    if d.health:
        parts.append('"health":true')
    if d.custom_info:  # a vendor plugin's json.Marshal keeps it (HAMi's MarshalNodeDevices drops it)
        parts.append('"custominfo":' + d.custom_info)
    return "{" + ",".join(parts) + "}"


def encode_node_devices(devices: Iterable[DeviceInfo]) -> str:
    """`hami.io/node-nvidia-register` as HAMi >= v2.8 writes it (Go MarshalNodeDevices)."""
    devices = tuple(devices)
    for d in devices:
        if d.index < 0:
            raise CodecError(
                f"index must not be negative: {d.index}", field=REGISTER_ANNOTATION + ".index", text=str(d.index)
            )
    return "[" + ",".join(_encode_device_json(d) for d in devices) + "]"


def encode_node_devices_legacy(devices: Iterable[DeviceInfo]) -> str:
    """The pre-v2.8 colon form, 9 fields (Go EncodeNodeDevices)."""
    out = []
    for d in devices:
        health = "true" if d.health else "false"
        out.append(f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},{health},{d.index},{d.mode}:")
    return "".join(out)


_DEV_FIELDS = (
    "id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "migProfiles",
    "migtemplate", "health", "devicevendor", "custominfo",
)
_DEV_KEYS = frozenset(_DEV_FIELDS)
# DeviceInfo is a frozen slots dataclass; its generated __init__ costs ~1 us. The hot path fills
# the slots through their descriptors instead (same object, ~35% cheaper); the field list is
# checked here so a change to the model fails at import, not silently.
_DEVICE_FIELDS = ("id", "count", "devmem", "devcore", "type", "index", "numa", "mode", "health", "mig_profiles",
                  "vendor", "custom_info")
if tuple(f.name for f in dataclass_fields(DeviceInfo)) != _DEVICE_FIELDS:  # pragma: no cover
    raise RuntimeError("hami.device.model.DeviceInfo fields changed: update codec.register._DEVICE_FIELDS")
_DEVICE_SETTERS = tuple(DeviceInfo.__dict__[name].__set__ for name in _DEVICE_FIELDS)
_HOT_KEYS = frozenset(("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health"))


def _decode_device_any(obj, i: int, text: str) -> DeviceInfo:
    """One device with every field checked on its own: nulls mean zero, keys match
    case-insensitively, a wrong type or range raises the error Go's decoder gives for that field."""
    field = f"{REGISTER_ANNOTATION}[{i}]"
    if type(obj) is not dict:
        raise CodecError(
            f"device entry {i} is {JSON_KIND.get(type(obj), 'null')}, expected an object", field=field, text=text
        )
    if not obj.keys() <= _DEV_KEYS:
        obj = fold_keys(obj, _DEV_FIELDS)
    ints = {}
    for key, bounds, go_type in (
        ("index", UINT64, "uint"), ("count", INT32, "int32"), ("devmem", INT32, "int32"),
        ("devcore", INT32, "int32"), ("numa", INT64, "int"),
    ):
        ints[key] = int_field(obj, key, bounds, f"DeviceInfo.{key}", go_type, f"{field}.{key}", text)
    strs = {key: str_field(obj, key, f"DeviceInfo.{key}", f"{field}.{key}", text)
            for key in ("id", "type", "mode", "devicevendor")}
    health = obj.get("health")
    if health is None:
        health = False
    elif type(health) is not bool:
        raise type_error(health, "DeviceInfo.health", "bool", f"{field}.health", text)
    for key, kind, go_type in (("custominfo", dict, "map[string]interface {}"),
                               ("migtemplate", list, "[]device.Geometry")):
        value = obj.get(key)
        if value is not None and type(value) is not kind:
            raise type_error(value, f"DeviceInfo.{key}", go_type, f"{field}.{key}", text)
    profiles = decode_mig_profiles(obj.get("migProfiles"), f"{field}.migProfiles", text)
    custom = obj.get("custominfo")
    return DeviceInfo(
        strs["id"], ints["count"], ints["devmem"], ints["devcore"], strs["type"], ints["index"], ints["numa"],
        strs["mode"], health, profiles, custom_info=go_json_value(custom) if custom else "",
    )


def decode_node_devices_json(text: str | bytes) -> tuple[DeviceInfo, ...]:
    """Go UnMarshalNodeDevices: a JSON array of DeviceInfo (`null` is an empty list)."""
    require_str(text, REGISTER_ANNOTATION, bytes_ok=True)
    doc = json_loads(text, REGISTER_ANNOTATION)
    if doc is None:
        return ()
    shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if type(doc) is not list:
        kind = JSON_KIND.get(type(doc), "value")
        raise CodecError(
            f"json: cannot unmarshal {kind} into Go value of type []*device.DeviceInfo",
            field=REGISTER_ANNOTATION, text=shown,
        )
    out = []
    append = out.append
    lo32, hi32 = INT32
    hot = _HOT_KEYS
    new = object.__new__
    (set_id, set_count, set_devmem, set_devcore, set_type, set_index, set_numa, set_mode, set_health, set_migs,
     set_vendor, set_custom) = _DEVICE_SETTERS
    for i, obj in enumerate(doc):
        # Hot path: an object with only the plain keys the NVIDIA plugin writes, values of the
        # right type and range, checked in one expression. Everything else (nulls, other keys,
        # key case folding, MIG profiles, errors) takes the slow path.
        if type(obj) is dict and obj.keys() <= hot:
            get = obj.get
            id_ = get("id", "")
            index = get("index", 0)
            count = get("count", 0)
            devmem = get("devmem", 0)
            devcore = get("devcore", 0)
            type_ = get("type", "")
            numa = get("numa", 0)
            mode = get("mode", "")
            health = get("health", False)
            if (
                type(id_) is str and type(type_) is str and type(mode) is str
                and type(count) is int and lo32 <= count <= hi32
                and type(devmem) is int and lo32 <= devmem <= hi32
                and type(devcore) is int and lo32 <= devcore <= hi32
                and type(index) is int and 0 <= index < 18446744073709551616
                and type(numa) is int and -9223372036854775808 <= numa < 9223372036854775808
                and type(health) is bool
            ):
                d = new(DeviceInfo)
                set_id(d, id_)
                set_count(d, count)
                set_devmem(d, shared_int(devmem))
                set_devcore(d, devcore)
                set_type(d, intern(type_))  # one string per GPU model and mode, not one per GPU
                set_index(d, index)
                set_numa(d, numa)
                set_mode(d, intern(mode))
                set_health(d, health)
                set_migs(d, ())
                set_vendor(d, NVIDIA)
                set_custom(d, "")
                append(d)
                continue
        append(_decode_device_any(obj, i, shown))
    return tuple(out)


_LEGACY_INT_FIELDS = ((1, "count", INT32), (2, "memory", INT32), (3, "core", INT32))


def decode_node_devices_legacy(text: str) -> tuple[DeviceInfo, ...]:
    """Go DecodeNodeDevices: `id,count,devmem,devcore,type,numa,health[,index,mode]:` per device."""
    require_str(text, REGISTER_ANNOTATION)
    field = REGISTER_ANNOTATION
    if ":" not in text:
        raise CodecError("node annotation missing device separator", field=field, text=text, position=None)
    out = []
    pos = 0
    for seg in text.split(":"):
        start = pos
        pos += len(seg) + 1
        if not seg:
            continue
        if "," not in seg:
            raise CodecError(
                f"malformed node annotation segment: {go_quote(seg)}", field=field, text=seg, position=start
            )
        items = seg.split(",")
        if len(items) not in (7, 9):
            raise CodecError(
                f"unexpected field count {len(items)} in node annotation", field=field, text=seg, position=start
            )
        if len(items) == 9:
            digits = items[1] + items[2] + items[3] + items[5] + items[7]
            plain = len(items[1]) < 10 and len(items[2]) < 10 and len(items[3]) < 10 and len(items[5]) < 18
            plain = plain and len(items[7]) < 18 and items[6] in GO_BOOLS and digits.isdigit() and digits.isascii()
            if plain and all(items[i] for i in (1, 2, 3, 5, 7)):
                out.append(DeviceInfo(
                    items[0], int(items[1]), int(items[2]), int(items[3]), items[4], int(items[7]), int(items[5]),
                    items[8], GO_BOOLS[items[6]],
                ))
                continue
        nums = []
        for idx, name, bounds in _LEGACY_INT_FIELDS:
            value = go_int(items[idx], bounds, "ParseInt")
            if isinstance(value, str):
                raise CodecError(
                    f"invalid {name} field: {value}", field=f"{field}.{name}", text=items[idx],
                    position=start + item_offset(items, idx),
                )
            nums.append(value)
        health_text = items[6]
        if health_text not in GO_BOOLS:
            raise CodecError(
                f"invalid health field: strconv.ParseBool: parsing {go_quote(health_text)}: invalid syntax",
                field=f"{field}.health", text=health_text, position=start + item_offset(items, 6),
            )
        numa = go_int(items[5], INT64, "Atoi")
        if isinstance(numa, str):
            raise CodecError(
                f"invalid numa field: {numa}", field=f"{field}.numa", text=items[5],
                position=start + item_offset(items, 5),
            )
        mode, index = "hami-core", 0
        if len(items) == 9:
            index = go_int(items[7], INT64, "Atoi")
            if isinstance(index, str):
                raise CodecError(
                    f"invalid index field: {index}", field=f"{field}.index", text=items[7],
                    position=start + item_offset(items, 7),
                )
            if index < 0:
                raise CodecError(
                    f"index field must not be negative: {index}", field=f"{field}.index", text=items[7],
                    position=start + item_offset(items, 7),
                )
            mode = items[8]
        out.append(
            DeviceInfo(
                id=items[0], count=nums[0], devmem=nums[1], devcore=nums[2], type=items[4],
                index=index, numa=numa, mode=mode, health=GO_BOOLS[health_text],
            )
        )
    return tuple(out)


def is_json_register(text: str) -> bool:
    """True when the register value is the JSON form (HAMi >= v2.8), False for the colon form."""
    stripped = text.strip(" \t\r\n")
    return stripped[:1] in ("[", "{") or stripped == "null"


def decode_node_devices(text: str) -> tuple[DeviceInfo, ...]:
    """`hami.io/node-nvidia-register` in either form. An empty result means no GPU registered
    (HAMi's "no gpu found on node"); the caller decides what that means."""
    require_str(text, REGISTER_ANNOTATION)
    if is_json_register(text):
        return decode_node_devices_json(text)
    return decode_node_devices_legacy(text)


class RegisterDecoder:
    """decode_node_devices with a bounded memo keyed by the annotation text.

    The scheduler sees the same register text on most node watch events (status heartbeats,
    label changes); the decoded tuple is immutable, so it can be shared. Create one per role and
    pass it down (no module-level state). Errors are not cached.
    """

    __slots__ = ("_memo", "_maxsize", "hits", "misses")

    def __init__(self, maxsize: int = 16384):
        self._memo: dict[str, tuple[DeviceInfo, ...]] = {}
        self._maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def __call__(self, text: str) -> tuple[DeviceInfo, ...]:
        found = self._memo.get(text)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        devices = decode_node_devices(text)
        if len(self._memo) >= self._maxsize:
            self._memo.clear()  # nodes re-register at most every 30 s: a cold refill is cheap
        self._memo[text] = devices
        return devices
