"""hami.obs.aiomon: `--aiomonitor` serves aiomonitor on loopback with the configured ports.

Covers: the terminal UI listens on its port, the web UI answers on its port and its task list
names a task of the monitored loop, and nothing starts when the flag is off.
"""

from __future__ import annotations

import asyncio

import aiohttp

from hami.config import DebugSettings
from hami.obs.aiomon import run_aiomonitor
from tests.ports import free_ports


async def test_aiomonitor_serves_task_list_and_webui_on_loopback():
    # aiomonitor binds inside the library and reports no port it bound (hami.listeners): chosen ahead
    term, webui, console = free_ports(3)
    settings = DebugSettings(aiomonitor=True, aiomonitor_port=term, aiomonitor_webui_port=webui,
                             aiomonitor_console_port=console)
    stop, gate = asyncio.Event(), asyncio.Event()
    parked = asyncio.create_task(gate.wait(), name="parked-for-aiomonitor")
    server = asyncio.create_task(run_aiomonitor(settings, stop))
    try:
        for _ in range(200):  # the UI thread binds asynchronously
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", term)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("aiomonitor terminal port never opened")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{webui}/") as resp:
                assert resp.status == 200
            async with session.post(f"http://127.0.0.1:{webui}/api/live-tasks",
                                    data={"filter": "parked"}) as resp:
                tasks = (await resp.json())["tasks"]
        assert [t["name"] for t in tasks] == ["parked-for-aiomonitor"]
    finally:
        stop.set()
        gate.set()
        await server
        await parked


async def test_aiomonitor_off_returns_at_once():
    stop = asyncio.Event()
    await asyncio.wait_for(run_aiomonitor(DebugSettings(aiomonitor=False), stop), 5)
