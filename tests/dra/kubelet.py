"""A kubelet's DRA side for tests: plugin discovery, registration, prepare/unprepare over gRPC.

It does what kubelet's plugin watcher and DRA manager do: find `*-reg.sock` in the registration
dir, call GetInfo, pick an API version from `supported_versions`, report NotifyRegistrationStatus,
then call the DRAPlugin service of that version on the endpoint GetInfo named, and watch the
DRAResourceHealth stream (v1alpha1, kubelet 1.36; v1, later) when the plugin lists it.
"""

from __future__ import annotations

import asyncio
import glob
import os

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

VERSIONS = {"v1": (dra_v1_pb2, dra_v1_pb2_grpc), "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)}


class FakeKubelet:
    def __init__(self, registration_dir: str, version: str = "v1"):
        self.registration_dir = registration_dir
        self.version = version
        self.info: reg_pb.PluginInfo | None = None

    async def register(self) -> reg_pb.PluginInfo:
        socks = glob.glob(os.path.join(self.registration_dir, "*-reg.sock"))
        assert len(socks) == 1, socks
        async with grpc.aio.insecure_channel(f"unix://{socks[0]}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = await stub.GetInfo(reg_pb.InfoRequest(), timeout=5)
            ok = f"{self.version}.DRAPlugin" in info.supported_versions and info.type == "DRAPlugin"
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=ok, error="" if ok else "unsupported"), timeout=5)
        self.info = info
        return info

    def _stub(self, ch):
        return VERSIONS[self.version][1].DRAPluginStub(ch)

    def _claims(self, claims):
        pb = VERSIONS[self.version][0]
        return [pb.Claim(namespace=ns, uid=uid, name=name) for ns, name, uid in claims]

    async def prepare(self, *claims: tuple[str, str, str]):
        """claims: (namespace, name, uid) -> the response's claims map."""
        pb = VERSIONS[self.version][0]
        async with grpc.aio.insecure_channel(f"unix://{self.info.endpoint}") as ch:
            resp = await self._stub(ch).NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=self._claims(claims)), timeout=10)
        return resp.claims

    def watch_health(self, version: str = "v1alpha1") -> HealthWatch:
        assert f"{version}.DRAResourceHealth" in self.info.supported_versions, self.info.supported_versions
        return HealthWatch(self.info.endpoint, version)

    async def unprepare(self, *claims: tuple[str, str, str]):
        pb = VERSIONS[self.version][0]
        async with grpc.aio.insecure_channel(f"unix://{self.info.endpoint}") as ch:
            resp = await self._stub(ch).NodeUnprepareResources(
                pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=10)
        return resp.claims


HEALTH = {"v1": (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
          "v1alpha1": (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc)}


class HealthWatch:
    """Kubelet's DRAResourceHealth stream: `await watch.next()` -> {device: (health, message)}."""

    def __init__(self, endpoint: str, version: str):
        self.pb, pb_grpc = HEALTH[version]
        self.channel = grpc.aio.insecure_channel(f"unix://{endpoint}")
        self.stream = pb_grpc.DRAResourceHealthStub(self.channel).NodeWatchResources(
            self.pb.NodeWatchResourcesRequest())
        self.pools: set[str] = set()

    async def next(self, timeout: float = 10.0) -> dict[str, tuple[str, str]]:
        resp = await asyncio.wait_for(self.stream.read(), timeout)
        assert resp is not grpc.aio.EOF, "the plugin ended the health stream"
        for d in resp.devices:
            assert d.health_check_timeout_seconds > 0 and d.last_updated_time > 0
            self.pools.add(d.device.pool_name)
        return {d.device.device_name: (self.pb.HealthStatus.Name(d.health), d.message) for d in resp.devices}

    async def until(self, pred, timeout: float = 10.0) -> dict[str, tuple[str, str]]:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            got = await self.next(max(0.1, end - loop.time()))
            if pred(got):
                return got

    async def close(self) -> None:
        self.stream.cancel()
        await self.channel.close()
