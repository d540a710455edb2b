"""The kubelet device plugin: gRPC over a unix socket, and the pod-side of Allocate.

`DevicePluginServer` serves `v1beta1.DevicePlugin` on `<dir>/nvidia-gpu.sock`, registers with
`<dir>/kubelet.sock`, streams the device list (ListAndWatch) and re-sends it on every change, and
re-creates its socket and re-registers when kubelet.sock is re-created (kubelet restart) or its own
socket vanishes. Allocate and GetPreferredAllocation are delegated to a handler (`PodAllocator`).

`PodAllocator` finds the pod being allocated from the informer caches (the node-lock owner, else the
oldest `bind-phase=allocating` pod with devices left), answers from `hami.agent.allocate`, patches
the pod once (devices-to-allocate rewritten, plus `bind-phase=success` when nothing is left) and
releases the node lock if this pod owns it. On failure: `bind-phase=failed`, lock released, and a
gRPC error carrying the reason. An API call Allocate depends on that fails (RBAC 403, a timeout, a
5xx) is never swallowed: the gRPC error carries its cause with a matching status code
(PERMISSION_DENIED, UNAVAILABLE, ...), and nothing is returned to kubelet for a pod whose
allocation could not be recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC
from typing import Protocol

import grpc

from hami.agent import allocate as alloc
from hami.agent import cdi, hamicore
from hami.agent._pb import api_pb2 as pb
from hami.agent._pb import api_pb2_grpc as pb_grpc
from hami.agent.mig import MIG_ANNOTATION as MIG_ALLOCATIONS
from hami.agent.mig import MigRequestError
from hami.agent.register import PluginDevice, physical_id
from hami.device.codec.timestamps import format_rfc3339
from hami.device.model import MODE_MIG
from hami.device.nodeconfig import DeviceSettings
from hami.device.sharecontract import VGPU_LOCK_DIR_MODE as VGPU_LOCK_DIR_MODE
from hami.gpu.mig import MigError
from hami.kube.client import ApiError
from hami.kube.lanes import background
from hami.kube.nodelock import NodeLockError
from hami.obs.log import get_logger

log = get_logger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
REGISTER_RETRY = 1.0  # seconds between failed registrations (HAMi waits 30 s; kubelet restarts are quick)




class ApiCallError(alloc.AllocationError):
    """An API call Allocate depends on failed; the message names the call and the server's answer."""

    def __init__(self, what: str, exc: ApiError):
        super().__init__(f"{what}: {exc}")
        self.status = exc.status
        self.reason = exc.reason


class HamiCoreMissingError(alloc.AllocationError):
    """The host lacks a HAMi-core file the answer would mount: refuse rather than mount nothing."""


def grpc_status(exc: alloc.AllocationError) -> grpc.StatusCode:
    """The gRPC code kubelet shows: the API's answer when one caused it, else HAMi's UNKNOWN."""
    if isinstance(exc, HamiCoreMissingError):
        return grpc.StatusCode.FAILED_PRECONDITION
    status = getattr(exc, "status", None)
    if status is None:
        return grpc.StatusCode.UNKNOWN
    if status == 0:  # no answer: timeout or transport
        timed_out = getattr(exc, "reason", "") in ("TimeoutError", "ServerTimeoutError")
        return grpc.StatusCode.DEADLINE_EXCEEDED if timed_out else grpc.StatusCode.UNAVAILABLE
    return {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED,
            404: grpc.StatusCode.NOT_FOUND, 409: grpc.StatusCode.ABORTED,
            429: grpc.StatusCode.RESOURCE_EXHAUSTED}.get(
        status, grpc.StatusCode.UNAVAILABLE if status >= 500 else grpc.StatusCode.UNKNOWN)


def socket_name(resource_name: str) -> str:
    """`nvidia.com/gpu` -> `nvidia-gpu.sock` (HAMi: `nvidia-` + the part after `/`)."""
    return f"nvidia-{resource_name.rsplit('/', 1)[-1]}.sock"


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class AllocateHandler(Protocol):
    async def allocate(self, requests: Sequence[Sequence[str]]) -> Sequence[alloc.ContainerAllocation]: ...

    async def preferred(self, requests: Sequence[pb.ContainerPreferredAllocationRequest]) -> list[list[str]]: ...


def to_pb_response(containers: Sequence[alloc.ContainerAllocation]) -> pb.AllocateResponse:
    resp = pb.AllocateResponse()
    for c in containers:
        cr = resp.container_responses.add()
        cr.envs.update(c.envs)
        for m in c.mounts:
            cr.mounts.add(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
        cr.annotations.update(c.annotations)
        for name in c.cdi_devices:
            cr.cdi_devices.add(name=name)
    return resp


class _Servicer(pb_grpc.DevicePluginServicer):
    def __init__(self, server: DevicePluginServer):
        self.s = server

    async def GetDevicePluginOptions(self, request, context):
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(self, request, context):
        s = self.s
        sent = [-1]
        while not s._closing:
            async with s._changed:
                await s._changed.wait_for(lambda: s._version != sent[0] or s._closing)
                if s._closing:
                    return
                sent[0] = s._version
                devices = s._devices
            yield s._list_response(devices)

    async def GetPreferredAllocation(self, request, context):
        resp = pb.PreferredAllocationResponse()
        try:
            chosen = await self.s.handler.preferred(list(request.container_requests))
        except Exception as exc:  # noqa: BLE001 - kubelet then chooses by itself
            log.warning("GetPreferredAllocation failed", error=str(exc))
            chosen = []
        for ids in chosen:
            resp.container_responses.add(deviceIDs=ids)
        return resp

    async def Allocate(self, request, context):
        requests = [list(r.devices_ids) for r in request.container_requests]
        try:
            containers = await self.s.handler.allocate(requests)
        except alloc.AllocationError as exc:
            await context.abort(grpc_status(exc), str(exc))
        return to_pb_response(containers)

    async def PreStartContainer(self, request, context):
        return pb.PreStartContainerResponse()


class DevicePluginServer:
    """One device plugin endpoint for one resource; `await run(stop)` serves until stop is set."""

    def __init__(
        self,
        socket_dir: str,
        handler: AllocateHandler,
        *,
        resource_name: str = "nvidia.com/gpu",
        preferred_allocation: bool = False,
        poll_interval: float = 0.25,
        register_timeout: float = 5.0,
    ):
        self.socket_dir = socket_dir
        self.handler = handler
        self.resource_name = resource_name
        self.preferred_allocation = preferred_allocation
        self.endpoint = socket_name(resource_name)
        self.socket_path = os.path.join(socket_dir, self.endpoint)
        self.kubelet_socket = os.path.join(socket_dir, KUBELET_SOCKET)
        self.poll_interval = poll_interval
        self.register_timeout = register_timeout
        self._devices: tuple[PluginDevice, ...] = ()
        self._version = 0
        self._changed = asyncio.Condition()
        self._closing = False
        self._server: grpc.aio.Server | None = None
        self.registered = asyncio.Event()
        self.registrations = 0
        self.restarts = 0
        self.register_failures = 0
        self.polls = 0  # looks at kubelet.sock by run() (each a chance to register)

    # ------------------------------------------------------------------ devices

    @property
    def devices(self) -> tuple[PluginDevice, ...]:
        return self._devices

    async def set_devices(self, devices: Sequence[PluginDevice]) -> bool:
        """Replace the advertised list; open ListAndWatch streams get it at once. True if changed."""
        devices = tuple(devices)
        if devices == self._devices:
            return False
        async with self._changed:
            self._devices = devices
            self._version += 1
            self._changed.notify_all()
        return True

    @staticmethod
    def _list_response(devices: Sequence[PluginDevice]) -> pb.ListAndWatchResponse:
        resp = pb.ListAndWatchResponse()
        for d in devices:
            dev = resp.devices.add(ID=d.id, health=d.health)
            if d.numa is not None:
                dev.topology.nodes.add(ID=d.numa)
        return resp

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        os.makedirs(self.socket_dir, exist_ok=True)
        _unlink(self.socket_path)
        self._closing = False
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        log.info("Device plugin serving", socket=self.socket_path, resource=self.resource_name)

    async def stop(self, grace: float = 1.0) -> None:
        """Stop serving: end ListAndWatch streams, stop the server, remove the socket."""
        server, self._server = self._server, None
        async with self._changed:
            self._closing = True
            self._changed.notify_all()
        if server is not None:
            await server.stop(grace)
        drain = getattr(self.handler, "drain", None)
        if drain is not None:
            await drain()  # an Allocate cancelled by the stop marks its pod failed first
        _unlink(self.socket_path)
        self.registered.clear()

    async def register(self) -> None:
        """Register with kubelet (raises grpc.aio.AioRpcError / OSError if kubelet is not there)."""
        async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as ch:
            stub = pb_grpc.RegistrationStub(ch)
            await stub.Register(
                pb.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.endpoint,
                    resource_name=self.resource_name,
                    options=pb.DevicePluginOptions(
                        get_preferred_allocation_available=self.preferred_allocation
                    ),
                ),
                timeout=self.register_timeout,
            )
        self.registrations += 1
        self.registered.set()
        log.info("Registered with kubelet", endpoint=self.endpoint, resource=self.resource_name,
                 kubelet=self.kubelet_socket)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve, register, and re-register whenever kubelet.sock is re-created."""
        await self.start()
        kubelet_seen: tuple[int, int] | None = None
        try:
            while not stop.is_set():
                delay = self.poll_interval
                kubelet_now = _stamp(self.kubelet_socket)
                self.polls += 1
                own_gone = not _exists(self.socket_path)
                if kubelet_now is not None and (kubelet_now != kubelet_seen or own_gone):
                    if kubelet_seen is not None or own_gone:
                        log.info("kubelet socket re-created: restarting device plugin",
                                 socket=self.socket_path)
                        self.restarts += 1
                        await self.stop()
                        await self.start()
                    try:
                        await self.register()
                        kubelet_seen = kubelet_now
                    except (grpc.aio.AioRpcError, OSError) as exc:
                        self.register_failures += 1
                        log.warning("Register with kubelet failed, retrying", error=str(exc)[:200],
                                    retry_in=REGISTER_RETRY)
                        delay = REGISTER_RETRY
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        finally:
            await self.stop()


# --------------------------------------------------------------------------- pod side


def _rv_int(obj: Mapping | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


class PodAllocator:
    """Allocate against the API server, reading pods and the node from informer caches.

    `client` is a `hami.kube.client.KubeClient`; `pods()` / `nodes()` return the current stores
    (dicts) of this node's pod and node informers (an informer may replace its dict on re-LIST);
    `locker` is a `hami.kube.nodelock.NodeLocker` for releasing.
    """

    def __init__(
        self,
        client,
        node_name: str,
        pods: Callable[[], Mapping[str, dict]],
        nodes: Callable[[], Mapping[str, dict]],
        settings: Callable[[], DeviceSettings],
        hook_path: str,
        *,
        locker=None,
        vgpu_lock_dir: str = alloc.VGPU_LOCK_DIR,
        lib_version: str = "",
        device_list_strategy: tuple[str, ...] = ("envvar",),
        device_id_strategy: str = "uuid",
        index_of: Callable[[str], int | None] = lambda _uuid: None,
        new_cache_name: Callable[[], str] = lambda: str(uuidlib.uuid4()),
        mig=None,
        gpus: Callable[[], Sequence] = tuple,
    ):
        self.client = client
        self.node_name = node_name
        self.pods = pods
        self.nodes = nodes
        self.settings = settings
        self.hook_path = hook_path.rstrip("/")
        self.locker = locker
        self.vgpu_lock_dir = vgpu_lock_dir
        self.lib_version = lib_version
        self.device_list_strategy = tuple(device_list_strategy)
        self.device_id_strategy = device_id_strategy
        self.index_of = index_of
        self.new_cache_name = new_cache_name
        self.mig = mig  # hami.agent.migmgr.MigManager on a dynamic-MIG node
        self.gpus = gpus  # the node's GPUs as last polled
        self._lock = asyncio.Lock()
        # Pods returned by our own patches: newer than the informer until it catches up.
        self._fresh: dict[str, dict] = {}
        self._cleanups: set[asyncio.Future] = set()
        self.allocations = 0
        self.failures = 0
        self.api_fallbacks = 0

    # ------------------------------------------------------------------ lookup

    def _pod(self, key: str) -> dict | None:
        cached, fresh = self.pods().get(key), self._fresh.get(key)
        if fresh is None:
            return cached
        if cached is not None and _rv_int(cached) >= _rv_int(fresh):
            self._fresh.pop(key, None)
            return cached
        return fresh

    def _all_pods(self) -> list[dict]:
        keys = set(self.pods()) | set(self._fresh)
        return [p for p in (self._pod(k) for k in keys) if p is not None]

    async def _find_pod(self) -> tuple[dict | None, bool]:
        """(pod, True) for the pod holding this node's lock and waiting for Allocate, else (None, False).

        Only the lock holder is served (fail closed): a pod that claims `allocating` on this node
        without the lock was not placed by hami's scheduler (a forged placement). The caches
        are read first; when they show no usable holder, the node and its holder are read once."""
        owner = alloc.lock_owner(self.nodes().get(self.node_name))
        if owner is not None:
            pod = self._pod(f"{owner[0]}/{owner[1]}")
            if pod is None:
                # The node cache shows the lock but the pod watch is behind: read the owner once.
                self.api_fallbacks += 1
                pod = await self._get_pod(owner)
            if pod is not None and alloc.allocating_pods([pod], self.node_name):
                return pod, True
        # Caches may lag the scheduler by a watch event: ask the API server once.
        self.api_fallbacks += 1
        try:
            node = await self.client.get_node(self.node_name)
        except ApiError as exc:
            raise ApiCallError(f"cannot read node {self.node_name}", exc) from None
        owner = alloc.lock_owner(node)
        if owner is not None:
            pod = await self._get_pod(owner)
            if pod is not None:  # HAMi GetPendingPod: the holder, whatever its phase (Allocate then names it)
                return pod, True
        return None, False

    async def _refuse_unlocked(self) -> alloc.AllocationError:
        """The error for an Allocate with no lock holder; a Warning Event on each pod claiming the node."""
        claimants = alloc.allocating_pods(self._all_pods(), self.node_name)
        for pod in claimants[:5]:
            log.warning("Allocate refused: pod claims a placement without the node lock", pod=alloc.pod_ref(pod),
                        node=self.node_name)
            await self._warn(pod, "AllocationRefused", alloc.unlocked_claim_message(self.node_name, pod))
        return alloc.AllocationError(alloc.no_lock_holder_message(self.node_name, claimants))

    async def _warn(self, pod: dict, reason: str, message: str) -> None:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        now = format_rfc3339(time.time(), UTC)
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"generateName": f"{meta.get('name', 'pod')}.", "namespace": ns},
                 "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": meta.get("name", ""),
                                    "uid": meta.get("uid", "")},
                 "reason": reason, "message": message, "type": "Warning", "count": 1,
                 "firstTimestamp": now, "lastTimestamp": now,
                 "source": {"component": "hami-device-plugin", "host": self.node_name}}
        try:
            with background():
                await self.client.create("events", event, ns)
        except ApiError as exc:  # the gRPC error still tells kubelet; the Event is a courtesy
            log.warning("Could not write the Event", pod=alloc.pod_ref(pod), reason=reason, error=str(exc))

    async def _get_pod(self, ref: tuple[str, str]) -> dict | None:
        """The node-lock owner from the API; None only when it is gone (404), else the cause."""
        try:
            return await self.client.get_pod(ref[0], ref[1])
        except ApiError as exc:
            if exc.not_found:
                return None
            raise ApiCallError(f"cannot read pod {ref[0]}/{ref[1]} (the node lock owner)", exc) from None

    # ------------------------------------------------------------------ allocate

    def _lib_path(self) -> str:
        base = f"{self.hook_path}/vgpu/libvgpu.so"
        if self.lib_version and os.path.exists(f"{base}.{self.lib_version}"):
            return f"{base}.{self.lib_version}"
        return base

    def prepare_dirs(self, containers: Sequence[alloc.ContainerAllocation]) -> None:
        for c in containers:
            if not c.cache_dir:
                continue
            shutil.rmtree(c.cache_dir, ignore_errors=True)
            os.makedirs(c.cache_dir, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(c.cache_dir, 0o777)
        if any(c.cache_dir for c in containers):
            with contextlib.suppress(OSError):
                os.makedirs(self.vgpu_lock_dir, exist_ok=True)
                os.chmod(self.vgpu_lock_dir, VGPU_LOCK_DIR_MODE)

    async def allocate(self, requests: Sequence[Sequence[str]]) -> Sequence[alloc.ContainerAllocation]:
        async with self._lock:
            try:
                pod, owns_lock = await self._find_pod()
            except ApiCallError as exc:
                self.failures += 1
                log.warning("Allocate failed: API call", node=self.node_name, error=str(exc))
                raise
            if pod is None:
                self.failures += 1
                raise await self._refuse_unlocked()
            ref = alloc.pod_ref(pod)
            try:
                plan = alloc.plan_allocation(
                    pod, requests, self.settings(), self.hook_path,
                    new_cache_name=self.new_cache_name, lib_path=self._lib_path(),
                    license_exists=_exists(f"{self.hook_path}/vgpu/license"),
                )
                self._check_hamicore(plan.containers)
                await asyncio.to_thread(self.prepare_dirs, plan.containers)
                containers, mig_text = list(plan.containers), None
                if self.mig is not None and self.settings().mode == MODE_MIG:
                    containers, mig_text = await self.mig.apply(pod, plan.containers, self.gpus())
                containers = [
                    cdi.apply_strategy(c, self.device_list_strategy, self.device_id_strategy, self.index_of)
                    for c in containers]
            except asyncio.CancelledError:
                await self._abandon(pod, owns_lock)
                raise
            except HamiCoreMissingError as exc:
                await self._fail(pod, owns_lock)
                self.failures += 1
                log.warning("Allocate refused: HAMi-core missing", pod=ref, node=self.node_name, error=str(exc))
                raise
            except (alloc.AllocationError, OSError, MigRequestError, MigError) as exc:
                await self._fail(pod, owns_lock)
                self.failures += 1
                log.warning("Allocate failed", pod=ref, node=self.node_name, error=str(exc))
                raise alloc.AllocationError(str(exc)) from None
            anns: dict[str, str] = {alloc.ANN_TO_ALLOCATE: plan.remaining_text}
            if plan.done:
                anns[alloc.ANN_BIND_PHASE] = alloc.PHASE_SUCCESS
            if mig_text:
                anns[MIG_ALLOCATIONS] = mig_text  # migUUID, gpuInstanceID, computeInstanceID filled in
            meta = pod["metadata"]
            try:
                # The label HAMi's vGPU monitor lists running pods by: the scheduler's Binding
                # cannot carry it, and this patch is made anyway (hami.scheduler.extender.labeler).
                patched = await self.client.patch_pod(meta["namespace"], meta["name"], {"metadata": {
                    "annotations": anns, "labels": {alloc.ANN_VGPU_NODE: self.node_name}}})
            except asyncio.CancelledError:
                await self._abandon(pod, owns_lock)
                raise
            except ApiError as exc:  # answered with an error, or no answer (status 0)
                await self._fail(pod, owns_lock)
                self.failures += 1
                log.warning("Allocate failed: recording the allocation", pod=ref, error=str(exc))
                raise ApiCallError(f"pod {ref}: cannot record the allocation", exc) from None
            self._fresh[f"{meta['namespace']}/{meta['name']}"] = patched
            if plan.done:
                await self._release(pod, owns_lock)
            self.allocations += 1
            log.info("Allocated", pod=ref, node=self.node_name,
                     containers=[c.container for c in plan.containers], done=plan.done)
            return containers

    def _check_hamicore(self, containers: Sequence[alloc.ContainerAllocation]) -> None:
        """Every libvgpu.so / ld.so.preload the answer mounts must exist on the host."""
        missing = hamicore.missing_mounts([m.host_path for c in containers for m in c.mounts])
        if missing:
            raise HamiCoreMissingError(
                f"HAMi-core is not installed on node {self.node_name}: {', '.join(missing)} missing "
                f"(the node agent installs it from --vgpu-lib at start; see `hami doctor nodes`)")

    async def _abandon(self, pod: dict, owns_lock: bool) -> None:
        """Allocate was cancelled (kubelet gave up, or the agent is stopping) before the pod was
        recorded: mark it failed and release its lock, so it is never left allocating."""
        self.failures += 1
        log.warning("Allocate cancelled, marking the pod failed", pod=alloc.pod_ref(pod), node=self.node_name)
        task = asyncio.ensure_future(self._fail(pod, owns_lock))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 5.0)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (bounded) for the clean-up of cancelled Allocates, before the client closes."""
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=timeout)

    async def _fail(self, pod: dict, owns_lock: bool) -> None:
        meta = pod.get("metadata") or {}
        try:
            patched = await self.client.patch_pod(
                meta.get("namespace", ""), meta.get("name", ""),
                {"metadata": {"annotations": {alloc.ANN_BIND_PHASE: alloc.PHASE_FAILED}}},
            )
            self._fresh[f"{meta.get('namespace')}/{meta.get('name')}"] = patched
        except ApiError as exc:  # the gRPC error still goes out; the scheduler sees the pod not allocated
            log.warning("Marking pod failed did not work", pod=alloc.pod_ref(pod), error=str(exc))
        await self._release(pod, owns_lock)

    async def _release(self, pod: dict, owns_lock: bool) -> None:
        """Release the node lock if this pod holds it: through the locker (cache + CAS), else, when
        the node cache may be stale (no lock seen, or ours), after one GET of the node."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            if owns_lock and self.locker is not None and await self.locker.release(self.node_name, ns, name):
                return
            cached = alloc.lock_owner(self.nodes().get(self.node_name))
            if cached is not None and cached != (ns, name):
                return  # another pod's lock, and the cache has seen it
            node = await self.client.get_node(self.node_name)
            if alloc.lock_owner(node) == (ns, name):
                rv = node["metadata"].get("resourceVersion", "")
                await self.client.patch_node(self.node_name, {
                    "metadata": {"annotations": {alloc.ANN_NODE_LOCK: None}, "resourceVersion": rv}})
        except (ApiError, NodeLockError) as exc:  # the lock then expires on its own
            log.warning("Releasing node lock failed", node=self.node_name, pod=f"{ns}/{name}", error=str(exc))

    # ------------------------------------------------------------------ preferred allocation

    async def preferred(self, requests: Sequence[pb.ContainerPreferredAllocationRequest]) -> list[list[str]]:
        """Pick kubelet IDs on the GPUs the scheduler chose (HAMi server.go GetPreferredAllocation)."""
        pod, _ = await self._find_pod()
        if pod is None:
            return []
        slots = [s for s in alloc.pod_devices_to_allocate(pod) if s]
        out: list[list[str]] = []
        for k, req in enumerate(requests):
            if k >= len(slots):
                continue  # HAMi: no entry for this container, kubelet then chooses
            must = list(req.must_include_deviceIDs)
            must_set = set(must)
            available = must + [i for i in req.available_deviceIDs if i not in must_set]
            chosen: list[str] = []
            for dev in slots[k][: req.allocation_size]:
                pick = next((i for i in available if physical_id(i) == dev.uuid and i not in chosen), None)
                if pick is None:
                    chosen = []
                    break
                chosen.append(pick)
            if len(chosen) == req.allocation_size:
                out.append(chosen)
        return out


AllocateFn = Callable[[Sequence[Sequence[str]]], Awaitable[Sequence[alloc.ContainerAllocation]]]
