"""Go semantics the wire formats lean on: strconv ints and bools, strings.TrimSpace, strconv.Quote,
encoding/json string escaping and its field-type errors. Shared by the format modules of this package.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal

import orjson

from hami.device.codec.errors import CodecError

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
UINT32 = (0, (1 << 32) - 1)
UINT64 = (0, (1 << 64) - 1)


# Go's unicode.IsSpace set (strings.TrimSpace); Python's str.strip() also strips \x1c-\x1f.
_GO_SPACE = (
    " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_GO_INT_RE = re.compile(r"[+-]?[0-9]+")
GO_BOOLS = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}


def go_trim_space(text: str) -> str:
    """strings.TrimSpace."""
    return text.strip(_GO_SPACE)


def _go_upper_rune(ch: str) -> str:
    """unicode.ToUpper: the simple (one rune to one rune) mapping. Python's str.upper() uses the
    full mapping where one exists ("ß" -> "SS", "ﬁ" -> "FI"); Go keeps such a rune unless it has a
    simple uppercase, which for these letters is their one-rune titlecase ("ᾀ" -> "ᾈ")."""
    up = ch.upper()
    if len(up) == 1:
        return up
    title = ch.title()
    return title if len(title) == 1 else ch


_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def go_to_upper(text: str) -> str:
    """strings.ToUpper: rune by rune, unicode.ToUpper (never changes the length in runes)."""
    if text.isascii():
        return text.translate(_ASCII_UPPER)
    return "".join(_go_upper_rune(c) for c in text)


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


def go_int(text: str, lo_hi: tuple[int, int], func: str) -> int | str:
    """strconv.ParseInt/Atoi: the value, or the strconv error text."""
    if _GO_INT_RE.fullmatch(text) is None:
        return f"strconv.{func}: parsing {go_quote(text)}: invalid syntax"
    value = int(text)
    if not lo_hi[0] <= value <= lo_hi[1]:
        return f"strconv.{func}: parsing {go_quote(text)}: value out of range"
    return value


def parse_go_int64(text: object) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go returns an error (a non-string included)."""
    if not isinstance(text, str):
        return None
    value = go_int(text, INT64, "ParseInt")
    return value if isinstance(value, int) else None


def parse_go_bool(text: str, *, field: str = "bool", position: int | None = None) -> bool:
    """strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False."""
    require_str(text, field)
    value = GO_BOOLS.get(text)
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


def require_str(text, field: str, *, none_ok: bool = False, bytes_ok: bool = False) -> None:
    """Decoders take annotation values, i.e. strings; anything else is a CodecError too."""
    if type(text) is str or (none_ok and text is None) or (bytes_ok and type(text) is bytes):
        return
    raise CodecError(f"expected a string, got {type(text).__name__}", field=field, text=repr(text)[:200])


def json_loads(text: str | bytes, field: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise CodecError(f"invalid JSON: {exc.msg}", field=field, text=shown, position=exc.pos) from None


JSON_KIND = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def type_error(value, go_field: str, go_type: str, field: str, text: str) -> CodecError:
    kind = JSON_KIND.get(type(value), "value")
    if kind == "number" and type(value) is int:
        kind = f"number {value}"
    elif kind == "number":
        kind = f"number {orjson.dumps(value).decode()}"
    return CodecError(
        f"json: cannot unmarshal {kind} into Go struct field {go_field} of type {go_type}",
        field=field, text=text,
    )


def fold_keys(obj: dict, names: Iterable[str]) -> dict:
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


def int_field(obj: dict, key: str, bounds: tuple[int, int], go_field: str, go_type: str, field: str, text: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:
        raise type_error(value, go_field, go_type, field, text)
    return value


def str_field(obj: dict, key: str, go_field: str, field: str, text: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if type(value) is not str:
        raise type_error(value, go_field, "string", field, text)
    return value


# Integers decoded by the thousand with few distinct values (a GPU model's memory, a common memory
# request): one object per value, not one per GPU or per pod. Bounded: a table grown to
# _SHARED_INTS_MAX distinct values (whoever chose them) starts again empty instead of growing; the
# values already handed out stay shared.
_SHARED_INTS: dict[int, int] = {}
_SHARED_INTS_MAX = 4096


def shared_int(value: int) -> int:
    """An int equal to `value`: the object other decodes of that value got, unless the table started again."""
    got = _SHARED_INTS.get(value)
    if got is not None:
        return got
    if len(_SHARED_INTS) >= _SHARED_INTS_MAX:
        _SHARED_INTS.clear()
    _SHARED_INTS[value] = value
    return value


def item_offset(items: list[str], idx: int) -> int:
    return sum(len(x) + 1 for x in items[:idx])


def go_json_value(value) -> str:
    """A decoded JSON value as Go `json.Marshal` writes it back after unmarshalling it into an
    `any` (what a `map[string]any` field such as DeviceInfo.CustomInfo round-trips to): every number
    is a float64 (shortest digits, `1e+21`/`1e-7` outside Go's plain-notation range), object keys
    sorted, strings HTML-safe escaped. Used to keep such a field byte-exact (encoding/json encode.go)."""
    kind = type(value)
    if kind is str:
        return go_json_string(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is int or kind is float:
        return _go_float(float(value))
    if kind is list:
        return "[" + ",".join(go_json_value(v) for v in value) + "]"
    if kind is dict:
        return "{" + ",".join(go_json_string(k) + ":" + go_json_value(value[k]) for k in sorted(value)) + "}"
    raise TypeError(f"not a JSON value: {kind.__name__}")


def _go_float(f: float) -> str:
    """encoding/json floatEncoder for float64: 'f' format, 'e' below 1e-6 or from 1e21 on,
    with the exponent's leading zero dropped (e-07 -> e-7)."""
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    if math.isinf(f) or math.isnan(f):
        raise ValueError(f"json: unsupported value: {f!r}")
    text = repr(f)  # shortest round-trip digits, as strconv's -1 precision
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        mant, _, exp = text.partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        if len(digits) < 2:
            digits = "0" + digits
        out = f"{mant}e{sign}{digits}"
        if sign == "-" and digits[0] == "0":
            out = f"{mant}e-{digits[1:]}"
        return out
    return format(Decimal(text).normalize(), "f")
