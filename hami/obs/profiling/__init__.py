"""`/debug/pprof/*` endpoints that `go tool pprof` reads, for an asyncio process.

    go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=30   # CPU, every thread
    go tool pprof http://127.0.0.1:6060/debug/pprof/heap                      # tracemalloc in-use
    go tool pprof -sample_index=alloc_space http://127.0.0.1:6060/debug/pprof/allocs
    curl http://127.0.0.1:6060/debug/pprof/goroutine?debug=2                  # asyncio tasks + threads

Off by default. `--profiling` makes each role call `mount_pprof(app)` on its aiohttp application;
`--debug-bind-address HOST:PORT` runs `run_debug_server` (host defaults to loopback).

CPU profile (~100 Hz of CPU time, every thread), as Go does it: SIGPROF from
`setitimer(ITIMER_PROF)` fires per 10 ms of process CPU; the handler runs on the main thread
(where `asyncio.run` drives the loop) between two bytecodes, so it sees exactly where the main
thread spends its CPU. The same handler reads `sys._current_frames()` and every other thread's CPU
clock (`pthread_getcpuclockid`) and charges the CPU each used since the last tick to the stack it
is in now. No extra thread wakes up, and an idle process takes no samples at all. A thread blocked
in a known wait (epoll, a lock, a queue) at the tick is idle: its tick is not charged, so idle
threads do not show up. Other threads are seen where they released the GIL, a bias the main thread
does not have. When the request is not served on the main thread (or SIGPROF is taken), and for
`?mode=wall` (every thread at every tick, off-CPU time too), a sampler thread wakes every 10 ms
instead. Samples on a loop thread carry the running task's name as label `task`; every sample
carries `thread`. The profile's comment reports the profiler's own CPU time.

Heap: tracemalloc. If it is not tracing yet, the first heap/allocs request starts it and waits
`seconds` (default 5) so the profile has something in it; tracing then stays on. `alloc_*` values
are a lower bound: the in-use growth summed over the snapshots this process has taken.
"""

from __future__ import annotations

import asyncio
import bisect
import linecache
import os
import signal
import sys
import threading
import time
import tracemalloc
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import escape

from aiohttp import web

from hami.netaddr import split_host_port
from hami.obs.profiling.encoder import Frame, Profile, Sample, encode_gzip

__all__ = [
    "CpuSampler",
    "HeapTracker",
    "goroutine_profile",
    "goroutine_text",
    "mount_pprof",
    "run_debug_server",
    "start_debug_server",
]

MAX_DEPTH = 128
DEFAULT_INTERVAL = 0.01  # 100 Hz
# Leaf frames that mean "this thread is blocked in C right now": CPU it used since the last tick
# was spent elsewhere, so the tick is counted as idle (dropped), not charged to the wait.
IDLE_LEAVES = frozenset({
    "selectors.EpollSelector.select", "selectors.PollSelector.select", "selectors.SelectSelector.select",
    "selectors.KqueueSelector.select", "selectors.DevpollSelector.select",
    "threading.Condition.wait", "threading.Thread._wait_for_tstate_lock", "threading.Event.wait",
    "threading.Semaphore.acquire", "queue.SimpleQueue.get", "queue.Queue.get",
    "socket.socket.accept", "socketserver.BaseServer.serve_forever", "concurrent.futures.thread._worker",
})


# --------------------------------------------------------------------------- frames -> pprof Frames


class _FrameNames:
    """Caches code object -> (function name, filename, first line) for one profile."""

    def __init__(self) -> None:
        self.cache: dict[types.CodeType, tuple[str, str, int]] = {}

    def name(self, frame: types.FrameType) -> tuple[str, str, int]:
        code = frame.f_code
        hit = self.cache.get(code)
        if hit is None:
            module = frame.f_globals.get("__name__", "") if frame.f_globals is not None else ""
            qual = getattr(code, "co_qualname", code.co_name)
            hit = self.cache[code] = (f"{module}.{qual}" if module else qual, code.co_filename, code.co_firstlineno)
        return hit

    def frame(self, key: tuple[types.CodeType, int]) -> Frame:
        code, line = key
        name, filename, first = self.cache[code]
        return Frame(name, filename, line, first)


def _walk(frame: types.FrameType | None, names: _FrameNames) -> tuple[tuple[types.CodeType, int], ...]:
    """(code, line) pairs from `frame` outwards, leaf first."""
    out = []
    while frame is not None and len(out) < MAX_DEPTH:
        names.name(frame)
        out.append((frame.f_code, frame.f_lineno or 0))
        frame = frame.f_back
    return tuple(out)


def _thread_names() -> dict[int, str]:
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def _thread_cpu_ns(ident: int) -> int | None:
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError, AttributeError):
        return None


# --------------------------------------------------------------------------- CPU sampler


@dataclass
class _Acc:
    samples: dict[tuple, list[int]] = field(default_factory=dict)
    ticks: int = 0


class CpuSampler:
    """Samples every thread's stack every `interval` seconds of CPU (SIGPROF) or of wall time (thread).

    `loops` maps a thread ident to the event loop it runs, so samples there get the running
    task's name. `mode` is "cpu" (charge each thread's CPU time since the last tick) or "wall".
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        mode: str = "cpu",
        loops: dict[int, asyncio.AbstractEventLoop] | None = None,
    ):
        if mode not in ("cpu", "wall"):
            raise ValueError(f"mode: got {mode!r}, expected cpu or wall")
        if not interval > 0:
            raise ValueError(f"interval: got {interval!r}, expected a number > 0")
        self.interval = interval
        self.mode = mode
        self.loops = dict(loops or {})
        self._names = _FrameNames()
        self._acc = _Acc()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_ns = 0
        self._duration_ns = 0
        self._main_ident: int | None = None  # set while SIGPROF samples the main thread
        self._saved_handler = None
        self._main_acc = _Acc()
        self._main_last_cpu = 0
        self._other_cpu: dict[int, int] = {}  # CPU clocks of the other threads, read by the handler
        self._other_names: dict[int, str] = {}
        self.sampler_cpu_ns = 0  # CPU the sampler thread itself used: its overhead
        self.idle_ns = 0  # CPU seen on threads that were blocked at the tick: not charged
        self.handler_cpu_ns = 0  # CPU the SIGPROF handler used on the main thread: overhead too

    def start(self) -> None:
        self._start_ns = time.time_ns()
        if self.mode == "cpu" and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGPROF) in (signal.SIG_DFL, signal.SIG_IGN, None):
            self._main_ident = threading.get_ident()
            self._main_last_cpu = time.thread_time_ns()
            self._saved_handler = signal.signal(signal.SIGPROF, self._on_sigprof)
            signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
            return  # the handler samples the other threads too: no sampler thread, no extra wakeups
        self._thread = threading.Thread(target=self._run, name="hami-pprof-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Profile:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._main_ident is not None:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            if threading.current_thread() is threading.main_thread():
                # Never back to SIG_DFL: a SIGPROF still in flight would kill the process.
                saved = self._saved_handler
                signal.signal(signal.SIGPROF, signal.SIG_IGN if saved in (None, signal.SIG_DFL) else saved)
            self._main_ident = None
        self._duration_ns = time.time_ns() - self._start_ns
        return self.profile()

    def _run(self) -> None:
        me = threading.get_ident()
        last_cpu: dict[int, int] = {}
        wall_ns = int(self.interval * 1e9)
        names: dict[int, str] = {}
        tick = 0
        t0 = time.thread_time_ns()
        try:
            while not self._stop.wait(self.interval):
                if tick % 50 == 0:  # thread names change rarely; refresh twice a second
                    names = _thread_names()
                tick += 1
                self._sample(me, names, last_cpu, wall_ns)
        finally:
            self.sampler_cpu_ns = time.thread_time_ns() - t0

    def _on_sigprof(self, signum: int, frame: types.FrameType | None) -> None:
        """SIGPROF on the main thread: `frame` is exactly where the main thread spends its CPU."""
        if self._main_ident is None or frame is None:
            return
        now = time.thread_time_ns()
        value = now - self._main_last_cpu
        self._main_last_cpu = now
        self._main_acc.ticks += 1
        if value > 0:
            self._record(self._main_acc, self._main_ident, threading.current_thread().name, frame, value)
        if self._main_acc.ticks % 50 == 1:  # thread names change rarely
            self._other_names = _thread_names()
        self._sample(self._main_ident, self._other_names, self._other_cpu, 0, count_tick=False)
        self.handler_cpu_ns += time.thread_time_ns() - now

    def _record(self, acc: _Acc, ident: int, thread_name: str, frame: types.FrameType, value: int) -> None:
        stack = _walk(frame, self._names)
        if self.mode == "cpu" and stack and self._names.cache[stack[0][0]][0] in IDLE_LEAVES:
            self.idle_ns += value
            return
        task_name = ""
        loop = self.loops.get(ident)
        if loop is not None:
            try:
                task = asyncio.current_task(loop)
            except RuntimeError:
                task = None
            if task is not None:
                task_name = task.get_name()
        key = (thread_name, task_name, stack)
        slot = acc.samples.get(key)
        if slot is None:
            acc.samples[key] = [1, value]
        else:
            slot[0] += 1
            slot[1] += value

    def _sample(self, me: int, names: dict[int, str], last_cpu: dict[int, int], wall_ns: int,
                count_tick: bool = True) -> None:
        frames = sys._current_frames()
        acc = self._acc
        if count_tick:
            acc.ticks += 1
        for ident, frame in frames.items():
            if ident == me or ident == self._main_ident:
                continue
            if self.mode == "cpu":
                now = _thread_cpu_ns(ident)
                if now is None:
                    continue
                before = last_cpu.get(ident)
                last_cpu[ident] = now
                if before is None or now <= before:
                    continue
                value = now - before
            else:
                value = wall_ns
            self._record(acc, ident, names.get(ident, str(ident)), frame, value)

    def profile(self) -> Profile:
        period = int(self.interval * 1e9)
        kind = "cpu" if self.mode == "cpu" else "wall"
        samples = []
        merged = dict(self._acc.samples)
        for key, (count, value) in self._main_acc.samples.items():
            have = merged.get(key)
            merged[key] = [count, value] if have is None else [have[0] + count, have[1] + value]
        for (thread, task, stack), (count, value) in merged.items():
            labels = {"thread": thread}
            if task:
                labels["task"] = task
            samples.append(Sample(tuple(self._names.frame(k) for k in stack), (count, value), labels))
        return Profile(
            sample_types=(("samples", "count"), (kind, "nanoseconds")),
            samples=samples,
            period_type=(kind, "nanoseconds"),
            period=period,
            time_nanos=self._start_ns,
            duration_nanos=self._duration_ns,
            comments=(f"hami sampler: mode={self.mode} ticks={self._acc.ticks} sigprof={self._main_acc.ticks} "
                      f"sampler_cpu_ns={self.sampler_cpu_ns} sigprof_handler_cpu_ns={self.handler_cpu_ns} "
                      f"idle_cpu_ns_not_charged={self.idle_ns}",),
            default_sample_type=kind,
        )


# --------------------------------------------------------------------------- heap (tracemalloc)


class _FunctionIndex:
    """(filename, line) -> function name, from the code objects of loaded modules.

    tracemalloc frames carry only a filename and a line; pprof wants function names.
    """

    def __init__(self) -> None:
        self._by_file: dict[str, list[tuple[int, types.CodeType, str]] | None] = {}
        self._last: dict[types.CodeType, int] = {}
        self._hits: dict[tuple, tuple[int, int, str]] = {}
        self._modules: dict[str, str] | None = None

    def refresh_modules(self) -> None:
        """Forget the filename -> module map (modules imported since are found next time)."""
        self._modules = None
        self._hits = {k: v for k, v in self._hits.items() if not v[2].endswith("<module>")}

    def _module_of(self, filename: str) -> tuple[str, types.ModuleType | None]:
        if self._modules is None:
            self._modules = {}
            for name, mod in list(sys.modules.items()):
                f = getattr(mod, "__file__", None)
                if isinstance(f, str):
                    self._modules.setdefault(f, name)
        name = self._modules.get(filename, "")
        return name, sys.modules.get(name) if name else None

    def _functions(self, filename: str) -> list[tuple[int, types.CodeType, str]] | None:
        """(first line, code, qualified name) of every function in the file, by first line."""
        if filename in self._by_file:
            return self._by_file[filename]
        modname, mod = self._module_of(filename)
        top = None
        loader = getattr(mod, "__loader__", None) if mod is not None else None
        if loader is not None and hasattr(loader, "get_code"):
            try:
                top = loader.get_code(modname)
            except Exception:  # noqa: BLE001 - a loader that cannot give code: compile the file below
                top = None
        if top is None and filename.endswith(".py"):
            try:
                with open(filename, "rb") as fh:
                    top = compile(fh.read(), filename, "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError):
                top = None
        funcs: list[tuple[int, types.CodeType, str]] | None = None
        if top is not None:
            funcs = []
            stack = [top]
            while stack:
                code = stack.pop()
                if code is not top:
                    qual = getattr(code, "co_qualname", code.co_name)
                    funcs.append((code.co_firstlineno, code, f"{modname}.{qual}" if modname else qual))
                stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            funcs.sort(key=lambda f: f[0])
        self._by_file[filename] = funcs
        return funcs

    def _range(self, func: tuple[int, types.CodeType, str]) -> tuple[int, int, str]:
        hit = self._last.get(func[1])
        if hit is None:
            last = max((ln for _, _, ln in func[1].co_lines() if ln is not None), default=func[0])
            hit = self._last[func[1]] = max(last, func[0])
        return func[0], hit, func[2]

    def lookup(self, filename: str, line: int, inside: tuple[int, int, str] | None = None
               ) -> tuple[int, int, str]:
        """The innermost function range (first, last, name) around `line`.

        `inside`: the range found for the frame called from this same line (a comprehension or
        lambda): the caller is the innermost range strictly enclosing it. Only functions that
        start at or before `line` are measured, nearest first, so few code objects are walked.
        """
        ckey = (filename, line, inside)
        hit = self._hits.get(ckey)
        if hit is None:
            hit = self._hits[ckey] = self._lookup(filename, line, inside)
        return hit

    def _lookup(self, filename: str, line: int, inside: tuple[int, int, str] | None) -> tuple[int, int, str]:
        funcs = self._functions(filename) or []
        hi = bisect.bisect_right(funcs, line, key=lambda f: f[0])
        for func in reversed(funcs[:hi]):
            r = self._range(func)
            if not r[0] <= line <= r[1] or r == inside:
                continue
            if inside is not None and not (r[0] <= inside[0] and inside[1] <= r[1]):
                continue
            return r
        modname, _ = self._module_of(filename)
        return 0, 0, f"{modname}.<module>" if modname else os.path.basename(filename) or "<unknown>"


class HeapTracker:
    """Turns tracemalloc snapshots into Go-style heap profiles (alloc_* and inuse_*).

    `alloc_*` per stack is the in-use value of the first snapshot plus every later increase:
    a lower bound on what was allocated, since frees between two snapshots are not seen.
    """

    def __init__(self, nframes: int = 16):
        self.nframes = nframes
        self.started_ns = 0
        self._last: dict[tuple, tuple[int, int]] = {}
        self._alloc: dict[tuple, list[int]] = {}
        self._lock = threading.Lock()
        self._index = _FunctionIndex()  # source files do not change: names are looked up once

    @property
    def tracing(self) -> bool:
        return tracemalloc.is_tracing()

    def start(self) -> bool:
        """Start tracemalloc if it is off; True when this call started it."""
        if tracemalloc.is_tracing():
            if not self.started_ns:
                self.started_ns = time.time_ns()
            return False
        tracemalloc.start(self.nframes)
        self.started_ns = time.time_ns()
        return True

    def profile(self, default: str = "inuse_space") -> Profile:
        """A snapshot now, as a profile with Go's four heap sample types."""
        snap = tracemalloc.take_snapshot()
        index = self._index
        index.refresh_modules()
        own = {tracemalloc.__file__, __file__, linecache.__file__}
        samples = []
        with self._lock:
            seen = set()
            for stat in snap.statistics("traceback"):
                if any(f.filename in own for f in stat.traceback):  # the profiler's own work
                    continue
                key = tuple((f.filename, f.lineno) for f in reversed(stat.traceback))  # leaf first
                seen.add(key)
                size, count = stat.size, stat.count
                prev = self._last.get(key)
                acc = self._alloc.get(key)
                if acc is None:
                    acc = self._alloc[key] = [count, size]
                elif prev is not None:
                    acc[0] += max(0, count - prev[0])
                    acc[1] += max(0, size - prev[1])
                else:
                    acc[0] += count
                    acc[1] += size
                self._last[key] = (count, size)
                samples.append((key, acc[0], acc[1], count, size))
            for key in list(self._last):
                if key not in seen:  # all freed: remembered for alloc_*, no longer in use
                    del self._last[key]
                    acc = self._alloc[key]
                    samples.append((key, acc[0], acc[1], 0, 0))
        out = []
        for key, ac, asz, ic, isz in samples:
            stack = []
            prev: tuple[str, int, tuple[int, int, str]] | None = None
            for filename, line in key:
                inside = prev[2] if prev is not None and prev[:2] == (filename, line) else None
                found = index.lookup(filename, line, inside)
                stack.append(Frame(found[2], filename, line, found[0]))
                prev = (filename, line, found)
            out.append(Sample(tuple(stack), (ac, asz, ic, isz)))
        current, peak = tracemalloc.get_traced_memory()
        return Profile(
            sample_types=(("alloc_objects", "count"), ("alloc_space", "bytes"),
                          ("inuse_objects", "count"), ("inuse_space", "bytes")),
            samples=out,
            period_type=("space", "bytes"),
            period=1,
            time_nanos=time.time_ns(),
            comments=(f"tracemalloc since {self.started_ns} ns; traced now {current} B, peak {peak} B; "
                      "alloc_* is a lower bound (sum of in-use growth between snapshots)",),
            default_sample_type=default,
        )


# --------------------------------------------------------------------------- goroutines (tasks + threads)


def _coro_frames(coro: object) -> list[types.FrameType]:
    """Frames of a coroutine and everything it awaits, outermost first."""
    out = []
    seen = 0
    while coro is not None and seen < MAX_DEPTH:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            out.append(frame)
        nxt = getattr(coro, "cr_await", None)
        if nxt is None:
            nxt = getattr(coro, "gi_yieldfrom", None)
        if nxt is None:
            nxt = getattr(coro, "ag_await", None)
        coro = nxt
    return out


@dataclass(frozen=True, slots=True)
class _Routine:
    kind: str  # "task" | "thread"
    name: str
    state: str
    stack: tuple[tuple[types.CodeType, int], ...]  # leaf first


def _routines(loop: asyncio.AbstractEventLoop | None, names: _FrameNames) -> Iterator[_Routine]:
    if loop is not None:
        current = asyncio.current_task(loop)
        for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
            frames = _coro_frames(task.get_coro())
            stack = []
            for fr in reversed(frames):
                names.name(fr)
                stack.append((fr.f_code, fr.f_lineno or 0))
            waiter = getattr(task, "_fut_waiter", None)
            state = "running" if task is current else (f"awaiting {type(waiter).__name__}" if waiter else "ready")
            yield _Routine("task", task.get_name(), state, tuple(stack))
    thread_names = _thread_names()
    for ident, frame in sorted(sys._current_frames().items()):
        yield _Routine("thread", thread_names.get(ident, str(ident)), "running", _walk(frame, names))


def goroutine_profile(loop: asyncio.AbstractEventLoop | None) -> Profile:
    """The goroutine profile: one sample per task and thread, count 1, stacks merged by pprof."""
    names = _FrameNames()
    samples = [
        Sample(tuple(names.frame(k) for k in r.stack), (1,), {r.kind: r.name})
        for r in _routines(loop, names)
    ]
    return Profile(sample_types=(("goroutine", "count"),), samples=samples,
                   period_type=("goroutine", "count"), period=1, time_nanos=time.time_ns())


def goroutine_text(loop: asyncio.AbstractEventLoop | None, debug: int) -> str:
    """`?debug=1`: stacks grouped with a count; `?debug=2`: every task and thread on its own."""
    names = _FrameNames()
    routines = list(_routines(loop, names))

    def lines(stack: tuple) -> list[str]:
        out = []
        for k in stack:
            f = names.frame(k)
            out.append(f"{f.function}(...)\n\t{f.filename}:{f.line}")
        return out

    if debug >= 2:
        parts = []
        for i, r in enumerate(routines, 1):
            head = f"goroutine {i} [{r.state}]: {r.kind} {r.name!r}"
            parts.append("\n".join([head, *lines(r.stack)]) or head)
        return "\n\n".join(parts) + "\n"
    groups: dict[tuple, list[_Routine]] = {}
    for r in routines:
        groups.setdefault(r.stack, []).append(r)
    out = [f"goroutine profile: total {len(routines)}"]
    for stack, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        who = ", ".join(f"{m.kind} {m.name!r}" for m in members[:8])
        more = f" (+{len(members) - 8} more)" if len(members) > 8 else ""
        out.append(f"{len(members)} @ {who}{more}")
        for k in stack:
            f = names.frame(k)
            out.append(f"#\t{f.function}\t{f.filename}:{f.line}")
        out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- HTTP


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
        return web.Response(text=_heap_text(profile), content_type="text/plain")
    return _profile_response(profile, name)


def heap_delta(before: Profile, after: Profile) -> Profile:
    """`after` with alloc_* reduced by what `before` had for the same stack (Go's ?seconds= delta)."""
    was = {s.stack: s.values for s in before.samples}
    samples = []
    for s in after.samples:
        old = was.get(s.stack, (0, 0, 0, 0))
        values = (max(0, s.values[0] - old[0]), max(0, s.values[1] - old[1]), s.values[2], s.values[3])
        if any(values):
            samples.append(Sample(s.stack, values, s.labels, s.num_labels))
    after.samples = samples
    after.duration_nanos = max(0, after.time_nanos - before.time_nanos)
    return after


def _heap_text(profile: Profile) -> str:
    total = sum(s.values[3] for s in profile.samples)
    out = [f"heap profile: inuse {total} bytes; {profile.comments[0] if profile.comments else ''}"]
    for s in sorted(profile.samples, key=lambda s: -s.values[3])[:200]:
        ac, asz, ic, isz = s.values
        out.append(f"{ic}: {isz} [{ac}: {asz}] @")
        out.extend(f"#\t{f.function}\t{f.filename}:{f.line}" for f in s.stack)
    return "\n".join(out) + "\n"


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


async def start_debug_server(address: str) -> tuple[web.AppRunner, int]:
    """Serve only /debug/pprof on `address`; returns the runner (cleanup() it) and the bound port."""
    host, port = parse_bind_address(address)
    app = web.Application()
    mount_pprof(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    return runner, bound


async def run_debug_server(address: str, stop: asyncio.Event) -> None:
    """Run the `--debug-bind-address` listener until `stop` is set."""
    runner, _ = await start_debug_server(address)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
