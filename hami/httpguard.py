"""Limits every hami HTTP listener applies to its connections: a cap on open connections, a deadline
for a request's headers and another for its body, and an idle timeout between keep-alive requests.

aiohttp's server has none of the first three: a client that opens a connection and sends nothing, or
sends its headers a byte at a time, holds a connection (and a task) for as long as it likes; 200 such
clients would stay open as long as they like against the extender. Here:

- connections are counted by trust class (kube-scheduler's loopback or mTLS identity, or anyone else):
  an untrusted one beyond `max_connections` is closed as soon as it is accepted (counted in
  `refused`); at the listener's total the listener stops accepting and the kernel's queue holds the
  rest, so kube-scheduler's connections are never reset (hami.httpaccept, whose `GuardedSite` every
  listener is started with);
- from its first byte (or from accepting it), a request's headers must be complete within
  `header_timeout`, else the connection is closed (`header_timeouts`);
- a request's body must be read within `body_timeout` after its headers, else 408 and the connection
  is closed (`body_timeouts`); the body stays read for the handler;
- between requests a kept-alive connection is closed after `idle_timeout` (aiohttp's keep-alive);
- a request body with a `Content-Encoding` other than identity is refused 415 (aiohttp would inflate
  it, and the size limit would count the inflated bytes only after doing the work), and a path given
  a smaller body limit (`body_limits`, e.g. the webhook's 3 MiB) is refused 413 past it, before the
  rest is read.

A listener given `fast` routes (path -> handler of the body returning the answer's bytes, or an
awaitable of them when it must wait: the extender's /filter and /bind) answers the plainest requests to them itself
(`hami.httphead.parse_head`: POST, HTTP/1.1, a Content-Length body within the limit) with the
bytes aiohttp would write, under the same deadlines; anything else on that connection, and all that
follows it, goes to aiohttp unread, so errors, limits and TLS stay aiohttp's. Requests pipelined
behind a fast one are answered in order. An answer given at once is written from the protocol's
own callback (no task, no extra turn of the loop), and each connection checks its deadlines with
one lazy timer instead of making and cancelling three per request (`_Deadline`). A head seen before
is looked up by its bytes instead of parsed again (`Guard.heads`, bounded: HEADS_KEPT of at most
HEAD_KEPT_BYTES each).

The limits are `hami.config.ListenSettings` (flags --http-header-timeout, --http-body-timeout,
--http-max-connections, --http-idle-timeout). `guarded_runner(app, limits, body_limits=None, **runner_kwargs)` is a
drop-in for `web.AppRunner(app, ...)`; its `.guard` holds the counters. The protocol wrapper only watches bytes go by
(for the end of the header block) and forwards everything to aiohttp's own handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from hami import httphead
from hami.config import ListenSettings
from hami.httpaccept import Budget, GuardedSite, Slot, peer_is_trusted
from hami.obs.log import get_logger

log = get_logger("hami.httpguard")
# path -> handler of the request body: the answer's bytes now, or an awaitable of them
FastRoutes = dict[bytes, Callable[[bytes], "bytes | Awaitable[bytes]"]]

HEADER_END = b"\r\n\r\n"


class Guard:
    """Counters and live connections of one listener."""

    def __init__(self, limits: ListenSettings, body_limits: dict[str, int] | None = None,
                 answer: Callable[[int, str], web.Response] | None = None, fast: FastRoutes | None = None,
                 fast_max_body: int = 0):
        self.limits = limits
        self.fast = fast or None  # path -> handler answered without aiohttp (module docstring)
        self.fast_max_body = fast_max_body
        self.fast_served = 0
        # how a refusal is said (the embedded API server answers a Kubernetes Status)
        self.answer = answer or (lambda status, text: web.Response(status=status, text=text + "\n"))
        self.body_limits = dict(body_limits or {})  # path -> most bytes its request body may have
        self.open: dict[Any, _GuardedProtocol] = {}  # transport -> its protocol
        self.budget = Budget(self.limits)  # open connections by trust class (hami.httpaccept)
        self.header_timeouts = 0
        self.body_timeouts = 0
        self.too_large = 0
        self.encoded = 0
        self.heads: dict[bytes, httphead.Head] = {}  # fast-lane heads by their bytes (_parse_head)
        # The clock the header, body and idle deadlines are measured on (seconds): the event loop's
        # unless a caller sets its own before connections arrive (a test holds time still with it,
        # then moves it and calls expire_overdue, so no deadline depends on how fast the machine is).
        self.clock: Callable[[], float] | None = None

    def expire_overdue(self) -> int:
        """Expire, now, every connection deadline that has passed on `clock`, instead of when its
        timer next looks (at most the shortest timeout later); returns how many expired."""
        return sum(proto.deadline.expire_if_due() for proto in list(self.open.values()))

    @property
    def refused(self) -> int:
        """Connections closed at accept: untrusted ones over their cap (hami.httpaccept)."""
        return self.budget.refused

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
    """aiohttp's RequestHandler with the connection cap and the header deadline in front of it, and
    the fast routes answered here until the connection sends anything else (then aiohttp's handler
    is made and gets every byte from there on)."""

    def __init__(self, make_inner: Callable[[], Any], guard: Guard, slot: Slot | None = None):
        self.make_inner = make_inner
        self.inner: Any = None
        self.guard = guard
        self.transport: Any = None
        # its place in the listener's budget: given by hami.httpaccept's acceptor, else taken at connection_made
        self.slot = slot
        self.refused = False
        self.awaiting_headers = True
        self.tail = b""
        # One deadline at a time (HEADERS, BODY or IDLE, or None) behind one lazy timer: a request
        # answered within its deadlines moves the deadline and makes no timer (_Deadline).
        limits = guard.limits
        self.deadline = _Deadline(self._expired, min(limits.header_timeout, limits.body_timeout, limits.idle_timeout),
                                  guard.clock)
        # the fast lane: bytes not yet answered, the parsed head waiting for its body, an answer in flight
        self.fast = guard.fast
        self.fbuf = bytearray()
        self.head: httphead.Head | None = None
        self.busy = False
        # the answer in flight when its handler had to wait, held here: the loop keeps only a weak reference
        self.task: asyncio.Task | None = None
        self.eof = False
        self.paused = False  # the client does not read its answers: no more are made until it does
        self.reading = True

    # -- the deadlines
    def _arm(self) -> None:
        """The header deadline, unless one is already running (it counts from the request's first byte)."""
        if self.deadline.phase is not HEADERS:
            self.deadline.set(HEADERS, self.guard.limits.header_timeout)

    def _disarm(self) -> None:
        if self.deadline.phase is HEADERS:
            self.deadline.clear()

    def _expired(self, phase: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if phase is HEADERS:
            if self.awaiting_headers:
                self.guard.header_timeouts += 1
                transport.close()
        elif phase is BODY:
            self.guard.body_timeouts += 1
            text = f"request body not received within {self.guard.limits.body_timeout:g} s\n".encode()
            transport.write(httphead.response(408, text, b"text/plain; charset=utf-8", keep_alive=False))
            transport.close()
        elif not self.busy and not self.fbuf:  # IDLE
            transport.close()

    def request_done(self) -> None:
        """The handler finished: the next bytes start the next request's header deadline."""
        self.awaiting_headers = True
        self.tail = b""

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        budget = self.guard.budget
        if self.slot is None:  # a site that does not pause its accept (aiohttp's TCPSite): closed over the cap
            self.slot = budget.admit(peer_is_trusted(transport.get_extra_info("peername"), budget.nets))
            if self.slot is None:
                self.refused = True
                transport.close()
                return
        if transport.get_extra_info("peercert"):  # an mTLS handshake verified the client's certificate
            self.slot.trust()
        self.guard.open[transport] = self
        self._arm()
        if self.fast is None:
            self.inner = self.make_inner()
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.fast is not None:
            self.fbuf += data
            if not self.busy and not self.paused:
                self._fast_next()
            if self.fast is not None and self.reading and len(self.fbuf) > self.guard.fast_max_body + httphead.MAX_HEAD:
                self.reading = False  # more than one whole request waiting: read no further for now
                self.transport.pause_reading()
            return
        self._forward(data)

    def _forward(self, data: bytes) -> None:
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
        if self.refused:
            return None
        if self.fast is not None:
            self.eof = True
            return True if self.busy else None  # answer the request in hand, then close
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.stop()
        if self.refused:
            return
        self.slot.release()
        self.guard.open.pop(self.transport, None)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.paused = True
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.paused = False
        if self.inner is not None:
            self.inner.resume_writing()
        elif not self.busy:
            self._fast_next()

    # -- the fast lane
    def _fast_next(self) -> None:
        """Answer the buffered requests that are whole and ours, in order; hand the connection to
        aiohttp at the first that is not ours; else wait for more under the header or body deadline.

        A fast route's handler is called here, in this callback: when it answers at once (bytes: a
        /filter decision needs no I/O) the answer is written without a task or another turn of the
        loop; when it returns an awaitable, that goes on in a task (_finish) and the next request
        waits for its answer. After ANSWERS_PER_TURN answers from one callback the rest of a
        pipeline waits a loop turn, so one connection cannot hold the loop."""
        answered = 0
        while self.fbuf and not self.busy and not self.paused and self.fast is not None \
                and not self.transport.is_closing():
            head = self.head
            if head is None:
                head = self._parse_head()
                if head is httphead.NEED_MORE:
                    self._arm()  # the header deadline, from this request's first byte
                    return
                if head is httphead.DELEGATE:
                    self._arm()  # aiohttp's, from here
                    self._hand_over()
                    return
                self.head = head
                self.awaiting_headers = False
                if len(self.fbuf) < head.body_at + head.length:
                    # the body deadline, from the end of the headers (more bytes do not move it)
                    self.deadline.set(BODY, self.guard.limits.body_timeout)
                    return
            elif len(self.fbuf) < head.body_at + head.length:
                return
            # (a request whole in one read never needed its header or body deadline)
            self.deadline.clear()
            end = head.body_at + head.length
            with memoryview(self.fbuf) as view:  # one copy of the body, not a slice's and then a bytes'
                body = bytes(view[head.body_at:end])
            del self.fbuf[:end]
            if not self.reading and len(self.fbuf) <= self.guard.fast_max_body + httphead.MAX_HEAD:
                self.reading = True
                self.transport.resume_reading()
            self.head = None
            self.busy = True
            try:
                out = self.guard.fast[head.path](body)
            except Exception as exc:
                self._answered(head, None, exc)
                continue
            if out.__class__ is bytes:
                self._answered(head, out)
                answered += 1
                if answered >= ANSWERS_PER_TURN and self.fbuf:
                    # a long pipeline: let the loop serve others before the rest
                    asyncio.get_running_loop().call_soon(self._fast_next)
                    return
                continue
            self.task = asyncio.get_running_loop().create_task(self._finish(head, out))

    def _parse_head(self) -> httphead.Head | None | bool:
        """httphead.parse_head of the buffer, looked up by the head's bytes when the same head came
        before (kube-scheduler sends the same few heads: one per body length)."""
        fbuf, guard = self.fbuf, self.guard
        end = fbuf.find(b"\r\n\r\n", 0, httphead.MAX_HEAD + 4)
        if end < 0:
            return httphead.parse_head(fbuf, guard.fast, guard.fast_max_body)
        if end > HEAD_KEPT_BYTES:
            return httphead.parse_head(fbuf, guard.fast, guard.fast_max_body)
        key = bytes(fbuf[:end])
        head = guard.heads.get(key)
        if head is None:
            head = httphead.parse_head(fbuf, guard.fast, guard.fast_max_body)
            if head.__class__ is httphead.Head:  # (parse_head answers from the head's bytes alone)
                if len(guard.heads) >= HEADS_KEPT:
                    guard.heads.clear()
                guard.heads[key] = head
        return head

    async def _finish(self, head: httphead.Head, answer: Awaitable[bytes]) -> None:
        """A handler's answer that has to wait (I/O), then the requests pipelined behind it."""
        try:
            out = await answer
        except asyncio.CancelledError:
            # the handler was cancelled (the process stopping): as with aiohttp, no answer, and the
            # connection is closed so the client sees its request fail instead of waiting for ever
            self.busy = False
            self.task = None
            if not self.transport.is_closing():
                self.transport.close()
            raise
        except Exception as exc:
            self.task = None
            self._answered(head, None, exc)
        else:
            self.task = None
            self._answered(head, out)
        self._fast_next()

    def _answered(self, head: httphead.Head, answer: bytes | None, error: Exception | None = None) -> None:
        """Write a handler's answer (or aiohttp's 500 for one that raised) and get ready for the next request."""
        if error is not None:
            log.exception("Error handling request", path=head.path.decode(), error=str(error))  # in its except
            out = httphead.response(500, b"500 Internal Server Error\n\nServer got itself in trouble",
                                    b"text/plain; charset=utf-8", keep_alive=False)
            keep_alive = False  # aiohttp closes the connection after a 500
        else:
            out = httphead.response(200, answer, keep_alive=head.keep_alive)
            keep_alive = head.keep_alive
        self.guard.fast_served += 1
        self.busy = False
        self.awaiting_headers = True
        transport = self.transport
        if transport.is_closing():
            return
        transport.write(out)
        if not keep_alive or self.eof:
            transport.close()
            return
        if not self.fbuf:
            self.deadline.set(IDLE, self.guard.limits.idle_timeout)

    def _hand_over(self) -> None:
        """From here on the connection is aiohttp's: its handler is made and gets the unread bytes."""
        self._disarm_fast()
        self.fast = None
        self.head = None
        data, self.fbuf = bytes(self.fbuf), bytearray()
        if not self.reading:  # aiohttp's handler keeps its own flow control from here
            self.reading = True
            self.transport.resume_reading()
        self.awaiting_headers = True
        self.tail = b""
        self.inner = self.make_inner()
        self.inner.connection_made(self.transport)
        if data:
            self._forward(data)
        if self.eof:
            self.inner.eof_received()

    def _disarm_fast(self) -> None:
        """Drop the fast lane's body or idle deadline (a running header deadline stays: it is aiohttp's too)."""
        if self.deadline.phase is not HEADERS:
            self.deadline.clear()

    def shutdown(self) -> None:
        """The listener is closing: an idle fast connection is closed now, a busy one after its answer."""
        if self.fast is not None and not self.refused:
            self.eof = True
            if not self.busy and not self.transport.is_closing():
                self.transport.close()


HEADERS, BODY, IDLE = "headers", "body", "idle"
# Fast-lane request heads kept parsed, by their bytes (_GuardedProtocol._parse_head), each at most
# HEAD_KEPT_BYTES long (kube-scheduler's are about 150): a client sending ever new heads only empties
# the store, which never holds more than HEADS_KEPT x HEAD_KEPT_BYTES.
HEADS_KEPT = 256
HEAD_KEPT_BYTES = 1024
# Answers given at once from one read callback before the rest of a pipeline waits a loop turn.
ANSWERS_PER_TURN = 16


class _Deadline:
    """One connection's current deadline, checked by a lazy timer. `set` and `clear` only write
    two fields: the timer, once made, fires every `tick` seconds at most (the shortest of the
    listener's timeouts) and either calls `on_expiry(phase)` or comes back for the deadline that
    replaced its own. Every deadline lies at least `tick` after it is set, so a pending timer always
    fires before a new one is due and is never moved. A kept-alive connection answering request
    after request needs one timer per `tick` instead of three made and cancelled for each request.
    Deadlines are times on `clock` (the running loop's time when None, Guard.clock)."""

    __slots__ = ("phase", "at", "on_expiry", "tick", "timer", "clock")

    def __init__(self, on_expiry: Callable[[str], None], tick: float, clock: Callable[[], float] | None = None):
        self.phase: str | None = None
        self.at = 0.0
        self.on_expiry = on_expiry
        self.tick = tick
        self.timer: asyncio.TimerHandle | None = None
        self.clock = clock

    def set(self, phase: str, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self.phase = phase
        self.at = (loop.time() if self.clock is None else self.clock()) + seconds
        if self.timer is None:
            self.timer = loop.call_later(min(seconds, self.tick), self._fire)

    def clear(self) -> None:
        self.phase = None

    def stop(self) -> None:
        self.phase = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expire_if_due(self) -> bool:
        """Call `on_expiry` now if the deadline has passed on the clock; True when it did."""
        phase = self.phase
        if phase is None:
            return False
        now = asyncio.get_running_loop().time() if self.clock is None else self.clock()
        if now < self.at:
            return False
        self.phase = None
        self.on_expiry(phase)
        return True

    def _fire(self) -> None:
        self.timer = None
        if self.phase is None or self.expire_if_due():
            return
        # a later deadline replaced the one this timer was made for (or the clock is a test's, held still)
        loop = asyncio.get_running_loop()
        now = loop.time() if self.clock is None else self.clock()
        self.timer = loop.call_later(max(0.0, min(self.at - now, self.tick)), self._fire)


class _GuardedFactory:
    """Stands in for aiohttp's `web.Server` as the protocol factory; everything else is the server's."""

    def __init__(self, server: web.Server, guard: Guard):
        self._server = server
        self._guard = guard

    def __call__(self) -> _GuardedProtocol:
        return _GuardedProtocol(self._server, self._guard)

    def with_slot(self, slot: Slot) -> _GuardedProtocol:
        """The protocol of a connection hami.httpaccept already admitted."""
        return _GuardedProtocol(self._server, self._guard, slot)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class GuardedRunner(web.AppRunner):
    def __init__(self, app: web.Application, guard: Guard, **kwargs: Any):
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> Any:
        return _GuardedFactory(await super()._make_server(), self.guard)

    async def shutdown(self) -> None:
        for proto in list(self.guard.open.values()):  # aiohttp's own shutdown knows only its handlers
            proto.shutdown()
        await super().shutdown()


def guarded_runner(app: web.Application, limits: ListenSettings | None = None,
                   body_limits: dict[str, int] | None = None,
                   answer: Callable[[int, str], web.Response] | None = None, fast: FastRoutes | None = None,
                   **kwargs: Any) -> GuardedRunner:
    """`web.AppRunner(app, **kwargs)` with `limits` applied to every connection of its sites,
    `body_limits` (path -> bytes) to those paths' request bodies, and `fast` routes (path -> handler
    of the body returning the answer's bytes) answered without aiohttp (module docstring)."""
    fast_max = min([app._client_max_size] + [n for p, n in (body_limits or {}).items() if p.encode() in (fast or {})])
    guard = Guard(limits or ListenSettings(), body_limits, answer, fast, fast_max)
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
    await GuardedSite(runner, host, port).start()
    return runner, (runner.addresses[0][1] if runner.addresses else port)


async def run_with_probes(role, component: str, address: str, limits: ListenSettings | None,
                          stop: asyncio.Event, ready: asyncio.Event | None = None,
                          on_port: Callable[[int], None] | None = None, listeners=None) -> None:
    """`role.run(stop, ready)` with its `/healthz` and `/readyz` (`role.readiness`) served on `address`
    while it runs (kubelet's probes; "" serves none); `on_port(bound port)` once they listen, and the
    bound address reported to `listeners` (hami.listeners.BoundListeners) as `<component>-health`."""
    runner = None
    if address:
        runner, port = await serve_probes(component, role.readiness, address, limits)
        log.info("Health probes listening", component=component, address=address, port=port)
        if listeners is not None:
            listeners.add_runner(f"{component}-health", runner)
        if on_port is not None:
            on_port(port)
    try:
        await role.run(stop, ready)
    finally:
        if runner is not None:
            await runner.cleanup()
