"""How many bytes one read of an API connection asks for, per request.

asyncio reads a plain-TCP socket with `recv(max_size)` and decrypts a TLS connection with
`SSLObject.read(max_size)` (asyncio/sslproto.py `_do_read__copied`); `max_size` is 256 KiB on both,
and each read allocates that much before shrinking it to what came. For a LIST of megabytes that is
the right size; for a small answer (`GET /version`, a SelfSubjectAccessReview, a few hundred bytes)
it is a 256 KiB transient per request, which is what an idle scheduler allocated most (measured with
tracemalloc around one `GET /version`: about 260 KB over plain TCP and over TLS alike). On TLS the
raw socket is read into one buffer the connection keeps (no per-read allocation there); the decrypted
read is the transient, and it follows the same setting.

A request made inside `reads_of(size)` is read `size` bytes at a time; any other request at asyncio's
default. `SizedReadRequest` (the request class of the client's aiohttp session) sets its
connection's read size before writing each request, so a small answer is read whole at the small
size, and a pooled connection never carries the last request's size to the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import aiohttp

# /version and a SelfSubjectAccessReview answer in well under 1 KiB with their headers; a bigger
# answer only takes more reads.
SMALL_ANSWER = 4 * 1024

_wanted: ContextVar[int | None] = ContextVar("hami_kube_read_size", default=None)


@contextmanager
def reads_of(size: int | None) -> Iterator[None]:
    """Requests made in this block read their answers `size` bytes at a time (None: as the
    surrounding block says, by default asyncio's size)."""
    if size is None:
        yield
        return
    token = _wanted.set(size)
    try:
        yield
    finally:
        _wanted.reset(token)


def wanted_read_size() -> int | None:
    """The read size of the `reads_of` block this runs in (None: asyncio's default)."""
    return _wanted.get()


def read_target(transport: Any) -> Any:
    """What holds the read size of this connection: the TLS protocol that decrypts it, else the
    transport itself; None when neither has one (a transport this asyncio does not make)."""
    target = getattr(transport, "_ssl_protocol", transport)
    if target is None or not isinstance(getattr(type(target), "max_size", None), int):
        return None
    return target


def set_read_size(transport: Any, size: int | None) -> bool:
    """Read this connection `size` bytes at a time (None: asyncio's default again). False when its
    transport has no read size to set."""
    target = read_target(transport)
    if target is None:
        return False
    if size is not None:
        target.max_size = size
    elif "max_size" in vars(target):
        del target.max_size
    return True


class SizedReadRequest(aiohttp.ClientRequest):
    """Each request sets its connection's read size before it is written: the `reads_of` size it was
    made under, else asyncio's default (undoing what the connection's previous request set)."""

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        set_read_size(conn.transport, wanted_read_size())
        return await super().send(conn)
