"""Run roles side by side: a name -> import-path table, lazy imports, supervised named tasks.

A role is a module with `async def run(ctx: RoleContext) -> None`. Roles are imported only when
asked for, so `--role monitor` never imports grpc or pynvml. Every role runs as a named task; a role
that fails is logged with its name and ends the process with a non-zero exit. The first SIGTERM or
SIGINT sets `ctx.stop` and gives roles `drain_seconds` to return; a second signal forces exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hami.config import DEFAULT_DEBUG_BIND, Config
from hami.listeners import BoundListeners, write_ports_file
from hami.obs.log import get_logger

log = get_logger(__name__)

ROLES: dict[str, str] = {
    "sim": "hami.sim.role",
    "scheduler": "hami.scheduler.role",
    "node-agent": "hami.agent.role",
    "monitor": "hami.monitor.role",
    "ui": "hami.ui.role",
    "dra": "hami.dra.role",  # not in `all`: DRA and the device plugin never serve one node
}
ALL_ROLES = ("scheduler", "node-agent", "monitor")
# Roles that others need up before they start (the embedded API server).
FIRST = ("sim",)


class RoleFailed(RuntimeError):
    def __init__(self, role: str, exc: BaseException):
        self.role = role
        super().__init__(f"role {role} failed: {type(exc).__name__}: {exc}")


@dataclass
class RoleContext:
    name: str
    config: Config
    stop: asyncio.Event
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    shared: dict[str, Any] = field(default_factory=dict)
    listeners: BoundListeners = field(default_factory=BoundListeners)  # the process's one, shared by its roles


def expand_roles(spec: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`scheduler,monitor` -> ("scheduler", "monitor"); `all` -> the three node and cluster roles."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        names = ALL_ROLES if item == "all" else (item,)
        for name in names:
            if name not in ROLES:
                raise ValueError(f"unknown role {name!r}; known roles: {', '.join(ROLES)}, all")
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError("no role given; use --role with one of: " + ", ".join(ROLES) + ", all")
    return tuple(sorted(out, key=lambda r: (r not in FIRST, out.index(r))))


def load_role(name: str) -> Callable[[RoleContext], Awaitable[None]]:
    module = importlib.import_module(ROLES[name])
    return module.run


def _support_tasks(config: Config, stop: asyncio.Event, listeners: BoundListeners,
                   readies: list[asyncio.Event]) -> list[tuple[str, Any]]:
    """Process-wide debugging aids, supervised like roles; off unless asked for. Each listener's
    bound event joins `readies` (the ports file waits for them)."""
    out: list[tuple[str, Any]] = []
    if config.debug.profiling:
        # Profiling is only ever served here, on loopback (checked in config), never on a Service port.
        from hami.obs.profiling import run_debug_server

        address = config.debug.debug_bind_address or DEFAULT_DEBUG_BIND
        bound = asyncio.Event()
        readies.append(bound)

        def on_bound(runner) -> None:
            listeners.add_runner("debug", runner)
            bound.set()

        out.append(("debug-server", run_debug_server(address, stop, config.listen, on_bound=on_bound)))
    if config.debug.aiomonitor:
        from hami.obs.aiomon import run_aiomonitor

        out.append(("aiomonitor", run_aiomonitor(config.debug, stop)))
    return out


async def _ports_file(path: str, listeners: BoundListeners, readies: list[asyncio.Event],
                      stop: asyncio.Event) -> None:
    """--ports-file: every listener's address, written once every role is ready (so all are bound);
    removed again at a clean stop so that a stale file never names ports nobody holds."""
    waits = [asyncio.ensure_future(ready.wait()) for ready in readies]
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopping, asyncio.gather(*waits)}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if stop.is_set():
        return
    write_ports_file(path, listeners.addresses)
    try:
        await stopping
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


async def run_roles(
    config: Config,
    roles: tuple[str, ...],
    *,
    drain_seconds: float = 10.0,
    install_signals: bool = True,
    stop: asyncio.Event | None = None,
    shared: dict[str, Any] | None = None,
) -> int:
    """Run `roles` until one fails or a stop is requested. Returns the process exit code."""
    stop = stop or asyncio.Event()
    shared = {} if shared is None else shared
    loop = asyncio.get_running_loop()
    if install_signals:
        on_signal = _signal_handler(stop, drain_seconds)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)

    tasks: dict[asyncio.Task, str] = {}
    listeners = BoundListeners()
    readies: list[asyncio.Event] = []
    try:
        failure = await _start_roles(config, roles, stop, shared, tasks, listeners, readies)
        if failure is None:
            for name, coro in _support_tasks(config, stop, listeners, readies):
                tasks[asyncio.create_task(coro, name=name)] = name
            if config.listen.ports_file:
                coro = _ports_file(config.listen.ports_file, listeners, readies, stop)
                tasks[asyncio.create_task(coro, name="ports-file")] = "ports-file"
        failure = await _supervise(tasks, stop, drain_seconds, failure)
    finally:
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        for task in tasks:
            if not task.done():
                task.cancel()
    if failure is not None:
        return 1
    log.info("Stopped")
    return 0


def _signal_handler(stop: asyncio.Event, drain_seconds: float) -> Callable[[str], None]:
    """The first SIGTERM/SIGINT asks for a stop (roles drain); a second one exits at once."""
    signals_seen = 0

    def on_signal(signame: str) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            log.info("Shutting down", signal=signame, drain_seconds=drain_seconds)
            stop.set()
        else:
            log.warning("Second signal: forcing exit", signal=signame)
            os._exit(130)

    return on_signal


async def _start_roles(config: Config, roles: tuple[str, ...], stop: asyncio.Event, shared: dict[str, Any],
                       tasks: dict[asyncio.Task, str], listeners: BoundListeners,
                       readies: list[asyncio.Event]) -> RoleFailed | None:
    """Each role started as a task in `tasks`, in order, reporting its listeners to `listeners`, its
    ready event in `readies`; a FIRST role is waited for until ready (or dead). Answers the failure of a
    role that did not load (the stop is then set)."""
    for name in roles:
        try:
            runner = load_role(name)
        except Exception as exc:  # an import error names the role, like any other failure
            log.error("Role failed to load", role=name, error=f"{type(exc).__name__}: {exc}")
            stop.set()
            return RoleFailed(name, exc)
        ctx = RoleContext(name=name, config=config, stop=stop, shared=shared, listeners=listeners)
        readies.append(ctx.ready)
        task = asyncio.create_task(runner(ctx), name=f"role:{name}")
        tasks[task] = name
        log.info("Role started", role=name)
        if name in FIRST:
            # Others connect to what this role serves: wait until it is ready (or dies).
            ready = asyncio.create_task(ctx.ready.wait())
            done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                ready.cancel()
                break
    return None


async def _supervise(tasks: dict[asyncio.Task, str], stop: asyncio.Event, drain_seconds: float,
                     failure: RoleFailed | None) -> RoleFailed | None:
    """Wait on the tasks until a stop: a role that fails or returns early sets it; then each gets
    `drain_seconds` to stop before it is cancelled. Answers the first failure."""
    stop_waiter = asyncio.create_task(stop.wait(), name="stop-waiter")
    pending = set(tasks)
    while pending:
        done, _ = await asyncio.wait(pending | {stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is stop_waiter:
                continue
            pending.discard(task)
            name = tasks[task]
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is not None:
                log.error("Role failed", role=name, error=f"{type(exc).__name__}: {exc}")
                failure = failure or RoleFailed(name, exc)
                stop.set()
            elif not stop.is_set():
                log.warning("Role returned before shutdown was requested", role=name)
                failure = failure or RoleFailed(name, RuntimeError("returned early"))
                stop.set()
        if stop.is_set() and pending:
            _, still = await asyncio.wait(pending, timeout=drain_seconds)
            for task in still:
                log.warning("Role did not stop within the drain deadline; cancelling", role=tasks[task])
                task.cancel()
            if still:
                await asyncio.wait(still, timeout=2.0)
            for task in pending - still:
                if not task.cancelled() and task.exception() is not None and failure is None:
                    exc = task.exception()
                    log.error("Role failed while stopping", role=tasks[task], error=str(exc))
                    failure = RoleFailed(tasks[task], exc)
            pending = set()
    stop_waiter.cancel()
    return failure
