"""The sockets kubelet talks to: plugin registration and the DRA service (DRAPlugin v1 and
v1beta1, and DRAResourceHealth v1alpha1 and v1 when a `HealthBoard` is given), over unix sockets.

    server = DraServer(driver, plugin_dir=..., registration_dir=..., health=board)
    await server.start()   # <plugin_dir>/dra.sock and <registration_dir>/<driver>-reg.sock
    ...
    await server.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping

import grpc

from hami.dra._pb import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from hami.dra._pb import pluginregistration_pb2 as reg_pb
from hami.dra._pb import pluginregistration_pb2_grpc as reg_grpc
from hami.dra.health import HEALTH_SERVICES, HealthBoard, add_health_services
from hami.dra.plugin import (
    DEFAULT_REGISTRATION_DIR,
    DRA_SOCKET,
    PLUGIN_TYPE,
    SUPPORTED_VERSIONS,
    ClaimReader,
    ClaimRef,
    DraDriver,
    registration_socket,
)
from hami.kube.client import ApiError
from hami.obs.log import get_logger

log = get_logger(__name__)


def _refs(request) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _servicer(pb, pb_grpc, driver: DraDriver):
    """The DRAPlugin servicer of one API version (v1 and v1beta1 have the same messages)."""

    class Servicer(pb_grpc.DRAPluginServicer):
        async def NodePrepareResources(self, request, context):
            resp = pb.NodePrepareResourcesResponse()
            for uid, r in (await driver.prepare(_refs(request))).items():
                entry = resp.claims[uid]
                if r.error:
                    entry.error = r.error
                    continue
                for d in r.devices:
                    entry.devices.add(request_names=d.requests, pool_name=d.pool, device_name=d.device,
                                      cdi_device_ids=d.cdi_ids)
            return resp

        async def NodeUnprepareResources(self, request, context):
            resp = pb.NodeUnprepareResourcesResponse()
            for uid, err in (await driver.unprepare(_refs(request))).items():
                resp.claims[uid].error = err
            return resp

    return Servicer()


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, server: DraServer):
        self.server = server

    async def GetInfo(self, request, context):
        versions = list(SUPPORTED_VERSIONS) + (list(HEALTH_SERVICES) if self.server.health is not None else [])
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.server.driver.driver, endpoint=self.server.endpoint,
                                 supported_versions=versions)

    async def NotifyRegistrationStatus(self, request, context):
        self.server.registration_status = (request.plugin_registered, request.error)
        if request.plugin_registered:
            self.server.registered.set()
            log.info("Registered with kubelet", driver=self.server.driver.driver, endpoint=self.server.endpoint)
        else:
            self.server.registered.clear()
            log.error("kubelet refused the DRA plugin registration", driver=self.server.driver.driver,
                      error=request.error[:300])
        return reg_pb.RegistrationStatusResponse()


class DraServer:
    """The two sockets kubelet talks to: registration and the DRA service (v1 and v1beta1)."""

    def __init__(self, driver: DraDriver, *, plugin_dir: str, registration_dir: str = DEFAULT_REGISTRATION_DIR,
                 health: HealthBoard | None = None):
        self.driver = driver
        self.health = health
        self.endpoint = os.path.join(plugin_dir, DRA_SOCKET)
        self.registration_socket = registration_socket(registration_dir, driver.driver)
        self.registered = asyncio.Event()
        self.registration_status: tuple[bool, str] | None = None
        self._servers: list[grpc.aio.Server] = []

    async def start(self) -> None:
        dra = grpc.aio.server()
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_servicer(dra_v1_pb2, dra_v1_pb2_grpc, self.driver), dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            _servicer(dra_v1beta1_pb2, dra_v1beta1_pb2_grpc, self.driver), dra)
        if self.health is not None:
            add_health_services(dra, self.health)
        await self.driver.recover_mig()
        reg = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(_Registration(self), reg)
        # The DRA service first: kubelet dials the endpoint as soon as it sees the registration socket.
        for server, path in ((dra, self.endpoint), (reg, self.registration_socket)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server.add_insecure_port(f"unix://{path}")
            await server.start()
            self._servers.append(server)
        log.info("DRA plugin serving", driver=self.driver.driver, endpoint=self.endpoint,
                 registration=self.registration_socket)

    def sockets_present(self) -> bool:
        return all(os.path.exists(p) for p in (self.registration_socket, self.endpoint))

    async def stop(self, grace: float = 1.0) -> None:
        """Registration socket first (kubelet sees the plugin go), then the service."""
        servers, self._servers = self._servers, []
        for server, path in zip(reversed(servers), (self.registration_socket, self.endpoint), strict=False):
            await server.stop(grace)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.registered.clear()


def claim_reader(client) -> ClaimReader:
    """GET the ResourceClaim through a hami.kube.client.KubeClient (critical lane: a pod waits);
    None when it does not exist."""

    async def read(namespace: str, name: str) -> Mapping | None:
        try:
            return await client.get("resourceclaims", name, namespace)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    return read
