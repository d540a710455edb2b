"""How a hami listener accepts connections: a budget per trust class, and a paused accept at the cap
instead of a refused connection.

kube-scheduler calls the extender with Go's HTTP transport, which dials one connection per request in
flight: a burst of binds waiting on the API limiter is a thousand connections at once. A listener that
accepts and then closes a connection over its cap resets them, and kube-scheduler counts each reset as
a failed binding cycle (unreserve, back off 1 s, 2 s, ... 10 s). So:

- Connections are classed at accept by their source: *trusted* from a `trusted_sources` network
  (loopback by default: kube-scheduler is a container of the same pod), or, on an mTLS listener, from the moment
  its handshake verified a client certificate; everything else is *untrusted*.
- Untrusted connections have `max_connections` of their own; one more is closed at accept (`refused`),
  so a flood from elsewhere holds at most that many and never the trusted class's share. On a TLS
  listener a connection whose handshake is still running is untrusted until it ends, so when that
  class is full the oldest handshake still running is dropped for the newcomer: a client that
  completes its handshake in milliseconds (kube-scheduler with its certificate) is not crowded out
  by handshakes left hanging.
- Trusted connections are never closed at accept. The listener as a whole holds at most
  `max_connections + trusted_connections`; at that, it stops accepting (its socket is taken off the
  loop) and the kernel's accept queue (`BACKLOG`) holds whoever connects next, and it accepts again as
  soon as a connection closes. Since untrusted connections never pass their own cap, the trusted
  class always has `trusted_connections` of the total.
- A slow client (slowloris) is still bounded: its class's cap, and hami.httpguard's deadlines that
  close a connection whose headers or body do not arrive in time (a TLS handshake has the header
  deadline too).

`Budget` counts; `GuardedSite` is the aiohttp site whose `Acceptor`s accept under it. A listener started
with another site (aiohttp's TCPSite) cannot pause, so its connections over the total are closed at
accept as before (hami.httpguard counts them in `Guard.refused`).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hami.config import ListenSettings
from hami.obs.log import get_logger

log = get_logger("hami.httpaccept")

# The kernel's accept queue per listening socket; Linux clamps it to net.core.somaxconn (4096 since 5.4).
# It holds the connections made while accept is paused at the cap: a burst of kube-scheduler binds
# waits here for a slot instead of being reset.
BACKLOG = 4096
# Connections accepted in one wake of the loop before others get a turn.
ACCEPTS_PER_WAKE = 64
# Out of file descriptors or memory: accept again after this long (asyncio's own listener does the same).
ACCEPT_RETRY_S = 1.0
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(sources: tuple[str, ...]) -> tuple[Network, ...]:
    """`sources` (CIDRs; ListenSettings' default is loopback) as networks; a malformed one is a ValueError
    naming it."""
    nets: list[Network] = []
    for text in sources:
        try:
            nets.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"trusted source {text!r} is not a CIDR network (e.g. 10.0.0.0/8): {exc}") from None
    return tuple(nets)


def peer_is_trusted(peer: Any, nets: tuple[Network, ...]) -> bool:
    """Whether a peer address (a socket's getpeername()) lies in `nets`; a unix socket's peer (no address
    to spoof: the filesystem's permissions decide who connects) is trusted."""
    if not isinstance(peer, tuple) or not peer:
        return True
    try:
        ip = ipaddress.ip_address(peer[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in nets)


class Slot:
    """One connection's place in its listener's budget; `release` is idempotent."""

    __slots__ = ("budget", "trusted", "held")

    def __init__(self, budget: Budget, trusted: bool):
        self.budget = budget
        self.trusted = trusted
        self.held = True

    def trust(self) -> None:
        """Its TLS handshake verified a client certificate: it moves to the trusted class."""
        if self.held and not self.trusted:
            self.budget.untrusted -= 1
            self.budget.trusted += 1
            self.trusted = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.budget.released(self.trusted)


class Budget:
    """Open connections of one listener by trust class, and the acceptors to pause at the total."""

    def __init__(self, limits: ListenSettings):
        self.untrusted_cap = limits.max_connections
        self.total_cap = limits.max_connections + limits.trusted_connections
        self.nets = trusted_networks(limits.trusted_sources)
        self.trusted = 0
        self.untrusted = 0
        self.refused = 0  # untrusted connections closed at accept over their cap (or, without a pausing site, any)
        self.evicted = 0  # TLS handshakes still running dropped for a newcomer when their class was full
        self.pauses = 0  # times accepting paused at the total
        self.acceptors: list[Acceptor] = []

    @property
    def full(self) -> bool:
        return self.trusted + self.untrusted >= self.total_cap

    def admit(self, trusted: bool) -> Slot | None:
        """A place for a connection just accepted, or None when it must be closed."""
        if self.full or (not trusted and self.untrusted >= self.untrusted_cap):
            self.refused += 1
            return None
        if trusted:
            self.trusted += 1
        else:
            self.untrusted += 1
        if self.full:
            self.pause()
        return Slot(self, trusted)

    def released(self, trusted: bool) -> None:
        if trusted:
            self.trusted -= 1
        else:
            self.untrusted -= 1
        if not self.full:
            for acceptor in self.acceptors:
                acceptor.resume()

    def pause(self) -> None:
        self.pauses += 1
        for acceptor in self.acceptors:
            acceptor.pause()


class Acceptor:
    """Accepts one listening socket's connections under a `Budget`, off the loop while it is full."""

    def __init__(self, sock: socket.socket, budget: Budget, protocol_factory: Callable[[Slot], asyncio.Protocol],
                 ssl_context: ssl.SSLContext | None, handshake_timeout: float):
        self.sock = sock
        self.budget = budget
        self.protocol_factory = protocol_factory
        self.ssl_context = ssl_context
        self.handshake_timeout = handshake_timeout
        self.loop = asyncio.get_running_loop()
        self.reading = False
        self.closed = False
        self.retry: asyncio.TimerHandle | None = None
        # connections being set up (TLS handshakes), oldest first; the untrusted ones may be evicted
        self.starting: dict[asyncio.Task, Slot] = {}

    def start(self) -> None:
        self.sock.setblocking(False)
        self.budget.acceptors.append(self)
        if not self.budget.full:
            self.resume()

    def pause(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False

    def resume(self) -> None:
        if not self.closed and not self.reading and self.retry is None:
            self.loop.add_reader(self.sock.fileno(), self.accept_ready)
            self.reading = True

    def close(self) -> None:
        self.pause()
        self.closed = True
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        if self in self.budget.acceptors:
            self.budget.acceptors.remove(self)
        for task in list(self.starting):
            task.cancel()
        self.sock.close()

    def accept_ready(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            if self.budget.full:
                self.budget.pause()
                return
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                log.warning("Cannot accept a connection, trying again shortly", error=str(exc),
                            retry_s=ACCEPT_RETRY_S)
                self.pause()
                self.retry = self.loop.call_later(ACCEPT_RETRY_S, self.retried)
                return
            self.accepted(conn, peer)

    def retried(self) -> None:
        self.retry = None
        if not self.budget.full:
            self.resume()

    def accepted(self, conn: socket.socket, peer: Any) -> None:
        trusted = peer_is_trusted(peer, self.budget.nets)
        if not trusted and self.budget.untrusted >= self.budget.untrusted_cap:
            self.evict_a_handshake()
        slot = self.budget.admit(trusted)
        if slot is None:
            conn.close()
            return
        conn.setblocking(False)
        task = self.loop.create_task(self.connect(conn, slot))
        self.starting[task] = slot
        task.add_done_callback(self.started)

    def evict_a_handshake(self) -> None:
        """The untrusted class is full: drop its oldest TLS handshake still running, if any."""
        for task, slot in self.starting.items():
            if not slot.trusted:
                slot.release()
                task.cancel()
                self.budget.evicted += 1
                return

    def started(self, task: asyncio.Task) -> None:
        self.starting.pop(task, None)

    async def connect(self, conn: socket.socket, slot: Slot) -> None:
        """Makes the connection's transport (after its TLS handshake, if any); its protocol owns the slot
        from then on. A connection that never gets there gives its slot back here."""
        try:
            await self.loop.connect_accepted_socket(
                lambda: self.protocol_factory(slot), conn, ssl=self.ssl_context,
                ssl_handshake_timeout=self.handshake_timeout if self.ssl_context is not None else None)
        except asyncio.CancelledError:
            slot.release()
            conn.close()
            raise
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            slot.release()
            conn.close()
            log.debug("Connection closed before it started", error=str(exc))


def bind_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for `host` (every address it resolves to; all interfaces for "" or None), as
    asyncio's create_server makes them: SO_REUSEADDR, and IPv6 sockets IPv6-only."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[Any] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


class Listening:
    """What aiohttp's site keeps as its server: the sockets (runner.addresses) and `close()`."""

    def __init__(self, acceptors: list[Acceptor]):
        self.acceptors = acceptors

    @property
    def sockets(self) -> list[socket.socket]:
        return [a.sock for a in self.acceptors if not a.closed]

    def close(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()


class GuardedSite(web.BaseSite):
    """aiohttp's TCPSite (or SockSite, given `sock`) for a hami.httpguard runner: accepts under the
    listener's `Budget`, pausing at its total (module docstring)."""

    def __init__(self, runner: Any, host: str | None = None, port: int = 0, *,
                 ssl_context: ssl.SSLContext | None = None, backlog: int = BACKLOG, sock: socket.socket | None = None):
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self.host = host
        self.port = port
        self.sock = sock

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self.host or '0.0.0.0'}:{self.port}"

    async def start(self) -> None:
        await super().start()
        guard = self._runner.guard
        factory = self._runner.server
        if self.sock is not None:
            self.sock.listen(self._backlog)
            socks = [self.sock]
        else:
            socks = bind_sockets(self.host, self.port, self._backlog)
        acceptors = [Acceptor(s, guard.budget, factory.with_slot, self._ssl_context, guard.limits.header_timeout)
                     for s in socks]
        self._server = Listening(acceptors)
        for acceptor in acceptors:
            acceptor.start()
        if socks:
            self.port = socks[0].getsockname()[1]
