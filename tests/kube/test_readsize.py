"""Small answers read in small pieces (hami.kube.readsize), over plain TCP and over TLS.

The server runs as its own process, so tracemalloc here sees only the client's reads: a small GET
made under `reads_of(SMALL_ANSWER)` peaks far below asyncio's 256 KiB read, the same GET made
without it shows that 256 KiB transient (plain TCP: `recv(max_size)`; TLS: the decrypted
`SSLObject.read(max_size)`), and a pooled connection goes back to asyncio's size for the next
request that does not ask for a small one."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import tracemalloc

import aiohttp
import pytest

from hami.kube.readsize import (
    SMALL_ANSWER,
    SizedReadRequest,
    read_target,
    reads_of,
    set_read_size,
    wanted_read_size,
)
from tests.scheduler.test_extender_tls_logs import make_cert

pytestmark = pytest.mark.timeout(60)

SERVER = r"""
import asyncio, ssl, sys
from aiohttp import web

async def main():
    app = web.Application()
    app.router.add_get("/version", lambda r: web.json_response({"major": "1", "minor": "33"}))
    ctx = None
    if len(sys.argv) > 1:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture(params=["plain", "tls"])
def version_server(request, tmp_path):
    args, client_ssl = [], False
    if request.param == "tls":
        cert, key = make_cert(tmp_path, "127.0.0.1")
        args, client_ssl = [cert, key], ssl.create_default_context(cafile=cert)
        client_ssl.check_hostname = False
    proc = subprocess.Popen([sys.executable, "-c", SERVER, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        scheme = "https" if request.param == "tls" else "http"
        yield f"{scheme}://127.0.0.1:{port}/version", client_ssl
    finally:
        proc.terminate()
        proc.wait(10)


async def transient_of(session: aiohttp.ClientSession, url: str) -> int:
    """Bytes allocated and freed again during one GET (the traced peak above its start and end)."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        async with session.get(url) as r:
            assert r.status == 200 and (await r.json())["major"] == "1"
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - max(before, after)


async def test_a_small_answer_is_read_without_the_256_kib_transient(version_server):
    url, client_ssl = version_server
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl, limit=1),
                                     request_class=SizedReadRequest) as session:
        async with session.get(url) as r:  # the connection opened, the code paths warm
            await r.read()
        with reads_of(SMALL_ANSWER):
            small = min([await transient_of(session, url) for _ in range(3)])
        default = min([await transient_of(session, url) for _ in range(3)])  # the same pooled connection
    assert small < 64 * 1024, small
    assert default >= 200 * 1024, default  # asyncio's 256 KiB read, back for requests that ask nothing


class Transport:
    max_size = 256 * 1024  # as asyncio's socket transports have it


def test_the_read_size_is_set_and_comes_back_to_the_default():
    """(TLS: the size lands on the SSL protocol that decrypts; the tls case above shows it read small.)"""
    plain = Transport()
    assert read_target(plain) is plain
    assert set_read_size(plain, 4096) and plain.max_size == 4096
    assert set_read_size(plain, None) and plain.max_size == 256 * 1024 and "max_size" not in vars(plain)
    assert set_read_size(plain, None) and plain.max_size == 256 * 1024  # twice: still the default
    assert not set_read_size(None, 4096) and not set_read_size(object(), 4096)


async def test_reads_of_is_scoped_to_its_block_and_its_task():
    seen = []

    async def wanted():
        seen.append(wanted_read_size())

    with reads_of(SMALL_ANSWER):
        await wanted()
        await asyncio.create_task(wanted())  # a task started inside copies the block's size
        with reads_of(None):
            await wanted()  # None: the surrounding block's size
    await wanted()
    assert seen == [SMALL_ANSWER, SMALL_ANSWER, SMALL_ANSWER, None]
