"""Python frames as pprof sees them: names cached per code object, stacks leaf first, and
every thread's name and CPU clock. Shared by the CPU sampler and the task dump.
"""

from __future__ import annotations

import threading
import time
import types

from hami.obs.profiling.encoder import Frame

MAX_DEPTH = 128


class FrameNames:
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


def walk_stack(frame: types.FrameType | None, names: FrameNames) -> tuple[tuple[types.CodeType, int], ...]:
    """(code, line) pairs from `frame` outwards, leaf first."""
    out = []
    while frame is not None and len(out) < MAX_DEPTH:
        names.name(frame)
        out.append((frame.f_code, frame.f_lineno or 0))
        frame = frame.f_back
    return tuple(out)


def thread_names() -> dict[int, str]:
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def thread_cpu_ns(ident: int) -> int | None:
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError, AttributeError):
        return None
