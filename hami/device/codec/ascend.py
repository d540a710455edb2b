"""Huawei Ascend's allocation annotation `huawei.com/<commonWord>` (pkg/device/ascend PatchAnnotations).

The scheduler writes, beside the usual to-allocate/allocated pod device strings, the vNPU template
each chosen device runs: Go `json.Marshal([]RuntimeInfo)` with `UUID`, `temp` (the template
name, omitted when empty: a whole card), `memory` (MiB) and `core`, every field omitempty, e.g.
`[{"UUID":"npu-0","temp":"vir05_1c_16g","memory":16384,"core":5}]` or for a whole card
`[{"UUID":"npu-3","memory":65536}]` (HAMi v2.10.0, PR #2035; Test_PatchAnnotations); a pod in
HAMi-core mode gets no `temp`: `[{"UUID":"npu-0","memory":16384,"core":20}]`.
Ascend's register annotation is NVIDIA's JSON form under `hami.io/node-register-<commonWord>`,
so it needs no module of its own (`register.decode_node_devices_json`); its Ascend 910 devices
carry `"custominfo":{"NetworkID":<n>}` (the HAMi Ascend device plugin's register.go: the super-pod
network the NPU sits on), kept as `DeviceInfo.custom_info` and read by `network_ids`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import go_json_string, json_loads


def encode_runtime_info(items: Iterable[tuple]) -> str:
    """`[(uuid, template), ...]` or `[(uuid, template, memory, core), ...]` as Go marshals
    `[]RuntimeInfo` (omitempty on every field; a nil slice is `null`)."""
    parts = []
    for item in items:
        uuid, temp = item[0], item[1]
        memory, core = (item[2], item[3]) if len(item) > 2 else (0, 0)
        fields = []
        if uuid:
            fields.append('"UUID":' + go_json_string(uuid))
        if temp:
            fields.append('"temp":' + go_json_string(temp))
        if memory:
            fields.append(f'"memory":{int(memory)}')
        if core:
            fields.append(f'"core":{int(core)}')
        parts.append("{" + ",".join(fields) + "}")
    return "[" + ",".join(parts) + "]" if parts else "null"


def decode_runtime_info(text: str, *, field: str = "huawei.com/Ascend", full: bool = False) -> tuple[tuple, ...]:
    """The inverse of `encode_runtime_info`: `((uuid, template), ...)`, or with `full`
    `((uuid, template, memory, core), ...)` (memory int64, core int32, absent = 0)."""
    doc = json_loads(text, field)
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
        if not full:
            out.append((uuid, temp))
            continue
        nums = []
        for key, bits in (("memory", 64), ("core", 32)):
            n = obj.get(key) or 0
            if type(n) is not int or not -(1 << (bits - 1)) <= n < 1 << (bits - 1):
                raise CodecError(f"runtime info entry {i}: {key} must be an int{bits}, got {n!r}",
                                 field=f"{field}[{i}].{key}", text=text)
            nums.append(n)
        out.append((uuid, temp, nums[0], nums[1]))
    return tuple(out)


NETWORK_ID = "NetworkID"


def network_ids(devices: Iterable) -> Mapping[str, int | None] | None:
    """`{device id: NetworkID}` for the devices whose custominfo names a NetworkID (None when
    none does). HAMi reads the value as a JSON number (Go `.(float64)`, then `int()`: truncated);
    a NetworkID that is not a number maps to None: present (hasNetworkID holds) but never
    grouped or counted (pkg/device/ascend/device.go hasNetworkID, computeBestCombination, ScoreNode)."""
    out: dict[str, int | None] = {}
    for d in devices:
        text = d.custom_info
        if not text or NETWORK_ID not in text:
            continue
        info = orjson.loads(text)  # our own canonical form of an object: cannot fail
        if NETWORK_ID in info:
            v = info[NETWORK_ID]
            out[d.id] = int(v) if type(v) in (int, float) else None
    return out or None
