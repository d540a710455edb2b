"""The plainest HTTP/1.1 requests, recognised without a framework: the extender's hot verbs.

kube-scheduler sends /filter and /bind as `POST <path> HTTP/1.1` with a Content-Length body on a
kept-alive connection. aiohttp's per-request layer (request object, StreamReader, URL building,
response headers) costs about as much as reading and answering the bytes (as profiled), so
hami.httpguard answers those requests itself and hands every other one, with every byte still
unread, to aiohttp. This module only decides which is which (`parse_head`) and writes the answer's
bytes (`response`); it does no I/O.

`parse_head` accepts a strict subset and says DELEGATE for anything else, so whatever aiohttp would
refuse or treat specially (chunked bodies, Expect, compressed bodies, a missing Content-Length, any
of aiohttp's singleton headers twice (Content-Length, Host, Transfer-Encoding, User-Agent, ...), no
Host, more headers than aiohttp's parsers take, a header block over aiohttp's 8190 bytes, obs-fold,
a bare LF or CR, HTTP/1.0, a query string, other methods and paths, a body over the size limit)
still gets aiohttp's own answer. A head that is not whole yet is delegated as soon as a line of it
already could not be ours (a bare LF, a bad header line), so aiohttp answers its 400 at once instead
of the client waiting for the header deadline. tests/security/test_fast_http_differential.py holds
it to aiohttp's own parsers over generated requests. Header lines that matched once are kept (at
most 256) and looked up instead of matched again.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from email.utils import formatdate

from aiohttp.http_parser import SINGLETON_HEADERS

NEED_MORE = None  # the header block is not complete yet
DELEGATE = False  # not one of ours: aiohttp reads it

MAX_HEAD = 8190  # aiohttp's max_line_size / max_field_size default; longer heads go to aiohttp
_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?[ \t]*")
_PARTIAL_LINE = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+(?::[ \t]*(?:[\x21-\x7e][\x20-\x7e\t]*)?)?)?")
_DIGITS = re.compile(rb"[0-9]{1,15}")
# an unfinished Content-Length line whose value can still become one: llhttp refuses a non-digit the
# moment it arrives, before the line ends
_PARTIAL_LENGTH = re.compile(rb"content-length:[ \t]*[0-9]{0,15}[ \t]*", re.IGNORECASE)
_REFUSED = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"trailer"))
# headers aiohttp refuses to see twice in a request (400 "Duplicate ... header found")
_SINGLETONS = frozenset(name.lower().encode() for name in SINGLETON_HEADERS)
# aiohttp's servers take 128 header lines; its Python parser counts the request line and the blank
# line among them, so 126 headers is the most both of its parsers accept
MAX_HEADERS = 126
# Header lines already matched by _LINE, as (lower-cased name, value): kube-scheduler sends the same
# Host, User-Agent, Content-Type and Accept-Encoding lines request after request. Bounded; a client
# sending ever new lines only empties it.
_SEEN: dict[bytes, tuple[bytes, bytes]] = {}
_SEEN_MAX = 256



def forget_seen_lines() -> None:
    """Empty the cache of header lines already matched (the answer never depends on it)."""
    _SEEN.clear()


@dataclass(frozen=True, slots=True)
class Head:
    path: bytes
    body_at: int  # offset of the body's first byte
    length: int  # Content-Length
    keep_alive: bool


def parse_head(buf: bytes | bytearray, paths, max_body: int) -> Head | None | bool:
    """The head of the request at the start of `buf` when it is a plain POST to one of `paths`
    with a Content-Length of at most `max_body`; NEED_MORE while the head is incomplete and could
    still be one; DELEGATE otherwise."""
    if len(buf) < 6:
        return NEED_MORE if b"POST /".startswith(bytes(buf)) else DELEGATE
    if not buf.startswith(b"POST /"):
        return DELEGATE
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if end < 0:
        return NEED_MORE if len(buf) < MAX_HEAD + 4 and _could_be_ours(bytes(buf), paths) else DELEGATE
    lines = bytes(buf[:end]).split(b"\r\n")
    path = _our_path(lines[0], paths)
    if len(lines) > MAX_HEADERS + 1 or path is None:
        return DELEGATE
    got = _headers(lines)
    if got is DELEGATE:
        return DELEGATE
    length, hosts, keep_alive = got
    if length < 0 or length > max_body or hosts != 1:  # aiohttp answers 400 to HTTP/1.1 without a Host
        return DELEGATE
    return Head(path, end + 4, length, keep_alive)


def _our_path(line: bytes, paths) -> bytes | None:
    """The path of a request line `POST <one of paths> HTTP/1.1`; None for any other line."""
    method, _, rest = line.partition(b" ")
    path, _, version = rest.partition(b" ")
    return path if method == b"POST" and version == b"HTTP/1.1" and path in paths else None


def _headers(lines: list[bytes]) -> tuple[int, int, bool] | bool:
    """(Content-Length or -1, Host headers, keep-alive) of the header lines after the request line;
    DELEGATE at the first line that is not plainly ours."""
    length = -1
    hosts = 0
    keep_alive = True
    seen = _SEEN
    singles: set[bytes] = set()
    for line in lines[1:]:
        got = seen.get(line)
        if got is None:
            m = _LINE.fullmatch(line)
            if m is None:
                return DELEGATE  # obs-fold, a bare LF or CR, a control byte, no colon: aiohttp's call
            got = (m.group(1).lower(), m.group(2) or b"")
            if got[0] != b"content-length":  # a new length nearly every request: not worth keeping
                if len(seen) >= _SEEN_MAX:
                    seen.clear()
                seen[line] = got
        name, value = got
        if name in _SINGLETONS:
            if name in singles:
                return DELEGATE  # aiohttp's 400 "Duplicate header"
            singles.add(name)
        if name == b"content-length":
            if not _DIGITS.fullmatch(value):
                return DELEGATE
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name in _REFUSED:
            return DELEGATE
        elif name == b"content-encoding":
            if value.lower() != b"identity":
                return DELEGATE
        elif name == b"connection":
            v = value.lower()
            if v == b"close":
                keep_alive = False
            elif v != b"keep-alive":
                return DELEGATE
    return length, hosts, keep_alive


def _could_be_ours(head: bytes, paths) -> bool:
    """Whether an incomplete head may still become one of ours: no bare LF or CR so far, and every
    line, the one not yet ended included, is (the start of) one `parse_head` would take; aiohttp
    refuses the others at once."""
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf or head.count(b"\r") - crlf > head.endswith(b"\r"):
        return False
    lines = head.split(b"\r\n")
    last = lines.pop()  # the line not yet ended
    if last.endswith(b"\r"):  # whole but for its LF: llhttp judges it now, so it must be one we take whole
        last = last[:-1]
        if not lines:
            return _our_path(last, paths) is not None
        if last:
            lines.append(last)
            last = b""
    if not lines:
        return any((b"POST %s HTTP/1.1" % p).startswith(last) for p in paths)
    if len(lines) > MAX_HEADERS or _our_path(lines[0], paths) is None:
        return False
    got = _headers(lines)
    if got is DELEGATE or _PARTIAL_LINE.fullmatch(last) is None:
        return False
    name, colon, _ = last.partition(b":")
    if not colon:
        return True
    name = name.lower()
    if name in _REFUSED:
        return False  # llhttp refuses some of these (Transfer-Encoding beside Content-Length) at the name
    if name == b"content-length":  # llhttp refuses a second one, or a non-digit in one, as the value arrives
        return got[0] == -1 and _PARTIAL_LENGTH.fullmatch(last) is not None
    return name not in _SINGLETONS or all(not line.lower().startswith(name + b":") for line in lines[1:])


_SERVER = b""
_date_at = 0
_date = b""


def _server() -> bytes:
    global _SERVER
    if not _SERVER:
        from aiohttp.http import SERVER_SOFTWARE  # the Server header aiohttp's own answers carry

        _SERVER = SERVER_SOFTWARE.encode()
    return _SERVER


def http_date(now: float | None = None) -> bytes:
    """The Date header's value, formatted once a second."""
    global _date_at, _date
    t = int(time.time() if now is None else now)
    if t != _date_at:
        _date_at, _date = t, formatdate(t, usegmt=True).encode()
    return _date


REASONS = {200: b"OK", 400: b"Bad Request", 408: b"Request Timeout", 500: b"Internal Server Error"}


def response(status: int, body: bytes, content_type: bytes = b"application/json", keep_alive: bool = True) -> bytes:
    """The bytes aiohttp writes for `web.Response(status=, body=, content_type=)`: the same headers
    in the same order."""
    close = b"" if keep_alive else b"Connection: close\r\n"
    return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\nServer: %s\r\n%s\r\n%s"
            % (status, REASONS.get(status, b"Unknown"), content_type, len(body), http_date(), _server(), close, body))
