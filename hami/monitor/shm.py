"""HAMi-core shared region ("vGPU cache file") parser: pure, read-only.

A cache file is the raw image of HAMi-core's C `shared_region_t` (spec node.md §4). Three layouts
exist in the wild and are told apart the way HAMi's monitor does (§3.1), by size first:

* ``v0``            HAMi-core 7a9c88b, no version fields, 1,197,896 bytes;
* ``v1.1``/``v1.2`` the current layout (byte-identical; 1.2 names the slot `seqlock`), 2,008,952 bytes;
* ``v1.1-interim``  HAMi-core e200da2: still says 1.1 but moved fields, 2,008,984 bytes. HAMi's monitor
  misreads it; we read it with its own offsets.

The parser never does I/O itself: it takes `read(offset, size) -> bytes` and the file size, so the
caller can hand it `os.pread` on a file descriptor (reading only the few KiB that matter out of 2 MB)
or a slice of an in-memory image. Every problem raises `ShmError`, whose `reason` is a short
stable word used as the `reason` label of `hami_monitor_cache_errors_total`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_SIZE = 96
UUID_LABEL_BYTES = 40  # HAMi labels a device with the first 40 bytes of its UUID
SEQLOCK_RETRIES = 16

# Reasons an unreadable file is skipped (label values of hami_monitor_cache_errors_total).
REASONS = (
    "empty",  # zero-length file
    "too_small",  # shorter than any known layout
    "bad_magic",  # initialized_flag is not 19920718
    "unknown_version",  # big enough for v1 but major_version != 1
    "shrunk",  # a read came back short: the file shrank while we read it
    "torn",  # a process slot kept changing under us (seqlock never settled)
    "io",  # the file could not be opened or read
    "cache_count",  # more than two cache-like entries in one container dir (HAMi's rule)
)

Read = Callable[[int, int], bytes]


class ShmError(ValueError):
    """A cache file cannot be read: `reason` is one of REASONS, the message names field and value."""

    def __init__(self, reason: str, field: str, text: str):
        self.reason, self.field, self.text = reason, field, text
        super().__init__(f"{field}: {text}")


@dataclass(frozen=True, slots=True)
class Layout:
    """Byte offsets of one version of `shared_region_t` (from layout-*.json in the spec)."""

    name: str
    size: int  # sizeof(shared_region_t); HAMi-core writes files of size + 1
    has_version: bool
    sm_init_flag: int
    owner_pid: int
    sem: int
    sem_postinit: int | None
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None
    # shrreg_proc_slot_t
    slot_size: int
    slot_used: int
    mem_size: int  # sizeof(device_memory_t)
    slot_monitorused: int
    slot_util: int
    util_size: int  # sizeof(device_util_t)
    slot_status: int
    slot_seqlock: int | None

    @property
    def file_size(self) -> int:
        return self.size + 1

    def slot_offset(self, i: int) -> int:
        return self.procs + self.slot_size * i


V0 = Layout(
    name="v0", size=1_197_896, has_version=False,
    sm_init_flag=4, owner_pid=8, sem=16, sem_postinit=None, device_num=48, uuids=56,
    limit=1592, sm_limit=1720, procs=1848, proc_num=1_197_880, utilization_switch=1_197_884,
    recent_kernel=1_197_888, priority=1_197_892, last_kernel_time=None,
    slot_size=1168, slot_used=8, mem_size=40, slot_monitorused=648, slot_util=776, util_size=24,
    slot_status=1160, slot_seqlock=None,
)
V1 = Layout(
    name="v1", size=2_008_952, has_version=True,
    sm_init_flag=12, owner_pid=16, sem=24, sem_postinit=2_008_920, device_num=56, uuids=64,
    limit=1600, sm_limit=1728, procs=1856, proc_num=2_008_896, utilization_switch=2_008_900,
    recent_kernel=2_008_904, priority=2_008_908, last_kernel_time=2_008_912,
    slot_size=1960, slot_used=8, mem_size=64, slot_monitorused=1032, slot_util=1160, util_size=48,
    slot_status=1928, slot_seqlock=1936,
)
V1_INTERIM = Layout(
    name="v1.1-interim", size=2_008_984, has_version=True,
    sm_init_flag=12, owner_pid=16, sem=24, sem_postinit=56, device_num=88, uuids=96,
    limit=1632, sm_limit=1760, procs=1888, proc_num=2_008_928, utilization_switch=2_008_932,
    recent_kernel=2_008_936, priority=2_008_940, last_kernel_time=2_008_944,
    slot_size=1960, slot_used=16, mem_size=64, slot_monitorused=1040, slot_util=1168, util_size=48,
    slot_status=1936, slot_seqlock=8,
)
LAYOUTS = {"v0": V0, "v1": V1, "v1.1-interim": V1_INTERIM}

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U64x16 = struct.Struct("<16Q")
_TAIL = struct.Struct("<iiii")  # proc_num, utilization_switch, recent_kernel, priority
_HEAD_V1 = struct.Struct("<iIIi")  # magic, major, minor, sm_init_flag


def _slot_struct(lay: Layout) -> tuple[struct.Struct, int]:
    """One Struct that unpacks a slot from `pid` through `status`; returns it and the byte span."""
    pad_mem = f"{lay.mem_size - 40}x" if lay.mem_size > 40 else ""
    pad_util = f"{lay.util_size - 24}x" if lay.util_size > 24 else ""
    fmt = ["<ii"]
    if lay.slot_used > 8:
        fmt.append(f"{lay.slot_used - 8}x")
    fmt.append(("5Q" + pad_mem) * MAX_DEVICES)
    fmt.append("16Q")
    fmt.append(("3Q" + pad_util) * MAX_DEVICES)
    fmt.append("i")
    s = struct.Struct("".join(fmt))
    assert s.size == lay.slot_status + 4, (lay.name, s.size)
    return s, s.size


_SLOT_STRUCTS = {lay.name: _slot_struct(lay) for lay in LAYOUTS.values()}


class DeviceMemory(NamedTuple):
    """`device_memory_t` (a NamedTuple: a region holds 16 per slot, built on every scrape)."""

    context_size: int = 0
    module_size: int = 0
    data_size: int = 0
    offset: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True)
class ProcSlot:
    """One process slot below proc_num (status 0 = exited, see Region.exited)."""

    index: int  # position in procs[]
    pid: int  # container-namespace PID
    hostpid: int  # what HAMi-core found as host PID (0 = unknown)
    status: int  # 1 running, 2 suspended
    used: tuple[DeviceMemory, ...]  # per device, 16 entries
    monitorused: tuple[int, ...]  # NVML's view of this process' memory, 16 entries
    sm_util: tuple[int, ...]  # device_util[d].sm_util, 16 entries
    seqlock: int = 0


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a region, summed over live slots (HAMi's per-container numbers, §4.6)."""

    index: int  # d, the vdevice_index label
    uuid: str  # full UUID as written, "" if not yet initialised
    label_uuid: str | None  # first 40 bytes, None when empty or not UTF-8 (HAMi skips those)
    limit: int  # bytes, 0 = unlimited
    sm_limit: int  # percent, 100 = unlimited
    used: int  # Σ used[d].total
    context: int
    module: int
    buffer: int  # Σ data_size
    offset: int
    sm_util: int  # Σ device_util[d].sm_util


@dataclass(frozen=True, slots=True)
class Region:
    layout: str  # "v0", "v1.1", "v1.2", "v1.1-interim", "v1.<minor>"
    major: int
    minor: int
    file_size: int
    sm_init_flag: int
    owner_pid: int
    device_num: int  # as written (not clamped)
    uuids: tuple[bytes, ...]  # 16 raw 96-byte fields
    limit: tuple[int, ...]
    sm_limit: tuple[int, ...]
    proc_num: int  # as written
    procs: tuple[ProcSlot, ...]  # live slots only
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int  # unix seconds; 0 when the layout has none
    # Slots below proc_num with status 0 (exited, usage not yet compacted away). HAMi's monitor
    # (pkg/monitor/nvidia/v{0,1}/spec.go, and its spec_test.go) sums every slot below procnum
    # whatever its status, so the per-device numbers include these too.
    exited: tuple[ProcSlot, ...] = ()

    @property
    def device_count(self) -> int:
        return max(0, min(self.device_num, MAX_DEVICES))

    def uuid(self, d: int) -> str:
        return uuid_text(self.uuids[d])

    def valid_uuids(self) -> list[str]:
        """UUIDs of all 16 entries that are set (the feedback loop's view, like HAMi's)."""
        return [uuid_text(u) for u in self.uuids if u[:1] != b"\0"]

    def devices(self, sm_util: dict[int, int] | None = None) -> list[Device]:
        """Per-device numbers for d < min(device_num, 16), summed over every slot below proc_num.

        `sm_util` overrides the summed SM utilization per device (host-PID repair supplies it).
        """
        out = []
        for d in range(self.device_count):
            raw = self.uuids[d]
            ctx = mod = buf = off = tot = util = 0
            for p in self.procs + self.exited:
                m = p.used[d]
                ctx += m.context_size
                mod += m.module_size
                buf += m.data_size
                off += m.offset
                tot += m.total
                util += p.sm_util[d]
            if sm_util is not None and d in sm_util:
                util = sm_util[d]
            out.append(Device(
                index=d, uuid=uuid_text(raw), label_uuid=uuid_label(raw), limit=self.limit[d],
                sm_limit=self.sm_limit[d], used=tot, context=ctx, module=mod, buffer=buf,
                offset=off, sm_util=util,
            ))
        return out


def uuid_text(raw: bytes) -> str:
    """The NUL-terminated UUID as text (undecodable bytes replaced), "" when unset."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def uuid_label(raw: bytes) -> str | None:
    """HAMi's `device_uuid` label: the first 40 bytes; None when unset or not valid UTF-8."""
    if not raw or raw[0] == 0:
        return None
    head = raw[:UUID_LABEL_BYTES].split(b"\0", 1)[0]
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError:
        return None


def choose_layout(size: int, head: bytes) -> tuple[Layout, int, int]:
    """Pick the layout from the file size and its first 12 bytes; returns (layout, major, minor)."""
    if size == 0:
        raise ShmError("empty", "file size", "0 bytes")
    if size < 12 or len(head) < 12:
        raise ShmError("too_small", "file size", f"{size} bytes, need at least 12")
    magic, major, minor = struct.unpack_from("<iII", head, 0)
    if magic != MAGIC:
        raise ShmError("bad_magic", "initialized_flag", f"{magic}, expected {MAGIC}")
    if size < V0.size:
        raise ShmError("too_small", "file size", f"{size} bytes, smallest known layout (v0) is {V0.size}")
    if size < V1.size:
        return V0, 0, 0
    if major != 1:
        raise ShmError("unknown_version", "version", f"{major}.{minor} in a {size}-byte file")
    if minor == 1 and size >= V1_INTERIM.size:
        return V1_INTERIM, major, minor
    return V1, major, minor


def _read(read: Read, off: int, n: int, field: str) -> bytes:
    data = read(off, n)
    if len(data) != n:
        raise ShmError("shrunk", field, f"read {len(data)} of {n} bytes at offset {off}")
    return data


def _layout_name(lay: Layout, major: int, minor: int) -> str:
    if lay is V0:
        return "v0"
    if lay is V1_INTERIM:
        return "v1.1-interim"
    return f"v{major}.{minor}"


def _parse_slot(lay: Layout, i: int, block: bytes, base: int, seq: int) -> ProcSlot:
    st, _ = _SLOT_STRUCTS[lay.name]
    v = st.unpack_from(block, base)
    status = v[-1]
    make = DeviceMemory._make
    used = tuple([make(v[k:k + 5]) for k in range(2, 82, 5)])
    util = v[98:146]
    return ProcSlot(
        index=i, pid=v[0], hostpid=v[1], status=status, used=used,
        monitorused=tuple(v[82:98]), sm_util=tuple(util[2::3]), seqlock=seq,
    )


def _read_slots(read: Read, lay: Layout, n: int, retries: int) -> tuple[ProcSlot, ...]:
    _, span = _SLOT_STRUCTS[lay.name]
    if n == 0:
        return ()
    seq_off = lay.slot_seqlock
    if seq_off is None:
        # No seqlock in this layout: one read of every slot in use.
        block = _read(read, lay.procs, lay.slot_size * (n - 1) + span, "procs")
        slots = (_parse_slot(lay, i, block, lay.slot_size * i, 0) for i in range(n))
        return tuple(slots)
    out = []
    for i in range(n):
        off = lay.slot_offset(i)
        for _attempt in range(retries):
            (s1,) = _U64.unpack(_read(read, off + seq_off, 8, f"procs[{i}].seqlock"))
            block = _read(read, off, span, f"procs[{i}]")
            (s2,) = _U64.unpack(_read(read, off + seq_off, 8, f"procs[{i}].seqlock"))
            if s1 == s2 and not s1 & 1:
                break
        else:
            raise ShmError("torn", f"procs[{i}].seqlock", f"still changing after {retries} reads ({s1} -> {s2})")
        out.append(_parse_slot(lay, i, block, 0, s1))
    return tuple(out)


def parse(read: Read, size: int, *, retries: int = SEQLOCK_RETRIES) -> Region:
    """Parse a region through `read(offset, n)`; `size` is the file size (it picks the layout)."""
    head = read(0, 12) if size >= 12 else b""
    lay, major, minor = choose_layout(size, head)
    hdr = _read(read, 0, lay.uuids, "header")
    if lay.has_version:
        _, major, minor, sm_init = _HEAD_V1.unpack_from(hdr, 0)
    else:
        (sm_init,) = _I32.unpack_from(hdr, lay.sm_init_flag)
    (owner,) = _U64.unpack_from(hdr, lay.owner_pid)
    (device_num,) = _U64.unpack_from(hdr, lay.device_num)
    arrays = _read(read, lay.uuids, lay.procs - lay.uuids, "uuids/limit/sm_limit")
    uuids = tuple(arrays[k * UUID_SIZE:(k + 1) * UUID_SIZE] for k in range(MAX_DEVICES))
    limit = _U64x16.unpack_from(arrays, lay.limit - lay.uuids)
    sm_limit = _U64x16.unpack_from(arrays, lay.sm_limit - lay.uuids)
    tail_len = (lay.last_kernel_time + 8 if lay.last_kernel_time else lay.priority + 4) - lay.proc_num
    tail = _read(read, lay.proc_num, tail_len, "proc_num")
    proc_num, util_switch, recent_kernel, priority = _TAIL.unpack_from(tail, 0)
    last_kernel = _U64.unpack_from(tail, lay.last_kernel_time - lay.proc_num)[0] if lay.last_kernel_time else 0
    n = max(0, min(proc_num, MAX_PROCS))
    slots = _read_slots(read, lay, n, retries)
    procs = tuple(s for s in slots if s.status != 0)
    exited = tuple(s for s in slots if s.status == 0)
    return Region(
        layout=_layout_name(lay, major, minor), major=major, minor=minor, file_size=size,
        sm_init_flag=sm_init, owner_pid=owner, device_num=device_num, uuids=uuids,
        limit=tuple(limit), sm_limit=tuple(sm_limit), proc_num=proc_num, procs=procs,
        utilization_switch=util_switch, recent_kernel=recent_kernel, priority=priority,
        last_kernel_time=last_kernel, exited=exited,
    )


def parse_bytes(data: bytes | bytearray | memoryview, *, retries: int = SEQLOCK_RETRIES) -> Region:
    """Parse a whole in-memory image (tests, `hami cache dump`)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data

    def read(off: int, n: int) -> bytes:
        return bytes(view[off:off + n])

    return parse(read, len(view), retries=retries)


def layout_of(region: Region) -> Layout:
    """The offsets a parsed region was read with (the feedback loop writes through them)."""
    if region.layout == "v0":
        return V0
    if region.layout == "v1.1-interim":
        return V1_INTERIM
    return V1
