"""scripts/bench_scheduler --quick, the CI smoke run of the scheduler benchmark.

Covers: the quick size completes (embedded API server child, scheduler, the separate HTTP client)
and its own checks of every answer pass (NodeNames answers against select_node and the held
decisions, complete FailedNodes, full-Nodes answers naming a node of the body), and it prints the
one table with every row next to its floor; with --relist the API server's compaction makes the
pods informer re-list after 410 Gone under /filter load, and the JSON SUMMARY scripts/bench_growth
reads carries every figure. No time is asserted: on a shared machine it proves nothing.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_quick_bench_completes_with_right_answers(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scheduler"), "--quick",
                          "--profile", str(tmp_path), "--profile-seconds", "1", "--relist"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "answers checked: 100 over HTTP, 100 against select_node, 10 with complete FailedNodes" in out
    for row in ("/filter NodeNames p99 (HTTP round trip)", "/filter NodeNames handler CPU p50",
                "full-Nodes handler CPU, same nodes", "nodes changed per request", "filter+bind throughput"):
        line = next(x for x in out.splitlines() if row in x)
        assert " ms " in line or "pods/s" in line, line
    summary = json.loads(next(x for x in out.splitlines() if x.startswith("SUMMARY "))[len("SUMMARY "):])
    assert summary["relist_filters"] > 0 and summary["relist_s"] > 0  # a re-list happened under load
    assert summary["rss_mib"] > 0 and summary["rss_floor_mib"] > summary["raw_mib"] > 0
    assert "re-list after 410 Gone under /filter load (1 re-list)" in out
    assert (tmp_path / "nodenames.pb.gz").stat().st_size > 0 and (tmp_path / "fullnodes.pb.gz").stat().st_size > 0
