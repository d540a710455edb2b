"""Enflame DRS vGCU (pkg/device/enflame/device.go at HAMi v2.10.0): the node's DRS capacity and
its profiles.

Enflame's device plugin writes the node annotation `enflame.com/gcu-drs-capacity`:
`{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1"}}`.
Each device becomes one schedulable card: `count` = its capacity in DRS slices, memory the largest
profile's GB x 1024, cores 100, id `<node>-enflame-drs-<index>`, and a custominfo that carries its
index, minor, the profiles and the largest slice (as HAMi's GetNodeDevices builds it; Go's
json.Marshal of that map, keys sorted). A profile `<size>g.<mem>gb` takes `size` slices, `mem` GB
and `ceil(size x 100 / largest size)` percent of the cores.

`drs_node(devices)` gathers what the fit and the allocation annotations need of a node: the
profiles as candidates, smallest first, and each card's index and minor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import go_json_value
from hami.device.model import DeviceInfo

DRS_CAPACITY = "enflame.com/gcu-drs-capacity"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS = "assigned-containers"
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


def _atoi(text: str) -> int | None:
    """Go strconv.Atoi on a 64-bit int: an optional sign and ASCII digits, in range; else None."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    n = int(text)
    return n if -_INT64_MAX - 1 <= n <= _INT64_MAX else None


def _clamp32(n: int) -> int:
    return max(min(n, _INT32_MAX), -_INT32_MAX - 1)


def parse_profile(name: str) -> tuple[int, int]:
    """parseProfile: `<size>g.<mem>gb` (case and spaces ignored) -> (slices, GB); (0, 0) when the
    size does not parse, (size, 0) when the memory does not."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size_text = parts[0].strip()
    size = _atoi(size_text[:-1] if size_text.endswith("g") else size_text)
    if size is None:
        return 0, 0
    mem_text = parts[1].strip()
    mem = _atoi(mem_text[:-2] if mem_text.endswith("gb") else mem_text)
    return size, (mem if mem is not None else 0)


def _capacity(raw, node: str) -> int:
    """parseDRSCapacity: a JSON number (NaN/out of int32 refused), or a numeric string (clamped)."""
    if type(raw) is bool or raw is None:
        raise CodecError(f"invalid drs capacity on node {node}", field=DRS_CAPACITY, text=str(raw))
    if isinstance(raw, (int, float)):
        if raw != raw or not -_INT32_MAX - 1 <= raw <= _INT32_MAX:
            raise CodecError(f"invalid drs capacity on node {node}", field=DRS_CAPACITY, text=str(raw))
        return int(raw)
    if isinstance(raw, str):
        n = _atoi(raw.strip())
        if n is None:
            raise CodecError(f"invalid drs capacity on node {node}", field=DRS_CAPACITY, text=str(raw))
        return _clamp32(n)
    raise CodecError(f"invalid drs capacity on node {node}", field=DRS_CAPACITY, text=str(raw))


def decode_drs_capacity(node: str, text: str, *, vendor: str = "Enflame") -> tuple[DeviceInfo, ...]:
    """GetNodeDevices: the node's DRS cards; CodecError naming the annotation when it is no such
    object, names no valid profile, or a card's capacity is not a positive number."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"failed to parse {DRS_CAPACITY}: {exc}", field=DRS_CAPACITY, text=text) from None
    if type(doc) is not dict:
        raise CodecError(f"failed to parse {DRS_CAPACITY}: want an object", field=DRS_CAPACITY, text=text)
    profiles = doc.get("profiles") or {}
    devices = doc.get("devices") or []
    if type(profiles) is not dict or not all(type(v) is str for v in profiles.values()) or type(devices) is not list:
        raise CodecError(f"failed to parse {DRS_CAPACITY}: profiles must map names to ids, devices be a list",
                         field=DRS_CAPACITY, text=text)
    sizes = [parse_profile(name) for name in profiles]
    max_slice = max((s for s, _ in sizes), default=0)
    max_mem = max((m for _, m in sizes), default=0)
    if max_slice <= 0:
        raise CodecError(f"no valid drs profiles found on node {node}", field=DRS_CAPACITY, text=text)
    if max_mem <= 0:
        max_mem = max_slice
    out = []
    for pos, d in enumerate(devices):
        if type(d) is not dict:
            raise CodecError(f"failed to parse {DRS_CAPACITY}: devices[{pos}] is not an object",
                             field=DRS_CAPACITY, text=text)
        if any(k in d and type(d[k]) is not str for k in ("index", "minor")):
            raise CodecError(f"failed to parse {DRS_CAPACITY}: devices[{pos}].index and .minor are strings",
                             field=DRS_CAPACITY, text=text)  # Go's drsDeviceSpec fields are strings
        index = _atoi(d.get("index", ""))
        index = pos if index is None or index < 0 else index
        capacity = _capacity(d.get("capacity"), node)
        if capacity <= 0:
            raise CodecError(f"invalid drs capacity on node {node}", field=DRS_CAPACITY, text=text)
        minor = d.get("minor", "").strip() or str(index)
        info = {"index": str(index), "maxSlice": max_slice, "minor": minor, "profiles": profiles}
        out.append(DeviceInfo(id=f"{node}-enflame-drs-{index}", count=capacity, devmem=_clamp32(max_mem * 1024),
                              devcore=100, type=vendor, index=index, numa=0, mode="", health=True, vendor=vendor,
                              custom_info=go_json_value(info)))
    if not out:
        raise CodecError(f"no drs devices found on node {node}", field=DRS_CAPACITY, text=text)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Profile:
    """A DRS profile as the fit offers it (collectDRSProfiles' drsProfileCandidate)."""

    name: str
    id: str
    size: int  # slices
    memory_gb: int
    core_percent: int


@dataclass(frozen=True, slots=True)
class DrsNode:
    profiles: tuple[Profile, ...]  # smallest first (size, then memory)
    cards: Mapping[str, tuple[str, str]]  # card id -> (index, minor)


def drs_node(devices: Iterable[DeviceInfo]) -> DrsNode | None:
    """collectDRSProfiles over a node's DRS cards (their custominfo); None when none is one."""
    infos = []
    for d in devices:
        if d.custom_info and '"profiles"' in d.custom_info:
            info = orjson.loads(d.custom_info)
            if type(info.get("profiles")) is dict:
                infos.append((d.id, info))
    if not infos:
        return None
    max_slice = max((m for _, i in infos for m in (i.get("maxSlice"),) if type(m) is int), default=0)
    if max_slice <= 0:
        max_slice = max((parse_profile(n)[0] for _, i in infos for n in i["profiles"]), default=0)
    seen: dict[str, Profile] = {}
    if max_slice > 0:
        for _, info in infos:
            for name, pid in info["profiles"].items():
                size, mem = parse_profile(name)
                if size <= 0 or mem <= 0 or type(pid) is not str:
                    continue
                seen[name] = Profile(name, pid, size, mem, math.ceil(size * 100 / max_slice))
    profiles = tuple(sorted(seen.values(), key=lambda p: (p.size, p.memory_gb, p.name)))
    cards = {cid: (str(i.get("index", "")), str(i.get("minor", ""))) for cid, i in infos}
    return DrsNode(profiles, cards)


def choose_profile(node: DrsNode, memreq: int, coresreq: int, direct: bool) -> Profile | None:
    """selectProfileByRequest: a direct request names the slices (the first profile of that size);
    otherwise the smallest profile with the memory (GB, or MiB when the number is over twice the
    largest profile's GB) and the core percent asked."""
    if not node.profiles:
        return None
    if direct:
        return next((p for p in node.profiles if p.size == memreq), None)
    max_gb = node.profiles[-1].memory_gb
    want_gb = 0
    if memreq > 0:
        want_gb = math.ceil(memreq / 1024) if max_gb > 0 and memreq > max_gb * 2 else memreq
    for p in node.profiles:
        if want_gb > 0 and p.memory_gb < want_gb:
            continue
        if coresreq > 0 and p.core_percent < coresreq:
            continue
        return p
    return None


def profile_of(node: DrsNode | None, usedmem: int, usedcores: int) -> Profile | None:
    """The profile a chosen card was given (its MiB and core percent), for the annotations."""
    if node is None:
        return None
    return next((p for p in node.profiles if p.memory_gb * 1024 == usedmem and p.core_percent == usedcores), None)
