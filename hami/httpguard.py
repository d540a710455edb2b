"""Limits every hami HTTP listener applies to its connections: a cap on open connections, a deadline
for a request's headers and another for its body, and an idle timeout between keep-alive requests.

aiohttp's server has none of the first three: a client that opens a connection and sends nothing, or
sends its headers a byte at a time, holds a connection (and a task) for as long as it likes; 200 such
clients stayed open 130 s against the extender in an audit. Here:

- a connection beyond `max_connections` is closed as soon as it is accepted (counted in `refused`),
  so a flood cannot grow the process without bound; the ones already served are untouched;
- from its first byte (or from accepting it), a request's headers must be complete within
  `header_timeout`, else the connection is closed (`header_timeouts`);
- a request's body must be read within `body_timeout` after its headers, else 408 and the connection
  is closed (`body_timeouts`); the body stays read for the handler;
- between requests a kept-alive connection is closed after `idle_timeout` (aiohttp's keep-alive);
- a request body with a `Content-Encoding` other than identity is refused 415 (aiohttp would inflate
  it, and the size limit would count the inflated bytes only after doing the work), and a path given
  a smaller body limit (`body_limits`, e.g. the webhook's 3 MiB) is refused 413 past it, before the
  rest is read.

The limits are `hami.config.ListenSettings` (flags --http-header-timeout, --http-body-timeout,
--http-max-connections, --http-idle-timeout). `guarded_runner(app, limits, body_limits=None, **runner_kwargs)` is a drop-in for `web.AppRunner(app, ...)`; its
`.guard` holds the counters. The protocol wrapper only watches bytes go by (for the end of the
header block) and forwards everything to aiohttp's own handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hami.config import ListenSettings

HEADER_END = b"\r\n\r\n"


class Guard:
    """Counters and live connections of one listener."""

    def __init__(self, limits: ListenSettings, body_limits: dict[str, int] | None = None,
                 answer: Callable[[int, str], web.Response] | None = None):
        self.limits = limits
        # how a refusal is said (the embedded API server answers a Kubernetes Status)
        self.answer = answer or (lambda status, text: web.Response(status=status, text=text + "\n"))
        self.body_limits = dict(body_limits or {})  # path -> most bytes its request body may have
        self.open: dict[Any, _GuardedProtocol] = {}  # transport -> its protocol
        self.refused = 0
        self.header_timeouts = 0
        self.body_timeouts = 0
        self.too_large = 0
        self.encoded = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        proto = self.open.get(request.transport)
        try:
            if request.body_exists:
                encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    self.encoded += 1
                    return self._closing(415, f"Content-Encoding {encoding[:40]!r} is not accepted: send the body "
                                         f"uncompressed")
                limit = self.body_limits.get(request.path, request.client_max_size)
                if (request.content_length or 0) > limit:  # refused before a byte of it is read
                    self.too_large += 1
                    return self._closing(413, f"request body of {request.content_length} bytes is over this "
                                              f"endpoint's limit of {limit} bytes")
                if limit != request.client_max_size:
                    request = request.clone(client_max_size=limit)  # a chunked body is cut off at the limit
                try:
                    await asyncio.wait_for(request.read(), self.limits.body_timeout)
                except TimeoutError:
                    self.body_timeouts += 1
                    return self._closing(408, f"request body not received within {self.limits.body_timeout:g} s")
                except web.HTTPRequestEntityTooLarge:
                    self.too_large += 1
                    return self._closing(413, f"request body is over this endpoint's limit of {limit} bytes")
            return await handler(request)
        finally:
            if proto is not None:
                proto.request_done()

    def _closing(self, status: int, text: str) -> web.Response:
        resp = self.answer(status, text)
        resp.force_close()  # the rest of the body is never read: the connection cannot be reused
        return resp


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's RequestHandler with the connection cap and the header deadline in front of it."""

    def __init__(self, inner: asyncio.Protocol, guard: Guard):
        self.inner = inner
        self.guard = guard
        self.transport: Any = None
        self.refused = False
        self.awaiting_headers = True
        self.tail = b""
        self.timer: asyncio.TimerHandle | None = None

    # -- the deadline
    def _arm(self) -> None:
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.guard.limits.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.awaiting_headers and self.transport is not None and not self.transport.is_closing():
            self.guard.header_timeouts += 1
            self.transport.close()

    def request_done(self) -> None:
        """The handler finished: the next bytes start the next request's header deadline."""
        self.awaiting_headers = True
        self.tail = b""

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        if len(self.guard.open) >= self.guard.limits.max_connections:
            self.refused = True
            self.guard.refused += 1
            transport.close()
            return
        self.guard.open[transport] = self
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.awaiting_headers:
            self._arm()
            seen = self.tail + data
            if HEADER_END in seen:
                self.awaiting_headers = False
                self.tail = b""
                self._disarm()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.refused else self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.refused:
            return
        self.guard.open.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()


class _GuardedFactory:
    """Stands in for aiohttp's `web.Server` as the protocol factory; everything else is the server's."""

    def __init__(self, server: web.Server, guard: Guard):
        self._server = server
        self._guard = guard

    def __call__(self) -> _GuardedProtocol:
        return _GuardedProtocol(self._server(), self._guard)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class GuardedRunner(web.AppRunner):
    def __init__(self, app: web.Application, guard: Guard, **kwargs: Any):
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> Any:
        return _GuardedFactory(await super()._make_server(), self.guard)


def guarded_runner(app: web.Application, limits: ListenSettings | None = None,
                   body_limits: dict[str, int] | None = None,
                   answer: Callable[[int, str], web.Response] | None = None, **kwargs: Any) -> GuardedRunner:
    """`web.AppRunner(app, **kwargs)` with `limits` applied to every connection of its sites and
    `body_limits` (path -> bytes) to those paths' request bodies."""
    guard = Guard(limits or ListenSettings(), body_limits, answer)
    app.middlewares.append(guard.middleware)
    kwargs.setdefault("keepalive_timeout", guard.limits.idle_timeout)
    # after an early answer (408, 413) the unread rest of a body is drained this long at most, so the
    # client reads the answer instead of a reset, and a stalled client cannot hold the connection
    kwargs.setdefault("lingering_time", 1.0)
    return GuardedRunner(app, guard, **kwargs)


async def serve_probes(component: str, readiness, address: str, limits: ListenSettings | None = None):
    """`/healthz` and `/readyz` of a node role (agent, DRA plugin) on `address`, guarded as every listener.

    `readiness()` returns why the role is not ready ("" when it is). Returns (runner, bound port).
    """
    from hami.netaddr import split_host_port
    from hami.obs.health import Health

    health = Health(component)
    health.add(readiness)
    app = web.Application()
    health.add_routes(app)
    runner = guarded_runner(app, limits, access_log=None)
    await runner.setup()
    host, port = split_host_port(address, flag="--health-bind-address", default_host="0.0.0.0")
    await web.TCPSite(runner, host, port).start()
    return runner, (runner.addresses[0][1] if runner.addresses else port)

