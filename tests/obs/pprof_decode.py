"""A tiny profile.proto decoder for tests: just enough to check what hami.obs.profiling.encoder writes."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field


class DecodeError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise DecodeError(f"truncated varint at {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) in order; wire types 0 and 2 only."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val = buf[pos:pos + n]
            if len(val) != n:
                raise DecodeError("truncated bytes field")
            pos += n
        else:
            raise DecodeError(f"unexpected wire type {wt} for field {num}")
        out.append((num, wt, val))
    return out


def _ints(wt: int, val) -> list[int]:
    if wt == 0:
        return [val]
    out, pos = [], 0
    while pos < len(val):
        v, pos = _varint(val, pos)
        out.append(v)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass
class Decoded:
    strings: list[str] = field(default_factory=list)
    sample_types: list[tuple[str, str]] = field(default_factory=list)
    # each sample: (list of (function name, filename, line) leaf first, values, labels)
    samples: list[tuple[list[tuple[str, str, int]], list[int], dict[str, str | int]]] = field(default_factory=list)
    period_type: tuple[str, str] | None = None
    period: int = 0
    time_nanos: int = 0
    duration_nanos: int = 0
    comments: list[str] = field(default_factory=list)
    default_sample_type: str = ""
    function_ids: list[int] = field(default_factory=list)
    location_ids: list[int] = field(default_factory=list)

    def total(self, type_name: str) -> int:
        i = [t for t, _ in self.sample_types].index(type_name)
        return sum(v[i] for _, v, _ in self.samples)

    def flat(self, type_name: str) -> dict[str, int]:
        """Leaf function -> summed value, like the `flat` column of `pprof -top`."""
        i = [t for t, _ in self.sample_types].index(type_name)
        out: dict[str, int] = {}
        for stack, values, _ in self.samples:
            if stack:
                out[stack[0][0]] = out.get(stack[0][0], 0) + values[i]
        return out

    def cum(self, type_name: str) -> dict[str, int]:
        i = [t for t, _ in self.sample_types].index(type_name)
        out: dict[str, int] = {}
        for stack, values, _ in self.samples:
            for name in {f[0] for f in stack}:
                out[name] = out.get(name, 0) + values[i]
        return out


def decode(data: bytes) -> Decoded:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    top = fields(data)
    d = Decoded()
    d.strings = [v.decode() for n, wt, v in top if n == 6]
    if not d.strings or d.strings[0] != "":
        raise DecodeError("string_table[0] must be empty")
    s = d.strings
    functions: dict[int, tuple[str, str]] = {}
    locations: dict[int, list[tuple[int, int]]] = {}
    raw_samples = []
    for n, wt, v in top:
        if n == 1:
            f = dict((k, val) for k, _, val in fields(v))
            d.sample_types.append((s[f.get(1, 0)], s[f.get(2, 0)]))
        elif n == 2:
            raw_samples.append(v)
        elif n == 4:
            loc_id, lines = 0, []
            for k, _, val in fields(v):
                if k == 1:
                    loc_id = val
                elif k == 4:
                    lf = dict((kk, vv) for kk, _, vv in fields(val))
                    lines.append((lf.get(1, 0), lf.get(2, 0)))
            if loc_id in locations or loc_id == 0:
                raise DecodeError(f"bad or duplicate location id {loc_id}")
            locations[loc_id] = lines
            d.location_ids.append(loc_id)
        elif n == 5:
            f = dict((k, val) for k, _, val in fields(v))
            fid = f.get(1, 0)
            if fid in functions or fid == 0:
                raise DecodeError(f"bad or duplicate function id {fid}")
            functions[fid] = (s[f.get(2, 0)], s[f.get(4, 0)])
            d.function_ids.append(fid)
        elif n == 9:
            d.time_nanos = _signed(v)
        elif n == 10:
            d.duration_nanos = _signed(v)
        elif n == 11:
            f = dict((k, val) for k, _, val in fields(v))
            d.period_type = (s[f.get(1, 0)], s[f.get(2, 0)])
        elif n == 12:
            d.period = _signed(v)
        elif n == 13:
            d.comments.extend(s[i] for i in _ints(wt, v))
        elif n == 14:
            d.default_sample_type = s[v]
    for raw in raw_samples:
        loc_ids, values, labels = [], [], {}
        for k, wt, val in fields(raw):
            if k == 1:
                loc_ids.extend(_ints(wt, val))
            elif k == 2:
                values.extend(_signed(x) for x in _ints(wt, val))
            elif k == 3:
                lf = dict((kk, vv) for kk, _, vv in fields(val))
                labels[s[lf.get(1, 0)]] = s[lf[2]] if 2 in lf else _signed(lf.get(3, 0))
        if len(values) != len(d.sample_types):
            raise DecodeError(f"sample has {len(values)} values for {len(d.sample_types)} types")
        stack = []
        for lid in loc_ids:
            for fid, line in locations[lid]:
                name, filename = functions[fid]
                stack.append((name, filename, line))
        d.samples.append((stack, values, labels))
    return d
