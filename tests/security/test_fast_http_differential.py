"""The fast lane (hami.httphead.parse_head) against aiohttp's own request parsers, both of them (the C
one the server runs, and the pure-Python one it falls back to), over generated requests:

- whatever either parser refuses, the fast lane hands to aiohttp (DELEGATE), whole or cut anywhere:
  never NEED_MORE (the client would wait for the header deadline instead of aiohttp's 400), never a Head;
- whatever the fast lane takes, both parsers read as the same request: POST to the same path, no
  chunking or upgrade, the same Content-Length, the same keep-alive, and the same body bytes;
- the hostile cases of a tenant's review named one by one: more headers than aiohttp takes, each of
  aiohttp's singleton headers twice, a request in bare LF (answered 400 by a real listener at once,
  not after its header deadline).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp._http_parser import HttpRequestParser as CParser
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import SINGLETON_HEADERS
from aiohttp.http_parser import HttpRequestParserPy as PyParser
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hami import httphead
from hami.config import ListenSettings
from hami.httpaccept import GuardedSite
from hami.httpguard import guarded_runner

PATHS = frozenset((b"/filter", b"/bind"))
LIMIT = 1000
PARSERS = (CParser, PyParser)


def aiohttp_reads(parser_class, raw: bytes):
    """What aiohttp's parser makes of `raw` as a server reads it (its web_protocol's limits):
    ("refused", why), ("more",), or ("request", message, body bytes received)."""
    loop = asyncio.new_event_loop()
    try:
        parser = parser_class(BaseProtocol(loop), loop, 2**16, max_line_size=8190, max_field_size=8190,
                              max_headers=128)
        try:
            messages, _upgraded, _tail = parser.feed_data(raw)
        except HttpProcessingError as exc:
            return ("refused", str(exc))
        if not messages:
            return ("more",)
        message, payload = messages[0]
        return ("request", message, payload.read_nowait(-1))
    finally:
        loop.close()


def check(raw: bytes) -> object:
    """The property, for one buffer; returns the fast lane's verdict."""
    fast = httphead.parse_head(raw, PATHS, LIMIT)
    for parser_class in PARSERS:
        got = aiohttp_reads(parser_class, raw)
        if got[0] == "refused":
            assert fast is httphead.DELEGATE, (parser_class.__module__, got[1], raw)
        if isinstance(fast, httphead.Head):
            assert got[0] == "request", (parser_class.__module__, got, raw)
            message, body = got[1], got[2]
            assert message.method == "POST" and message.path.encode() == fast.path
            assert not message.chunked and not message.upgrade
            assert int(message.headers["Content-Length"]) == fast.length
            assert message.should_close == (not fast.keep_alive)
            assert body == raw[fast.body_at:fast.body_at + fast.length]
        elif fast is httphead.NEED_MORE:
            assert got == ("more",), (parser_class.__module__, got, raw)
    return fast


# ---------------------------------------------------------------------- generated requests

_names = st.one_of(
    st.sampled_from([b"Host", b"host", b"Content-Length", b"content-length", b"Transfer-Encoding", b"Connection",
                     b"Content-Encoding", b"Expect", b"Upgrade", b"Trailer", b"X-A", b"Accept"]
                    + sorted(n.encode() for n in SINGLETON_HEADERS)),
    st.binary(min_size=0, max_size=8),
    st.from_regex(rb"\A[!#$%&'*+.^_`|~0-9A-Za-z-]{1,12}\Z"))
_values = st.one_of(
    st.sampled_from([b"x", b"1", b"0", b"7", b"01", b"+1", b"-1", b" 5", b"5 ", b"1,1", b"1 1", b"", b"chunked",
                     b"close", b"keep-alive", b"Keep-Alive", b"upgrade", b"identity", b"gzip", b"100-continue",
                     b"a\tb", b"x\x00y", b"\xff", b"99999999999999999"]),
    st.binary(max_size=12))
_ends = st.sampled_from([b"\r\n"] * 8 + [b"\n", b"\r", b" \r\n", b"\r\r\n"])
_request_lines = st.tuples(st.sampled_from([b"POST", b"GET", b"post", b"PUT"]),
                           st.sampled_from([b"/filter", b"/bind", b"/other", b"/filter?x=1", b"//filter", b"*"]),
                           st.sampled_from([b"HTTP/1.1"] * 4 + [b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b""]))


@st.composite
def requests(draw) -> bytes:
    """Mostly plain requests (the fast lane's) with a few things changed; the rest anything."""
    plain = draw(st.integers(0, 2)) > 0
    method, path, version = (b"POST", draw(st.sampled_from(sorted(PATHS))), b"HTTP/1.1") if plain \
        else draw(_request_lines)
    ends = st.just(b"\r\n") if plain and draw(st.booleans()) else _ends
    line = b" ".join(p for p in (method, path, version) if p)
    headers = []
    if plain or draw(st.booleans()):
        headers.append((b"Host", b"x"))
    length = draw(st.integers(0, 40))
    if plain or draw(st.booleans()):
        headers.append((b"Content-Length", b"%d" % length))
    headers += draw(st.lists(st.tuples(_names, _values), max_size=3 if plain else 6))
    filler = draw(st.sampled_from([0] * 10 + [120, 124, 125, 126, 127, 128, 129]))
    headers += [(b"X-Filler-%d" % i, b"v") for i in range(filler)]
    headers = draw(st.permutations(headers))
    raw = line + draw(ends)
    for name, value in headers:
        raw += name + b": " + value + draw(ends)
    raw += draw(ends)
    return raw + b"b" * draw(st.integers(0, length))  # the body whole or cut short


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.data())
def test_the_fast_lane_takes_only_what_aiohttp_reads_the_same(raw, data):
    check(raw)
    cut = data.draw(st.integers(0, len(raw)))
    check(raw[:cut])  # the same, the request cut anywhere (it arrives a piece at a time)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
@example(b"*\r")  # a header line without a colon, whole but for its LF: llhttp refuses it at the CR
@example(b"Host: x\r")
def test_any_bytes_after_a_plain_request_line(tail):
    check(b"POST /filter HTTP/1.1\r\n" + tail)


def test_plain_requests_are_taken():
    """The property above is not met by delegating everything: plain requests are the fast lane's."""
    for raw in (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
                b"POST /bind HTTP/1.1\r\nhost: x\r\nUser-Agent: a\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\ncontent-length: 0\r\n\r\n",
                b"POST /filter HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 124 + b"Content-Length: 1\r\n\r\n1"):
        assert isinstance(check(raw), httphead.Head), raw


# ---------------------------------------------------------------------- a tenant's review, case by case

def plain(extra: bytes = b"", host: bytes = b"Host: x\r\n") -> bytes:
    return b"POST /filter HTTP/1.1\r\n" + host + extra + b"Content-Length: 1\r\n\r\n1"


def test_more_headers_than_aiohttp_takes_are_delegated():
    for count in (125, 126, 127, 200):  # with Host and Content-Length: 127 headers and more is over
        raw = plain(b"X: y\r\n" * count)
        assert check(raw) is httphead.DELEGATE, count
        assert any(aiohttp_reads(p, raw)[0] == "refused" for p in PARSERS), count


@pytest.mark.parametrize("name", sorted(SINGLETON_HEADERS))
def test_a_singleton_header_twice_is_delegated(name):
    line = name.encode() + b": v\r\n"
    # plain() carries Host and Content-Length once: a second one, in other case
    extra = {"host": b"host: y\r\n", "content-length": b"content-length: 1\r\n"}.get(name, line + line.upper())
    raw = plain(extra)
    assert check(raw) is httphead.DELEGATE
    for parser_class in PARSERS:
        assert aiohttp_reads(parser_class, raw)[0] == "refused", parser_class


@pytest.mark.parametrize("raw", [
    b"POST /filter HTTP/1.1\nHost: x\nContent-Length: 1\n\n1",
    b"POST /filter HTTP/1.1\r\nHost: x\nContent-Length: 1\n\n1",
    b"POST /filter HTTP/1.1\r\nHost: x\rContent-Length: 1\r\r1",
    b"POST /filter HTTP/1.1\r\nHo st: x\r\n",
], ids=["bare LF", "bare LF after the request line", "bare CR", "a bad header line, head not ended"])
def test_a_head_aiohttp_refuses_is_delegated_before_it_ends(raw):
    assert check(raw) is httphead.DELEGATE
    assert aiohttp_reads(CParser, raw)[0] == "refused"


async def test_a_bare_lf_request_gets_aiohttps_400_at_once():
    """With a header deadline far away, the 400 comes from aiohttp as soon as the bytes are in:
    the fast lane does not hold the connection waiting for a CRLF CRLF that never comes."""

    async def h(request):
        return web.Response(text="no")

    app = web.Application(client_max_size=LIMIT)
    app.router.add_post("/filter", h)
    limits = ListenSettings(header_timeout=120.0, body_timeout=120.0, idle_timeout=120.0)
    runner = guarded_runner(app, limits, access_log=None, fast={b"/filter": lambda body: b"{}"})
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
        writer.write(b"POST /filter HTTP/1.1\nHost: x\nContent-Length: 1\n\n1")
        out = await asyncio.wait_for(reader.read(), 30)  # far below the 120 s deadline
        assert out.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 ")), out
        assert runner.guard.header_timeouts == 0 and runner.guard.fast_served == 0
        writer.close()
    finally:
        await runner.cleanup()


def test_an_unfinished_line_llhttp_already_refuses_is_delegated():
    """llhttp refuses some header lines before they end (a second Content-Length, a non-digit in one,
    Transfer-Encoding beside Content-Length): the fast lane must not wait for more of those."""
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\n"
    for partial in (b"content-length: x", b"Content-Length: 0\r\ncontent-length: 0", b"Content-Length: 5 5",
                    b"Content-Length: 0\r\nTransfer-Encoding:", b"User-Agent: a\r\nuser-agent: b"):
        assert check(head + partial) is httphead.DELEGATE, partial
    for partial in (b"Content-Length: 1", b"Content-Length:  12 ", b"User-Agent: a"):  # may still become ours
        assert check(head + partial) is httphead.NEED_MORE, partial
