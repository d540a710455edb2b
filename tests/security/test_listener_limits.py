"""Every hami HTTP listener bounds what a connection may hold, with real slow sockets:
- a connection that sends nothing, or its headers a byte at a time (slowloris), is closed at the
  header deadline; a body that stalls gets 408 and the connection closed at the body deadline;
- untrusted connections beyond their cap are closed on accept while the ones inside it, and the trusted
  class's own budget, keep working; at the listener's total accept pauses and the queued connections
  are answered once slots free, none reset;
- keep-alive still works: each request on a connection gets its own header deadline (on a clock the
  test moves, Guard.clock);
- a body with a Content-Encoding is refused 415 (aiohttp would inflate a gzip bomb first);
- the webhook takes at most 3 MiB: a larger Content-Length is refused 413 before the body is read, a
  chunked body is cut off at 3 MiB with 413; the extender's own verbs keep their larger limit;
- the running scheduler: 200 slow connections to the extender listener are all closed at the header
  deadline (--http-header-timeout, shortened here) while /filter and the probes keep answering; the
  metrics listener, the node agent's health listener, the monitor, the debug listener and the embedded
  API server are built on the same guard (asserted by their runner type).
Deadlines are shortened through flags, and the header deadline runs on a clock the test moves
(Guard.clock); no test measures time, each waits on a socket's EOF."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip

import orjson
import pytest
from aiohttp import web

from hami.config import ListenSettings
from hami.httpaccept import GuardedSite
from hami.httpguard import GuardedRunner, guarded_runner
from hami.scheduler.extender.server import WEBHOOK_MAX_BODY
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import Clock, config_for, eventually, pod_obj, server_side
from tests.kube.scheduler_env import Env, hami_nodes, stop_env
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(60)
SHORT = ListenSettings(header_timeout=0.3, body_timeout=0.3, max_connections=5, idle_timeout=5.0)


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def server():
    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_post("/small", echo)
    app.router.add_get("/ok", ok)
    runner = guarded_runner(app, SHORT, body_limits={"/small": 1000}, access_log=None)
    # the header deadline on a clock the test moves: a loaded machine's slowness never expires one
    runner.guard.clock = Clock()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield runner.guard, port
    await runner.cleanup()


async def connect(port: int):
    return await asyncio.open_connection("127.0.0.1", port)


async def closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (waits for EOF)."""
    return await asyncio.wait_for(reader.read(), 10)


async def request(port: int, raw: bytes) -> bytes:
    reader, writer = await connect(port)
    writer.write(raw)
    out = await closed(reader)
    writer.close()
    return out


async def test_silent_and_slowloris_connections_are_closed_at_the_header_deadline(server):
    guard, port = server
    silent_r, silent_w = await connect(port)
    slow_r, slow_w = await connect(port)
    slow_w.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n")
    slow = await eventually(lambda: server_side(guard, slow_w), 10)
    await eventually(lambda: server_side(guard, silent_w), 10)  # both accepted at 0: deadlines at 0.3
    for i, byte in enumerate(b"abc", 1):  # one byte a tenth of a second, never the blank line that ends the headers
        slow_w.write(bytes([byte]))
        await eventually(lambda byte=byte: slow.tail.endswith(bytes([byte])), 10)  # the server has read it
        guard.clock.now += 0.1
        assert guard.expire_overdue() == (2 if i == 3 else 0), i  # the bytes never moved the deadline
    assert await closed(silent_r) == b""
    assert await closed(slow_r) == b""  # closed without an answer: the headers never ended
    assert guard.header_timeouts == 2
    for w in (silent_w, slow_w):
        w.close()


async def test_a_stalled_body_gets_408_and_the_connection_closes(server):
    guard, port = server
    reader, writer = await connect(port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
    out = await closed(reader)
    assert out.startswith(b"HTTP/1.1 408") and b"request body not received within 0.3 s" in out
    assert guard.body_timeouts == 1
    writer.close()


# Two trust classes on loopback: 127.0.0.1 is trusted (kube-scheduler's side), 127.0.0.2 is not.
CAPPED = ListenSettings(header_timeout=30.0, body_timeout=30.0, idle_timeout=30.0, max_connections=3,
                        trusted_connections=4, trusted_sources=("127.0.0.1/32",))


@pytest.fixture
async def capped():
    app = web.Application()
    app.router.add_get("/ok", ok)
    runner = guarded_runner(app, CAPPED, access_log=None)
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0).start()
    yield runner.guard, runner.addresses[0][1]
    await runner.cleanup()


async def connect_from(source: str, port: int):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def get_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, close: bool = False) -> bytes:
    writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n" + (b"Connection: close\r\n" if close else b"") + b"\r\n")
    return await asyncio.wait_for(reader.read() if close else reader.readuntil(b"ok"), 10)


async def test_untrusted_connections_over_their_cap_are_closed_and_trusted_ones_still_get_in(capped):
    guard, port = capped
    flood = [await connect_from("127.0.0.2", port) for _ in range(3)]
    await eventually(lambda: guard.budget.untrusted == 3, 5)
    extra_r, extra_w = await connect_from("127.0.0.2", port)
    assert await closed(extra_r) == b""  # over the untrusted cap: closed at accept, counted
    assert guard.refused == 1
    trusted = [await connect_from("127.0.0.1", port) for _ in range(4)]  # the trusted class's own budget
    for r, w in trusted:
        assert (await get_ok(r, w)).startswith(b"HTTP/1.1 200")
    assert guard.budget.trusted == 4 and guard.refused == 1
    r, w = flood[0]  # a connection inside the untrusted cap is served too
    assert (await get_ok(r, w)).startswith(b"HTTP/1.1 200")
    for _, w in flood + trusted:
        w.close()
    extra_w.close()
    await eventually(lambda: len(guard.open) == 0 and guard.budget.trusted + guard.budget.untrusted == 0, 5)
    out = await request(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200")


async def test_at_the_total_accept_pauses_and_the_queued_connections_are_served_not_reset(capped):
    guard, port = capped
    untrusted = [await connect_from("127.0.0.2", port) for _ in range(3)]
    trusted = [await connect_from("127.0.0.1", port) for _ in range(4)]
    await eventually(lambda: guard.budget.full, 5)  # 3 + 4: accepting pauses
    # 20 more trusted clients connect (the kernel's accept queue takes them) and send their request
    queued = [await connect_from("127.0.0.1", port) for _ in range(20)]
    for _, w in queued:
        w.write(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await eventually(lambda: guard.budget.pauses >= 1, 5)
    assert guard.budget.trusted == 4 and guard.refused == 0  # none accepted past the total, none closed
    for _, w in trusted:  # slots free: accept resumes, and every queued client gets its answer
        w.close()
    outs = await asyncio.gather(*(closed(r) for r, _ in queued))
    assert all(o.startswith(b"HTTP/1.1 200") and o.endswith(b"ok") for o in outs), outs
    assert guard.refused == 0
    for _, w in untrusted + queued:
        w.close()


async def test_keep_alive_requests_each_get_their_own_header_deadline(server):
    guard, port = server
    clock = guard.clock
    reader, writer = await connect(port)
    await eventually(lambda: server_side(guard, writer), 10)  # accepted at 0: a header deadline at 0.3 runs
    for i in range(3):
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        head = await asyncio.wait_for(reader.readuntil(b"hello"), 10)
        assert head.startswith(b"HTTP/1.1 200"), i
        clock.now += 0.2  # under the 0.3 s deadline each time, 0.6 s in all
        assert guard.expire_overdue() == 0, i  # no deadline left over from accepting or an earlier request
    assert guard.header_timeouts == 0
    # the next request's deadline starts at its first byte: its headers never end, and 0.3 s later it closes
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
    proto = server_side(guard, writer)
    await eventually(lambda: proto.deadline.phase is not None, 10)  # the server has the bytes
    clock.now += 0.2
    assert guard.expire_overdue() == 0
    clock.now += 0.2
    assert guard.expire_overdue() == 1
    assert await closed(reader) == b"" and guard.header_timeouts == 1
    writer.close()


async def test_content_encoding_is_refused_415(server):
    guard, port = server
    body = gzip.compress(b"[" * 10_000)
    out = await request(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert out.startswith(b"HTTP/1.1 415") and b"Content-Encoding 'gzip' is not accepted" in out
    assert guard.encoded == 1


async def test_a_path_body_limit_refuses_before_reading_and_cuts_chunked_bodies(server):
    guard, port = server
    out = await request(port, b"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413") and b"5000 bytes is over this endpoint's limit of 1000" in out
    chunk = b"x" * 600
    chunked = b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(3)) + b"0\r\n\r\n"
    out = await request(port, b"POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    assert out.startswith(b"HTTP/1.1 413")
    out = await request(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5000\r\n\r\n"
                        + b"y" * 5000)  # another path keeps the app's limit
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"y" * 5000)
    assert guard.too_large == 2


# ---------------------------------------------------------------- the running scheduler

@pytest.fixture
async def sched_env(apiserver):
    for n in hami_nodes(1):
        apiserver.store.create("nodes", "", n)
    cfg = dataclasses.replace(config_for(apiserver.kubeconfig),
                              listen=ListenSettings(header_timeout=0.5, body_timeout=0.5, max_connections=256))
    s = await start_scheduler(cfg)
    assert await s.state.wait_synced(10)
    import aiohttp

    env = Env(apiserver, s, aiohttp.ClientSession())
    yield env
    await stop_env(env)


async def test_scheduler_closes_200_slow_connections_and_keeps_serving(sched_env):
    env = sched_env
    port = int(env.sched.url.rsplit(":", 1)[1])
    conns = [await connect(port) for _ in range(200)]
    for _, w in conns:
        w.write(b"POST /filter HTTP/1.1\r\nHost: x\r\n")  # and then nothing more
    # while they hang, /filter and the probes answer
    p = env.create_pod(pod_obj("p", mem=1000))
    assert (await env.filter(p, ["n0"]))["NodeNames"] == ["n0"]
    async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/healthz") as r:
        assert r.status == 200
    outs = await asyncio.gather(*(closed(r) for r, _ in conns))
    assert outs == [b""] * 200
    assert env.sched.runners[0].guard.header_timeouts == 200
    record("slow connections (slowloris)", connections=200, closed_at_header_deadline=200,
           header_timeout_s=0.5, filter_answered_meanwhile=True)
    for _, w in conns:
        w.close()


async def test_scheduler_webhook_refuses_bodies_over_3_mib_and_gzip(sched_env):
    env = sched_env
    url = env.sched.url + "/webhook"
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "operation": "CREATE", "object": pod_obj("big", mem=1000),
                          "pad": "x" * WEBHOOK_MAX_BODY}}
    async with env.http.post(url, data=orjson.dumps(review)) as r:
        assert r.status == 413 and str(WEBHOOK_MAX_BODY) in await r.text()
    async with env.http.post(url, data=gzip.compress(orjson.dumps({"kind": "AdmissionReview"})),
                             headers={"Content-Encoding": "gzip"}) as r:
        assert r.status == 415
    review["request"]["pad"] = "x"  # a normal review is still answered
    async with env.http.post(url, data=orjson.dumps(review)) as r:
        assert r.status == 200 and (await r.json())["response"]["uid"] == "u1"


async def test_metrics_listener_closes_a_slow_connection(sched_env):
    reader, writer = await connect(sched_env.sched.metrics_port)
    writer.write(b"GET /metrics HTTP/1.1\r\n")
    assert await closed(reader) == b""
    writer.close()


class _Ready:
    def readiness(self) -> list[str]:
        return []


async def test_agent_health_debug_and_embedded_api_listeners_close_slow_connections(tmp_path):
    from hami.agent.role import serve_health
    from hami.obs.profiling.routes import start_debug_server
    from hami.sim.apiserver.server import ApiServer

    api = ApiServer(listen=SHORT)
    await api.start()
    health, health_port = await serve_health(_Ready(), "127.0.0.1:0", SHORT)
    debug, debug_port = await start_debug_server("127.0.0.1:0", SHORT)
    try:
        for port in (int(api.url.rsplit(":", 1)[1]), health_port, debug_port):
            reader, writer = await connect(port)
            writer.write(b"GET /readyz HTTP/1.1\r\n")
            assert await closed(reader) == b"", port
            writer.close()
        for runner in (api.runner, health, debug):
            assert isinstance(runner, GuardedRunner) and runner.guard.header_timeouts == 1
    finally:
        await api.stop()
        await health.cleanup()
        await debug.cleanup()


def test_the_monitor_listener_is_built_on_the_guard():
    import inspect

    from hami.monitor import role as monitor_role

    src = inspect.getsource(monitor_role.run)
    assert "guarded_runner(app, ctx.config.listen" in src and "web.AppRunner(" not in src
