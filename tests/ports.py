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
