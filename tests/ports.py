"""Free loopback TCP ports for tests that start listeners (bound all at once so they differ, then
released; a race with another process taking one is possible but harmless in CI)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


async def serve_app(app) -> tuple[str, object]:
    """Start an aiohttp `app` on a free loopback port; returns (base URL, runner to `cleanup()`)."""
    from aiohttp import web

    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", runner
