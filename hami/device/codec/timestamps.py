"""The annotations that carry a time: `hami.io/node-handshake` (`Requesting_<2006-01-02 15:04:05>`,
legacy `Reported <Go time>`, `Deleted_<...>`), `hami.io/mutex.lock` (`<RFC3339>,<ns>,<pod>`, legacy
bare RFC3339) and `hami.io/vgpu-time` / `hami.io/bind-time` (decimal unix seconds).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    INT64,
    go_int,
    go_quote,
    require_str,
)
from hami.device.codec.keys import (
    HANDSHAKE_ANNOTATION,
    NODE_LOCK_ANNOTATION,
    VGPU_TIME_ANNOTATION,
)
from hami.device.model import (
    Handshake,
    NodeLock,
)

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
    require_str(text, field)
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
    require_str(text, field)
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
    require_str(text, field)
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


def format_micro_time(ts: float) -> str:
    """metav1.MicroTime as the API server writes it: UTC, six fractional digits, `Z`."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def kube_time(text: object) -> float | None:
    """A metav1.Time or MicroTime read back (RFC 3339, a fraction allowed) as Unix seconds; None when
    it is absent or not one. For fields where a bad value means "unknown", never an error."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_rfc3339(text, field="time")
    except CodecError:
        return None


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
    require_str(text, NODE_LOCK_ANNOTATION)
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


# --------------------------------------------------------------------------- unix seconds


def encode_unix_seconds(ts: float) -> str:
    """`hami.io/vgpu-time` / `hami.io/bind-time`: decimal unix seconds."""
    return str(int(ts // 1))


def decode_unix_seconds(text: str, *, field: str = VGPU_TIME_ANNOTATION) -> int:
    """`hami.io/vgpu-time` / `hami.io/bind-time` back to an int (strconv.ParseInt)."""
    require_str(text, field)
    value = go_int(text, INT64, "ParseInt")
    if isinstance(value, str):
        raise CodecError(value, field=field, text=text, position=0)
    return value
