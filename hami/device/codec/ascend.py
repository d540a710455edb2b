"""Huawei Ascend's allocation annotation `huawei.com/<commonWord>` (pkg/device/ascend PatchAnnotations).

The scheduler writes, beside the usual to-allocate/allocated pod device strings, the vNPU template
each chosen device runs: Go `json.Marshal([]RuntimeInfo)` with `UUID` and `temp` (the template
name, omitted when empty: a whole card), e.g. `[{"UUID":"npu-0","temp":"vir05_1c_16g"}]`.
Ascend's register annotation is NVIDIA's JSON form under `hami.io/node-register-<commonWord>`,
so it needs no module of its own (`register.decode_node_devices_json`).
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import _loads, go_json_string


def encode_runtime_info(items: Iterable[tuple[str, str]]) -> str:
    """`[(uuid, template), ...]` as Go marshals `[]RuntimeInfo` (omitempty on both fields; a nil
    slice is `null`)."""
    parts = []
    for uuid, temp in items:
        fields = []
        if uuid:
            fields.append('"UUID":' + go_json_string(uuid))
        if temp:
            fields.append('"temp":' + go_json_string(temp))
        parts.append("{" + ",".join(fields) + "}")
    return "[" + ",".join(parts) + "]" if parts else "null"


def decode_runtime_info(text: str, *, field: str = "huawei.com/Ascend") -> tuple[tuple[str, str], ...]:
    """The inverse of `encode_runtime_info`: `((uuid, template), ...)`."""
    doc = _loads(text, field)
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError("json: cannot unmarshal into Go value of type []ascend.RuntimeInfo", field=field, text=text)
    out = []
    for i, obj in enumerate(doc):
        if type(obj) is not dict:
            raise CodecError(f"runtime info entry {i} is not an object", field=f"{field}[{i}]", text=text)
        uuid, temp = obj.get("UUID") or "", obj.get("temp") or ""
        if type(uuid) is not str or type(temp) is not str:
            raise CodecError(f"runtime info entry {i}: UUID and temp must be strings", field=f"{field}[{i}]",
                             text=text)
        out.append((uuid, temp))
    return tuple(out)
