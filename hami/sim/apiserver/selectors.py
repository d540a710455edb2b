"""Kubernetes label and field selectors: parse once, match many objects. Pure.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not
exist), `k>n`, `k<n`, joined by commas (all must hold). Field selectors: `f=v`, `f==v`, `f!=v`, joined
by commas, with `\\,`, `\\=` and `\\\\` escapes in values; the allowed field names are the caller's.
Every parse error is a `SelectorError` naming the selector kind and the offending text.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector does not parse: names which selector ("labelSelector"/"fieldSelector") and the text."""

    def __init__(self, selector: str, text: str, problem: str):
        self.selector, self.text, self.problem = selector, text, problem
        super().__init__(f"{selector} {text!r}: {problem}")


# A label key: optional DNS-subdomain prefix and a name; values are names or empty.
_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(_VALUE)
_REQ_RE = re.compile(
    rf"^\s*(?:(?P<not>!)\s*(?P<nkey>{_KEY})"
    rf"|(?P<key>{_KEY})\s*(?:(?P<op>==|=|!=|>|<)\s*(?P<val>[^,\s]*)"
    rf"|\s+(?P<setop>in|notin)\s*\((?P<set>[^()]*)\))?)\s*$"
)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "=":
            return labels.get(self.key) in self.values
        if op == "!=":
            return labels.get(self.key) not in self.values
        if op == "in":
            return self.key in labels and labels[self.key] in self.values
        if op == "notin":
            return labels.get(self.key) not in self.values
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have, want = int(value), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > want if op == ">" else have < want


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector; the empty selector (None or "") matches everything."""
    if not text or not text.strip():
        return ()
    if text.count("(") != text.count(")"):
        raise SelectorError("labelSelector", text, "unbalanced parentheses")
    reqs = []
    for part in _split_top(text):
        m = _REQ_RE.match(part)
        if not m:
            raise SelectorError("labelSelector", text, f"cannot parse requirement {part.strip()!r}")
        if m["not"]:
            reqs.append(Requirement(m["nkey"], "!"))
            continue
        key = m["key"]
        if m["setop"]:
            vals = [v.strip() for v in m["set"].split(",")]
            for v in vals:
                if not _VALUE_RE.fullmatch(v):
                    raise SelectorError("labelSelector", text, f"invalid value {v!r} for {key}")
            reqs.append(Requirement(key, m["setop"], frozenset(vals)))
        elif m["op"]:
            op, val = m["op"], m["val"]
            if op in (">", "<"):
                if not re.fullmatch(r"-?\d+", val):
                    raise SelectorError("labelSelector", text, f"{key}{op}{val}: value must be an integer")
            elif not _VALUE_RE.fullmatch(val):
                raise SelectorError("labelSelector", text, f"invalid value {val!r} for {key}")
            reqs.append(Requirement(key, "=" if op == "==" else op, frozenset((val,))))
        else:
            reqs.append(Requirement(key, "exists"))
    return tuple(reqs)


def labels_match(reqs: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    if not reqs:
        return True
    labels = labels or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    negate: bool
    value: str
    parts: tuple[str, ...] = ()  # field.split("."), filled by the parser

    def matches(self, obj: Mapping[str, Any]) -> bool:
        cur: Any = obj
        for part in self.parts or self.field.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
            if cur is None:
                return ("" == self.value) != self.negate
        if not isinstance(cur, str):
            cur = _stringify(cur)
        return (cur == self.value) != self.negate


def _split_escaped(text: str, sep: str) -> list[str]:
    """Split on `sep` not preceded by a backslash escape; keeps escapes in place."""
    parts, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str, whole: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise SelectorError("fieldSelector", whole, f"invalid escape in {text!r}")
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str | None, allowed: Collection[str] | None = None) -> tuple[FieldRequirement, ...]:
    """Parse a field selector; `allowed` (if given) is the set of field labels the resource supports."""
    if not text:
        return ()
    reqs = []
    for part in _split_escaped(text, ","):
        if not part:
            continue  # as the real server does: empty terms are skipped
        m = re.match(r"^([^=!\\]+?)(==|!=|=)(.*)$", part, re.S)
        if not m:
            raise SelectorError("fieldSelector", text, f"cannot parse requirement {part!r}")
        field, op, raw = m.group(1), m.group(2), m.group(3)
        if allowed is not None and field not in allowed:
            raise SelectorError("fieldSelector", text, f'field label not supported: "{field}"')
        reqs.append(FieldRequirement(field, op == "!=", _unescape(raw, text), tuple(field.split("."))))
    return tuple(reqs)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field as the API server compares it ("" when absent)."""
    return _value_at(obj, tuple(path.split(".")))


def _value_at(obj: Mapping[str, Any], parts: tuple[str, ...]) -> str:
    cur: Any = obj
    for part in parts:
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    return cur if isinstance(cur, str) else _stringify(cur)


def _stringify(cur: Any) -> str:
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, Mapping):
        # `source` on core/v1 Events selects on source.component.
        return str(cur.get("component", ""))
    return str(cur)


def fields_match(reqs: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    for r in reqs:
        if not r.matches(obj):
            return False
    return True


def matches(labels: tuple[Requirement, ...], fields: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    """Both selectors hold for `obj` (a raw object dict)."""
    if labels and not labels_match(labels, (obj.get("metadata") or {}).get("labels")):
        return False
    return not fields or fields_match(fields, obj)
