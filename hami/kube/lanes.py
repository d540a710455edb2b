"""Rate lanes of the API client: what a pending pod waits on never queues behind housekeeping.

Two lanes, each a client-go token bucket of its own:

* `critical`: the writes a pending GPU pod waits on: /bind's node lock, the pod's annotation
  patch and the binding, the node agent's Allocate patch and its unlock.
* `background`: everything else: events, node handshakes, device registrations, lease renewals,
  LISTs (informer re-lists) and watch starts.

A request picks its lane from what it is (`lane_for`): events, leases, LIST and WATCH are always
background; a caller marks other background work with `with background():` (a context variable,
so it follows the task and never leaks into a concurrent critical call). The rest is critical.

`ROLE_BUDGETS` holds the defaults per role (docs/kube-client.md explains and sizes them; a test
keeps the two in step). `--kube-qps`/`--kube-burst` override the critical lane,
`--kube-background-qps`/`--kube-background-burst` the background one; qps <= 0 disables a limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CRITICAL = "critical"
BACKGROUND = "background"
LANES = (CRITICAL, BACKGROUND)

# Default deadline of one non-watch request (seconds), `--kube-timeout` overrides it.
DEFAULT_TIMEOUT = 10.0
# 429 / Retry-After handling, as client-go: bounded retries, the server's delay plus jitter.
MAX_RETRIES = 5
MAX_RETRY_AFTER = 10.0


@dataclass(frozen=True, slots=True)
class LaneBudget:
    qps: float
    burst: int


# role -> (critical, background). The scheduler's critical qps is 3x kube-scheduler's own
# `--kube-api-qps 50`: kube-scheduler makes one write (the binding) per pod where our /bind makes
# three (lock, pod annotations, binding), so this keeps pace with it. Its burst is 1000, not 300:
# a burst of pods puts all their binds in flight at once and each must answer within the
# extender's httpTimeout (docs/kube-client.md has the measurement).
ROLE_BUDGETS: dict[str, tuple[LaneBudget, LaneBudget]] = {
    "scheduler": (LaneBudget(150.0, 1000), LaneBudget(50.0, 100)),
    "node-agent": (LaneBudget(50.0, 100), LaneBudget(10.0, 20)),
    "monitor": (LaneBudget(20.0, 40), LaneBudget(20.0, 40)),
    "default": (LaneBudget(50.0, 100), LaneBudget(50.0, 100)),
    # The embedded cluster's player of many kubelets and kube-scheduler: unlimited.
    "sim": (LaneBudget(0.0, 1), LaneBudget(0.0, 1)),
}

_lane: contextvars.ContextVar[str | None] = contextvars.ContextVar("hami_kube_lane", default=None)
_urgent: contextvars.ContextVar[bool] = contextvars.ContextVar("hami_kube_urgent", default=False)


@contextmanager
def background() -> Iterator[None]:
    """Requests made inside (by this task and the tasks it starts) take the background lane."""
    token = _lane.set(BACKGROUND)
    try:
        yield
    finally:
        _lane.reset(token)


@contextmanager
def critical() -> Iterator[None]:
    """Requests made inside take the critical lane (the default for writes other than events/leases)."""
    token = _lane.set(CRITICAL)
    try:
        yield
    finally:
        _lane.reset(token)


@contextmanager
def urgent() -> Iterator[None]:
    """Requests made inside go ahead of the lane's other waiters: the writes a held node lock
    waits on. Without it a burst of binds interleaves every bind's later writes behind every other
    bind's first one, so each lock is held for the whole burst's drain time, not its own writes."""
    token = _urgent.set(True)
    try:
        yield
    finally:
        _urgent.reset(token)


def is_urgent() -> bool:
    return _urgent.get()


_ALWAYS_BACKGROUND = frozenset({"events", "leases"})


def lane_for(verb: str, resource: str) -> str:
    if resource in _ALWAYS_BACKGROUND or verb in ("list", "watch"):
        return BACKGROUND
    return _lane.get() or CRITICAL


def budgets_for(role: str, qps: float | None, burst: int | None, background_qps: float | None,
                background_burst: int | None) -> tuple[LaneBudget, LaneBudget]:
    """The lanes' budgets for `role`, with any value the user set replacing the role's default."""
    crit, bg = ROLE_BUDGETS.get(role, ROLE_BUDGETS["default"])
    return (LaneBudget(crit.qps if qps is None else float(qps), crit.burst if burst is None else int(burst)),
            LaneBudget(bg.qps if background_qps is None else float(background_qps),
                       bg.burst if background_burst is None else int(background_burst)))


class TokenBucket:
    """client-go's token-bucket rate limiter: `qps` tokens a second, at most `burst` banked.

    qps <= 0 disables limiting. `clock` and `sleep` are injectable for tests (default: monotonic time, asyncio.sleep).
    Waiters are served in arrival order, except urgent ones (`urgent()`), which take the next token
    ahead of the queue (they only race the queue's head and each other). `waited` sums the seconds callers spent
    waiting: the saturation signal (`hami_kube_lane_wait_seconds_total`).
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None):
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._clock = clock or time.monotonic
        self._sleep = sleep or asyncio.sleep  # injectable with the clock: a test's fake time moves both
        self._tokens = float(self.burst)
        self._last = self._clock()
        self._lock = asyncio.Lock()
        self._urgent_waiting = 0
        self.waited = 0.0

    @property
    def tokens(self) -> float:
        """The tokens banked at the last refill (never below zero while the bucket keeps its contract)."""
        return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is there now (never waits); False when the lane is over budget."""
        if self.qps <= 0:
            return True
        self._refill()
        if self._tokens >= 1.0 and not self._lock.locked() and not self._urgent_waiting:
            self._tokens -= 1.0
            return True
        return False

    async def acquire(self, urgent: bool = False) -> None:
        if self.try_acquire():
            return
        if urgent:
            self._urgent_waiting += 1
            try:
                await self._take(urgent=True)  # not behind the FIFO
            finally:
                self._urgent_waiting -= 1
            return
        async with self._lock:  # FIFO: one waiter computes its sleep at a time
            await self._take(urgent=False)

    async def _take(self, urgent: bool) -> None:
        self._refill()
        # The FIFO's head leaves a token to any urgent waiter (it sleeps one token's time).
        while self._tokens < 1.0 or (not urgent and self._urgent_waiting):
            delay = max(1.0 - self._tokens, 1.0 if self._tokens >= 1.0 else 0.0) / self.qps
            self.waited += delay
            await self._sleep(delay)
            self._refill()
        self._tokens -= 1.0  # no await between the check and the take: never below zero


@dataclass(slots=True)
class LaneStats:
    """Per-lane counters the metrics exporters read at scrape time."""

    requests: int = 0
    writes: int = 0  # requests other than GET (the benchmark's writes per pod by lane)
    throttled: int = 0  # answers 429 from the server
    retries: int = 0


def retry_after_seconds(header: str | None, body: dict | None) -> float | None:
    """The server's Retry-After (header, else Status.details.retryAfterSeconds), in seconds."""
    for raw in (header, ((body or {}).get("details") or {}).get("retryAfterSeconds")):
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue  # an HTTP date: treat as absent, use the default back-off
        if value >= 0:
            return min(value, MAX_RETRY_AFTER)
    return None
