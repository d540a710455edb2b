"""Write HAMi-core shared regions: test fixtures and the simulated kubelet's cache files.

The bytes follow the spec offsets (`hami.monitor.shm` layouts, checked against the spec's
layout-*.json by the tests) exactly as HAMi-core lays them out: little-endian, file size =
sizeof(shared_region_t) + 1, semaphores initialised like glibc `sem_init(pshared=1, value=1)`.

    write_region(path, devices=[Dev("GPU-...", limit=4 << 30, sm_limit=30)],
                 procs=[Proc(pid=12, hostpid=34567, used={0: 512 << 20}, sm_util={0: 17})],
                 version="1.2")
    with RegionUpdater(path) as up:           # in place, seqlock-bracketed like HAMi-core
        up.set_used(slot=0, device=0, total=1 << 30)
        up.set_sm_util(slot=0, device=0, value=42)

`devices` and `procs` items may be the dataclasses below or plain dicts with the same keys.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.monitor.shm import (
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    UUID_SIZE,
    V0,
    V1,
    V1_INTERIM,
    DeviceMemory,
    Layout,
    choose_layout,
)

VERSIONS: dict[str, tuple[Layout, int, int]] = {
    "0": (V0, 0, 0),
    "1.1": (V1, 1, 1),
    "1.2": (V1, 1, 2),
    "1.1-interim": (V1_INTERIM, 1, 1),
}
_ALIASES = {"v0": "0", "v1.1": "1.1", "v1.2": "1.2", "v1.1-interim": "1.1-interim", "interim": "1.1-interim"}


@dataclass(frozen=True, slots=True)
class Dev:
    uuid: str
    limit: int = 0  # bytes, 0 = unlimited
    sm_limit: int = 100  # percent


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    hostpid: int = 0
    status: int = 1
    used: Mapping[int, int | DeviceMemory] = field(default_factory=dict)  # int = data bytes
    sm_util: Mapping[int, int] = field(default_factory=dict)
    monitorused: Mapping[int, int] = field(default_factory=dict)
    seqlock: int = 0


def resolve_version(version: str) -> tuple[Layout, int, int]:
    key = _ALIASES.get(str(version), str(version))
    if key not in VERSIONS:
        raise ValueError(f"version: {version!r}, expected one of {', '.join(VERSIONS)}")
    return VERSIONS[key]


def _coerce(item: Any, cls: type) -> Any:
    if isinstance(item, cls):
        return item
    if isinstance(item, str) and cls is Dev:
        return Dev(item)
    if isinstance(item, Mapping):
        return cls(**item)
    raise TypeError(f"expected {cls.__name__} or mapping, got {type(item).__name__}")


def _memory(v: int | DeviceMemory) -> DeviceMemory:
    if isinstance(v, DeviceMemory):
        return v
    return DeviceMemory(data_size=int(v), total=int(v))


def _put(buf: bytearray, fmt: str, off: int, *values: Any) -> None:
    struct.pack_into("<" + fmt, buf, off, *values)


def _sem_init(buf: bytearray, off: int) -> None:
    # glibc x86_64 new_sem: 64-bit word whose low half is the value (1), then `private` (0).
    _put(buf, "Q", off, 1)


def put_slot(buf: bytearray, lay: Layout, i: int, proc: Proc, base: int | None = None) -> None:
    """Write slot `i` of `proc` into `buf` (an image of the whole region, or of one slot at `base`)."""
    off = lay.slot_offset(i) if base is None else base
    buf[off:off + lay.slot_size] = bytes(lay.slot_size)
    _put(buf, "ii", off, proc.pid, proc.hostpid)
    for d, v in proc.used.items():
        m = _memory(v)
        _put(buf, "5Q", off + lay.slot_used + lay.mem_size * d,
             m.context_size, m.module_size, m.data_size, m.offset, m.total)
    for d, v in proc.monitorused.items():
        _put(buf, "Q", off + lay.slot_monitorused + 8 * d, v)
    for d, v in proc.sm_util.items():
        _put(buf, "Q", off + lay.slot_util + lay.util_size * d + 16, v)
    _put(buf, "i", off + lay.slot_status, proc.status)
    if lay.slot_seqlock is not None:
        _put(buf, "Q", off + lay.slot_seqlock, proc.seqlock)


def build_region(
    devices: Iterable[Dev | Mapping | str] = (),
    procs: Iterable[Proc | Mapping] = (),
    version: str = "1.2",
    *,
    device_num: int | None = None,
    proc_num: int | None = None,
    priority: int = 1,
    recent_kernel: int = 2,
    utilization_switch: int = 1,
    last_kernel_time: int | None = None,
    sm_init_flag: int = 1,
    owner_pid: int = 0,
    magic: int = MAGIC,
    major: int | None = None,
    minor: int | None = None,
) -> bytearray:
    """The full file image (sizeof + 1 bytes) of a region holding `devices` and `procs`."""
    lay, maj, mnr = resolve_version(version)
    devs = [_coerce(d, Dev) for d in devices]
    slots = [_coerce(p, Proc) for p in procs]
    if len(devs) > MAX_DEVICES or len(slots) > MAX_PROCS:
        raise ValueError(f"at most {MAX_DEVICES} devices and {MAX_PROCS} procs")
    buf = bytearray(lay.file_size)
    _put(buf, "i", 0, magic)
    if lay.has_version:
        _put(buf, "II", 4, maj if major is None else major, mnr if minor is None else minor)
    _put(buf, "i", lay.sm_init_flag, sm_init_flag)
    _put(buf, "Q", lay.owner_pid, owner_pid)
    _sem_init(buf, lay.sem)
    if lay.sem_postinit is not None:
        _sem_init(buf, lay.sem_postinit)
    _put(buf, "Q", lay.device_num, len(devs) if device_num is None else device_num)
    for d in range(MAX_DEVICES):
        # HAMi-core fills limits for every index from the environment; 0 / 100 when unset.
        _put(buf, "Q", lay.limit + 8 * d, devs[d].limit if d < len(devs) else 0)
        _put(buf, "Q", lay.sm_limit + 8 * d, devs[d].sm_limit if d < len(devs) else 100)
    for d, dev in enumerate(devs):
        raw = dev.uuid.encode()[:UUID_SIZE - 1]
        buf[lay.uuids + UUID_SIZE * d:lay.uuids + UUID_SIZE * d + len(raw)] = raw
    for i, p in enumerate(slots):
        put_slot(buf, lay, i, p)
    _put(buf, "iiii", lay.proc_num, len(slots) if proc_num is None else proc_num,
         utilization_switch, recent_kernel, priority)
    if lay.last_kernel_time is not None:
        _put(buf, "Q", lay.last_kernel_time, int(time.time()) if last_kernel_time is None else last_kernel_time)
    return buf


def write_region(path: str | os.PathLike, devices=(), procs=(), version: str = "1.2", **kw: Any) -> None:
    """Write a region file at `path` (atomically: temp file + rename, so readers never see half)."""
    data = build_region(devices, procs, version, **kw)
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class RegionUpdater:
    """Change a region file in place, the way HAMi-core does (seqlock odd during a slot write)."""

    def __init__(self, path: str | os.PathLike, version: str | None = None):
        self.path = os.fspath(path)
        self.fd = os.open(self.path, os.O_RDWR)
        size = os.fstat(self.fd).st_size
        if version is None:
            lay, _, _ = choose_layout(size, os.pread(self.fd, 12, 0))
        else:
            lay = resolve_version(version)[0]
        self.layout = lay

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RegionUpdater:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw field access
    def _w(self, fmt: str, off: int, *values: Any) -> None:
        os.pwrite(self.fd, struct.pack("<" + fmt, *values), off)

    def _r(self, fmt: str, off: int) -> tuple:
        f = struct.Struct("<" + fmt)
        return f.unpack(os.pread(self.fd, f.size, off))

    def _bump_seqlock(self, slot: int) -> None:
        if self.layout.slot_seqlock is not None:
            off = self.layout.slot_offset(slot) + self.layout.slot_seqlock
            (v,) = self._r("Q", off)
            self._w("Q", off, v + 1)

    # -- slot fields (seqlock-bracketed)
    def set_used(self, slot: int, device: int, total: int | None = None, *, context: int | None = None,
                 module: int | None = None, data: int | None = None) -> None:
        lay = self.layout
        base = lay.slot_offset(slot) + lay.slot_used + lay.mem_size * device
        self._bump_seqlock(slot)
        cur = list(self._r("5Q", base))
        for k, v in ((0, context), (1, module), (2, data)):
            if v is not None:
                cur[k] = v
        if total is None:
            total = cur[0] + cur[1] + cur[2] + cur[3]
        cur[4] = total
        self._w("5Q", base, *cur)
        self._bump_seqlock(slot)

    def set_totals(self, slot: int, totals: Mapping[int, int]) -> None:
        """Set `used[d].total` of several devices inside one seqlock bracket (one pwrite each)."""
        lay = self.layout
        base = lay.slot_offset(slot) + lay.slot_used
        self._bump_seqlock(slot)
        for d, v in totals.items():
            self._w("Q", base + lay.mem_size * d + 32, v)
        self._bump_seqlock(slot)

    def set_sm_util(self, slot: int, device: int, value: int) -> None:
        lay = self.layout
        self._bump_seqlock(slot)
        self._w("Q", lay.slot_offset(slot) + lay.slot_util + lay.util_size * device + 16, value)
        self._bump_seqlock(slot)

    def add_proc(self, proc: Proc | Mapping) -> int:
        """Append a slot at procs[proc_num] and bump proc_num (HAMi-core's init_proc_slot); returns it."""
        p = _coerce(proc, Proc)
        lay = self.layout
        (n,) = self._r("i", lay.proc_num)
        if n >= MAX_PROCS:
            raise ValueError("region full: proc_num is 1024")
        img = bytearray(lay.slot_size)
        put_slot(img, lay, n, p, base=0)
        os.pwrite(self.fd, bytes(img), lay.slot_offset(n))
        self._w("i", lay.proc_num, n + 1)
        return n

    def exit_proc(self, slot: int) -> None:
        """What HAMi-core's exit handler does: pid=0, status=0, usage left until compaction."""
        lay = self.layout
        self._w("i", lay.slot_offset(slot), 0)
        self._w("i", lay.slot_offset(slot) + lay.slot_status, 0)

    # -- region fields
    def set_last_kernel_time(self, t: int) -> None:
        if self.layout.last_kernel_time is not None:
            self._w("Q", self.layout.last_kernel_time, t)

    def set_recent_kernel(self, v: int) -> None:
        self._w("i", self.layout.recent_kernel, v)

    def set_device(self, d: int, uuid: str | None = None, *, limit: int | None = None,
                   sm_limit: int | None = None) -> None:
        lay = self.layout
        if uuid is not None:
            raw = uuid.encode()[:UUID_SIZE - 1]
            os.pwrite(self.fd, raw + bytes(UUID_SIZE - len(raw)), lay.uuids + UUID_SIZE * d)
        if limit is not None:
            self._w("Q", lay.limit + 8 * d, limit)
        if sm_limit is not None:
            self._w("Q", lay.sm_limit + 8 * d, sm_limit)

    def set_device_num(self, n: int) -> None:
        self._w("Q", self.layout.device_num, n)

    def read_int(self, field_name: str) -> int:
        """utilization_switch / recent_kernel / priority / proc_num as stored."""
        return self._r("i", getattr(self.layout, field_name))[0]
