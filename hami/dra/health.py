"""Device health for kubelet: the `DRAResourceHealth.NodeWatchResources` stream (v1alpha1 and v1).

Kubelet (KEP-4680, beta in 1.36) opens one stream to the plugin and keeps it; what the plugin sends
becomes `containerStatuses[].allocatedResourcesStatus` of every container whose claim holds the
device (`claim:<pod claim>` -> resourceID `<driver>/<pool>/<device>`, health Healthy/Unhealthy/
Unknown, and the message). `HealthBoard` holds the latest status of every device the node published
and wakes the streams when one changes; each stream sends the whole board at once on connect, on
every change, and at least every `heartbeat` seconds (kubelet marks a device Unknown after
`health_check_timeout_seconds` without news, so a quiet plugin is not mistaken for a dead one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hami.dra._pb import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
)
from hami.obs.log import get_logger

log = get_logger(__name__)

HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
HEARTBEAT = 10.0
TIMEOUT_SECONDS = 30  # told to kubelet: three heartbeats missed make the device Unknown
MAX_MESSAGE = 1024  # kubelet truncates longer messages


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    health: str  # HEALTHY / UNHEALTHY / UNKNOWN
    message: str = ""
    updated: int = 0  # Unix seconds the status was last determined


class HealthBoard:
    """device name -> DeviceStatus for one pool; `version` goes up on every change."""

    def __init__(self, pool: str, clock: Callable[[], float] = time.time):
        self.pool = pool
        self.clock = clock
        self.devices: dict[str, DeviceStatus] = {}
        self.version = 0
        self.streams = 0  # open kubelet streams (tests and /readyz can see kubelet listening)
        self._changed = asyncio.Condition()

    async def update(self, statuses: Mapping[str, tuple[str, str]]) -> bool:
        """Replace the board with `statuses` (device -> (health, message)); True if anything changed.
        A device that left the board is reported Unknown once more, then forgotten."""
        now = int(self.clock())
        new: dict[str, DeviceStatus] = {}
        for name, (health, message) in statuses.items():
            old = self.devices.get(name)
            same = old is not None and (old.health, old.message) == (health, message)
            new[name] = old if same else DeviceStatus(health, message[:MAX_MESSAGE], now)
        gone = {n: DeviceStatus(UNKNOWN, "no longer published by this node", now)
                for n, s in self.devices.items() if n not in new and s.health != UNKNOWN}
        merged = {**gone, **new}
        if merged == self.devices:
            return False
        self.devices = merged
        self.version += 1
        async with self._changed:
            self._changed.notify_all()
        return True

    async def wait_change(self, seen: int, timeout: float) -> None:
        async with self._changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(lambda: self.version != seen), timeout)


_PB = {"v1": (dra_health_v1_pb2, dra_health_v1_pb2_grpc), "v1alpha1": (dra_health_v1alpha1_pb2,
                                                                       dra_health_v1alpha1_pb2_grpc)}
_HEALTH = {HEALTHY: "HEALTHY", UNHEALTHY: "UNHEALTHY", UNKNOWN: "UNKNOWN"}


def response(pb, board: HealthBoard):
    resp = pb.NodeWatchResourcesResponse()
    for name, st in sorted(board.devices.items()):
        resp.devices.add(device=pb.DeviceIdentifier(pool_name=board.pool, device_name=name),
                         health=pb.HealthStatus.Value(_HEALTH[st.health]), last_updated_time=st.updated,
                         health_check_timeout_seconds=TIMEOUT_SECONDS, message=st.message)
    return resp


def add_health_services(server, board: HealthBoard, heartbeat: float = HEARTBEAT) -> None:
    """Serve DRAResourceHealth v1 and v1alpha1 on `server` (a grpc.aio server)."""
    for version, (pb, pb_grpc) in _PB.items():

        class Servicer(pb_grpc.DRAResourceHealthServicer):
            async def NodeWatchResources(self, request, context, pb=pb, version=version):
                board.streams += 1
                log.v(2).info("kubelet watches device health", pool=board.pool, version=version)
                try:
                    while True:
                        seen = board.version
                        await context.write(response(pb, board))
                        await board.wait_change(seen, heartbeat)
                finally:
                    board.streams -= 1

        pb_grpc.add_DRAResourceHealthServicer_to_server(Servicer(), server)
