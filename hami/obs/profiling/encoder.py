"""A compact encoder for google/pprof's `profile.proto`, gzipped as `go tool pprof` expects.

Pure: values in, bytes out. Protobuf is written by hand (varints and length-delimited fields);
the field numbers are those of `proto/profile.proto` (see ../shared/spec/protocols.md §1):

    Profile  sample_type=1 sample=2 mapping=3 location=4 function=5 string_table=6
             time_nanos=9 duration_nanos=10 period_type=11 period=12 comment=13
             default_sample_type=14
    ValueType type=1 unit=2          Sample location_id=1 value=2 label=3
    Label    key=1 str=2 num=3 num_unit=4
    Location id=1 mapping_id=2 address=3 line=4     Line function_id=1 line=2
    Function id=1 name=2 system_name=3 filename=4 start_line=5

A stack is a tuple of `Frame`s, leaf first (the order pprof wants). Functions and locations are
deduplicated; string index 0 is "" as the format requires.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


class PprofError(ValueError):
    """A profile cannot be encoded: names the field and the offending value."""

    def __init__(self, field_name: str, value: object, expected: str):
        self.field_name, self.value, self.expected = field_name, value, expected
        super().__init__(f"pprof: {field_name}: got {value!r}, expected {expected}")


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame: a function (name, file, first line) at a line."""

    function: str
    filename: str = ""
    line: int = 0
    start_line: int = 0


@dataclass(slots=True)
class Sample:
    stack: tuple[Frame, ...]  # leaf first
    values: tuple[int, ...]  # one per sample type
    labels: Mapping[str, str] = field(default_factory=dict)
    num_labels: Mapping[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Profile:
    sample_types: tuple[tuple[str, str], ...]  # (type, unit), e.g. ("cpu", "nanoseconds")
    samples: list[Sample] = field(default_factory=list)
    period_type: tuple[str, str] | None = None
    period: int = 0
    time_nanos: int = 0
    duration_nanos: int = 0
    comments: tuple[str, ...] = ()
    default_sample_type: str = ""


# --------------------------------------------------------------------------- wire primitives

_U64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    """Protobuf base-128 varint; negative int64 values are written as 64-bit two's complement."""
    if n < 0:
        n &= _U64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field_no: int, wire_type: int) -> bytes:
    return varint((field_no << 3) | wire_type)


def _int_field(field_no: int, value: int) -> bytes:
    """A varint field, omitted when zero (proto3 default)."""
    return _key(field_no, 0) + varint(value) if value else b""


def _bytes_field(field_no: int, payload: bytes) -> bytes:
    return _key(field_no, 2) + varint(len(payload)) + payload


def _packed(field_no: int, values: Iterable[int]) -> bytes:
    body = b"".join(varint(v) for v in values)
    return _bytes_field(field_no, body) if body else b""


# --------------------------------------------------------------------------- encoder


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}
        self.table: list[str] = [""]

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


def _check_int(name: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not -(1 << 63) <= v < (1 << 64):
        raise PprofError(name, v, "an integer that fits 64 bits")
    return v


def encode_profile(profile: Profile) -> bytes:
    """The serialized (not yet gzipped) `Profile` message."""
    if not profile.sample_types:
        raise PprofError("sample_types", profile.sample_types, "at least one (type, unit) pair")
    strings = _Strings()
    nvalues = len(profile.sample_types)
    functions: dict[tuple[str, str, int], int] = {}
    locations: dict[tuple[int, int], int] = {}
    parts: list[bytes] = []

    for typ, unit in profile.sample_types:
        parts.append(_bytes_field(1, _int_field(1, strings(typ)) + _int_field(2, strings(unit))))

    func_msgs: list[bytes] = []
    loc_msgs: list[bytes] = []
    for i, sample in enumerate(profile.samples):
        if len(sample.values) != nvalues:
            raise PprofError(f"samples[{i}].values", sample.values, f"{nvalues} values, one per sample type")
        loc_ids = []
        for frame in sample.stack:
            if not isinstance(frame, Frame):
                raise PprofError(f"samples[{i}].stack", frame, "a Frame")
            fkey = (frame.function, frame.filename, frame.start_line)
            fid = functions.get(fkey)
            if fid is None:
                fid = functions[fkey] = len(functions) + 1
                name = strings(frame.function)
                func_msgs.append(_bytes_field(5, (
                    _int_field(1, fid) + _int_field(2, name) + _int_field(3, name)
                    + _int_field(4, strings(frame.filename))
                    + _int_field(5, _check_int(f"samples[{i}].stack.start_line", frame.start_line))
                )))
            lkey = (fid, frame.line)
            lid = locations.get(lkey)
            if lid is None:
                lid = locations[lkey] = len(locations) + 1
                line = _int_field(1, fid) + _int_field(2, _check_int(f"samples[{i}].stack.line", frame.line))
                loc_msgs.append(_bytes_field(4, _int_field(1, lid) + _bytes_field(4, line)))
            loc_ids.append(lid)
        body = _packed(1, loc_ids)
        body += _packed(2, (_check_int(f"samples[{i}].values", v) for v in sample.values))
        for k, v in sample.labels.items():
            body += _bytes_field(3, _int_field(1, strings(k)) + _int_field(2, strings(str(v))))
        for k, n in sample.num_labels.items():
            num_labels = _check_int(f"samples[{i}].num_labels", n)
            body += _bytes_field(3, _int_field(1, strings(k)) + _int_field(3, num_labels))
        parts.append(_bytes_field(2, body))

    parts.extend(loc_msgs)
    parts.extend(func_msgs)
    tail = _int_field(9, _check_int("time_nanos", profile.time_nanos))
    tail += _int_field(10, _check_int("duration_nanos", profile.duration_nanos))
    if profile.period_type is not None:
        typ, unit = profile.period_type
        tail += _bytes_field(11, _int_field(1, strings(typ)) + _int_field(2, strings(unit)))
    tail += _int_field(12, _check_int("period", profile.period))
    comment_ids = [strings(c) for c in profile.comments]
    if comment_ids:
        tail += _packed(13, comment_ids)
    if profile.default_sample_type:
        tail += _int_field(14, strings(profile.default_sample_type))
    # the string table last: every index above is now assigned
    table = b"".join(_bytes_field(6, s.encode("utf-8", "replace")) for s in strings.table)
    return b"".join(parts) + table + tail


def encode_gzip(profile: Profile) -> bytes:
    """What a /debug/pprof endpoint returns: the gzipped profile (mtime 0, deterministic)."""
    return gzip.compress(encode_profile(profile), compresslevel=6, mtime=0)


def merge_samples(samples: Sequence[Sample]) -> list[Sample]:
    """Sum the values of samples that share a stack and labels (keeps first-seen order)."""
    merged: dict[tuple, Sample] = {}
    for s in samples:
        key = (s.stack, tuple(sorted(s.labels.items())), tuple(sorted(s.num_labels.items())))
        have = merged.get(key)
        if have is None:
            merged[key] = Sample(s.stack, tuple(s.values), dict(s.labels), dict(s.num_labels))
        else:
            have.values = tuple(a + b for a, b in zip(have.values, s.values, strict=True))
    return list(merged.values())
