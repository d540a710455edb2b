"""A kubelet's device-manager half, for real: the `v1beta1.Registration` server on
`<dir>/kubelet.sock` plus a DevicePlugin client per registered plugin.

What it does, like kubelet's devicemanager:
* `Register` dials the plugin's endpoint (relative to the socket dir), reads its options and keeps a
  ListAndWatch stream open; the device list per resource is kept current.
* With a `client` and `node_name`, every change of a device list patches the Node's
  `status.capacity` / `status.allocatable` (`<resource>`: all IDs / healthy IDs).
* `allocate_container(pod, container)` picks free healthy IDs (asking GetPreferredAllocation first
  when the plugin offers it) and calls Allocate with one container request; `allocate_pod(pod)`
  does that for every container asking for the resource (init containers first).
* `restart()` removes kubelet.sock and serves a new one, as a kubelet restart does; plugins are
  expected to notice and register again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from hami.agent._pb import api_pb2 as pb
from hami.agent._pb import api_pb2_grpc as pb_grpc

KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"


class KubeletError(RuntimeError):
    """The test kubelet could not do what was asked (no plugin, not enough devices, RPC failed)."""


@dataclass
class PluginConn:
    resource: str
    endpoint: str
    options: pb.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: pb_grpc.DevicePluginStub
    devices: dict[str, pb.Device] = field(default_factory=dict)
    updates: int = 0
    task: asyncio.Task | None = None


def _container_limit(container: Mapping, resource: str) -> int:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


def received(resp: pb.ContainerAllocateResponse) -> dict:
    """What a container runtime gets from one Allocate answer, by channel: the env var, the CRI
    `cdi_devices` field and `cdi.k8s.io/*` annotations (kubelet passes all three on)."""
    return {
        "NVIDIA_VISIBLE_DEVICES": resp.envs.get("NVIDIA_VISIBLE_DEVICES", ""),
        "cdi_devices": [d.name for d in resp.cdi_devices],
        "cdi_annotations": {k: v for k, v in resp.annotations.items() if k.startswith(CDI_ANNOTATION_PREFIX)},
    }


def visible_gpus(resp: pb.ContainerAllocateResponse, uuid_of_index: Mapping[int, str] | None = None) -> list[str]:
    """GPU UUIDs the container ends up with, as a CDI-enabled NVIDIA runtime resolves them: CDI names
    (`nvidia.com/gpu=<uuid>` or `=<index>`) from the cdi_devices field and the annotations, else
    NVIDIA_VISIBLE_DEVICES (`void`/`none` mean none). Raises KubeletError on a name it cannot resolve,
    as the runtime would fail the container."""
    got = received(resp)
    names = list(got["cdi_devices"])
    for value in got["cdi_annotations"].values():
        names += [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        env = got["NVIDIA_VISIBLE_DEVICES"]
        return [] if env in ("", "void", "none") else [u for u in env.split(",") if u]
    out: list[str] = []
    for name in dict.fromkeys(names):
        kind, sep, dev = name.partition("=")
        if kind != "nvidia.com/gpu" or not sep or not dev:
            raise KubeletError(f"unresolvable CDI device {name!r}: expected nvidia.com/gpu=<uuid|index>")
        if dev.isdigit():
            uuid = (uuid_of_index or {}).get(int(dev))
            if uuid is None:
                raise KubeletError(f"unresolvable CDI device {name!r}: no GPU with index {dev}")
            dev = uuid
        if dev not in out:
            out.append(dev)
    return out


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: Kubelet):
        self.k = kubelet

    async def Register(self, request, context):
        if request.version != "v1beta1":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version!r}")
        await self.k._add_plugin(request)
        return pb.Empty()


class Kubelet:
    def __init__(self, socket_dir: str, *, client=None, node_name: str = "",
                 on_change: Callable[[str], None] | None = None):
        self.socket_dir = socket_dir
        self.socket_path = os.path.join(socket_dir, KUBELET_SOCKET)
        self.client = client
        self.node_name = node_name
        self.on_change = on_change
        self.plugins: dict[str, PluginConn] = {}
        self.registrations: list[pb.RegisterRequest] = []
        # (pod uid, container name) -> device IDs in use
        self.assigned: dict[tuple[str, str], list[str]] = {}
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Condition()
        self._status_lock = asyncio.Lock()
        self.status_patches = 0
        self.status_errors: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        os.makedirs(self.socket_dir, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        for conn in list(self.plugins.values()):
            await self._drop(conn)
        self.plugins.clear()
        if server is not None:
            await server.stop(0.5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def restart(self, *, remove_plugin_sockets: bool = False) -> None:
        """Go away and come back with a new kubelet.sock; registered plugins are forgotten."""
        await self.stop()
        if remove_plugin_sockets:
            for name in os.listdir(self.socket_dir):
                if name.endswith(".sock"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.socket_dir, name))
        await self.start()

    async def __aenter__(self) -> Kubelet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ plugins

    async def _drop(self, conn: PluginConn) -> None:
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await conn.task
        await conn.channel.close()

    async def _add_plugin(self, req: pb.RegisterRequest) -> None:
        self.registrations.append(req)
        old = self.plugins.pop(req.resource_name, None)
        if old is not None:
            await self._drop(old)
        path = os.path.join(self.socket_dir, req.endpoint)
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        stub = pb_grpc.DevicePluginStub(channel)
        conn = PluginConn(req.resource_name, req.endpoint, req.options, channel, stub)
        self.plugins[req.resource_name] = conn
        conn.task = asyncio.get_running_loop().create_task(
            self._list_and_watch(conn), name=f"kubelet-law-{req.resource_name}")
        await self._notify(req.resource_name)

    async def _list_and_watch(self, conn: PluginConn) -> None:
        try:
            async for resp in conn.stub.ListAndWatch(pb.Empty()):
                conn.devices = {d.ID: d for d in resp.devices}
                conn.updates += 1
                try:
                    await self._update_node_status(conn.resource)
                except Exception as exc:  # noqa: BLE001 - status is best effort, like kubelet's
                    self.status_errors.append(str(exc))
                await self._notify(conn.resource)
        except grpc.aio.AioRpcError:
            pass  # plugin went away; it registers again when it comes back
        finally:
            if self.plugins.get(conn.resource) is conn and conn.devices:
                conn.devices = {}
                await self._notify(conn.resource)

    async def _notify(self, resource: str) -> None:
        async with self._changed:
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(resource)

    async def _update_node_status(self, resource: str) -> None:
        if self.client is None or not self.node_name:
            return
        from hami.kube.client import resource_path

        total, healthy = len(self.devices(resource)), self.healthy_count(resource)
        patch = {"status": {"capacity": {resource: str(total)}, "allocatable": {resource: str(healthy)}}}
        async with self._status_lock:
            await self.client.request(
                "patch", "nodes/status", "PATCH", resource_path("nodes", None, self.node_name, "status"),
                body=patch, content_type="application/merge-patch+json",
            )
            self.status_patches += 1

    # ------------------------------------------------------------------ queries

    def devices(self, resource: str = "nvidia.com/gpu") -> list[pb.Device]:
        conn = self.plugins.get(resource)
        return list(conn.devices.values()) if conn else []

    def healthy_count(self, resource: str = "nvidia.com/gpu") -> int:
        return sum(1 for d in self.devices(resource) if d.health == HEALTHY)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        try:
            await asyncio.wait_for(_wait(), timeout)
            return True
        except TimeoutError:
            return predicate()

    # ------------------------------------------------------------------ allocation

    def _conn(self, resource: str) -> PluginConn:
        conn = self.plugins.get(resource)
        if conn is None:
            raise KubeletError(f"no device plugin registered for {resource}")
        return conn

    async def allocate(self, device_ids: Sequence[Sequence[str]],
                       resource: str = "nvidia.com/gpu", timeout: float = 30.0) -> pb.AllocateResponse:
        """Raw Allocate with one container request per list of IDs (raises grpc.aio.AioRpcError)."""
        conn = self._conn(resource)
        req = pb.AllocateRequest()
        for ids in device_ids:
            req.container_requests.add(devices_ids=list(ids))
        return await conn.stub.Allocate(req, timeout=timeout)

    def _free(self, resource: str) -> list[str]:
        used = {i for ids in self.assigned.values() for i in ids}
        return [d.ID for d in self.devices(resource) if d.health == HEALTHY and d.ID not in used]

    async def allocate_container(self, pod: Mapping, container: str,
                                 resource: str = "nvidia.com/gpu") -> pb.ContainerAllocateResponse:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ctr = next((c for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
                    if c.get("name") == container), None)
        if ctr is None:
            raise KubeletError(f"pod {meta.get('namespace')}/{meta.get('name')} has no container {container!r}")
        n = _container_limit(ctr, resource)
        conn = self._conn(resource)
        free = self._free(resource)
        if n > len(free):
            raise KubeletError(f"{resource}: {n} requested, {len(free)} free")
        ids = free[:n]
        if conn.options.get_preferred_allocation_available:
            preq = pb.PreferredAllocationRequest()
            preq.container_requests.add(available_deviceIDs=free, allocation_size=n)
            presp = await conn.stub.GetPreferredAllocation(preq, timeout=10)
            if presp.container_responses and len(presp.container_responses[0].deviceIDs) == n:
                ids = list(presp.container_responses[0].deviceIDs)
        resp = await self.allocate([ids], resource)
        self.assigned[(meta.get("uid", ""), container)] = ids
        return resp.container_responses[0]

    async def allocate_pod(self, pod: Mapping, resource: str = "nvidia.com/gpu"
                           ) -> dict[str, pb.ContainerAllocateResponse]:
        """Allocate every container of the pod that asks for `resource`, init containers first."""
        spec = pod.get("spec") or {}
        out = {}
        for ctr in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
            if _container_limit(ctr, resource) > 0:
                out[ctr["name"]] = await self.allocate_container(pod, ctr["name"], resource)
        return out

    def release_pod(self, pod_uid: str) -> None:
        for key in [k for k in self.assigned if k[0] == pod_uid]:
            del self.assigned[key]
