"""Shared-region parser: layouts against the spec's compiled offsets, every version, HAMi's
counting rules (proc_num clamp, status-0 slots summed as HAMi does, device_num clamp, 40-byte UUID label), the
seqlock re-read, each error reason, a hypothesis round trip through the writer, and a fuzz test
feeding random and truncated bytes (the number of inputs run is printed)."""

from __future__ import annotations

import json
import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.monitor import shm
from hami.monitor.shm import V0, V1, V1_INTERIM, DeviceMemory, ShmError, parse, parse_bytes
from hami.monitor.shmwrite import Dev, Proc, build_region

from ._fixtures import U0, U1, VERSIONS

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "monitor")


def _spec(name: str) -> dict:
    with open(os.path.join(DATA, f"layout-{name}.json")) as fh:
        return json.load(fh)


@pytest.mark.parametrize(("layout", "spec_name"), [(V0, "v0"), (V1, "v1_1"), (V1, "v1_2"),
                                                   (V1_INTERIM, "v1_1_interim")],
                         ids=["v0", "v1.1", "v1.2", "v1.1-interim"])
def test_layout_offsets_equal_the_compiled_header(layout, spec_name):
    spec = _spec(spec_name)
    f = spec["fields"]
    region_fields = {
        "device_num": "shared_region_t.num" if "shared_region_t.num" in f else "shared_region_t.device_num",
        "uuids": "shared_region_t.uuids", "limit": "shared_region_t.limit", "sm_limit": "shared_region_t.sm_limit",
        "procs": "shared_region_t.procs", "proc_num": "shared_region_t.proc_num",
        "utilization_switch": "shared_region_t.utilization_switch",
        "recent_kernel": "shared_region_t.recent_kernel", "priority": "shared_region_t.priority",
        "sm_init_flag": "shared_region_t.sm_init_flag", "owner_pid": "shared_region_t.owner_pid",
        "sem": "shared_region_t.sem",
        "slot_used": "shrreg_proc_slot_t.used", "slot_monitorused": "shrreg_proc_slot_t.monitorused",
        "slot_util": "shrreg_proc_slot_t.device_util", "slot_status": "shrreg_proc_slot_t.status",
    }
    for attr, key in region_fields.items():
        assert getattr(layout, attr) == f[key]["offset"], attr
    if "shared_region_t.last_kernel_time" in f:
        assert layout.last_kernel_time == f["shared_region_t.last_kernel_time"]["offset"]
    else:
        assert layout.last_kernel_time is None
    if "shrreg_proc_slot_t.seqlock" in f:
        assert layout.slot_seqlock == f["shrreg_proc_slot_t.seqlock"]["offset"]
    if "shared_region_t.sem_postinit" in f:
        assert layout.sem_postinit == f["shared_region_t.sem_postinit"]["offset"]
    assert layout.size == spec["sizeof"]["shared_region_t"]
    assert layout.file_size == spec["file_size_written_by_hami_core"]
    assert layout.slot_size == spec["sizeof"]["shrreg_proc_slot_t"]
    assert layout.mem_size == spec["sizeof"]["device_memory_t"]
    assert layout.util_size == spec["sizeof"]["device_util_t"]
    assert spec["constants"]["MULTIPROCESS_SHARED_REGION_MAGIC_FLAG"] == shm.MAGIC


def test_writer_places_fields_at_the_spec_offsets_of_v1_2():
    f = _spec("v1_2")["fields"]
    buf = build_region([Dev(U0, limit=7 << 30, sm_limit=40)],
                       [Proc(pid=9, hostpid=4242, used={0: DeviceMemory(1, 2, 3, 4, 10)}, sm_util={0: 33},
                             monitorused={0: 77}, seqlock=6)],
                       "1.2", priority=0, recent_kernel=5, utilization_switch=0, last_kernel_time=1234)
    procs = f["shared_region_t.procs"]["offset"]
    assert struct.unpack_from("<iII", buf, 0) == (19920718, 1, 2)
    assert struct.unpack_from("<Q", buf, f["shared_region_t.device_num"]["offset"])[0] == 1
    assert buf[f["shared_region_t.uuids"]["offset"]:][:len(U0)] == U0.encode()
    assert struct.unpack_from("<Q", buf, f["shared_region_t.limit"]["offset"])[0] == 7 << 30
    assert struct.unpack_from("<Q", buf, f["shared_region_t.sm_limit"]["offset"])[0] == 40
    assert struct.unpack_from("<ii", buf, procs) == (9, 4242)
    assert struct.unpack_from("<5Q", buf, procs + f["shrreg_proc_slot_t.used"]["offset"]) == (1, 2, 3, 4, 10)
    assert struct.unpack_from("<Q", buf, procs + f["shrreg_proc_slot_t.monitorused"]["offset"])[0] == 77
    assert struct.unpack_from("<Q", buf, procs + f["shrreg_proc_slot_t.device_util"]["offset"] + 16)[0] == 33
    assert struct.unpack_from("<i", buf, procs + f["shrreg_proc_slot_t.status"]["offset"])[0] == 1
    assert struct.unpack_from("<Q", buf, procs + f["shrreg_proc_slot_t.seqlock"]["offset"])[0] == 6
    assert struct.unpack_from("<iiiiQ", buf, f["shared_region_t.proc_num"]["offset"]) == (1, 0, 5, 0, 1234)
    assert len(buf) == 2_008_953


@pytest.mark.parametrize("version", VERSIONS)
def test_every_layout_reads_back_what_was_written(version):
    buf = build_region(
        [Dev(U0, limit=4 << 30, sm_limit=30), Dev(U1, limit=2 << 30)],
        [Proc(pid=12, hostpid=3456, used={0: DeviceMemory(context_size=5, data_size=95, total=100)},
              sm_util={0: 7, 1: 2}),
         Proc(pid=14, used={1: 50}, sm_util={1: 3})],
        version, priority=0, recent_kernel=1, utilization_switch=0, last_kernel_time=99,
    )
    r = parse_bytes(buf)
    assert r.layout == {"0": "v0", "1.1": "v1.1", "1.2": "v1.2", "1.1-interim": "v1.1-interim"}[version]
    assert (r.device_num, r.proc_num, r.priority, r.recent_kernel, r.utilization_switch) == (2, 2, 0, 1, 0)
    assert r.last_kernel_time == (0 if version == "0" else 99)
    assert [(p.pid, p.hostpid, p.status) for p in r.procs] == [(12, 3456, 1), (14, 0, 1)]
    d0, d1 = r.devices()
    assert (d0.uuid, d0.label_uuid, d0.limit, d0.sm_limit) == (U0, U0, 4 << 30, 30)
    assert (d0.used, d0.context, d0.buffer, d0.sm_util) == (100, 5, 95, 7)
    assert (d1.used, d1.limit, d1.sm_limit, d1.sm_util) == (50, 2 << 30, 100, 5)


def test_interim_file_is_not_read_with_v1_offsets():
    # Same bytes read as v1 would give device_num = the second semaphore's value (1) and garbage UUIDs.
    buf = build_region([Dev(U0), Dev(U1)], [Proc(pid=3, used={0: 8})], "1.1-interim")
    assert len(buf) == 2_008_985
    r = parse_bytes(buf)
    assert r.layout == "v1.1-interim" and r.device_num == 2 and r.uuid(1) == U1
    assert r.devices()[0].used == 8


def test_v1_2_sized_file_with_minor_1_is_v1_1_not_interim():
    r = parse_bytes(build_region([Dev(U0)], [], "1.1"))
    assert r.layout == "v1.1"


def test_only_slots_below_proc_num_count_whatever_their_status():
    """HAMi's spec.go sums procs[:procnum] without looking at status; exited slots are listed apart."""
    procs = [Proc(pid=1, used={0: 1}), Proc(pid=2, status=0, used={0: 10}), Proc(pid=3, status=2, used={0: 100}),
             Proc(pid=4, used={0: 1000})]
    r = parse_bytes(build_region([Dev(U0)], procs, "1.2", proc_num=3))
    assert [p.pid for p in r.procs] == [1, 3]
    assert [p.pid for p in r.exited] == [2]
    assert r.devices()[0].used == 111


@pytest.mark.parametrize(("proc_num", "expected"), [(-5, 0), (0, 0), (2000, 2)], ids=["negative", "zero", "over-1024"])
def test_proc_num_is_clamped(proc_num, expected):
    r = parse_bytes(build_region([Dev(U0)], [Proc(pid=1), Proc(pid=2)], "1.2", proc_num=proc_num))
    assert len(r.procs) == expected
    assert r.proc_num == proc_num


def test_device_num_is_clamped_to_16():
    r = parse_bytes(build_region([Dev(U0)], [], "1.2", device_num=1000))
    assert r.device_count == 16 and len(r.devices()) == 16


def test_unset_uuid_and_non_utf8_uuid_have_no_label():
    buf = build_region([Dev(U0), Dev(U1)], [], "1.2")
    struct.pack_into("<B", buf, V1.uuids, 0)  # device 0 not initialised yet
    buf[V1.uuids + 96:V1.uuids + 98] = b"\xff\xfe"  # device 1 not UTF-8
    d0, d1 = parse_bytes(buf).devices()
    assert d0.label_uuid is None and d1.label_uuid is None


def test_uuid_label_is_the_first_40_bytes():
    long = "GPU-0d4c6a5e-0000-4000-8000-000000000001-MIG-extra"
    d = parse_bytes(build_region([Dev(long)], [], "1.2")).devices()[0]
    assert d.label_uuid == long[:40] and d.uuid == long


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x4e\xf7\x2f", "too_small"),
        (struct.pack("<iII", 19920718, 1, 2) + bytes(100), "too_small"),
        (struct.pack("<iII", 12345, 1, 2) + bytes(V1.size), "bad_magic"),
        (struct.pack("<iII", 19920718, 2, 0) + bytes(V1.size), "unknown_version"),
    ],
    ids=["empty", "three-bytes", "header-only", "wrong-magic", "version-2"],
)
def test_bad_files_raise_one_error_type_with_a_reason(data, reason):
    with pytest.raises(ShmError) as info:
        parse_bytes(data)
    assert info.value.reason == reason
    assert info.value.reason in shm.REASONS and str(info.value)


def test_file_shrinking_while_read_is_reported_as_shrunk():
    buf = bytes(build_region([Dev(U0)], [Proc(pid=1)], "1.2"))

    def read(off, n):  # the file was truncated to 5,000 bytes after its size was taken
        return buf[off:min(off + n, 5000)]

    with pytest.raises(ShmError) as info:
        parse(read, len(buf))
    assert info.value.reason == "shrunk"


def test_slot_with_odd_seqlock_is_re_read_until_it_settles():
    buf = bytearray(build_region([Dev(U0)], [Proc(pid=1, used={0: 111})], "1.2"))
    seq_off = V1.slot_offset(0) + V1.slot_seqlock
    struct.pack_into("<Q", buf, seq_off, 7)  # a write is in progress
    reads = {"seq": 0}

    def read(off, n):
        if off == seq_off and n == 8:
            reads["seq"] += 1
            if reads["seq"] == 3:  # the writer finishes: new value, seqlock even again
                struct.pack_into("<Q", buf, V1.slot_offset(0) + V1.slot_used + 32, 222)
                struct.pack_into("<Q", buf, seq_off, 8)
        return bytes(buf[off:off + n])

    r = parse(read, len(buf))
    assert r.devices()[0].used == 222 and r.procs[0].seqlock == 8
    assert reads["seq"] >= 4


def test_slot_whose_seqlock_never_settles_is_torn():
    buf = bytearray(build_region([Dev(U0)], [Proc(pid=1, seqlock=3)], "1.2"))
    with pytest.raises(ShmError) as info:
        parse_bytes(buf, retries=4)
    assert info.value.reason == "torn"


def test_seqlock_moving_between_the_two_reads_forces_a_re_read():
    buf = bytearray(build_region([Dev(U0)], [Proc(pid=1, used={0: 5})], "1.2"))
    seq_off = V1.slot_offset(0) + V1.slot_seqlock
    n = {"seq": 0}

    def read(off, size):
        if off == seq_off and size == 8:
            n["seq"] += 1
            if n["seq"] == 2:  # between the first pair: a whole write happened (0 -> 2)
                struct.pack_into("<Q", buf, seq_off, 2)
                struct.pack_into("<Q", buf, V1.slot_offset(0) + V1.slot_used + 32, 6)
        return bytes(buf[off:off + size])

    r = parse(read, len(buf))
    assert r.devices()[0].used == 6 and n["seq"] == 4


_dev = st.builds(Dev, uuid=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=60),
                 limit=st.integers(0, 2**64 - 1), sm_limit=st.integers(0, 100))
_u64 = st.integers(0, 2**40)
_mem = st.builds(DeviceMemory, _u64, _u64, _u64, _u64, _u64)
_proc = st.builds(
    Proc, pid=st.integers(1, 2**31 - 1), hostpid=st.integers(0, 2**31 - 1), status=st.integers(0, 2),
    used=st.dictionaries(st.integers(0, 15), _mem, max_size=4),
    sm_util=st.dictionaries(st.integers(0, 15), st.integers(0, 100), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(VERSIONS), devices=st.lists(_dev, max_size=16), procs=st.lists(_proc, max_size=6),
       priority=st.integers(-1, 3), recent_kernel=st.integers(-1, 3))
def test_round_trip_through_writer_and_parser(version, devices, procs, priority, recent_kernel):
    r = parse_bytes(build_region(devices, procs, version, priority=priority, recent_kernel=recent_kernel,
                                 last_kernel_time=5))
    live = [p for p in procs if p.status != 0]
    assert [(p.pid, p.hostpid, p.status) for p in r.procs] == [(p.pid, p.hostpid, p.status) for p in live]
    assert (r.priority, r.recent_kernel) == (priority, recent_kernel)
    for dev, want in zip(r.devices(), devices, strict=True):
        assert dev.uuid == want.uuid and dev.limit == want.limit and dev.sm_limit == want.sm_limit
        assert dev.used == sum(p.used[dev.index].total for p in procs if dev.index in p.used)
        assert dev.sm_util == sum(p.sm_util.get(dev.index, 0) for p in procs)


_FUZZ = {"inputs": 0}


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=4096), size=st.sampled_from([None, V0.size, V0.file_size, V1.size, V1.file_size,
                                                              V1_INTERIM.file_size, V1.size + 7]))
def test_fuzz_random_bytes_only_raise_shm_error(data, size):
    _FUZZ["inputs"] += 1
    if size is None:
        image = data
    else:  # random header/arrays inside a file of a known size, rest zero
        image = bytes(data[:size]) + bytes(max(0, size - len(data)))
        if len(image) >= 4 and random.random() < 0.7:
            image = struct.pack("<i", shm.MAGIC) + image[4:]
    try:
        r = parse_bytes(image)
    except ShmError as exc:
        assert exc.reason in shm.REASONS
    else:
        r.devices()


def test_fuzz_truncations_and_bit_flips_of_real_regions_only_raise_shm_error():
    rng = random.Random(20261122)
    runs = 0
    for version in VERSIONS:
        full = bytes(build_region([Dev(U0), Dev(U1)], [Proc(pid=i + 1, used={0: i}) for i in range(5)], version))
        for _ in range(150):
            cut = rng.randrange(0, len(full) + 1)
            img = bytearray(full[:cut])
            for _ in range(rng.randrange(0, 8)):
                if img:
                    img[rng.randrange(len(img))] = rng.randrange(256)
            runs += 1
            try:
                parse_bytes(img, retries=2)
            except ShmError as exc:
                assert exc.reason in shm.REASONS
    total = runs + _FUZZ["inputs"]
    print(f"\nshm fuzz: {runs} truncated/flipped regions + {_FUZZ['inputs']} random inputs = {total} inputs")
    assert runs == 600
