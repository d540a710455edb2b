"""Region writer: file sizes per version, atomic write, and the in-place updater (seqlock bracket,
slot append and exit like HAMi-core, region fields), read back through the parser from disk."""

from __future__ import annotations

import os

import pytest

from hami.monitor.scan import read_region_file
from hami.monitor.shmwrite import Dev, Proc, RegionUpdater, build_region, resolve_version, write_region

from ._fixtures import U0, U1


@pytest.mark.parametrize(("version", "size"), [("0", 1_197_897), ("1.1", 2_008_953), ("1.2", 2_008_953),
                                               ("1.1-interim", 2_008_985), ("v1.2", 2_008_953)])
def test_file_size_is_sizeof_plus_one(tmp_path, version, size):
    path = tmp_path / "r.cache"
    write_region(path, [Dev(U0)], [], version)
    assert os.path.getsize(path) == size
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_unknown_version_is_refused():
    with pytest.raises(ValueError, match="version"):
        resolve_version("3.0")


def test_dicts_and_strings_are_accepted_for_devices_and_procs():
    buf = build_region([U0, {"uuid": U1, "limit": 5}], [{"pid": 3, "used": {1: 9}}], "1.2")
    from hami.monitor.shm import parse_bytes

    r = parse_bytes(buf)
    assert r.uuid(0) == U0 and r.limit[1] == 5 and r.devices()[1].used == 9


def test_updater_changes_usage_in_place_and_leaves_seqlock_even(tmp_path):
    path = tmp_path / "r.cache"
    write_region(path, [Dev(U0), Dev(U1)], [Proc(pid=7, used={0: 10})], "1.2")
    ino = os.stat(path).st_ino
    with RegionUpdater(path) as up:
        up.set_used(0, 0, context=3, data=40)
        up.set_used(0, 1, total=1 << 20)
        up.set_sm_util(0, 1, 55)
        up.set_last_kernel_time(1700000000)
        up.set_recent_kernel(-1)
    r = read_region_file(str(path))
    assert os.stat(path).st_ino == ino
    p = r.procs[0]
    assert (p.used[0].context_size, p.used[0].data_size, p.used[0].total) == (3, 40, 43)
    assert p.used[1].total == 1 << 20 and p.sm_util[1] == 55
    assert p.seqlock == 6  # three bracketed writes, each +2
    assert r.last_kernel_time == 1700000000 and r.recent_kernel == -1


def test_updater_appends_and_exits_slots_like_hami_core(tmp_path):
    path = tmp_path / "r.cache"
    write_region(path, [Dev(U0)], [Proc(pid=7, used={0: 10})], "0")
    with RegionUpdater(path) as up:
        assert up.layout.name == "v0"
        slot = up.add_proc(Proc(pid=8, hostpid=9000, used={0: 5}))
        assert slot == 1
        up.exit_proc(0)
        assert up.read_int("proc_num") == 2
    r = read_region_file(str(path))
    assert [(p.pid, p.hostpid) for p in r.procs] == [(8, 9000)]
    assert [p.pid for p in r.exited] == [0]
    assert r.devices()[0].used == 15  # HAMi sums every slot below proc_num until HAMi-core compacts


def test_updater_sets_device_identity_and_limits(tmp_path):
    path = tmp_path / "r.cache"
    write_region(path, [], [], "1.1-interim")
    with RegionUpdater(path) as up:
        up.set_device(0, U1, limit=3 << 30, sm_limit=25)
        up.set_device_num(1)
    r = read_region_file(str(path))
    d = r.devices()[0]
    assert (r.layout, d.uuid, d.limit, d.sm_limit) == ("v1.1-interim", U1, 3 << 30, 25)


_WRITER = """
import sys
from hami.monitor.shmwrite import RegionUpdater
path, n = sys.argv[1], int(sys.argv[2])
with RegionUpdater(path) as up:
    for k in range(1, n + 1):
        up.set_totals(0, {d: k for d in range(8)})  # 8 separate writes inside one seqlock bracket
print("done", flush=True)
"""


def test_reader_never_sees_a_half_written_slot_from_a_concurrent_writer(tmp_path):
    import subprocess
    import sys

    from hami.monitor.shm import ShmError

    path = tmp_path / "r.cache"
    write_region(path, [Dev(U0)] * 8, [Proc(pid=1, used={d: 0 for d in range(8)})], "1.2")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "20000"], stdout=subprocess.PIPE)
    reads = torn = 0
    try:
        while writer.poll() is None:
            try:
                r = read_region_file(str(path))
            except ShmError as exc:
                assert exc.reason == "torn"  # gave up after the retries: never wrong numbers
                torn += 1
                continue
            totals = {p.used[d].total for p in r.procs for d in range(8)}
            assert len(totals) == 1, totals  # all 8 devices from the same write
            assert r.procs[0].seqlock % 2 == 0
            reads += 1
    finally:
        writer.wait(60)
    assert writer.returncode == 0
    final = read_region_file(str(path))
    assert {final.procs[0].used[d].total for d in range(8)} == {20000} and final.procs[0].seqlock == 40000
    print(f"\nconcurrent seqlock reads: {reads} consistent, {torn} gave up as torn")
