"""Dependency advisories, checked offline: a vendored snapshot of the advisories against
hami's runtime dependencies (constraints/advisories.json) is read against
- the declared floors (constraints/floor.txt, which CI's floor run installs exactly): no floor is a
  version with a known crash or smuggling bug (orjson 3.9.0 segfaulted on nested arrays);
- the image lock (constraints/image.lock): every runtime dependency of pyproject.toml is pinned there,
  inside pyproject's range, with hashes, and outside every advisory;
- the Dockerfile: it installs the lock with --require-hashes and hami's wheel without resolving anything.
The range check itself is proven on the snapshot's own boundaries (introduced <= v < fixed)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _v(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", text.split("+")[0])[:4]]
    return tuple(parts + [0] * (4 - len(parts)))


def _advisories() -> list[dict]:
    return json.loads((ROOT / "constraints" / "advisories.json").read_text())["advisories"]


def affected(package: str, version: str) -> list[str]:
    """Advisory ids in the snapshot that name `package` at `version`."""
    return [a["id"] for a in _advisories() if a["package"] == package.lower()
            and _v(a.get("introduced", "0")) <= _v(version) < _v(a["fixed"])]


def _floor_pins() -> dict[str, str]:
    lines = [ln.strip() for ln in (ROOT / "constraints" / "floor.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("==") for ln in lines)


def _lock() -> dict[str, tuple[str, int]]:
    """package -> (version, number of hashes) from constraints/image.lock."""
    out: dict[str, tuple[str, int]] = {}
    current = None
    for line in (ROOT / "constraints" / "image.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", line)
        if m:
            current = m.group(1).lower().replace("_", "-")
            out[current] = (m.group(2), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            out[current] = (out[current][0], out[current][1] + 1)
    return out


def _runtime_ranges() -> dict[str, tuple[str, str]]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+),<([0-9.]+)", dep)
        assert m, dep
        out[m.group(1).lower().replace("_", "-")] = (m.group(2), m.group(3))
    return out


def test_snapshot_entries_are_well_formed():
    ids = [a["id"] for a in _advisories()]
    assert len(ids) == len(set(ids))
    for a in _advisories():
        assert a["package"] == a["package"].lower() and a["summary"] and _v(a["fixed"]) > _v(a.get("introduced", "0"))


@pytest.mark.parametrize("package,version,want", [
    ("orjson", "3.9.0", {"CVE-2024-27454", "PYSEC-2026-107"}),
    ("orjson", "3.9.15", {"PYSEC-2026-107"}),
    ("orjson", "3.11.5", set()),
    ("aiohttp", "3.9.0", {"CVE-2024-23829", "CVE-2024-30251", "CVE-2024-52304", "CVE-2025-53643",
                          "aiohttp-3.13.3-batch", "PYSEC-2026-2103", "PYSEC-2026-2112", "PYSEC-2026-4369"}),
    ("aiohttp", "3.13.3", {"PYSEC-2026-2103", "PYSEC-2026-2112", "PYSEC-2026-4369"}),
    ("aiohttp", "3.14.4", set()),
    ("pyyaml", "6.0", set()),
])
def test_a_version_is_affected_from_introduced_up_to_fixed(package, version, want):
    assert set(affected(package, version)) == want


def test_no_declared_floor_has_a_known_advisory():
    bad = {p: affected(p, v) for p, v in _floor_pins().items() if affected(p, v)}
    assert not bad, f"floors with known advisories (raise them in pyproject.toml and constraints/floor.txt): {bad}"


def test_image_lock_pins_every_runtime_dependency_in_range_with_hashes():
    lock, ranges = _lock(), _runtime_ranges()
    missing = sorted(set(ranges) - set(lock))
    assert not missing, f"constraints/image.lock lacks {missing}: run scripts/lock-image"
    for pkg, (lo, hi) in ranges.items():
        version = lock[pkg][0]
        assert _v(lo) <= _v(version) < _v(hi), \
            f"{pkg}=={version} in the lock is outside >={lo},<{hi}: run scripts/lock-image"
    unhashed = [p for p, (_, n) in lock.items() if n == 0]
    assert not unhashed, f"packages without hashes in constraints/image.lock: {unhashed}"


def test_image_lock_has_no_known_advisory():
    bad = {p: affected(p, v) for p, (v, _) in _lock().items() if affected(p, v)}
    assert not bad, f"locked versions with known advisories: {bad}: run scripts/lock-image"


def test_dockerfile_installs_the_lock_with_hashes_and_resolves_nothing_else():
    text = (ROOT / "Dockerfile").read_text()
    assert "constraints/image.lock" in text
    installs = [ln.strip() for ln in text.splitlines() if re.search(r"\bpip install\b", ln) and "/opt/hami/" in ln]
    assert any("--require-hashes" in ln and "-r constraints/image.lock" in ln for ln in installs), installs
    wheel = [ln for ln in installs if ".whl" in ln]
    assert wheel and all("--no-deps" in ln for ln in wheel), installs  # the wheel itself resolves nothing
