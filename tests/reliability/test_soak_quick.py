"""`scripts/soak --quick` (the CI smoke size of the load and memory soak): it completes, the
scheduler counts every bound pod, /filter over every node answers with one of them, the idle
window makes no API request but the API liveness probe (no RBAC review on a timer, no pod GET), and
the one table names each figure with its goal and floor. No time or byte figure is asserted: those
depend on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_soak_completes_with_correct_answers(tmp_path):
    out = tmp_path / "soak.json"
    env = {**os.environ, "HAMI_SOAK_OUT": str(out)}
    run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "soak"), "--quick"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    load = json.loads(out.read_text())["load"]
    assert load["pods_counted"] == load["pods"] == 100
    assert load["filter_answer"] in {f"node-{i:05d}" for i in range(load["nodes"])}
    # Idle, the scheduler writes and reads nothing; only the liveness probe may fall in the window
    # (GET /version after 10 s without a watch line or answer).
    assert set(load["idle_api_requests_by_resource"]) <= {"get version"}
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in rows[0].split("|")[1:5]] == ["figure", "measured", "goal", "floor"]
    names = [r.split("|")[1].strip() for r in rows[2:]]
    assert names[0] == "scheduler RSS after sync" and names[1].startswith("idle allocation per 120 s")
    measured, goal = (c.strip() for c in rows[2].split("|")[2:4])
    ratio = load["rss_mib_synced"] / (load["rss_mib_before"] + load["raw_json_mib"])
    shown = measured.rpartition("= ")[2]
    assert shown.endswith("x the floor") and abs(float(shown.split("x")[0]) - ratio) < 0.006, measured
    assert goal.startswith("<= 1.5x the floor")
