"""A kubelet's DRA manager, for the simulated nodes: plugin discovery and prepare/unprepare over gRPC.

As kubelet's plugin watcher and DRA manager: find `<driver>-reg.sock` in the registration dir,
call `GetInfo`, take the newest API version the plugin supports (v1, else v1beta1), answer
`NotifyRegistrationStatus`, then call `NodePrepareResources` / `NodeUnprepareResources` of that
version on the endpoint GetInfo named, over one kept channel. Before a container with claims
starts, the runner prepares the pod's claims and the container runtime applies the CDI devices'
container edits (`hami.dra.cdi.resolve`). When the plugin lists `DRAResourceHealth` (v1, else
v1alpha1) among its versions, `watch_health` keeps kubelet's `NodeWatchResources` stream open (opened
again after a break) and hands each update to the runner, which writes the containers'
`allocatedResourcesStatus` (hami.sim.kubelet.drapods).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc

from hami.dra._pb import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from hami.dra._pb import pluginregistration_pb2 as reg_pb
from hami.dra._pb import pluginregistration_pb2_grpc as reg_grpc

_VERSIONS = (("v1.DRAPlugin", dra_v1_pb2, dra_v1_pb2_grpc),
             ("v1beta1.DRAPlugin", dra_v1beta1_pb2, dra_v1beta1_pb2_grpc))
_HEALTH = (("v1.DRAResourceHealth", dra_health_v1_pb2, dra_health_v1_pb2_grpc),
           ("v1alpha1.DRAResourceHealth", dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc))
HEALTH_NAMES = {"HEALTHY": "Healthy", "UNHEALTHY": "Unhealthy", "UNKNOWN": "Unknown"}
# (pool, device) -> (Healthy | Unhealthy | Unknown, message)
HealthUpdate = dict[tuple[str, str], tuple[str, str]]


class DraKubeletError(RuntimeError):
    """No DRA plugin registered, or the plugin could not be reached."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Prepared:
    cdi_ids: tuple[str, ...]  # every device's CDI ids, for the containers that use the claim
    error: str = ""
    devices: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (pool, device, request names)


class DraKubelet:
    def __init__(self, registration_dir: str):
        self.registration_dir = registration_dir
        self.driver = ""
        self.version = ""
        self._pb = None
        self._stub = None
        self._channel: grpc.aio.Channel | None = None
        self.prepares = 0
        self.unprepares = 0
        self.health = None  # (pb, pb_grpc) of the health service the plugin offers, or None
        self.health_updates = 0

    async def register(self, timeout: float = 30.0, poll: float = 0.05) -> str:
        """Wait for a plugin's registration socket and register it; returns the driver name."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            socks = sorted(glob.glob(os.path.join(self.registration_dir, "*-reg.sock")))
            if socks:
                break
            if loop.time() > deadline:
                raise DraKubeletError(f"no DRA plugin registered under {self.registration_dir} in {timeout:.0f}s")
            await asyncio.sleep(poll)
        async with grpc.aio.insecure_channel(f"unix://{socks[0]}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = await stub.GetInfo(reg_pb.InfoRequest(), timeout=10)
            chosen = next((v for v in _VERSIONS if v[0] in info.supported_versions), None)
            ok = info.type == "DRAPlugin" and chosen is not None
            error = "" if ok else f"unsupported plugin {info.type} {list(info.supported_versions)}"
            await stub.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=ok, error=error),
                                                timeout=10)
        if not ok:
            raise DraKubeletError(error)
        self.driver, self.version, self._pb = info.name, chosen[0], chosen[1]
        self.health = next(((pb, pb_grpc) for name, pb, pb_grpc in _HEALTH if name in info.supported_versions), None)
        if self._channel is not None:
            await self._channel.close()
        self._channel = grpc.aio.insecure_channel(f"unix://{info.endpoint}")
        self._stub = chosen[2].DRAPluginStub(self._channel)
        return info.name

    def _claims(self, claims: Sequence[ClaimRef]) -> list:
        if self._stub is None:
            raise DraKubeletError("no DRA plugin registered")
        return [self._pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    async def prepare(self, claims: Sequence[ClaimRef], timeout: float = 45.0) -> dict[str, Prepared]:
        """NodePrepareResources (kubelet's timeout: 45 s); uid -> CDI ids or the claim's error."""
        req = self._pb_request("NodePrepareResourcesRequest", claims)
        resp = await self._stub.NodePrepareResources(req, timeout=timeout)
        self.prepares += 1
        out = {}
        for c in claims:
            entry = resp.claims.get(c.uid)
            if entry is None:
                out[c.uid] = Prepared((), "the plugin answered nothing for this claim")
            elif entry.error:
                out[c.uid] = Prepared((), entry.error)
            else:
                out[c.uid] = Prepared(tuple(i for d in entry.devices for i in d.cdi_device_ids),
                                      devices=tuple((d.pool_name, d.device_name, tuple(d.request_names))
                                                    for d in entry.devices))
        return out

    async def unprepare(self, claims: Sequence[ClaimRef], timeout: float = 45.0) -> dict[str, str]:
        """NodeUnprepareResources; uid -> error ("" when done)."""
        req = self._pb_request("NodeUnprepareResourcesRequest", claims)
        resp = await self._stub.NodeUnprepareResources(req, timeout=timeout)
        self.unprepares += 1
        return {c.uid: (resp.claims[c.uid].error if c.uid in resp.claims else "") for c in claims}

    def _pb_request(self, kind: str, claims: Sequence[ClaimRef]):
        items = self._claims(claims)
        return getattr(self._pb, kind)(claims=items)

    async def watch_health(self, on_update: Callable[[HealthUpdate], Awaitable[None]], stop: asyncio.Event,
                           retry: float = 1.0) -> None:
        """Keep the plugin's health stream open until `stop`, as kubelet does; every message goes to
        `on_update`. Nothing to watch when the plugin does not offer the service."""
        while not stop.is_set() and self.health is not None and self._channel is not None:
            pb, pb_grpc = self.health
            call = pb_grpc.DRAResourceHealthStub(self._channel).NodeWatchResources(pb.NodeWatchResourcesRequest())
            stopped = asyncio.create_task(stop.wait())
            try:
                while True:
                    read = asyncio.create_task(call.read())
                    await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
                    if not read.done():
                        read.cancel()
                        return
                    resp = read.result()
                    if resp is grpc.aio.EOF:
                        break
                    self.health_updates += 1
                    await on_update({(d.device.pool_name, d.device.device_name):
                                     (HEALTH_NAMES[pb.HealthStatus.Name(d.health)], d.message) for d in resp.devices})
            except grpc.aio.AioRpcError:
                pass  # the plugin went away: kubelet opens the stream again
            finally:
                call.cancel()
                stopped.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), retry)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None
