"""The kubelet DRA plugin: registration and NodePrepare/UnprepareResources over unix sockets.

Start it in-process (the simulated kubelet, tests, `hami --role dra`):

    driver = DraDriver(node="gpu-node-1", cdi_root=..., plugin_dir=..., hook_path="/usr/local",
                       read_claim=async (namespace, name) -> dict | None,   # GET the ResourceClaim
                       published=lambda: {device name: PublishedGpu},       # what the slice publishes
                       settings=lambda: DeviceSettings())                   # hami.device.nodeconfig
    server = DraServer(driver, plugin_dir=..., registration_dir=...)
    await server.start()   # serves <plugin_dir>/dra.sock (dra v1 + v1beta1) and
                           # <registration_dir>/hami-core-gpu.project-hami.io-reg.sock
    ...                    # kubelet: GetInfo on the reg socket, then DRAPlugin on server.endpoint
    await server.stop()

`driver.prepare(claims)` / `driver.unprepare(claims)` answer without gRPC (claims: `ClaimRef`s).
Prepare GETs each ResourceClaim, checks its allocation (hami.dra.shares), writes its CDI spec
(hami.dra.cdi) with HAMi-core's contract from `hami.device.sharecontract.share_contract` (the
values Allocate hands a device-plugin container), then records it in the checkpoint as `prepared`. A claim already prepared is answered from the checkpoint (idempotent); a claim
that cannot be prepared gets an error in its own entry of the response; no claim's failure fails
another or the call. Unprepare removes the spec, the claim's shared-region cache dir and the entry;
an unknown claim is already unprepared.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from hami.device.model import MODE_MIG, NVIDIA, ContainerDevice
from hami.device.nodeconfig import DeviceSettings
from hami.device.sharecontract import VGPU_LOCK_DIR, share_contract
from hami.dra import cdi
from hami.dra._pb import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from hami.dra._pb import pluginregistration_pb2 as reg_pb
from hami.dra._pb import pluginregistration_pb2_grpc as reg_grpc
from hami.dra.checkpoint import PREPARED, Checkpoint, Entry
from hami.dra.shares import ClaimError, PublishedGpu, Share, shares
from hami.dra.slices import DRIVER, MAX_CORES
from hami.kube.client import ApiError
from hami.obs.log import get_logger

log = get_logger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
DRA_SOCKET = "dra.sock"
DEFAULT_REGISTRATION_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_ROOT = "/var/run/cdi"
LOGGED_FAILURES = 1024  # distinct (claim, error) pairs remembered so a retry is not logged again


def default_plugin_dir(driver: str = DRIVER) -> str:
    return f"/var/lib/kubelet/plugins/{driver}"


def registration_socket(registration_dir: str, driver: str = DRIVER) -> str:
    return os.path.join(registration_dir, f"{driver}-reg.sock")


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


ClaimReader = Callable[[str, str], Awaitable[Mapping | None]]


class DraDriver:
    """Prepare and unprepare, independent of the gRPC version that asks."""

    def __init__(self, *, node: str, cdi_root: str, plugin_dir: str, hook_path: str,
                 read_claim: ClaimReader, published: Callable[[], Mapping[str, PublishedGpu]],
                 settings: Callable[[], DeviceSettings] = DeviceSettings, driver: str = DRIVER,
                 lib_path: Callable[[], str] = lambda: "",
                 withdrawn: Callable[[], Mapping[str, str]] = dict,
                 crash_hook: Callable[[str, str], None] | None = None):
        self.node = node
        self.driver = driver
        self.cdi_root = cdi_root
        self.plugin_dir = plugin_dir
        self.hook_path = hook_path.rstrip("/")
        self.read_claim = read_claim
        self.published = published
        self.settings = settings
        self.lib_path = lib_path
        self.withdrawn = withdrawn  # device name -> why the slice no longer has it (error text)
        self.crash_hook = crash_hook  # tests: called with (step, claim uid); may raise to simulate a kill
        os.makedirs(plugin_dir, exist_ok=True)
        os.makedirs(cdi_root, exist_ok=True)
        self.checkpoint = Checkpoint(plugin_dir, cdi_root, driver)
        self.recovered = self.checkpoint.recover()
        self.prepared_total = 0
        self.failed_total = 0
        self._logged: dict[tuple[str, str], None] = {}  # failures already logged (bounded, oldest out)

    def cache_dir(self, uid: str) -> str:
        """Host dir of the claim's HAMi-core shared-region file (HAMi's DRA driver: vgpu/claims/<uid>)."""
        return f"{self.hook_path}/vgpu/claims/{uid}"

    # ------------------------------------------------------------------ prepare

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results = await asyncio.gather(*(self._prepare_one(c) for c in claims))
        return {c.uid: r for c, r in zip(claims, results, strict=True)}

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        try:
            cdi.check_uid(ref.uid)
        except cdi.CdiError as exc:
            return self._failed(ref, str(exc))
        try:
            if self._already_prepared(ref.uid):
                return PrepareResult(_devices(self.checkpoint.claims[ref.uid].devices))
            claim = await self._read(ref)
            if self._already_prepared(ref.uid):  # a concurrent call for the same claim won the race
                return PrepareResult(_devices(self.checkpoint.claims[ref.uid].devices))
            return self._prepare_claim(ref, claim)
        except (ClaimError, cdi.CdiError) as exc:
            return self._failed(ref, str(exc))
        except OSError as exc:
            return self._failed(ref, f"writing the claim's CDI spec under {self.cdi_root}: {exc}")

    def _already_prepared(self, uid: str) -> bool:
        entry = self.checkpoint.claims.get(uid)
        return entry is not None and entry.state == PREPARED and \
            os.path.exists(os.path.join(self.cdi_root, cdi.spec_file(self.driver, uid)))

    async def _read(self, ref: ClaimRef) -> Mapping:
        try:
            claim = await self.read_claim(ref.namespace, ref.name)
        except ApiError as exc:
            raise ClaimError(f"cannot read ResourceClaim {ref.namespace}/{ref.name}: {exc}") from None
        if claim is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} not found")
        if not isinstance(claim, Mapping):
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: not an object")
        uid = (claim.get("metadata") or {}).get("uid") if isinstance(claim.get("metadata"), Mapping) else None
        if uid != ref.uid:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} has uid {uid!r}, kubelet asked for "
                             f"{ref.uid!r} (deleted and re-created?)")
        return claim

    def _prepare_claim(self, ref: ClaimRef, claim: Mapping) -> PrepareResult:
        """Everything after the read, with no await: one claim's checkpoint and spec writes are
        never interleaved with another's."""
        published = self.published()
        parts = shares(claim, driver=self.driver, pool=self.node, published=published, withdrawn=self.withdrawn())
        self._check_room(ref.uid, parts, published)
        devices = tuple(ContainerDevice(s.uuid, NVIDIA, s.memory_mib, s.cores) for s in parts)
        cache_dir = self.cache_dir(ref.uid)
        settings = self.settings()
        if parts[0].mig:  # MIG instances: only NVIDIA_VISIBLE_DEVICES, as Allocate answers in MIG mode
            settings = dataclasses.replace(settings, mode=MODE_MIG)
        envs, mounts = share_contract(devices, settings, self.hook_path, cache_file=f"{ref.uid}.cache",
                                      cache_dir=cache_dir, lib_path=self.lib_path())
        spec = cdi.build_spec(self.driver, ref.uid, [(s.device, s.uuid) for s in parts], envs, mounts)
        prepared = [{"requests": list(s.requests), "pool": self.node, "device": s.device,
                     "cdi": [cdi.device_id(self.driver, ref.uid, s.device)],
                     "uuid": s.uuid, "memory_mib": s.memory_mib, "cores": s.cores} for s in parts]
        # The spec first, the record second: a kill before the record leaves a spec the checkpoint
        # does not know (or a temporary), which `recover` removes; one checkpoint write per prepare
        # (a rename over a file on disk costs as much as an fsync on ext4).
        if mounts:
            _make_dirs(cache_dir)
        self._crash("before-cdi", ref.uid)
        cdi.write_spec(self.cdi_root, self.driver, ref.uid, spec)
        self._crash("after-cdi", ref.uid)
        self.checkpoint.put(ref.uid, Entry(PREPARED, ref.namespace, ref.name, prepared))
        self.prepared_total += 1
        log.v(2).info("Prepared claim", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid,
                      devices=",".join(f"{s.device}:{s.memory_mib}MiB/{s.cores}%" for s in parts))
        return PrepareResult(_devices(prepared))

    def _check_room(self, uid: str, parts: Sequence[Share], published: Mapping[str, PublishedGpu]) -> None:
        """Refuse a share that, with the claims already prepared here, over-commits its GPU: the
        allocator should never allow it, but claim status is API data and the GPU is real."""
        for s in parts:
            held = [(u, d) for u, e in self.checkpoint.claims.items() if u != uid
                    for d in e.devices if d.get("device") == s.device]
            mem = sum(int(d.get("memory_mib", 0)) for _, d in held)
            cores = sum(int(d.get("cores", 0)) for _, d in held)
            total = published[s.device].memory_mib
            if mem + s.memory_mib > total or cores + s.cores > MAX_CORES:
                raise ClaimError(
                    f"device {s.device} would be over-committed: {len(held)} prepared claim(s) hold "
                    f"{mem} MiB and {cores}% of its {total} MiB and {MAX_CORES}%, this claim asks "
                    f"{s.memory_mib} MiB and {s.cores}%")

    def _crash(self, step: str, uid: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(step, uid)

    def _failed(self, ref: ClaimRef, message: str) -> PrepareResult:
        """The claim's error for kubelet; logged once per claim and message (kubelet retries a
        failed prepare every few seconds: the repeats go to -v=4)."""
        self.failed_total += 1
        key = (ref.uid, message)
        if key in self._logged:
            log.v(4).info("Cannot prepare claim (again)", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid,
                          error=message[:300])
        else:
            self._logged[key] = None
            while len(self._logged) > LOGGED_FAILURES:
                del self._logged[next(iter(self._logged))]
            log.warning("Cannot prepare claim", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid,
                        source="ResourceClaim status.allocation / kubelet request", error=message[:300])
        return PrepareResult(error=message)

    # ------------------------------------------------------------------ unprepare

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """claim uid -> error ("" when unprepared, or never prepared here)."""
        out: dict[str, str] = {}
        for ref in claims:
            try:
                cdi.check_uid(ref.uid)
            except cdi.CdiError as exc:
                out[ref.uid] = str(exc)
                continue
            try:  # no await: one claim's removal is never interleaved with a prepare's writes
                cdi.remove_spec(self.cdi_root, self.driver, ref.uid)
                shutil.rmtree(self.cache_dir(ref.uid), ignore_errors=True)
                self.checkpoint.drop(ref.uid)
                out[ref.uid] = ""
                log.v(2).info("Unprepared claim", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid)
            except OSError as exc:
                out[ref.uid] = f"removing the claim's CDI spec under {self.cdi_root}: {exc}"
        return out


def _make_dirs(cache_dir: str) -> None:
    for d in (cache_dir, VGPU_LOCK_DIR):
        with contextlib.suppress(OSError):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o777)  # HAMi-core in any container user writes its region and locks here


def _devices(prepared: Sequence[Mapping]) -> tuple[PreparedDevice, ...]:
    return tuple(PreparedDevice(tuple(d["requests"]), d["pool"], d["device"], tuple(d["cdi"])) for d in prepared)


# --------------------------------------------------------------------------- gRPC


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
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.server.driver.driver, endpoint=self.server.endpoint,
                                 supported_versions=list(SUPPORTED_VERSIONS))

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

    def __init__(self, driver: DraDriver, *, plugin_dir: str, registration_dir: str = DEFAULT_REGISTRATION_DIR):
        self.driver = driver
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
