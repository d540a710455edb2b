"""Figures the reliability tests measure (fuzz input counts, convergence times), for the report.

`record(scenario, **figures)` prints one line and merges the figures into a JSON file:
`$HAMI_RELIABILITY_FIGURES`, else `build/reliability/figures.json` under the repository root.
`scripts/soak --report` reads that file to fill docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def figures_path() -> str:
    return os.environ.get("HAMI_RELIABILITY_FIGURES") or os.path.join(ROOT, "build", "reliability", "figures.json")


def record(scenario: str, **figures) -> None:
    print(f"[reliability] {scenario}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    path = figures_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data: dict = {}
        with contextlib.suppress(OSError, ValueError):
            with open(path) as fh:
                data = json.load(fh)
        entry = data.setdefault(scenario, {})
        entry.update(figures)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
