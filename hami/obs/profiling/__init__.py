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

Layout: `sampler` (CPU sampler), `heap` (tracemalloc profiles), `tasks` (goroutine dump),
`frames` (stack walking shared by the sampler and the dump), `encoder` (profile.proto, gzipped),
`routes` (the HTTP routes and the standalone debug server). This package re-exports what roles
and tests use.
"""

from hami.obs.profiling.heap import HeapTracker, heap_delta
from hami.obs.profiling.routes import mount_pprof, parse_bind_address, run_debug_server, start_debug_server
from hami.obs.profiling.sampler import DEFAULT_INTERVAL, CpuSampler
from hami.obs.profiling.tasks import goroutine_profile, goroutine_text

__all__ = [
    "CpuSampler",
    "DEFAULT_INTERVAL",
    "HeapTracker",
    "goroutine_profile",
    "goroutine_text",
    "heap_delta",
    "mount_pprof",
    "parse_bind_address",
    "run_debug_server",
    "start_debug_server",
]
