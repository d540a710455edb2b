"""scripts/bench_growth's other roles (`--roles`), the smoke run: each role's script runs in its own
process and the growth table's row is built from the SUMMARY line it prints, beside the floor that
script measured. No time is asserted: on a shared machine it proves nothing."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_roles_rows_come_from_each_scripts_summary_with_its_floor():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_growth"), "--quick", "--sizes", "", "--big",
                          "", "--roles", "monitor,dra"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [line.split(" | ") for line in run.stdout.splitlines() if line.count(" | ") == 2]
    assert rows[0][0].startswith("role, size") and rows[0][2] == "floor (same run)"
    kinds = [r[0].strip() for r in rows[1:]]
    assert kinds[0] == "monitor, 200 containers on one node, 5 scrapes", kinds
    assert [k.split(":")[0] for k in kinds[1:]] == ["DRA, 500 ResourceSlices"] * 3, kinds
    for _, figure, floor in rows[1:]:
        assert "p50" in figure and " ms" in figure and " ms" in floor, (figure, floor)
    assert "/filter p50" not in run.stdout  # the scheduler's sizes were not run
