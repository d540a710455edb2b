"""hami.obs.profiling over HTTP on loopback, decoded with the test decoder.

Covers: the CPU profile charges busy threads and the busy asyncio task (with `task` and `thread`
labels) and leaves idle threads out, wall mode shows them; heap and allocs from tracemalloc with
Go's four sample types and default types, alloc_* kept after frees; goroutine profile and its
debug=1/2 text listing tasks and threads; cmdline; the index; 400 naming the bad parameter;
the standalone debug server and its bind address parsing.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import aiohttp
import pytest

from hami.obs.profiling import CpuSampler, parse_bind_address, start_debug_server
from tests.obs.pprof_decode import decode

HERE = "tests.obs.test_profiling"


def spin_in_thread(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(20_000):
            x += i * i % 7


def idle_waiter(stop: threading.Event) -> None:
    stop.wait()


def burn_on_loop() -> int:
    x = 0
    for i in range(50_000):
        x += i * i % 7
    return x


async def burner(stop: asyncio.Event) -> None:
    while not stop.is_set():
        burn_on_loop()
        await asyncio.sleep(0)


def _threads(*targets):
    stop = threading.Event()
    threads = [threading.Thread(target=t, args=(stop,), name=t.__name__, daemon=True) for t in targets]
    for t in threads:
        t.start()
    return stop, threads


async def test_cpu_profile_charges_busy_thread_and_task_not_idle_thread(pprof_app):
    base, session = pprof_app
    stop_threads, threads = _threads(spin_in_thread, idle_waiter)
    stop = asyncio.Event()
    task = asyncio.create_task(burner(stop), name="burner")
    try:
        async with session.get(f"{base}/debug/pprof/profile?seconds=1") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/octet-stream"
            d = decode(await resp.read())
    finally:
        stop.set()
        stop_threads.set()
        await task
    assert d.sample_types == [("samples", "count"), ("cpu", "nanoseconds")]
    assert d.period_type == ("cpu", "nanoseconds") and d.period == 10_000_000
    assert d.default_sample_type == "cpu" and d.duration_nanos > 0
    flat = d.flat("cpu")
    assert flat.get(f"{HERE}.spin_in_thread", 0) > 0
    assert flat.get(f"{HERE}.burn_on_loop", 0) > 0
    assert f"{HERE}.idle_waiter" not in d.cum("cpu")
    labels_of = {stack[0][0]: labels for stack, _, labels in d.samples if stack}
    assert labels_of[f"{HERE}.spin_in_thread"]["thread"] == "spin_in_thread"
    assert labels_of[f"{HERE}.burn_on_loop"]["task"] == "burner"
    assert labels_of[f"{HERE}.burn_on_loop"]["thread"] == threading.current_thread().name


def _inside(thread: threading.Thread, function: str) -> bool:
    """Whether `thread` is running `function` now (anywhere on its stack)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _wait_until(pred, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.01)


def test_wall_mode_counts_idle_threads_too():
    stop, threads = _threads(idle_waiter)
    # a started thread may not have reached its function yet (a loaded machine can take a while):
    # only a thread already waiting can show up waiting in the samples
    _wait_until(lambda: _inside(threads[0], "idle_waiter"), "the idle thread waiting")
    sampler = CpuSampler(interval=0.005, mode="wall")
    sampler.start()
    _wait_until(lambda: sampler.ticks >= 5, "5 sampler ticks")
    profile = sampler.stop()
    stop.set()
    names = {f.function for s in profile.samples for f in s.stack}
    assert f"{HERE}.idle_waiter" in names
    assert profile.sample_types[1] == ("wall", "nanoseconds")
    assert profile.comments[0].startswith("hami sampler: mode=wall")


def test_sampler_rejects_bad_settings():
    with pytest.raises(ValueError, match="mode"):
        CpuSampler(mode="gpu")
    with pytest.raises(ValueError, match="interval"):
        CpuSampler(interval=0)


def hold_memory() -> list[bytearray]:
    return [bytearray(4096) for _ in range(256)]


async def test_heap_and_allocs_report_live_and_freed_memory(pprof_app):
    base, session = pprof_app
    async with session.get(f"{base}/debug/pprof/heap?seconds=0") as resp:  # starts tracemalloc
        assert resp.status == 200
    held = hold_memory()
    async with session.get(f"{base}/debug/pprof/heap") as resp:
        heap = decode(await resp.read())
    assert heap.sample_types == [("alloc_objects", "count"), ("alloc_space", "bytes"),
                                 ("inuse_objects", "count"), ("inuse_space", "bytes")]
    assert heap.default_sample_type == "inuse_space"
    name = f"{HERE}.hold_memory"
    assert heap.cum("inuse_space")[name] >= 256 * 4096
    assert heap.cum("inuse_objects")[name] >= 256
    del held
    async with session.get(f"{base}/debug/pprof/allocs") as resp:
        allocs = decode(await resp.read())
    assert allocs.default_sample_type == "alloc_space"
    assert allocs.cum("alloc_space")[name] >= 256 * 4096
    assert allocs.cum("inuse_space").get(name, 0) < 4096
    async with session.get(f"{base}/debug/pprof/heap?debug=1") as resp:
        text = await resp.text()
    assert text.startswith("heap profile: inuse")


async def test_goroutine_lists_tasks_and_threads(pprof_app):
    base, session = pprof_app
    stop_threads, _ = _threads(idle_waiter)
    gate = asyncio.Event()
    task = asyncio.create_task(gate.wait(), name="parked-task")
    await asyncio.sleep(0)
    try:
        async with session.get(f"{base}/debug/pprof/goroutine?debug=2") as resp:
            full = await resp.text()
        async with session.get(f"{base}/debug/pprof/goroutine?debug=1") as resp:
            grouped = await resp.text()
        async with session.get(f"{base}/debug/pprof/goroutine") as resp:
            prof = decode(await resp.read())
    finally:
        gate.set()
        stop_threads.set()
        await task
    assert "task 'parked-task'" in full and "asyncio.locks.Event.wait(...)" in full
    assert "thread 'idle_waiter'" in full and f"{HERE}.idle_waiter(...)" in full
    assert grouped.startswith("goroutine profile: total ")
    total = int(grouped.split("\n", 1)[0].rsplit(" ", 1)[1])
    assert prof.sample_types == [("goroutine", "count")]
    assert prof.total("goroutine") == total
    assert any(labels.get("task") == "parked-task" for _, _, labels in prof.samples)


async def test_cmdline_index_and_bad_parameters(pprof_app):
    base, session = pprof_app
    async with session.get(f"{base}/debug/pprof/cmdline") as resp:
        assert (await resp.text()).split("\x00") == sys.argv
    async with session.get(f"{base}/debug/pprof/") as resp:
        index = await resp.text()
    for name in ("profile", "heap", "allocs", "goroutine", "cmdline"):
        assert f'href="{name}?debug=1"' in index
    for url, field in (("profile?seconds=abc", "seconds"), ("profile?seconds=0", "seconds"),
                       ("profile?mode=gpu", "mode"), ("goroutine?debug=7", "debug")):
        async with session.get(f"{base}/debug/pprof/{url}") as resp:
            assert resp.status == 400
            assert (await resp.text()).startswith(f"{field}: ")


async def test_debug_server_serves_pprof_on_loopback_by_default():
    runner, port = await start_debug_server(":0")
    try:
        # Bound to loopback only: a listener on 0.0.0.0 would answer the request below too.
        assert [addr[:2] for addr in runner.addresses] == [("127.0.0.1", port)]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/debug/pprof/cmdline") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("text", "want"), [
    (":6060", ("127.0.0.1", 6060)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:6060", ("::1", 6060)),
])
def test_parse_bind_address(text, want):
    assert parse_bind_address(text) == want


@pytest.mark.parametrize("text", ["6060", "host:", "h:99999", "h:x"])
def test_parse_bind_address_rejects_bad_text(text):
    with pytest.raises(ValueError, match="--debug-bind-address"):
        parse_bind_address(text)


def test_cpu_mode_off_the_main_thread_falls_back_to_the_sampler_thread():
    stop, _ = _threads(spin_in_thread)
    box = {}

    def profile_from_worker():
        sampler = CpuSampler(interval=0.005)
        sampler.start()
        deadline = time.monotonic() + 5
        while sampler.ticks < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        box["profile"] = sampler.stop()
        box["sampler"] = sampler

    worker = threading.Thread(target=profile_from_worker)
    worker.start()
    worker.join()
    stop.set()
    assert box["sampler"].signal_ticks == 0  # no SIGPROF off the main thread
    assert f"{HERE}.spin_in_thread" in {s.stack[0].function for s in box["profile"].samples if s.stack}


def hold_early() -> list[bytearray]:
    return [bytearray(4096) for _ in range(128)]


async def test_allocs_with_seconds_is_a_delta_over_the_window(pprof_app):
    base, session = pprof_app
    async with session.get(f"{base}/debug/pprof/heap?seconds=0") as resp:  # starts tracemalloc
        assert resp.status == 200
    early = hold_early()

    async def allocate_during_window():
        await asyncio.sleep(0.3)
        return hold_memory()

    job = asyncio.create_task(allocate_during_window())
    async with session.get(f"{base}/debug/pprof/allocs?seconds=1") as resp:
        d = decode(await resp.read())
    held = await job
    alloc = d.cum("alloc_space")
    assert alloc.get(f"{HERE}.hold_memory", 0) >= 256 * 4096
    assert alloc.get(f"{HERE}.hold_early", 0) == 0  # allocated before the window
    assert d.cum("inuse_space")[f"{HERE}.hold_early"] >= 128 * 4096  # still in use
    assert d.duration_nanos > 0
    del early, held


def test_sigprof_is_left_ignored_after_a_profile_and_a_second_profile_uses_it_again():
    import signal

    for _ in range(2):
        sampler = CpuSampler(interval=0.002)
        sampler.start()
        assert sampler.by_signal and not sampler.by_thread  # SIGPROF, no sampler thread
        x, deadline = 0, time.monotonic() + 5
        while sampler.signal_ticks < 3 and time.monotonic() < deadline:
            x += 1
        sampler.stop()
        assert signal.getsignal(signal.SIGPROF) == signal.SIG_IGN
        assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
