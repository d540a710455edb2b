"""The kubelet DRA plugin's work: NodePrepare/UnprepareResources, independent of the gRPC version
(the sockets kubelet talks to are hami.dra.server).

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
values Allocate hands a device-plugin container), then records it in the checkpoint as `prepared`.
A claim already prepared is answered from the checkpoint (idempotent); a claim that cannot be
prepared gets an error in its own entry of the response; no claim's failure fails another or the
call. Unprepare removes the spec, the claim's shared-region cache dir and the entry; an unknown
claim is already unprepared.

A MIG partition (hami.dra.slices: KEP-4815) is made real at prepare: the claim is recorded
`preparing` with the slices it wants, the MIG slicer the node agent's dynamic MIG uses too (hami.gpu.migslicer) creates
the GPU and compute instances, and the spec hands the container the instance alone; unprepare destroys
them (MIG mode goes off with the card's last instance). A restart answers from the checkpoint, and
destroys the instances of claims a kill left `preparing`. An adminAccess claim gets its GPUs'
UUIDs and nothing else: no capacity is counted, no HAMi-core library or limit is mounted.

"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from hami.device.model import MODE_MIG, NVIDIA, ContainerDevice
from hami.device.nodeconfig import DeviceSettings
from hami.device.sharecontract import VGPU_LOCK_DIR, VGPU_LOCK_DIR_MODE, share_contract
from hami.dra import cdi
from hami.dra.checkpoint import PREPARED, PREPARING, Checkpoint, Entry
from hami.dra.shares import PARTITION, WHOLE, ClaimError, PublishedGpu, Share, shares
from hami.dra.slices import DRIVER
from hami.gpu.mig import MigError, SliceKey
from hami.gpu.migslicer import MigSlicer
from hami.kube.client import ApiError
from hami.obs.log import get_logger

log = get_logger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # and HEALTH_SERVICES with a HealthBoard
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
                 crash_hook: Callable[[str, str], None] | None = None, mig: MigSlicer | None = None):
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
        self.mig = mig  # creates and destroys MIG partitions; None: the backend cannot
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
            return await self._prepare_claim(ref, claim)
        except (ClaimError, cdi.CdiError, MigError) as exc:
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

    async def _prepare_claim(self, ref: ClaimRef, claim: Mapping) -> PrepareResult:
        """Everything after the read. Until the claim is recorded (its room checked) nothing awaits,
        so two prepares never both take the same room; MIG partitions are then created under the
        `preparing` record, which holds their room while the card works."""
        published = self.published()
        parts = shares(claim, driver=self.driver, pool=self.node, published=published, withdrawn=self.withdrawn())
        self._check_room(ref.uid, parts, published)
        wanted = [SliceKey(s.uuid, s.profile, s.start, s.size) for s in parts if s.kind == PARTITION and not s.admin]
        # a partitionable GPU shared whole must not be in MIG mode (an operator may have left it on)
        whole = [s.uuid for s in parts if s.kind == WHOLE and not s.admin and published[s.device].partitionable]
        made: dict[str, str] = {}  # device -> MIG UUID of the instance made for it
        gi: dict[str, tuple[int, int]] = {}  # device -> (GPU instance, compute instance)
        if wanted or whole:
            if self.mig is None:
                raise ClaimError("this node's GPU backend cannot change MIG state")
            self.checkpoint.put(ref.uid, Entry(PREPARING, ref.namespace, ref.name, _records(self.node, ref.uid,
                                                                                          self.driver, parts, {})))
            where = f"claim {ref.namespace}/{ref.name}"
            try:
                self._crash("before-mig", ref.uid)
                for uuid in whole:
                    await self.mig.ensure_whole(uuid, where)
                instances = await self.mig.realize_slices(wanted, where) if wanted else []
                self._crash("after-mig", ref.uid)
            except MigError:
                self.checkpoint.drop(ref.uid)
                raise
            partitions = [s for s in parts if s.kind == PARTITION and not s.admin]
            made = {s.device: m.mig_uuid for s, m in zip(partitions, instances, strict=True)}
            gi = {s.device: (m.gpu_instance_id, m.compute_instance_id) for s, m in zip(partitions, instances,
                                                                                       strict=True)}
        try:
            return self._write_prepared(ref, parts, made, gi)
        except Exception:
            if wanted:  # the spec was not written: the instances are not handed out either
                await self._release(ref, self.checkpoint.claims.get(ref.uid))
            if wanted or whole:
                self.checkpoint.drop(ref.uid)
            raise

    def _write_prepared(self, ref: ClaimRef, parts: Sequence[Share], made: Mapping[str, str],
                        gi: Mapping[str, tuple[int, int]]) -> PrepareResult:
        visible = [(s.device, made.get(s.device, s.uuid)) for s in parts]
        devices = tuple(ContainerDevice(uuid, NVIDIA, s.memory_mib, s.cores) for s, (_, uuid) in zip(parts, visible,
                                                                                                    strict=True))
        cache_dir = self.cache_dir(ref.uid)
        if parts[0].admin:  # monitoring: the GPUs, no HAMi-core, no limits
            envs, mounts = {"NVIDIA_VISIBLE_DEVICES": ",".join(u for _, u in visible)}, []
        else:
            settings = self.settings()
            if parts[0].mig:  # MIG instances: only NVIDIA_VISIBLE_DEVICES, as Allocate answers in MIG mode
                settings = dataclasses.replace(settings, mode=MODE_MIG)
            envs, mounts = share_contract(devices, settings, self.hook_path, cache_file=f"{ref.uid}.cache",
                                          cache_dir=cache_dir, lib_path=self.lib_path())
        spec = cdi.build_spec(self.driver, ref.uid, visible, envs, mounts)
        prepared = _records(self.node, ref.uid, self.driver, parts, made, gi)
        # The spec first, the record second: a kill before the record leaves a spec the checkpoint
        # does not know (or a temporary), which `recover` removes; one checkpoint write per prepare
        # (a rename over a file on disk costs as much as an fsync on ext4).
        if mounts:
            make_shared_dirs(cache_dir)
        self._crash("before-cdi", ref.uid)
        cdi.write_spec(self.cdi_root, self.driver, ref.uid, spec)
        self._crash("after-cdi", ref.uid)
        self.checkpoint.put(ref.uid, Entry(PREPARED, ref.namespace, ref.name, prepared))
        self.prepared_total += 1
        log.v(2).info("Prepared claim", claim=f"{ref.namespace}/{ref.name}", uid=ref.uid,
                      devices=",".join(f"{s.device}:{'admin' if s.admin else f'{s.memory_mib}MiB/{s.cores}%'}"
                                       for s in parts))
        return PrepareResult(_devices(prepared))

    def _check_room(self, uid: str, parts: Sequence[Share], published: Mapping[str, PublishedGpu]) -> None:
        """Refuse a share that, with the claims already prepared (or being prepared) here,
        over-commits its GPU, takes a MIG device another claim holds, or cuts a GPU into MIG
        instances while it is shared whole (or the other way round): the allocator should never
        allow it, but claim status is API data and the GPU is real. adminAccess takes no room."""
        held = [d for u, e in self.checkpoint.claims.items() if u != uid for d in e.devices if not d.get("admin")]
        for s in parts:
            if s.admin:
                continue
            same = [d for d in held if d.get("device") == s.device]
            if s.mig and same:
                raise ClaimError(f"device {s.device} is a MIG device another prepared claim holds")
            if s.kind == PARTITION:
                for d in held:
                    if d.get("uuid") != s.uuid:
                        continue
                    if d.get("kind", WHOLE) == WHOLE:
                        raise ClaimError(f"device {s.device}: GPU {s.uuid} is shared whole by a prepared claim "
                                         f"({d.get('device')}); it cannot be cut into MIG instances")
                    if d.get("kind") == PARTITION and _overlap(d, s):
                        raise ClaimError(f"device {s.device}: memory slices {s.start}..{s.start + s.size - 1} "
                                         f"overlap {d.get('device')}, which a prepared claim holds")
                continue
            if s.kind == WHOLE and any(d.get("kind") == PARTITION and d.get("uuid") == s.uuid for d in held):
                raise ClaimError(f"device {s.device}: GPU {s.uuid} is cut into MIG instances for prepared claims")
            if s.mig:
                continue
            gpu = published[s.device]
            mem = sum(int(d.get("memory_mib", 0)) for d in same)
            cores = sum(int(d.get("cores", 0)) for d in same)
            count = sum(int(d.get("shares", 0)) for d in same)
            if mem + s.memory_mib > gpu.memory_mib or cores + s.cores > gpu.cores or \
                    (gpu.shares and count + s.shares > gpu.shares):
                raise ClaimError(
                    f"device {s.device} would be over-committed: {len(same)} prepared claim(s) hold "
                    f"{mem} MiB, {cores}% and {count} shares of its {gpu.memory_mib} MiB, {gpu.cores}% and "
                    f"{gpu.shares} shares, this claim asks {s.memory_mib} MiB, {s.cores}% and {s.shares}")

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
            entry = self.checkpoint.claims.get(ref.uid)
            try:  # MIG instances first: one that cannot go (processes still on it) keeps the claim prepared
                await self._release(ref, entry)
            except MigError as exc:
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

    async def _release(self, ref: ClaimRef, entry: Entry | None) -> None:
        keys = mig_keys(entry)
        if keys and self.mig is not None:
            await self.mig.release_slices(keys, f"claim {ref.namespace}/{ref.name}")

    async def recover_mig(self) -> list[str]:
        """Destroy the MIG instances of claims the checkpoint dropped at start (a kill while
        `preparing`, or a spec gone); returns the claim UIDs whose instances were released."""
        done = []
        for uid, entry in list(self.checkpoint.dropped.items()):
            try:
                await self._release(ClaimRef(entry.namespace, uid, entry.name), entry)
            except MigError as exc:
                log.warning("Cannot release a dropped claim's MIG instances yet", uid=uid, error=str(exc)[:300])
                continue
            del self.checkpoint.dropped[uid]
            done.append(uid)
        return done


def mig_keys(entry: Entry | None) -> list[SliceKey]:
    return [SliceKey(d["uuid"], d["profile"], int(d["start"]), int(d["size"])) for d in (entry.devices if entry else ())
            if d.get("kind") == PARTITION and not d.get("admin")]


def _overlap(d: Mapping, s: Share) -> bool:
    a, z = int(d.get("start", 0)), int(d.get("size", 0))
    return a < s.start + s.size and s.start < a + z


def _records(node: str, uid: str, driver: str, parts: Sequence[Share], made: Mapping[str, str],
             gi: Mapping[str, tuple[int, int]] | None = None) -> list[dict]:
    """The checkpoint's record of each device: what kubelet is answered, what room it takes, and for
    a MIG partition the instance made for it."""
    out = []
    for s in parts:
        d = {"requests": list(s.requests), "pool": node, "device": s.device,
             "cdi": [cdi.device_id(driver, uid, s.device)], "uuid": s.uuid, "memory_mib": s.memory_mib,
             "cores": s.cores, "shares": s.shares, "kind": s.kind}
        if s.admin:
            d["admin"] = True
        if s.kind == PARTITION:
            d.update({"profile": s.profile, "start": s.start, "size": s.size})
            if s.device in made:
                d["mig_uuid"] = made[s.device]
                d["gpu_instance"], d["compute_instance"] = (gi or {}).get(s.device, (0, 0))
        out.append(d)
    return out


def make_shared_dirs(cache_dir: str, lock_dir: str = VGPU_LOCK_DIR) -> None:
    """The claim's cache dir (its own: HAMi-core in any container user writes its region there) and
    the node's /tmp/vgpulock, as the node agent keeps them: the lock dir sticky, so a tenant's process
    creates its own lock files but never removes another's."""
    for d, mode in ((cache_dir, 0o777), (lock_dir, VGPU_LOCK_DIR_MODE)):
        with contextlib.suppress(OSError):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, mode)


def _devices(prepared: Sequence[Mapping]) -> tuple[PreparedDevice, ...]:
    return tuple(PreparedDevice(tuple(d["requests"]), d["pool"], d["device"], tuple(d["cdi"])) for d in prepared)
