"""A kubelet's DRA manager, for the simulated nodes: plugin discovery and prepare/unprepare over gRPC.

As kubelet's plugin watcher and DRA manager: find `<driver>-reg.sock` in the registration dir,
call `GetInfo`, take the newest API version the plugin supports (v1, else v1beta1), answer
`NotifyRegistrationStatus`, then call `NodePrepareResources` / `NodeUnprepareResources` of that
version on the endpoint GetInfo named, over one kept channel. Before a container with claims
starts, the runner prepares the pod's claims and the container runtime applies the CDI devices'
container edits (`hami.dra.cdi.resolve`).
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from hami.dra._pb import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from hami.dra._pb import pluginregistration_pb2 as reg_pb
from hami.dra._pb import pluginregistration_pb2_grpc as reg_grpc

_VERSIONS = (("v1.DRAPlugin", dra_v1_pb2, dra_v1_pb2_grpc), ("v1beta1.DRAPlugin", dra_v1beta1_pb2, dra_v1beta1_pb2_grpc))


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
                out[c.uid] = Prepared(tuple(i for d in entry.devices for i in d.cdi_device_ids))
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

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None
