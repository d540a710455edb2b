"""The addresses this process's listeners bound, and `--ports-file`.

Every listener takes port 0 (the kernel picks a free one at bind time); each role reports what it bound
here (`BoundListeners.add`, also logged at -v=0 as "Listener bound"), and once every role is ready
hami.app writes them all, at once and atomically, to `--ports-file` as a JSON object
listener name -> "host:port". A test or a script starts hami with `:0` everywhere and reads the file
instead of choosing ports ahead, which races with every other process on the machine.

Names: api (the embedded API server), scheduler-extender, scheduler-webhook (its own listener only),
scheduler-metrics, monitor-metrics (monitor-metrics-<node> per node), ui, node-agent-health, dra-health,
debug. aiomonitor's ports are not reported: its listeners are internal to the library.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import tempfile

from hami.netaddr import split_host_port, url_host
from hami.obs.log import get_logger

log = get_logger(__name__)


class BoundListeners:
    """name -> "host:port" of every listener of the process, as bound."""

    def __init__(self) -> None:
        self.addresses: dict[str, str] = {}
        self.changed = asyncio.Event()

    def add(self, name: str, host: str, port: int) -> None:
        address = f"{url_host(host)}:{port}"
        self.addresses[name] = address
        log.info("Listener bound", listener=name, address=address)
        self.changed.set()

    async def wait_for(self, names: list[str], stop: asyncio.Event) -> bool:
        """Until every listener in `names` is bound (True) or `stop` is set (False)."""
        while not all(n in self.addresses for n in names):
            if stop.is_set():
                return False
            self.changed.clear()
            stopping = asyncio.ensure_future(stop.wait())
            changed = asyncio.ensure_future(self.changed.wait())
            try:
                await asyncio.wait({stopping, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                changed.cancel()
        return True

    def add_runner(self, name: str, runner) -> None:
        """An aiohttp runner's first bound address (a TCP site: (host, port, ...))."""
        for address in runner.addresses:
            self.add(name, address[0], address[1])
            return


# listener name -> (the role that serves it, the settings group and field of its bind address)
BIND_FIELDS = {
    "scheduler-extender": ("scheduler", "scheduler", "http_bind"),
    "scheduler-webhook": ("scheduler", "scheduler", "webhook_bind_address"),
    "scheduler-metrics": ("scheduler", "scheduler", "metrics_bind_address"),
    "monitor-metrics": ("monitor", "monitor", "metrics_bind_address"),
    "ui": ("ui", "ui", "bind_address"),
}


async def with_bound_addresses(config, listeners: BoundListeners, stop: asyncio.Event, names: tuple[str, ...]):
    """`config` with the bind address of each listener in `names` that asked for port 0, of a role this
    process runs, replaced by the address it bound, once bound: what the embedded cluster dials (the
    webhook, kube-scheduler's extender, the banner) and the UI scrapes (the monitor's /metrics) when
    the kernel picked the ports. None when `stop` came first."""
    wanted: dict[str, tuple[str, str, str]] = {}
    for name in names:
        role, group, field = BIND_FIELDS[name]
        value = getattr(getattr(config, group), field)
        if role in config.roles and value and split_host_port(value, flag=field, default_host="")[1] == 0:
            wanted[name] = (value, group, field)
    if not await listeners.wait_for(list(wanted), stop):
        return None
    groups: dict[str, dict[str, str]] = {}
    for name, (_, group, field) in wanted.items():
        groups.setdefault(group, {})[field] = listeners.addresses[name]
    if "monitor-metrics" in wanted:  # the UI scrapes the monitor (hami.config.build derives the URL from it)
        before, bound = wanted["monitor-metrics"][0], listeners.addresses["monitor-metrics"]
        urls = config.ui.metrics_urls.replace(f"//{before}/", f"//{bound}/")
        if urls != config.ui.metrics_urls:
            groups.setdefault("ui", {})["metrics_urls"] = urls
    return dataclasses.replace(config, **{group: dataclasses.replace(getattr(config, group), **fields)
                                          for group, fields in groups.items()})


def write_ports_file(path: str, addresses: dict[str, str]) -> None:
    """`addresses` as one JSON object at `path`, replaced atomically: a reader sees all or nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ports-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(dict(sorted(addresses.items())), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    log.info("Ports file written", path=path, listeners=len(addresses))
