"""The extender listener's fast lane (hami.httpguard `fast` routes, hami.httphead)
answers like aiohttp and keeps every limit of the guard, with real sockets:
- the same bytes (Date aside) with and without the fast lane, for: plain keep-alive POSTs, a
  handler's JSON error, Connection: close, pipelined requests (fast ones, then one aiohttp must
  read, then fast again on that connection), a chunked body, a body over the limit (413 before it is
  read), a Content-Encoding (415), a wrong method (405), an unknown path (404), HTTP/1.0, no Host, a header
  block past aiohttp's 8190 bytes, a bare-LF header, a doubled Content-Length, a handler that raises
  (500, the connection closed, as aiohttp does); a handler cancelled mid-way (the connection closed
  with no answer on both lanes, never left hanging);
- every case above and below with a fast handler that is a coroutine (answered from a task) and
  with one that answers at once (bytes, written from the read callback; a request that must wait
  still gets a task);
- request heads kept parsed by their bytes: the same head again with other bodies answers each
  body, and the store stays bounded under ever new heads;
- a pipeline of 200 requests answered in order, a handler answering at once giving the loop back
  every few answers;
- one lazy timer per connection: 60 keep-alive requests schedule at most two timers, and the idle
  deadline still counts from the last answer, not from when its timer was made;
- hostile clients on the fast lane: a slowloris head and a stalled body are cut at the guard's
  deadlines (408 for the body) while another connection is answered; a half-closed socket after a
  whole request still gets its answer; a half-closed socket mid-request is closed; a huge
  Content-Length goes to aiohttp's 413; the untrusted connection cap holds; the listener's cleanup closes
  idle fast connections;
- the running scheduler answers /filter through the fast lane, and with --extender-fast-http=false
  through aiohttp, the same JSON; over TLS too (fast /filter and aiohttp's /healthz on one TLS
  connection; an untrusting client gets nothing);
- parse_head (hypothesis): never raises on any bytes, takes a request only when its head is whole,
  a prefix of a plain request is NEED_MORE until the blank line, and its cache of header lines
  already matched never changes an answer.
Deadlines are shortened through ListenSettings and run on a clock each test moves (Guard.clock); no
test measures time."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import orjson
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from hami import httphead
from hami.config import ListenSettings
from hami.httpaccept import GuardedSite
from hami.httpguard import HEAD_KEPT_BYTES, HEADS_KEPT, guarded_runner
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import Clock, config_for, eventually, pod_obj, server_side
from tests.kube.scheduler_env import Env, hami_nodes, stop_env

pytestmark = pytest.mark.timeout(60)
# 127.0.0.1 is the trusted client; the cap's test connects from 127.0.0.2, an untrusted one
SHORT = ListenSettings(header_timeout=0.3, body_timeout=0.3, max_connections=5, idle_timeout=5.0,
                       trusted_sources=("127.0.0.1/32",))
LIMIT = 1000


def answer_now(body: bytes) -> dict:
    if body == b"boom":
        raise RuntimeError("boom")
    if body == b'"big"':
        return {"Echo": "x" * 65536, "Error": ""}
    try:
        return {"Echo": orjson.loads(body), "Error": ""}
    except orjson.JSONDecodeError as exc:
        return {"Error": str(exc)}


async def answer(body: bytes) -> dict:
    if body == b"cancel":  # the process stopping under the handler
        await asyncio.sleep(0)
        raise asyncio.CancelledError
    return answer_now(body)


async def h_filter(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(await answer(await request.read())), content_type="application/json")


async def fast_filter(body: bytes) -> bytes:
    return orjson.dumps(await answer(body))


def sync_filter(body: bytes):
    """A fast route that answers at once (bytes, from the read callback) unless it must wait."""
    if body == b"cancel":
        return fast_filter(body)
    return orjson.dumps(answer_now(body))


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def start(fast, limits: ListenSettings = SHORT):
    """A listener with /filter on the fast lane (`fast`: its handler) or on aiohttp only (None)."""
    app = web.Application(client_max_size=LIMIT)
    app.router.add_post("/filter", h_filter)
    app.router.add_get("/ok", ok)
    runner = guarded_runner(app, limits, access_log=None, fast={b"/filter": fast} if fast else None)
    # deadlines on a clock the test moves: a loaded machine's slowness never expires one
    runner.guard.clock = Clock()
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


@pytest.fixture(params=["async handler", "handler answering at once"])
async def both(request):
    started = [await start(fast_filter if request.param == "async handler" else sync_filter), await start(None)]
    yield started
    for runner, _ in started:
        await runner.cleanup()


async def exchange(port: int, raw: bytes, half_close: bool = False) -> bytes:
    """What the server sends for `raw` until it closes, or until it stays silent for a moment."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    if half_close:
        writer.write_eof()
    out = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 0.3 if out else 10)
        except TimeoutError:
            break
        if not chunk:
            break
        out += chunk
    writer.close()
    return out


def undated(out: bytes) -> bytes:
    return re.sub(rb"Date: [^\r]*\r\n", b"", out)


def post(body: bytes, path: bytes = b"/filter", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (path, extra, len(body), body)


CASES = {
    "plain, twice": post(b'{"a":1}') + b"",
    "bad json": post(b"{nope"),
    "connection close": post(b"[1]", extra=b"Connection: close\r\n"),
    "pipelined with aiohttp's in the middle": post(b"1") + b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n" + post(b"2")
    + post(b"3"),
    "chunked": b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1]\r\n0\r\n\r\n",
    "over the limit": post(b"1" * (LIMIT + 1)),
    "gzip": post(b"[1]", extra=b"Content-Encoding: gzip\r\n"),
    "wrong method": b"GET /filter HTTP/1.1\r\nHost: x\r\n\r\n",
    "unknown path": post(b"[1]", path=b"/nope"),
    "http/1.0": b"POST /filter HTTP/1.0\r\nContent-Length: 1\r\n\r\n1",
    "head past 8190 bytes": b"POST /filter HTTP/1.1\r\nX-Long: " + b"a" * 9000 + b"\r\nContent-Length: 1\r\n\r\n1",
    "bare LF": b"POST /filter HTTP/1.1\r\nHost: x\nContent-Length: 1\r\n\r\n1",
    "doubled Content-Length": b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n1",
    "no Host": b"POST /filter HTTP/1.1\r\nContent-Length: 1\r\n\r\n1",
    "handler raises, connection closed": post(b"boom") + post(b"4"),
    "no Content-Length": b"POST /filter HTTP/1.1\r\nHost: x\r\n\r\n",
    "the same head again, other bodies": post(b"[1]") + post(b"[2]") + post(b"{x}") + post(b"[1]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_fast_lane_answers_the_same_bytes_as_aiohttp(both, case):
    (fast_runner, fast_port), (_, slow_port) = both
    raw = CASES[case]
    got, want = await asyncio.gather(exchange(fast_port, raw), exchange(slow_port, raw))
    assert want, case  # aiohttp answered something
    assert undated(got) == undated(want)
    assert b"\r\nDate: " in got or not got.startswith(b"HTTP/1.1 200")


async def test_plain_requests_take_the_fast_lane_and_others_do_not(both):
    (fast_runner, port), _ = both
    await exchange(port, post(b"1") + post(b"2"))
    assert fast_runner.guard.fast_served == 2
    await exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n" + post(b"3"))  # sticky: aiohttp's from the GET on
    assert fast_runner.guard.fast_served == 2


async def test_heads_seen_before_are_kept_parsed_and_bounded(both):
    """A head seen before is looked up by its bytes (each request still gets its own body's
    answer); a client sending ever new heads only empties the bounded store, and a long head is
    answered without being kept."""
    (fast_runner, port), _ = both
    out = await exchange(port, post(b"[1]") + post(b"[2]"))
    assert out.count(b'{"Echo":[1],"Error":""}') == 1 and out.count(b'{"Echo":[2],"Error":""}') == 1
    assert list(fast_runner.guard.heads.values()) == [httphead.parse_head(post(b"[1]"), {b"/filter"}, LIMIT)]
    raw = b"".join(post(b"%d" % i, extra=b"X-N: %d\r\n" % i) for i in range(HEADS_KEPT + 10))
    out = await exchange(port, raw)
    assert out.count(b"HTTP/1.1 200 OK") == HEADS_KEPT + 10
    assert fast_runner.guard.fast_served == 2 + HEADS_KEPT + 10
    assert 0 < len(fast_runner.guard.heads) <= HEADS_KEPT
    kept = dict(fast_runner.guard.heads)
    long_head = post(b"[3]", extra=b"X-Long: " + b"a" * HEAD_KEPT_BYTES + b"\r\n")
    assert b'{"Echo":[3],"Error":""}' in await exchange(port, long_head)
    assert fast_runner.guard.heads == kept  # answered, not kept


async def test_slowloris_and_stalled_body_are_cut_while_others_are_answered(both):
    (runner, port), _ = both
    slow_r, slow_w = await asyncio.open_connection("127.0.0.1", port)
    slow_w.write(b"POST /filter HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
    body_r, body_w = await asyncio.open_connection("127.0.0.1", port)
    body_w.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123")  # 96 bytes never come
    assert (await exchange(port, post(b"[5]"))).endswith(b'{"Echo":[5],"Error":""}')
    slow = await eventually(lambda: server_side(runner.guard, slow_w), 10)
    body = await eventually(lambda: server_side(runner.guard, body_w), 10)
    await eventually(lambda: slow.fbuf and body.deadline.phase == "body", 10)  # every byte sent is read
    runner.guard.clock.now += 0.3
    assert runner.guard.expire_overdue() == 2
    assert await asyncio.wait_for(slow_r.read(), 10) == b""
    out = await asyncio.wait_for(body_r.read(), 10)
    assert out.startswith(b"HTTP/1.1 408") and b"request body not received within 0.3 s" in out
    assert runner.guard.header_timeouts == 1 and runner.guard.body_timeouts == 1
    for w in (slow_w, body_w):
        w.close()


async def test_half_closed_sockets(both):
    (runner, port), _ = both
    out = await exchange(port, post(b"[6]"), half_close=True)  # the request whole, then EOF: answered
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b'{"Echo":[6],"Error":""}')
    out = await exchange(port, post(b"[7]")[:30], half_close=True)  # cut mid-head: closed, nothing answered
    assert out == b""
    assert (await exchange(port, post(b"[8]"))).endswith(b'{"Echo":[8],"Error":""}')  # the listener serves on


async def test_huge_content_length_and_the_connection_cap(both):
    (runner, port), _ = both
    out = await exchange(port, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413")
    held = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            for _ in range(SHORT.max_connections)]
    for r, w in held:  # each takes a fast answer and stays open (kept alive)
        w.write(post(b"1"))
        await asyncio.wait_for(r.readuntil(b'"Error":""}'), 10)
    extra_r, extra_w = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
    assert await asyncio.wait_for(extra_r.read(), 10) == b""
    assert runner.guard.refused == 1
    await runner.cleanup()  # the listener closes: idle fast connections are closed with it
    for r, w in held:
        assert await asyncio.wait_for(r.read(), 10) == b""
        w.close()
    extra_w.close()


# ---------------------------------------------------------------------- the running scheduler

@pytest.mark.parametrize("fast", [True, False])
async def test_the_scheduler_answers_filter_the_same_on_either_lane(apiserver, fast):
    for n in hami_nodes(1):
        apiserver.store.create("nodes", "", n)
    cfg = config_for(apiserver.kubeconfig)
    cfg = dataclasses.replace(cfg, scheduler=dataclasses.replace(cfg.scheduler, extender_fast_http=fast))
    s = await start_scheduler(cfg)
    assert await s.state.wait_synced(10)
    import aiohttp

    env = Env(apiserver, s, aiohttp.ClientSession())
    try:
        p = env.create_pod(pod_obj("p", mem=1000))
        assert (await env.filter(p, ["n0"]))["NodeNames"] == ["n0"]
        assert (await env.filter({}, raw=b"{nope"))["Error"].startswith("unexpected character")
        assert s.runners[0].guard.fast_served == (2 if fast else 0)
    finally:
        await stop_env(env)


# ---------------------------------------------------------------------- parse_head

PATHS = frozenset((b"/filter", b"/bind"))


@given(st.binary(max_size=300))
def test_parse_head_never_raises(buf):
    got = httphead.parse_head(buf, PATHS, 1000)
    assert got is httphead.NEED_MORE or got is httphead.DELEGATE or isinstance(got, httphead.Head)
    if isinstance(got, httphead.Head):
        assert buf[got.body_at - 4:got.body_at] == b"\r\n\r\n" and got.path in PATHS


_lines = st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(
    [b"Host: x", b"Host: y", b"User-Agent: kube-scheduler/v1.34", b"Accept-Encoding: gzip", b"X: a\tb",
     b"X:", b"Bad Name: v", b" folded", b"Connection: close", b"Content-Length: 3", b"content-length: 03"])),
    max_size=6)


@given(st.lists(_lines, min_size=1, max_size=4))
def test_parse_head_answers_the_same_with_its_line_cache_warm_or_cold(heads):
    """Header lines already matched are looked up, not matched again: the answer never depends on
    what earlier requests left in that cache."""
    for lines in heads:
        buf = b"POST /filter HTTP/1.1\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\nabc"
        warm = httphead.parse_head(buf, PATHS, 1000)
        httphead.forget_seen_lines()
        cold = httphead.parse_head(buf, PATHS, 1000)
        assert warm == cold, lines


_name = st.from_regex(rb"\A[A-Za-z][A-Za-z0-9-]{0,15}\Z").filter(
    lambda n: n.lower() not in (b"content-length", b"host", b"transfer-encoding", b"expect", b"upgrade", b"trailer",
                                b"content-encoding", b"connection"))
_value = st.from_regex(rb"\A[!-~]([ -~]{0,30}[!-~])?\Z")


@given(st.sampled_from(sorted(PATHS)), st.lists(st.tuples(_name, _value), max_size=6),
       st.integers(0, 1000), st.booleans(), st.data())
def test_parse_head_takes_plain_requests_and_waits_for_their_whole_head(path, headers, length, close, data):
    head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in headers)
    head += b"Content-Length: %d\r\n" % length + (b"Connection: close\r\n" if close else b"") + b"\r\n"
    raw = head + b"x" * length
    got = httphead.parse_head(raw, PATHS, 1000)
    assert got == httphead.Head(path, len(head), length, not close)
    cut = data.draw(st.integers(0, len(head) - 1))
    assert httphead.parse_head(raw[:cut], PATHS, 1000) is httphead.NEED_MORE
    assert httphead.parse_head(raw, PATHS, length - 1) is httphead.DELEGATE if length else True


async def test_the_fast_lane_serves_tls_listeners(apiserver, tmp_path):
    """Behind TLS the lane sees the decrypted bytes: /filter answered by it, /healthz by aiohttp,
    on one kept-alive TLS connection; a client that does not trust the certificate gets nothing."""
    import ssl

    import aiohttp

    from tests.kube.scheduler_env import start_env
    from tests.scheduler.test_extender_tls_logs import make_cert

    cert, key = make_cert(tmp_path, "fast")
    e = await start_env(apiserver, hami_nodes(1), cert_file=cert, key_file=key)
    try:
        assert e.sched.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=cert)
        p = e.create_pod(pod_obj("p", mem=1000))
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.post(e.sched.url + "/filter", ssl=ctx,
                                 data=orjson.dumps({"Pod": p, "NodeNames": ["n0"]})) as r:
                assert r.status == 200 and (orjson.loads(await r.read()))["NodeNames"] == ["n0"]
            async with http.get(e.sched.url + "/healthz", ssl=ctx) as r:
                assert r.status == 200
        assert e.sched.runners[0].guard.fast_served == 1
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            async with aiohttp.ClientSession() as http, http.post(e.sched.url + "/filter", data=b"{}") as r:
                await r.read()
        assert e.sched.runners[0].guard.fast_served == 1
    finally:
        await stop_env(e)


async def test_a_body_dripped_byte_by_byte_still_meets_its_deadline(both):
    (runner, port), _ = both
    clock = runner.guard.clock
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n"
    writer.write(head)
    proto = await eventually(lambda: server_side(runner.guard, writer), 10)
    await eventually(lambda: proto.deadline.phase == "body", 10)  # from the end of the headers
    for i in range(1, 4):  # a byte every 0.1 s, each received before the clock moves: 0.3 s in all
        writer.write(b"1")
        await eventually(lambda i=i: len(proto.fbuf) == len(head) + i, 10)
        clock.now += 0.1 if i < 3 else 0.15
        assert runner.guard.expire_overdue() == (i == 3), i  # the bytes never moved the deadline
    out = await asyncio.wait_for(reader.read(), 10)
    assert out.startswith(b"HTTP/1.1 408") and runner.guard.body_timeouts == 1
    writer.close()


async def test_a_client_that_never_reads_its_answers_is_not_buffered_without_bound(both):
    """Pipelined requests whose answers are never read: the lane stops answering once the socket's
    send buffer is full and stops reading beyond one request more; read, every answer comes in order."""
    (runner, port), _ = both
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    count = 400  # 25 MiB of answers, more than the loopback socket buffers hold
    sender = asyncio.create_task(_send_all(writer, [post(b'"big"')] * count))
    await asyncio.sleep(0.5)
    stalled_at = runner.guard.fast_served
    assert 0 < stalled_at < count  # paused: the answers are not all made and buffered
    got = 0
    while got < count:
        await asyncio.wait_for(reader.readuntil(b'"Error":""}'), 10)
        got += 1
    await sender
    assert runner.guard.fast_served == count
    writer.close()


async def _send_all(writer, requests) -> None:
    for r in requests:
        writer.write(r)
        await writer.drain()


async def test_a_cancelled_handler_closes_the_connection_on_both_lanes(both):
    """A replica dying inside /bind: kube-scheduler's request must fail, not wait for ever."""
    for _runner, port in both:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post(b"cancel"))
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        writer.close()


@pytest.mark.parametrize("handler", [fast_filter, sync_filter], ids=["async handler", "handler answering at once"])
async def test_keep_alive_requests_do_not_make_a_timer_each(handler):
    runner, port = await start(handler, dataclasses.replace(SHORT, header_timeout=5.0, body_timeout=5.0))
    loop = asyncio.get_running_loop()
    made = []
    real = loop.call_at

    def counting(when, callback, *args, **kwargs):
        made.append(callback)
        return real(when, callback, *args, **kwargs)

    loop.call_at = counting
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(60):
            writer.write(post(b"[%d]" % i))
            got = await asyncio.wait_for(reader.readuntil(b'"Error":""}'), 10)
            assert got.endswith(b"[%d]," % i + b'"Error":""}')
        writer.close()
    finally:
        del loop.call_at
        await runner.cleanup()
    assert runner.guard.fast_served == 60
    # three deadlines a request; one timer, from the accept, fires every 5 s at most (two: a slow run)
    assert len([c for c in made if getattr(c, "__name__", "") == "_fire"]) <= 2, made


async def test_the_idle_deadline_counts_from_the_last_answer():
    runner, port = await start(sync_filter, dataclasses.replace(SHORT, idle_timeout=1.5))
    clock = runner.guard.clock
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(5):  # 0.5 s apart: 2.5 s in all, past the 1.5 s idle timeout, never idle that long
            writer.write(post(b"[%d]" % i))
            await asyncio.wait_for(reader.readuntil(b'"Error":""}'), 10)
            clock.now += 0.5
            assert runner.guard.expire_overdue() == 0, i
        writer.write(post(b"[9]"))
        await asyncio.wait_for(reader.readuntil(b'"Error":""}'), 10)  # still open
        clock.now += 1.5
        # then closed once idle: by the connection's own lazy timer, made long before, which comes back
        # for the deadline the last answer set
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_long_pipeline_is_answered_in_order_a_few_at_a_time(both):
    """200 requests in one write: answered in order; a handler answering at once gives the loop back
    every httpguard.ANSWERS_PER_TURN answers instead of serving the whole pipeline in one callback."""

    (runner, port), _ = both
    loop = asyncio.get_running_loop()
    turns = []
    real = loop.call_soon

    def counting(callback, *args, **kwargs):
        if getattr(callback, "__name__", "") == "_fast_next":
            turns.append(1)
        return real(callback, *args, **kwargs)

    loop.call_soon = counting
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(post(b"[%d]" % i) for i in range(200)))
        for i in range(200):
            got = await asyncio.wait_for(reader.readuntil(b'"Error":""}'), 10)
            assert got.endswith(b"[%d]," % i + b'"Error":""}')
        writer.close()
    finally:
        del loop.call_soon
    assert runner.guard.fast_served == 200
    if runner.guard.fast[b"/filter"] is sync_filter:
        assert len(turns) >= 5, len(turns)  # 200 answers, the loop given back every few
