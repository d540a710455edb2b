"""The CPU (and wall-clock) sampler behind `/debug/pprof/profile`: SIGPROF on the main thread,
every other thread's CPU clock read at each tick; see the package docstring for the method.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
import types
from dataclasses import dataclass, field

from hami.obs.profiling.encoder import Profile, Sample
from hami.obs.profiling.frames import FrameNames, thread_cpu_ns, thread_names, walk_stack

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
        self._names = FrameNames()
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

    @property
    def ticks(self) -> int:
        """Ticks the sampler thread has taken (wall mode, or cpu mode off the main thread)."""
        return self._acc.ticks

    @property
    def signal_ticks(self) -> int:
        """Ticks SIGPROF has taken on the main thread (cpu mode started there)."""
        return self._main_acc.ticks

    @property
    def by_signal(self) -> bool:
        """Whether SIGPROF samples now (cpu mode on the main thread), rather than a sampler thread."""
        return self._main_ident is not None

    @property
    def by_thread(self) -> bool:
        """Whether a sampler thread was started (wall mode, or cpu mode off the main thread)."""
        return self._thread is not None

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
                    names = thread_names()
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
            self._other_names = thread_names()
        self._sample(self._main_ident, self._other_names, self._other_cpu, 0, count_tick=False)
        self.handler_cpu_ns += time.thread_time_ns() - now

    def _record(self, acc: _Acc, ident: int, thread_name: str, frame: types.FrameType, value: int) -> None:
        stack = walk_stack(frame, self._names)
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
                now = thread_cpu_ns(ident)
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
