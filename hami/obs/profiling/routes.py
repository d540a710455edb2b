"""The `/debug/pprof/*` HTTP routes (`mount_pprof`) and the standalone `--debug-bind-address`
server.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from dataclasses import dataclass, field
from html import escape

from aiohttp import web

from hami.netaddr import split_host_port
from hami.obs.profiling.encoder import Profile, encode_gzip
from hami.obs.profiling.heap import HeapTracker, heap_delta, heap_text
from hami.obs.profiling.sampler import DEFAULT_INTERVAL, CpuSampler
from hami.obs.profiling.tasks import goroutine_profile, goroutine_text

_STATE = web.AppKey("hami_pprof_state", object)

_INDEX = [
    ("allocs", "A sampling of all past memory allocations (tracemalloc; lower bound)"),
    ("cmdline", "The command line invocation of the current program"),
    ("goroutine", "Stack traces of all asyncio tasks and threads"),
    ("heap", "A sampling of memory allocations of live objects (tracemalloc)"),
    ("profile", "CPU profile of every thread. Use the seconds GET parameter (default 30)."),
]


@dataclass
class _PprofState:
    heap: HeapTracker = field(default_factory=HeapTracker)
    interval: float = DEFAULT_INTERVAL


def _int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: got {raw!r}, expected an integer\n") from None
    if not lo <= value <= hi:
        raise web.HTTPBadRequest(text=f"{name}: got {value}, expected {lo}..{hi}\n")
    return value


def _profile_response(profile: Profile, name: str) -> web.Response:
    return web.Response(
        body=encode_gzip(profile),
        content_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "X-Content-Type-Options": "nosniff"},
    )


async def _index(request: web.Request) -> web.Response:
    rows = "\n".join(
        f'<tr><td><a href="{n}?debug=1">{n}</a></td><td>{escape(d)}</td></tr>' for n, d in _INDEX
    )
    body = (
        "<html><head><title>/debug/pprof/</title></head><body>/debug/pprof/<br><br>"
        f"Types of profiles available:<table>{rows}</table>"
        '<a href="goroutine?debug=2">full goroutine stack dump</a></body></html>\n'
    )
    return web.Response(text=body, content_type="text/html")


async def _cmdline(request: web.Request) -> web.Response:
    return web.Response(text="\x00".join(sys.argv), content_type="text/plain")


async def _profile(request: web.Request) -> web.Response:
    state: _PprofState = request.app[_STATE]
    seconds = _int_param(request, "seconds", 30, 1, 3600)
    mode = request.query.get("mode", "cpu")
    if mode not in ("cpu", "wall"):
        raise web.HTTPBadRequest(text=f"mode: got {mode!r}, expected cpu or wall\n")
    loop = asyncio.get_running_loop()
    sampler = CpuSampler(state.interval, mode, {threading.get_ident(): loop})
    sampler.start()
    try:
        await asyncio.sleep(seconds)
    finally:
        profile = sampler.stop()
    return _profile_response(profile, "profile")


async def _heap_like(request: web.Request, default: str, name: str) -> web.Response:
    state: _PprofState = request.app[_STATE]
    if _int_param(request, "gc", 0, 0, 1):
        import gc

        gc.collect()
    seconds = _int_param(request, "seconds", 0, 0, 3600)
    debug = _int_param(request, "debug", 0, 0, 2)
    started = state.heap.start()
    # On the loop thread: a worker thread would fight a busy loop for the GIL (Go stops the world too).
    base = state.heap.profile(default) if seconds and not started else None
    if started or seconds:
        # Tracing just began: wait so the profile has something in it. `seconds=N` (pprof -seconds):
        # like Go, alloc_* is what was allocated during the N seconds (in-use is the state at the end).
        await asyncio.sleep(seconds if seconds else 5)
    profile = state.heap.profile(default)
    if base is not None:
        profile = heap_delta(base, profile)
    if debug:
        return web.Response(text=heap_text(profile), content_type="text/plain")
    return _profile_response(profile, name)


async def _heap(request: web.Request) -> web.Response:
    return await _heap_like(request, "inuse_space", "heap")


async def _allocs(request: web.Request) -> web.Response:
    return await _heap_like(request, "alloc_space", "allocs")


async def _goroutine(request: web.Request) -> web.Response:
    debug = _int_param(request, "debug", 0, 0, 2)
    loop = asyncio.get_running_loop()
    if debug:
        return web.Response(text=goroutine_text(loop, debug), content_type="text/plain")
    return _profile_response(goroutine_profile(loop), "goroutine")


def mount_pprof(app: web.Application, *, interval: float = DEFAULT_INTERVAL) -> None:
    """Add the /debug/pprof/ routes to `app` (call before the app starts)."""
    app[_STATE] = _PprofState(interval=interval)
    app.router.add_get("/debug/pprof", _index)
    app.router.add_get("/debug/pprof/", _index)
    app.router.add_get("/debug/pprof/cmdline", _cmdline)
    app.router.add_get("/debug/pprof/profile", _profile)
    app.router.add_get("/debug/pprof/heap", _heap)
    app.router.add_get("/debug/pprof/allocs", _allocs)
    app.router.add_get("/debug/pprof/goroutine", _goroutine)



# --------------------------------------------------------------------------- standalone debug server


def parse_bind_address(address: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (loopback) or `[v6]:PORT` -> (host, port)."""
    return split_host_port(address, flag="--debug-bind-address", default_host="127.0.0.1")


async def start_debug_server(address: str, limits=None) -> tuple[web.AppRunner, int]:
    """Serve only /debug/pprof on `address`; returns the runner (cleanup() it) and the bound port."""
    from hami.httpaccept import GuardedSite
    from hami.httpguard import guarded_runner

    host, port = parse_bind_address(address)
    app = web.Application()
    mount_pprof(app)
    runner = guarded_runner(app, limits, access_log=None)
    await runner.setup()
    site = GuardedSite(runner, host, port)
    await site.start()
    bound = site.port  # the port the kernel gave (GuardedSite.start)
    return runner, bound


async def run_debug_server(address: str, stop: asyncio.Event, limits=None, on_bound=None) -> None:
    """Run the `--debug-bind-address` listener until `stop` is set; `on_bound(runner)` once it listens."""
    runner, _ = await start_debug_server(address, limits)
    if on_bound is not None:
        on_bound(runner)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
