"""A small seeded mutational fuzzer for JSON request bodies and annotation text (pure, seeded).

`bodies(seed_doc, n, seed)` yields `n` byte strings derived from a valid document: values replaced
by values of other types (null, bools, 64-bit-overflowing ints, floats, unicode and lone
surrogates, lists, objects), keys deleted, subtrees nested thousands deep, and on top of that
byte-level damage (truncation, flipped bytes, invalid UTF-8), plus a few huge bodies.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator

UNICODE = ["é", "日本語", "🚀", "\u0000", "\u202e", "\ufeff", "\ud800", "Ω" * 50, "\n\t\r", "a/b", "..", "%00"]


def rand_string(rng: random.Random) -> str:
    k = rng.randrange(5)
    if k == 0:
        return ""
    if k == 1:
        return "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 4)))
    if k == 2:
        return rng.choice(["1e9999", "-5", "0x10", "NaN", "1Gi", "99999999999999999999", "3.5", " 7 ", "-0"])
    if k == 3:
        return "x" * rng.choice((64, 254, 4096, 70000))
    return "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 12)))


def rand_value(rng: random.Random, depth: int = 0):
    k = rng.randrange(10 if depth < 3 else 6)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return rng.choice([0, -1, 1, 2**31, 2**63 - 1, -(2**63), 2**64, 10**30, -(10**30)])
    if k == 3:
        return rng.choice([0.5, -0.0, 1e308, -1e308, 3.0])
    if k in (4, 5):
        return rand_string(rng)
    if k in (6, 7):
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if k == 8:
        return {rand_string(rng): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return nested(rng.choice((10, 100, 600)))


def nested(depth: int):
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def _paths(doc, prefix=()):
    yield prefix
    if len(prefix) > 12:
        return
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value, delete=False):
    if not path:
        return value
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


def mutate_doc(rng: random.Random, doc):
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        op = rng.randrange(4)
        if op == 0 and path:
            doc = _set(doc, path, None, delete=True)
        elif op == 1:
            doc = _set(doc, path, rand_value(rng))
        elif op == 2 and path:
            doc = _set(doc, path, rand_string(rng))
        else:
            doc = _set(doc, path, nested(rng.choice((50, 900, 3000))) if rng.random() < 0.3 else rand_value(rng))
    return doc


def damage(rng: random.Random, raw: bytes) -> bytes:
    k = rng.randrange(4)
    if k == 0:
        return raw[: rng.randrange(len(raw) + 1)]
    if k == 1:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if k == 2:
        i = rng.randrange(len(raw) + 1)
        return raw[:i] + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"}}]]"]) + raw[i:]
    return b"[" * rng.choice((10, 2000, 100000))


def bodies(seed_doc, n: int, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for i in range(n):
        if i < 3:
            yield [b"", b"null", b"{}"][i]
            continue
        doc = mutate_doc(rng, seed_doc)
        try:
            raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        except (ValueError, RecursionError):
            raw = b'{"deep":' + b"[" * 5000
        if rng.random() < 0.35:
            raw = damage(rng, raw)
        yield raw


def damage_text(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(chars) + 1)
        if op == 0:
            chars = chars[:i]
        elif op == 1 and chars:
            chars[min(i, len(chars) - 1)] = rng.choice(",:;[]{}\"-0.9eE \x00é🚀\ud800\\")
        elif op == 2:
            chars.insert(i, rng.choice(["-1", "99999999999999999999", "NaN", ",", ":", ";", "null", "\"", "1e999"]))
        elif op == 3 and chars:
            del chars[min(i, len(chars) - 1)]
        else:
            chars = chars * rng.randint(2, 3)
    return "".join(chars)
