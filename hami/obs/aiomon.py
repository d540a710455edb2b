"""aiomonitor for `--aiomonitor`: inspect live asyncio tasks of a running hami.

    hami --role scheduler --aiomonitor [--aiomonitor-port 20101] [--aiomonitor-webui-port 20102]
         [--aiomonitor-console-port 20103]
    telnet 127.0.0.1 20101        # `ps`, `where TASK_ID`, `cancel TASK_ID`
    curl http://127.0.0.1:20102/  # the web UI

Always binds 127.0.0.1: the monitor can run code in the process, so it is never exposed. Off by
default. aiomonitor runs its UI in its own thread; `run_aiomonitor` holds it for as long as the
process runs and closes it when `stop` is set.
"""

from __future__ import annotations

import asyncio

from hami.config import DebugSettings
from hami.obs.log import get_logger

HOST = "127.0.0.1"

log = get_logger(__name__)


def start_aiomonitor(loop: asyncio.AbstractEventLoop, settings: DebugSettings, **local_vars):
    """Start aiomonitor for `loop` on loopback with the configured ports; returns the Monitor."""
    import aiomonitor  # imported only when asked for: it pulls in prompt_toolkit, telnetlib3, aiohttp UI

    monitor = aiomonitor.Monitor(
        loop,
        host=HOST,
        termui_port=settings.aiomonitor_port,
        webui_port=settings.aiomonitor_webui_port,
        console_port=settings.aiomonitor_console_port,
        console_enabled=True,
        locals=local_vars or None,
    )
    monitor.start()
    log.info("Started aiomonitor", host=HOST, port=settings.aiomonitor_port,
             webui_port=settings.aiomonitor_webui_port, console_port=settings.aiomonitor_console_port)
    return monitor


async def run_aiomonitor(settings: DebugSettings, stop: asyncio.Event, **local_vars) -> None:
    """Serve aiomonitor until `stop` is set (a no-op when `--aiomonitor` is off)."""
    if not settings.aiomonitor:
        return
    monitor = start_aiomonitor(asyncio.get_running_loop(), settings, **local_vars)
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(monitor.close)
