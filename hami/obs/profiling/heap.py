"""Heap profiles from tracemalloc (`/debug/pprof/heap` and `/allocs`): function names found for
tracemalloc's (file, line) frames, Go's four heap sample types, the `?seconds=` delta and the
`?debug=1` text.
"""

from __future__ import annotations

import bisect
import linecache
import os
import sys
import threading
import time
import tracemalloc
import types

from hami.obs.profiling.encoder import Frame, Profile, Sample

# The profiler's own modules (all but the encoder, which holds nothing between requests): what
# they allocate is left out of heap profiles.
_PROFILER_FILES = frozenset(
    os.path.join(os.path.dirname(__file__), name)
    for name in ("__init__.py", "frames.py", "sampler.py", "heap.py", "tasks.py", "routes.py")
)


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
        own = {tracemalloc.__file__, linecache.__file__, *_PROFILER_FILES}
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


def heap_text(profile: Profile) -> str:
    total = sum(s.values[3] for s in profile.samples)
    out = [f"heap profile: inuse {total} bytes; {profile.comments[0] if profile.comments else ''}"]
    for s in sorted(profile.samples, key=lambda s: -s.values[3])[:200]:
        ac, asz, ic, isz = s.values
        out.append(f"{ic}: {isz} [{ac}: {asz}] @")
        out.extend(f"#\t{f.function}\t{f.filename}:{f.line}" for f in s.stack)
    return "\n".join(out) + "\n"
