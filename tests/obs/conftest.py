"""Fixtures for the obs tests: a loopback aiohttp app with /debug/pprof mounted."""

from __future__ import annotations

import tracemalloc

import aiohttp
import pytest
from aiohttp import web

from hami.obs.profiling import mount_pprof


@pytest.fixture
async def pprof_app():
    """(base URL, aiohttp session) of a running app with mount_pprof; tracemalloc stopped after."""
    app = web.Application()
    mount_pprof(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession() as session:
        yield f"http://127.0.0.1:{port}", session
    await runner.cleanup()
    tracemalloc.stop()
