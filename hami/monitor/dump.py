"""`hami cache dump FILE [--json]`: print a HAMi-core shared region, the tool users write by hand.

Prints the layout version, every device (uuid, limit, sm_limit, used bytes, SM utilization) and
every live process slot (pid, hostpid, status, per-device used bytes and SM utilization), and
flags slots whose host PID HAMi-core got wrong (hostpid 0 or equal to the container PID: NVML
utilization samples will never match, so utilization reads 0). The JSON schema is in
docs/cache-dump.md. Exit status: 0 printed, 1 unreadable file, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import orjson

from hami.monitor.hostpid import needs_repair
from hami.monitor.scan import read_region_file
from hami.monitor.shm import Region, ShmError

SCHEMA_VERSION = 1
STATUS_NAMES = {0: "exited", 1: "running", 2: "suspended"}


def to_dict(region: Region, path: str = "") -> dict[str, Any]:
    """The JSON document of a region (docs/cache-dump.md)."""
    n = region.device_count
    devices = [
        {
            "index": d.index,
            "uuid": d.uuid,
            "limit_bytes": d.limit,
            "sm_limit_percent": d.sm_limit,
            "used_bytes": d.used,
            "context_bytes": d.context,
            "module_bytes": d.module,
            "buffer_bytes": d.buffer,
            "sm_util_percent": d.sm_util,
        }
        for d in region.devices()
    ]
    procs = [
        {
            "slot": p.index,
            "pid": p.pid,
            "hostpid": p.hostpid,
            "status": p.status,
            "status_name": STATUS_NAMES.get(p.status, "unknown"),
            "hostpid_suspect": needs_repair(p.pid, p.hostpid),
            "devices": [
                {
                    "index": d,
                    "used_bytes": p.used[d].total,
                    "context_bytes": p.used[d].context_size,
                    "module_bytes": p.used[d].module_size,
                    "buffer_bytes": p.used[d].data_size,
                    "monitor_used_bytes": p.monitorused[d],
                    "sm_util_percent": p.sm_util[d],
                }
                for d in range(n)
            ],
        }
        for p in region.procs
    ]
    return {
        "schema": SCHEMA_VERSION,
        "file": path,
        "layout": region.layout,
        "major": region.major,
        "minor": region.minor,
        "file_size": region.file_size,
        "device_num": region.device_num,
        "proc_num": region.proc_num,
        "priority": region.priority,
        "recent_kernel": region.recent_kernel,
        "utilization_switch": region.utilization_switch,
        "last_kernel_time": region.last_kernel_time,
        "sm_init_flag": region.sm_init_flag,
        "owner_pid": region.owner_pid,
        "devices": devices,
        "processes": procs,
    }


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render_text(doc: dict[str, Any]) -> str:
    lines = [
        f"file:       {doc['file']}",
        f"layout:     {doc['layout']} (file size {doc['file_size']} bytes)",
        f"devices:    {doc['device_num']}    proc_num: {doc['proc_num']}    priority: {doc['priority']}"
        f"    recent_kernel: {doc['recent_kernel']}    utilization_switch: {doc['utilization_switch']}",
    ]
    lk = doc["last_kernel_time"]
    if lk:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lk))
        lines.append(f"last kernel: {lk} ({stamp})")
    lines.append("")
    lines.append(f"{'IDX':<4}{'UUID':<42}{'LIMIT':>12}{'SM_LIMIT':>10}{'USED':>12}{'SM_UTIL':>9}")
    for d in doc["devices"]:
        limit = _bytes(d["limit_bytes"]) if d["limit_bytes"] else "unlimited"
        lines.append(f"{d['index']:<4}{(d['uuid'] or '(not set)'):<42}{limit:>12}{d['sm_limit_percent']:>9}%"
                     f"{_bytes(d['used_bytes']):>12}{d['sm_util_percent']:>8}%")
    lines.append("")
    lines.append(f"{'SLOT':<6}{'PID':>8}{'HOSTPID':>9}  {'STATUS':<10}{'DEV':>4}{'USED':>12}{'NVML_USED':>12}"
                 f"{'SM_UTIL':>9}")
    suspect = 0
    for p in doc["processes"]:
        mark = " *" if p["hostpid_suspect"] else ""
        suspect += bool(p["hostpid_suspect"])
        devs = p["devices"] or [None]
        for k, d in enumerate(devs):
            head = (f"{p['slot']:<6}{p['pid']:>8}{p['hostpid']:>9}  {p['status_name']:<10}" if k == 0
                    else " " * 35)
            if d is None:
                lines.append(head + mark)
            else:
                lines.append(f"{head}{d['index']:>4}{_bytes(d['used_bytes']):>12}"
                             f"{_bytes(d['monitor_used_bytes']):>12}{d['sm_util_percent']:>8}%"
                             + (mark if k == 0 else ""))
    if not doc["processes"]:
        lines.append("(no live process slots)")
    if suspect:
        lines.append("")
        lines.append(f"* {suspect} slot(s) with hostpid 0 or hostpid == pid: HAMi-core did not find the host PID, "
                     "so NVML utilization never matches and SM utilization reads 0. "
                     "The hami monitor repairs this from /proc (hostPID: true).")
    return "\n".join(lines) + "\n"


def dump(path: str, as_json: bool, out: TextIO, err: TextIO) -> int:
    try:
        region = read_region_file(path)
    except ShmError as exc:
        print(f"hami cache dump: {path}: {exc.reason}: {exc}", file=err)
        return 1
    doc = to_dict(region, path)
    if as_json:
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(render_text(doc))
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `dump`: FILE and --json (the flag table's, hami.config.flagtable, command "cache dump")."""
    from hami.cli.flags import add_command_flags

    add_command_flags(parser, "cache dump")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`hami cache dump FILE [--json]` from an argv without the `cache dump` words."""
    parser = argparse.ArgumentParser(prog="hami cache dump", description="print a HAMi-core shared region")
    configure(parser)
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code not in (None, 0) else 0
    return dump(args.file, args.json, out or sys.stdout, err or sys.stderr)
