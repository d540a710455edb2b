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
    assert "SKIPPED [1]" in out.stdout and ("not installed" in out.stdout or "not root" in out.stdout), out.stdout[-2000:]
