"""The goroutine profile of an asyncio process (`/debug/pprof/goroutine`): every task's await
chain and every thread's stack, as a profile or as Go's `?debug=1` / `?debug=2` text.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass

from hami.obs.profiling.encoder import Profile, Sample
from hami.obs.profiling.frames import MAX_DEPTH, FrameNames, thread_names, walk_stack


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


def _routines(loop: asyncio.AbstractEventLoop | None, names: FrameNames) -> Iterator[_Routine]:
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
    tnames = thread_names()
    for ident, frame in sorted(sys._current_frames().items()):
        yield _Routine("thread", tnames.get(ident, str(ident)), "running", walk_stack(frame, names))


def goroutine_profile(loop: asyncio.AbstractEventLoop | None) -> Profile:
    """The goroutine profile: one sample per task and thread, count 1, stacks merged by pprof."""
    names = FrameNames()
    samples = [
        Sample(tuple(names.frame(k) for k in r.stack), (1,), {r.kind: r.name})
        for r in _routines(loop, names)
    ]
    return Profile(sample_types=(("goroutine", "count"),), samples=samples,
                   period_type=("goroutine", "count"), period=1, time_nanos=time.time_ns())


def goroutine_text(loop: asyncio.AbstractEventLoop | None, debug: int) -> str:
    """`?debug=1`: stacks grouped with a count; `?debug=2`: every task and thread on its own."""
    names = FrameNames()
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
