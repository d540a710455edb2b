"""Every HAMi wire format, encoded and decoded. Pure: no I/O, never logs.

One error type, `CodecError`, carries the field, the offending text and its position; on any
input whatsoever a decoder returns a value or raises `CodecError`, nothing else. Where HAMi's
Go code has an error message, `str(CodecError)` is that message, so a reader can grep HAMi.

Formats (annotation keys are the constants below; see ../shared/spec/scheduler.md §1-§2):

* `hami.io/node-nvidia-register`: JSON array written exactly as Go `encoding/json` writes
  `[]DeviceInfo` (key order of the struct, every field `omitempty`, no spaces, HTML-escaped
  strings); the legacy `id,count,devmem,devcore,type,numa,health[,index,mode]:` form is still
  decoded. `decode_node_devices` detects which one it was given.
* `hami.io/node-nvidia-score`: JSON `[{"uuid":..,"score":{uuid:int}}]`.
* pod device strings (`hami.io/vgpu-devices-to-allocate` / `-allocated`):
  `UUID,TYPE,MEM,CORES:` per device, `;` after every container; decoding keeps empty containers
  (a trailing `;` yields one extra empty container, as HAMi does).
* `hami.io/node-handshake`: `Requesting_<2006-01-02 15:04:05>`, legacy `Reported <Go time>`,
  `Deleted_<2006-01-02 15:04:05>`.
* `hami.io/mutex.lock`: `<RFC3339>,<namespace>,<pod>`, legacy bare RFC3339.
* `hami.io/device-cordon`, the use/nouse gputype and gpuuuid lists, `nvidia.com/numa-bind`,
  `nvidia.com/vgpu-mode`, `hami.io/device-scoring-weights`, `hami.io/vgpu-mig-allocations`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta, timezone, tzinfo

import orjson

from hami.device.model import (
    NVIDIA,
    ContainerDevice,
    ContainerDevices,
    DeviceInfo,
    Handshake,
    MigPlacement,
    MigProfile,
    NodeLock,
    PodDevices,
    ScoringWeights,
)

# --------------------------------------------------------------------------- annotation keys

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
PAIR_SCORE_ANNOTATION = "hami.io/node-nvidia-score"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake"
NODE_LOCK_ANNOTATION = "hami.io/mutex.lock"
CORDON_ANNOTATION = "hami.io/device-cordon"
TO_ALLOCATE_ANNOTATION = "hami.io/vgpu-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
MIG_ALLOCATIONS_ANNOTATION = "hami.io/vgpu-mig-allocations"
VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
VGPU_TIME_ANNOTATION = "hami.io/vgpu-time"
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
BIND_TIME_ANNOTATION = "hami.io/bind-time"
NODE_SCHEDULER_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS_ANNOTATION = "hami.io/device-scoring-weights"
USE_GPUTYPE_ANNOTATION = "nvidia.com/use-gputype"
NOUSE_GPUTYPE_ANNOTATION = "nvidia.com/nouse-gputype"
USE_GPUUUID_ANNOTATION = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID_ANNOTATION = "nvidia.com/nouse-gpuuuid"
NUMA_BIND_ANNOTATION = "nvidia.com/numa-bind"
VGPU_MODE_ANNOTATION = "nvidia.com/vgpu-mode"

# Index a decoded ContainerDevice carries: the card index is not on the wire (HAMi's
# UnsetContainerDeviceIdx), and a real index is >= 0, so reading it by mistake is obvious.
UNSET_CONTAINER_DEVICE_IDX = -1

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT32 = (0, (1 << 32) - 1)
_UINT64 = (0, (1 << 64) - 1)


# --------------------------------------------------------------------------- the error


class CodecError(ValueError):
    """A value could not be decoded (or encoded).

    `field` names the annotation or field, `text` is the offending text, `position` the
    character offset of that text in the whole input (None where it has no single place).
    `str(err)` is HAMi's own message where HAMi has one.
    """

    def __init__(self, message: str, *, field: str, text: str, position: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.text = text
        self.position = position


# --------------------------------------------------------------------------- Go scalar semantics

# Go's unicode.IsSpace set (strings.TrimSpace); Python's str.strip() also strips \x1c-\x1f.
_GO_SPACE = (
    " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_GO_INT_RE = re.compile(r"[+-]?[0-9]+")
_GO_BOOLS = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}


def go_trim_space(text: str) -> str:
    """strings.TrimSpace."""
    return text.strip(_GO_SPACE)


def go_quote(text: str) -> str:
    """strconv.Quote, close enough for error messages: printable text kept, the rest escaped."""
    out = ['"']
    for ch in text:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _go_int(text: str, lo_hi: tuple[int, int], func: str) -> int | str:
    """strconv.ParseInt/Atoi: the value, or the strconv error text."""
    if _GO_INT_RE.fullmatch(text) is None:
        return f"strconv.{func}: parsing {go_quote(text)}: invalid syntax"
    value = int(text)
    if not lo_hi[0] <= value <= lo_hi[1]:
        return f"strconv.{func}: parsing {go_quote(text)}: value out of range"
    return value


def parse_go_bool(text: str, *, field: str = "bool", position: int | None = None) -> bool:
    """strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False."""
    _require_str(text, field)
    value = _GO_BOOLS.get(text)
    if value is None:
        raise CodecError(
            f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax",
            field=field, text=text, position=position,
        )
    return value


def go_json_string(text: str) -> str:
    """A JSON string literal exactly as Go encoding/json writes it (HTML-safe escaping)."""
    if _PLAIN_JSON.fullmatch(text):
        return '"' + text + '"'
    out = json.dumps(text, ensure_ascii=False)
    if not _GO_ESCAPE_NEEDED.search(out):
        return out
    out = (
        out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )
    # Lone surrogates cannot be UTF-8; Go writes U+FFFD for invalid UTF-8.
    return _SURROGATE.sub("\ufffd", out)


# Printable ASCII that neither JSON nor Go's HTML-safe escaping touches.
_PLAIN_JSON = re.compile(r"[ !#-%'-;=?-\[\]-~]*")
_GO_ESCAPE_NEEDED = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _require_str(text, field: str, *, none_ok: bool = False, bytes_ok: bool = False) -> None:
    """Decoders take annotation values, i.e. strings; anything else is a CodecError too."""
    if type(text) is str or (none_ok and text is None) or (bytes_ok and type(text) is bytes):
        return
    raise CodecError(f"expected a string, got {type(text).__name__}", field=field, text=repr(text)[:200])


def _loads(text: str | bytes, field: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise CodecError(f"invalid JSON: {exc.msg}", field=field, text=shown, position=exc.pos) from None


_JSON_KIND = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def _type_error(value, go_field: str, go_type: str, field: str, text: str) -> CodecError:
    kind = _JSON_KIND.get(type(value), "value")
    if kind == "number" and type(value) is int:
        kind = f"number {value}"
    elif kind == "number":
        kind = f"number {orjson.dumps(value).decode()}"
    return CodecError(
        f"json: cannot unmarshal {kind} into Go struct field {go_field} of type {go_type}",
        field=field, text=text,
    )


def _fold_keys(obj: dict, names: Iterable[str]) -> dict:
    """Go's decoder matches object keys to fields case-insensitively (exact match first)."""
    names = tuple(names)
    lower = {n.lower(): n for n in names}
    exact = set(names)
    out: dict = {}
    for key, value in obj.items():
        if key in exact:
            out[key] = value
        else:
            name = lower.get(key.lower())
            if name is not None:
                out[name] = value
    return out


def _int_field(obj: dict, key: str, bounds: tuple[int, int], go_field: str, go_type: str, field: str, text: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:
        raise _type_error(value, go_field, go_type, field, text)
    return value


def _str_field(obj: dict, key: str, go_field: str, field: str, text: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if type(value) is not str:
        raise _type_error(value, go_field, "string", field, text)
    return value


# --------------------------------------------------------------------------- register annotation


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
                  "vendor")
if tuple(f.name for f in dataclass_fields(DeviceInfo)) != _DEVICE_FIELDS:  # pragma: no cover
    raise RuntimeError("hami.device.model.DeviceInfo fields changed: update codec._DEVICE_FIELDS")
_DEVICE_SETTERS = tuple(DeviceInfo.__dict__[name].__set__ for name in _DEVICE_FIELDS)
_HOT_KEYS = frozenset(("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health"))
_MIG_FIELDS = ("name", "memoryMB", "core", "sliceCount", "placements")
_MIG_KEYS = frozenset(_MIG_FIELDS)
_PLACEMENT_FIELDS = ("start", "size")


def _decode_placements(raw, field: str, text: str) -> tuple[MigPlacement, ...]:
    if raw is None:
        return ()
    if type(raw) is not list:
        raise _type_error(raw, "MigProfile.placements", "[]device.MigPlacement", field, text)
    out = []
    for p in raw:
        if p is None:
            out.append(MigPlacement(0, 0))
            continue
        if type(p) is not dict:
            raise _type_error(p, "MigProfile.placements", "device.MigPlacement", field, text)
        if not p.keys() <= {"start", "size"}:
            p = _fold_keys(p, _PLACEMENT_FIELDS)
        start = _int_field(p, "start", _UINT32, "MigPlacement.start", "uint32", field, text)
        size = _int_field(p, "size", _UINT32, "MigPlacement.size", "uint32", field, text)
        out.append(MigPlacement(start, size))
    return tuple(out)


def _decode_mig_profiles(raw, field: str, text: str) -> tuple[MigProfile, ...]:
    if raw is None:
        return ()
    if type(raw) is not list:
        raise _type_error(raw, "DeviceInfo.migProfiles", "[]device.MigProfile", field, text)
    out = []
    for m in raw:
        if m is None:
            out.append(MigProfile(""))
            continue
        if type(m) is not dict:
            raise _type_error(m, "DeviceInfo.migProfiles", "device.MigProfile", field, text)
        if not m.keys() <= _MIG_KEYS:
            m = _fold_keys(m, _MIG_FIELDS)
        out.append(
            MigProfile(
                name=_str_field(m, "name", "MigProfile.name", field, text),
                memory_mb=_int_field(m, "memoryMB", _INT32, "MigProfile.memoryMB", "int32", field, text),
                core=_int_field(m, "core", _INT32, "MigProfile.core", "int32", field, text),
                slice_count=_int_field(m, "sliceCount", _UINT32, "MigProfile.sliceCount", "uint32", field, text),
                placements=_decode_placements(m.get("placements"), field, text),
            )
        )
    return tuple(out)


def _decode_device_any(obj, i: int, text: str) -> DeviceInfo:
    """One device with every field checked on its own: nulls mean zero, keys match
    case-insensitively, a wrong type or range raises the error Go's decoder gives for that field."""
    field = f"{REGISTER_ANNOTATION}[{i}]"
    if type(obj) is not dict:
        raise CodecError(
            f"device entry {i} is {_JSON_KIND.get(type(obj), 'null')}, expected an object", field=field, text=text
        )
    if not obj.keys() <= _DEV_KEYS:
        obj = _fold_keys(obj, _DEV_FIELDS)
    ints = {}
    for key, bounds, go_type in (
        ("index", _UINT64, "uint"), ("count", _INT32, "int32"), ("devmem", _INT32, "int32"),
        ("devcore", _INT32, "int32"), ("numa", _INT64, "int"),
    ):
        ints[key] = _int_field(obj, key, bounds, f"DeviceInfo.{key}", go_type, f"{field}.{key}", text)
    strs = {key: _str_field(obj, key, f"DeviceInfo.{key}", f"{field}.{key}", text)
            for key in ("id", "type", "mode", "devicevendor")}
    health = obj.get("health")
    if health is None:
        health = False
    elif type(health) is not bool:
        raise _type_error(health, "DeviceInfo.health", "bool", f"{field}.health", text)
    for key, kind, go_type in (("custominfo", dict, "map[string]interface {}"), ("migtemplate", list, "[]device.Geometry")):
        value = obj.get(key)
        if value is not None and type(value) is not kind:
            raise _type_error(value, f"DeviceInfo.{key}", go_type, f"{field}.{key}", text)
    profiles = _decode_mig_profiles(obj.get("migProfiles"), f"{field}.migProfiles", text)
    return DeviceInfo(
        strs["id"], ints["count"], ints["devmem"], ints["devcore"], strs["type"], ints["index"], ints["numa"],
        strs["mode"], health, profiles,
    )


def decode_node_devices_json(text: str | bytes) -> tuple[DeviceInfo, ...]:
    """Go UnMarshalNodeDevices: a JSON array of DeviceInfo (`null` is an empty list)."""
    _require_str(text, REGISTER_ANNOTATION, bytes_ok=True)
    doc = _loads(text, REGISTER_ANNOTATION)
    if doc is None:
        return ()
    shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if type(doc) is not list:
        kind = _JSON_KIND.get(type(doc), "value")
        raise CodecError(
            f"json: cannot unmarshal {kind} into Go value of type []*device.DeviceInfo",
            field=REGISTER_ANNOTATION, text=shown,
        )
    out = []
    append = out.append
    lo32, hi32 = _INT32
    hot = _HOT_KEYS
    new = object.__new__
    (set_id, set_count, set_devmem, set_devcore, set_type, set_index, set_numa, set_mode, set_health, set_migs,
     set_vendor) = _DEVICE_SETTERS
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
                set_devmem(d, devmem)
                set_devcore(d, devcore)
                set_type(d, type_)
                set_index(d, index)
                set_numa(d, numa)
                set_mode(d, mode)
                set_health(d, health)
                set_migs(d, ())
                set_vendor(d, NVIDIA)
                append(d)
                continue
        append(_decode_device_any(obj, i, shown))
    return tuple(out)


_LEGACY_INT_FIELDS = ((1, "count", _INT32), (2, "memory", _INT32), (3, "core", _INT32))


def decode_node_devices_legacy(text: str) -> tuple[DeviceInfo, ...]:
    """Go DecodeNodeDevices: `id,count,devmem,devcore,type,numa,health[,index,mode]:` per device."""
    _require_str(text, REGISTER_ANNOTATION)
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
            plain = plain and len(items[7]) < 18 and items[6] in _GO_BOOLS and digits.isdigit() and digits.isascii()
            if plain and all(items[i] for i in (1, 2, 3, 5, 7)):
                out.append(DeviceInfo(
                    items[0], int(items[1]), int(items[2]), int(items[3]), items[4], int(items[7]), int(items[5]),
                    items[8], _GO_BOOLS[items[6]],
                ))
                continue
        nums = []
        for idx, name, bounds in _LEGACY_INT_FIELDS:
            value = _go_int(items[idx], bounds, "ParseInt")
            if isinstance(value, str):
                raise CodecError(
                    f"invalid {name} field: {value}", field=f"{field}.{name}", text=items[idx],
                    position=start + _offset(items, idx),
                )
            nums.append(value)
        health_text = items[6]
        if health_text not in _GO_BOOLS:
            raise CodecError(
                f"invalid health field: strconv.ParseBool: parsing {go_quote(health_text)}: invalid syntax",
                field=f"{field}.health", text=health_text, position=start + _offset(items, 6),
            )
        numa = _go_int(items[5], _INT64, "Atoi")
        if isinstance(numa, str):
            raise CodecError(
                f"invalid numa field: {numa}", field=f"{field}.numa", text=items[5],
                position=start + _offset(items, 5),
            )
        mode, index = "hami-core", 0
        if len(items) == 9:
            index = _go_int(items[7], _INT64, "Atoi")
            if isinstance(index, str):
                raise CodecError(
                    f"invalid index field: {index}", field=f"{field}.index", text=items[7],
                    position=start + _offset(items, 7),
                )
            if index < 0:
                raise CodecError(
                    f"index field must not be negative: {index}", field=f"{field}.index", text=items[7],
                    position=start + _offset(items, 7),
                )
            mode = items[8]
        out.append(
            DeviceInfo(
                id=items[0], count=nums[0], devmem=nums[1], devcore=nums[2], type=items[4],
                index=index, numa=numa, mode=mode, health=_GO_BOOLS[health_text],
            )
        )
    return tuple(out)


def _offset(items: list[str], idx: int) -> int:
    return sum(len(x) + 1 for x in items[:idx])


def is_json_register(text: str) -> bool:
    """True when the register value is the JSON form (HAMi >= v2.8), False for the colon form."""
    stripped = text.strip(" \t\r\n")
    return stripped[:1] in ("[", "{") or stripped == "null"


def decode_node_devices(text: str) -> tuple[DeviceInfo, ...]:
    """`hami.io/node-nvidia-register` in either form. An empty result means no GPU registered
    (HAMi's "no gpu found on node"); the caller decides what that means."""
    _require_str(text, REGISTER_ANNOTATION)
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


# --------------------------------------------------------------------------- node pair scores


@dataclass(frozen=True, slots=True)
class DevicePairScore:
    """One entry of `hami.io/node-nvidia-score`: how well `uuid` connects to each other GPU."""

    uuid: str
    scores: Mapping[str, int]

    def __hash__(self) -> int:
        return hash((self.uuid, tuple(sorted(self.scores.items()))))


def encode_pair_scores(entries: Iterable[DevicePairScore]) -> str:
    """JSON of []DevicePairScore (both fields omitempty; Go sorts map keys)."""
    out = []
    for e in entries:
        parts = []
        if e.uuid:
            parts.append('"uuid":' + go_json_string(e.uuid))
        if e.scores:
            inner = ",".join(f"{go_json_string(k)}:{int(v)}" for k, v in sorted(e.scores.items()))
            parts.append('"score":{' + inner + "}")
        out.append("{" + ",".join(parts) + "}")
    return "[" + ",".join(out) + "]"


def decode_pair_scores(text: str | bytes) -> tuple[DevicePairScore, ...]:
    """Go DecodePairScores."""
    _require_str(text, PAIR_SCORE_ANNOTATION, bytes_ok=True)
    field = PAIR_SCORE_ANNOTATION
    doc = _loads(text, field)
    shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError(
            f"json: cannot unmarshal {_JSON_KIND.get(type(doc), 'value')} into Go value of type device.DevicePairScores",
            field=field, text=shown,
        )
    out = []
    for i, obj in enumerate(doc):
        if obj is None:
            out.append(DevicePairScore("", {}))
            continue
        if type(obj) is not dict:
            raise _type_error(obj, "DevicePairScores", "device.DevicePairScore", f"{field}[{i}]", shown)
        if not obj.keys() <= {"uuid", "score"}:
            obj = _fold_keys(obj, ("uuid", "score"))
        uuid = _str_field(obj, "uuid", "DevicePairScore.uuid", f"{field}[{i}].uuid", shown)
        raw = obj.get("score")
        scores: dict[str, int] = {}
        if raw is not None:
            if type(raw) is not dict:
                raise _type_error(raw, "DevicePairScore.score", "map[string]int", f"{field}[{i}].score", shown)
            for k, v in raw.items():
                if v is None:
                    v = 0
                if type(v) is not int or not _INT64[0] <= v <= _INT64[1]:
                    raise _type_error(v, "DevicePairScore.score", "int", f"{field}[{i}].score.{k}", shown)
                scores[k] = v
        out.append(DevicePairScore(uuid, scores))
    return tuple(out)


# --------------------------------------------------------------------------- pod device strings


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
                if not 0 <= value <= _INT32[1]:
                    raise CodecError(
                        f"pod device {what} {value} is outside 0..2147483647", field=f"pod device {what}",
                        text=str(value),
                    )
    return encode_pod_devices(pod)


def decode_container_devices(text: str, *, field: str = TO_ALLOCATE_ANNOTATION, base: int = 0) -> ContainerDevices:
    """Go DecodeContainerDevices: devices of one container; empty segments are skipped."""
    _require_str(text, field)
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
            out.append(ContainerDevice(uuid, type_, int(mem), int(cores), UNSET_CONTAINER_DEVICE_IDX))
            continue
        nums = []
        for idx, name in ((2, "memory"), (3, "core")):
            value = _go_int(items[idx], _INT32, "ParseInt")
            where = start + _offset(items, idx)
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
    _require_str(text, field)
    out = []
    pos = 0
    for chunk in text.split(";"):
        out.append(decode_container_devices(chunk, field=field, base=pos) if chunk else ())
        pos += len(chunk) + 1
    return tuple(out)


# --------------------------------------------------------------------------- handshake

HANDSHAKE_REQUESTING = "Requesting"
HANDSHAKE_REPORTED = "Reported"
HANDSHAKE_DELETED = "Deleted"
HANDSHAKE_UNKNOWN = "Unknown"

_DATETIME_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]+))?")
# Go Time.String(): 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895
_GO_TIME_STRING_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r" ([+-])([0-9]{2})([0-9]{2})(?: \S+)?(?: m=[+-][0-9]+(?:\.[0-9]+)?)?"
)


def _local(ts: float, tz: tzinfo | None) -> datetime:
    try:
        if tz is None:
            return datetime.fromtimestamp(ts).astimezone()
        return datetime.fromtimestamp(ts, tz)
    except (ValueError, OverflowError, OSError, TypeError) as exc:
        raise CodecError(f"timestamp {ts!r} cannot be formatted: {exc}", field="timestamp", text=repr(ts)) from None


def format_datetime(ts: float, tz: tzinfo | None = None) -> str:
    """Go time.DateTime layout `2006-01-02 15:04:05` in `tz` (None: the local zone, as HAMi)."""
    return _local(ts, tz).strftime("%Y-%m-%d %H:%M:%S")


def _fraction(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def parse_datetime(text: str, tz: tzinfo | None = None, *, field: str = HANDSHAKE_ANNOTATION) -> float:
    """Go time.ParseInLocation(time.DateTime, text, tz) -> unix seconds."""
    _require_str(text, field)
    m = _DATETIME_RE.fullmatch(text)
    if m is None:
        raise CodecError(
            f'parsing time {go_quote(text)} as "2006-01-02 15:04:05": cannot parse', field=field, text=text
        )
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        naive = datetime(y, mo, d, h, mi, s)
        aware = naive.astimezone() if tz is None else naive.replace(tzinfo=tz)
        stamp = aware.timestamp()
    except (ValueError, OverflowError, OSError) as exc:
        raise CodecError(f"parsing time {go_quote(text)}: {exc}", field=field, text=text) from None
    return stamp + _fraction(m.group(7))


def encode_handshake_requesting(ts: float, tz: tzinfo | None = None) -> str:
    """`Requesting_<2006-01-02 15:04:05>`, the value the scheduler writes."""
    return "Requesting_" + format_datetime(ts, tz)


def encode_handshake_deleted(ts: float, tz: tzinfo | None = None) -> str:
    """`Deleted_<2006-01-02 15:04:05>` (legacy cleanup value)."""
    return "Deleted_" + format_datetime(ts, tz)


def format_go_time_string(ts: float, tz: tzinfo | None = None) -> str:
    """Go Time.String() without the monotonic part: `2024-01-23 04:30:04.434037 +0000 UTC`."""
    dt = _local(ts, tz)
    frac = f"{dt.microsecond:06d}".rstrip("0")
    off = dt.utcoffset() or timedelta(0)
    sign = "-" if off < timedelta(0) else "+"
    minutes = abs(int(off.total_seconds())) // 60
    zone = dt.tzname() or ""
    if not zone or zone.startswith(("UTC+", "UTC-")):
        zone = f"{sign}{minutes // 60:02d}{minutes % 60:02d}" if minutes else "UTC"
    return (
        dt.strftime("%Y-%m-%d %H:%M:%S") + (("." + frac) if frac else "")
        + f" {sign}{minutes // 60:02d}{minutes % 60:02d} {zone}"
    )


def encode_handshake_reported(ts: float, tz: tzinfo | None = None) -> str:
    """Legacy device-plugin value `Reported <Go time.Now().String()>`."""
    return "Reported " + format_go_time_string(ts, tz)


def parse_go_time_string(text: str, *, field: str = HANDSHAKE_ANNOTATION) -> float:
    """Unix seconds from a Go Time.String() value."""
    _require_str(text, field)
    m = _GO_TIME_STRING_RE.fullmatch(text)
    if m is None:
        raise CodecError(f"not a Go time string: {go_quote(text)}", field=field, text=text)
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    sign, oh, om = m.group(8), int(m.group(9)), int(m.group(10))
    offset = timedelta(hours=oh, minutes=om) * (-1 if sign == "-" else 1)
    try:
        stamp = datetime(y, mo, d, h, mi, s, tzinfo=timezone(offset)).timestamp()
    except (ValueError, OverflowError) as exc:
        raise CodecError(f"parsing time {go_quote(text)}: {exc}", field=field, text=text) from None
    return stamp + _fraction(m.group(7))


def decode_handshake(text: str | None, tz: tzinfo | None = None) -> Handshake:
    """Classify `hami.io/node-handshake` the way HAMi's CheckHealth does. Never raises.

    Contains `Requesting` -> Requesting (timestamp after the first `_`, parsed in `tz`, None when
    missing or unparsable); contains `Deleted` -> Deleted; starts with `Reported` -> Reported;
    anything else, or absent (None) -> Unknown.
    """
    if not text or type(text) is not str:
        return Handshake(HANDSHAKE_UNKNOWN)
    if HANDSHAKE_REQUESTING in text or HANDSHAKE_DELETED in text:
        state = HANDSHAKE_REQUESTING if HANDSHAKE_REQUESTING in text else HANDSHAKE_DELETED
        _, sep, rest = text.partition("_")
        stamp = None
        if sep:
            try:
                stamp = parse_datetime(rest, tz)
            except (CodecError, OverflowError, OSError):
                stamp = None
        return Handshake(state, stamp)
    if text.startswith(HANDSHAKE_REPORTED):
        try:
            stamp = parse_go_time_string(text[len(HANDSHAKE_REPORTED):].strip(" "))
        except (CodecError, OverflowError, OSError):
            stamp = None
        return Handshake(HANDSHAKE_REPORTED, stamp)
    return Handshake(HANDSHAKE_UNKNOWN)


# --------------------------------------------------------------------------- node lock

RFC3339 = "2006-01-02T15:04:05Z07:00"
_RFC3339_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))"
)


def format_rfc3339(ts: float, tz: tzinfo | None = None) -> str:
    """Go t.Format(time.RFC3339): whole seconds, `Z` for UTC, else `+hh:mm`."""
    dt = _local(int(ts // 1), tz)
    off = dt.utcoffset() or timedelta(0)
    if not off:
        return dt.strftime("%Y-%m-%dT%H:%M:%S") + "Z"
    sign = "-" if off < timedelta(0) else "+"
    minutes = abs(int(off.total_seconds())) // 60
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def parse_rfc3339(text: str, *, field: str = NODE_LOCK_ANNOTATION, position: int | None = None) -> float:
    """Go time.Parse(time.RFC3339, text) -> unix seconds (fractional seconds accepted)."""
    _require_str(text, field)
    m = _RFC3339_RE.fullmatch(text)
    if m is None:
        raise CodecError(
            f"parsing time {go_quote(text)} as {go_quote(RFC3339)}: cannot parse {go_quote(text)}",
            field=field, text=text, position=position,
        )
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    if m.group(8):
        offset = timedelta(0)
    else:
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 24 or om > 59:
            raise CodecError(
                f"parsing time {go_quote(text)}: time zone offset out of range", field=field, text=text,
                position=position,
            )
        offset = timedelta(hours=oh, minutes=om) * (-1 if m.group(9) == "-" else 1)
    try:
        dt = datetime(y, mo, d, h, mi, s, tzinfo=timezone(offset))
        stamp = dt.timestamp()
    except (ValueError, OverflowError) as exc:
        raise CodecError(f"parsing time {go_quote(text)}: {exc}", field=field, text=text, position=position) from None
    return stamp + _fraction(m.group(7))


def encode_node_lock(ts: float, namespace: str, name: str, tz: tzinfo | None = UTC) -> str:
    """`<RFC3339>,<namespace>,<pod>` (Go GenerateNodeLockKeyByPod). tz None: the local zone."""
    if "," in namespace or "," in name:
        raise CodecError("namespace and pod name must not contain ','", field=NODE_LOCK_ANNOTATION,
                         text=f"{namespace},{name}")
    return f"{format_rfc3339(ts, tz)},{namespace},{name}"


def encode_node_lock_legacy(ts: float, tz: tzinfo | None = UTC) -> str:
    """A bare RFC3339 timestamp (what HAMi writes for a nil pod, and old versions always)."""
    return format_rfc3339(ts, tz)


def decode_node_lock(text: str) -> NodeLock:
    """Go ParseNodeLock: no comma -> legacy bare RFC3339; else exactly 3 comma parts."""
    _require_str(text, NODE_LOCK_ANNOTATION)
    if "," not in text:
        return NodeLock(parse_rfc3339(text, position=0))
    parts = text.split(",")
    if len(parts) != 3:
        raise CodecError(
            f"malformed lock annotation: expected 3 parts, got {len(parts)} from {text}",
            field=NODE_LOCK_ANNOTATION, text=text, position=0,
        )
    return NodeLock(parse_rfc3339(parts[0], position=0), parts[1], parts[2])


def node_lock_owner_suffix(namespace: str, name: str) -> str:
    """What a lock value set by this pod ends with (ReleaseNodeLock's owner check)."""
    return f",{namespace},{name}"


# --------------------------------------------------------------------------- cordon and pod filters


def decode_device_cordon(text: str | None) -> tuple[str, ...]:
    """`hami.io/device-cordon`: comma list of UUIDs, spaces trimmed, empty members skipped."""
    _require_str(text, CORDON_ANNOTATION, none_ok=True)
    if not text:
        return ()
    return tuple(u for u in (go_trim_space(p) for p in text.split(",")) if u)


def encode_device_cordon(uuids: Iterable[str]) -> str:
    out = []
    for u in uuids:
        if not u or "," in u or go_trim_space(u) != u:
            raise CodecError(f"cordon UUID {go_quote(u)} is empty, has a comma or surrounding space",
                             field=CORDON_ANNOTATION, text=u)
        out.append(u)
    return ",".join(out)


def _has_constraint(value: str | None) -> bool:
    return value is not None and go_trim_space(value) != ""


def gpu_type_allowed(card_type: str, use: str | None, nouse: str | None) -> bool:
    """Go CheckType: use/nouse gputype lists; a member matches when it is a case-insensitive
    substring of the card type; empty members never match; empty/absent values mean no constraint."""
    card = card_type.upper()

    def match(listing: str) -> bool:
        return any(t and t.upper() in card for t in (go_trim_space(x) for x in listing.split(",")))

    if _has_constraint(use) and not match(use):
        return False
    return not (_has_constraint(nouse) and match(nouse))


def gpu_uuid_allowed(uuid: str, use: str | None, nouse: str | None) -> bool:
    """Go CheckUUID: use/nouse gpuuuid lists of exact (trimmed) UUIDs; empty values: no constraint."""

    def match(listing: str) -> bool:
        return any(go_trim_space(x) == uuid for x in listing.split(","))

    if _has_constraint(use) and not match(use):
        return False
    return not (_has_constraint(nouse) and match(nouse))


def numa_bind(value: str | None) -> bool:
    """`nvidia.com/numa-bind`: strconv.ParseBool true; anything unparsable means false."""
    return value is not None and _GO_BOOLS.get(value, False)


def vgpu_mode_allowed(annotation: str | None, card_mode: str) -> bool:
    """`nvidia.com/vgpu-mode`: the card's mode must be a substring of the value when it is set."""
    return annotation is None or card_mode in annotation


def policy_contains(policy: str, name: str) -> bool:
    """PolicyContains: the comma chain, members trimmed, holds `name`."""
    return any(go_trim_space(p) == name for p in policy.split(","))


# --------------------------------------------------------------------------- scoring weights


def decode_scoring_weights(text: str | None) -> ScoringWeights:
    """Go ParseDeviceScoringWeights; None (annotation absent) gives the defaults (1,1,1)."""
    _require_str(text, SCORING_WEIGHTS_ANNOTATION, none_ok=True)
    if text is None:
        return ScoringWeights()
    key_name = SCORING_WEIGHTS_ANNOTATION

    def fail(why: str) -> CodecError:
        return CodecError(f"invalid {key_name} annotation {go_quote(text)}: {why}", field=key_name, text=text)

    parts = text.split(",")
    if len(parts) != 3:
        raise fail("expected slot, core, and memory weights")
    weights = {"slot": 0, "core": 0, "memory": 0}
    seen: set[str] = set()
    for part in parts:
        key, sep, raw = go_trim_space(part).partition("=")
        if not sep:
            raise fail("expected key=value entries")
        key = go_trim_space(key)
        if key in seen:
            raise fail(f"duplicate {go_quote(key)} weight")
        value = _go_int(go_trim_space(raw), _INT64, "ParseInt")
        if isinstance(value, str):
            raise fail(f"{go_quote(key)} weight must be an integer")
        if value < 0:
            raise fail(f"{go_quote(key)} weight must not be negative")
        if key not in weights:
            raise fail(f"unknown weight {go_quote(key)}")
        weights[key] = value
        seen.add(key)
    if not any(weights.values()):
        raise fail("at least one weight must be positive")
    return ScoringWeights(**weights)


def encode_scoring_weights(w: ScoringWeights) -> str:
    return f"slot={w.slot},core={w.core},memory={w.memory}"


# --------------------------------------------------------------------------- MIG allocations


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
    _require_str(text, MIG_ALLOCATIONS_ANNOTATION, none_ok=True)
    field = MIG_ALLOCATIONS_ANNOTATION
    if not text:
        return ()
    doc = _loads(text, field)
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError(
            f"json: cannot unmarshal {_JSON_KIND.get(type(doc), 'value')} into Go value of type []nvidia.MigAllocation",
            field=field, text=text,
        )
    out = []
    seen: set[tuple[int, int]] = set()
    for i, obj in enumerate(doc):
        if obj is None:
            obj = {}
        if type(obj) is not dict:
            raise _type_error(obj, "MigAllocations", "nvidia.MigAllocation", f"{field}[{i}]", text)
        if not obj.keys() <= set(_MIG_ALLOC_FIELDS):
            obj = _fold_keys(obj, _MIG_ALLOC_FIELDS)
        f = f"{field}[{i}]"
        ci = _int_field(obj, "containerIndex", _INT64, "MigAllocation.containerIndex", "int", f, text)
        di = _int_field(obj, "deviceIndex", _INT64, "MigAllocation.deviceIndex", "int", f, text)
        gpu = _str_field(obj, "gpuUUID", "MigAllocation.gpuUUID", f, text)
        profile = _str_field(obj, "profile", "MigAllocation.profile", f, text)
        placement = MigPlacement(0, 0)
        raw = obj.get("placement")
        if raw is not None:
            if type(raw) is not dict:
                raise _type_error(raw, "MigAllocation.placement", "device.MigPlacement", f, text)
            placement = _decode_placements([raw], f, text)[0]
        mig_uuid = _str_field(obj, "migUUID", "MigAllocation.migUUID", f, text)
        gi = obj.get("gpuInstanceID")
        ci_id = obj.get("computeInstanceID")
        for name, value in (("gpuInstanceID", gi), ("computeInstanceID", ci_id)):
            if value is not None and (type(value) is not int or not _UINT32[0] <= value <= _UINT32[1]):
                raise _type_error(value, f"MigAllocation.{name}", "uint32", f, text)
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


# --------------------------------------------------------------------------- small scalars


def encode_unix_seconds(ts: float) -> str:
    """`hami.io/vgpu-time` / `hami.io/bind-time`: decimal unix seconds."""
    return str(int(ts // 1))


def decode_unix_seconds(text: str, *, field: str = VGPU_TIME_ANNOTATION) -> int:
    """`hami.io/vgpu-time` / `hami.io/bind-time` back to an int (strconv.ParseInt)."""
    _require_str(text, field)
    value = _go_int(text, _INT64, "ParseInt")
    if isinstance(value, str):
        raise CodecError(value, field=field, text=text, position=0)
    return value
