"""The image build test under CI: it fails, never skips, when the image cannot be built (CI=true), and
skips naming what is missing elsewhere. Runs that test file in a child pytest whose PATH holds no buildah."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.deploy.chart import ROOT


def _run_image_test(ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = os.path.dirname(sys.executable)  # the venv's tools only: no buildah, no mmdebstrap
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-n0", "-p", "no:randomly", "-rs", "-q",
                           "tests/deploy/test_image_build.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_build_tool_fails_the_image_test(ci):
    out = _run_image_test(ci)
    assert out.returncode == 1, out.stdout[-2000:]
    assert "CI=true and the image cannot be built here" in out.stdout, out.stdout[-2000:]
    assert "not installed" in out.stdout or "not root" in out.stdout


def test_outside_ci_a_missing_build_tool_skips_naming_it():
    out = _run_image_test(None)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "SKIPPED [1]" in out.stdout, out.stdout[-2000:]
    assert "not installed" in out.stdout or "not root" in out.stdout, out.stdout[-2000:]


def test_image_smoke_runs_from_a_fresh_shell_outside_the_venv(tmp_path):
    """README: `scripts/image-smoke IMAGE` right after the build, from any shell. Outside .venv it finds
    (or makes) the venv and runs again there: with no buildah on PATH it stops naming buildah, never with
    a traceback from a missing module."""
    import shutil

    bin_dir = tmp_path / "bin"  # a PATH with a shell and the system python, no venv, no buildah
    bin_dir.mkdir()
    for tool in ("sh", "python3", "cat", "du", "cut", "basename", "dirname"):
        found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin")
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": str(bin_dir)}
    out = subprocess.run([str(ROOT / "scripts" / "image-smoke"), "localhost/hami:0.1.0"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "image-smoke: buildah is not installed" in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
