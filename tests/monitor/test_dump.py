"""`hami cache dump FILE [--json]`: text and JSON output (schema of docs/cache-dump.md) for each
layout, the host-PID warning of seed 003, exit codes for bad files and usage, and the CLI wiring."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from hami.monitor import dump
from hami.monitor.shm import DeviceMemory
from hami.monitor.shmwrite import Dev, Proc, write_region

from ._fixtures import U0, U1, VERSIONS


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    rc = dump.main(argv, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("version", VERSIONS)
def test_json_dump_lists_devices_and_live_processes(tmp_path, version):
    path = str(tmp_path / "r.cache")
    write_region(path, [Dev(U0, limit=4 << 30, sm_limit=30), Dev(U1)],
                 [Proc(pid=1082, hostpid=1082, used={0: DeviceMemory(context_size=1, data_size=9, total=10)},
                       monitorused={0: 11}),
                  Proc(pid=7, status=0, used={0: 99}),
                  Proc(pid=1090, hostpid=36110, used={1: 5}, sm_util={1: 40})],
                 version, last_kernel_time=1_700_000_000, priority=0)
    rc, out, _ = run([path, "--json"])
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema"] == 1 and doc["file"] == path
    assert doc["layout"] == {"0": "v0", "1.1": "v1.1", "1.2": "v1.2", "1.1-interim": "v1.1-interim"}[version]
    assert (doc["device_num"], doc["proc_num"], doc["priority"]) == (2, 3, 0)
    assert doc["last_kernel_time"] == (0 if version == "0" else 1_700_000_000)
    assert doc["devices"][0] == {"index": 0, "uuid": U0, "limit_bytes": 4 << 30, "sm_limit_percent": 30,
                                 "used_bytes": 109, "context_bytes": 1, "module_bytes": 0, "buffer_bytes": 108,
                                 "sm_util_percent": 0}  # the exited slot still counts, as in HAMi
    assert doc["devices"][1]["sm_util_percent"] == 40
    assert [(p["slot"], p["pid"], p["hostpid"], p["hostpid_suspect"]) for p in doc["processes"]] == [
        (0, 1082, 1082, True), (2, 1090, 36110, False)]
    p0 = doc["processes"][0]["devices"][0]
    assert (p0["used_bytes"], p0["monitor_used_bytes"], p0["status"] if "status" in p0 else 1) == (10, 11, 1)
    assert doc["processes"][1]["status_name"] == "running"


def test_text_dump_shows_layout_devices_and_flags_the_hostpid_bug(tmp_path):
    path = str(tmp_path / "r.cache")
    write_region(path, [Dev(U0, limit=1 << 30)], [Proc(pid=1082, hostpid=1082, used={0: 3 << 20})], "1.2")
    rc, out, _ = run([path])
    assert rc == 0
    assert "layout:     v1.2" in out and U0 in out and "1.0 GiB" in out and "3.0 MiB" in out
    assert "1 slot(s) with hostpid 0 or hostpid == pid" in out


def test_unreadable_file_exits_1_with_the_reason(tmp_path):
    path = tmp_path / "r.cache"
    path.write_bytes(b"\x00" * 100)
    rc, out, err = run([str(path)])
    assert rc == 1 and out == "" and "bad_magic" in err
    rc, _, err = run([str(tmp_path / "missing.cache")])
    assert rc == 1 and "io" in err


def test_usage_error_exits_2():
    rc, _, _ = run([])
    assert rc == 2


def test_hami_cache_dump_command_line(tmp_path):
    path = str(tmp_path / "r.cache")
    write_region(path, [Dev(U0)], [Proc(pid=3, used={0: 1})], "0")
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "cache", "dump", path, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["layout"] == "v0"
