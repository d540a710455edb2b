"""Loopback ports for tests.

`serve_app`: an aiohttp app on a port the kernel picks at bind time (no race). `refusing_port`: a port
held bound but not listening for as long as the test runs, so connecting is refused and no other test
can take it. hami's own listeners take port 0 and report what they bound (`--ports-file`,
hami.listeners). `free_ports`: numbers chosen ahead and released before they are bound, so another
process can take one meanwhile: only for aiomonitor, which binds inside the library and reports no port.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def serve_app(app) -> tuple[str, object]:
    """Start an aiohttp `app` on a free loopback port; returns (base URL, runner to `cleanup()`)."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return f"http://127.0.0.1:{port}", runner
