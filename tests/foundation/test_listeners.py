"""hami.listeners: the bound addresses, --ports-file, and the config the embedded cluster dials.

Covers: the ports file is one JSON object written atomically (no temporary left); a config's port-0
listeners of roles this process runs are replaced by what they bound once bound (the UI's metrics URL
too), a role not running is not waited for, a fixed port is left alone, and a stop ends the wait.
The end-to-end use (a child's --ports-file, removed at a clean stop) is in test_runner and tests/e2e."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from hami.config import Config
from hami.listeners import BoundListeners, with_bound_addresses, write_ports_file


def test_the_ports_file_is_one_json_object_written_atomically(tmp_path):
    path = tmp_path / "ports.json"
    path.write_text("stale")
    write_ports_file(str(path), {"ui": "127.0.0.1:4", "api": "127.0.0.1:3"})
    assert json.loads(path.read_text()) == {"api": "127.0.0.1:3", "ui": "127.0.0.1:4"}
    assert [p.name for p in tmp_path.iterdir()] == ["ports.json"]


def embedded(**scheduler) -> Config:
    cfg = Config(roles=("sim", "scheduler", "monitor", "ui"))
    return dataclasses.replace(
        cfg, scheduler=dataclasses.replace(cfg.scheduler, http_bind="127.0.0.1:0",
                                           metrics_bind_address="127.0.0.1:0", **scheduler),
        monitor=dataclasses.replace(cfg.monitor, metrics_bind_address="127.0.0.1:0"),
        ui=dataclasses.replace(cfg.ui, bind_address="127.0.0.1:0", metrics_urls="http://127.0.0.1:0/metrics"))


async def test_port_zero_listeners_are_replaced_by_what_they_bound_once_bound():
    listeners, stop = BoundListeners(), asyncio.Event()
    waiting = asyncio.create_task(with_bound_addresses(embedded(), listeners, stop,
                                                       ("scheduler-extender", "monitor-metrics", "ui")))
    listeners.add("scheduler-extender", "127.0.0.1", 4001)
    listeners.add("monitor-metrics", "127.0.0.1", 4002)
    await asyncio.sleep(0)
    assert not waiting.done()  # the UI is not bound yet
    listeners.add("ui", "127.0.0.1", 4003)
    cfg = await asyncio.wait_for(waiting, 10)
    assert cfg.scheduler.http_bind == "127.0.0.1:4001" and cfg.monitor.metrics_bind_address == "127.0.0.1:4002"
    assert cfg.ui.bind_address == "127.0.0.1:4003" and cfg.ui.metrics_urls == "http://127.0.0.1:4002/metrics"
    assert cfg.scheduler.metrics_bind_address == "127.0.0.1:0"  # not asked for


async def test_roles_not_running_and_fixed_ports_are_not_waited_for_and_a_stop_ends_the_wait():
    cfg = dataclasses.replace(embedded(), roles=("sim", "scheduler"))
    cfg = dataclasses.replace(cfg, scheduler=dataclasses.replace(cfg.scheduler, http_bind="127.0.0.1:8080"))
    same = await asyncio.wait_for(with_bound_addresses(cfg, BoundListeners(), asyncio.Event(),
                                                       ("scheduler-extender", "monitor-metrics", "ui")), 10)
    assert same == cfg
    stop = asyncio.Event()
    waiting = asyncio.create_task(with_bound_addresses(embedded(), BoundListeners(), stop, ("ui",)))
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(waiting, 10) is None
