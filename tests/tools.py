"""Third-party binaries the tests drive for real: kubectl and promtool.

Looked up on PATH, then where the machine image or `scripts/install-*` put them (.ci/tools).
A missing tool FAILS the calling test; these tests never skip.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GCLOUD_BIN = "/usr/lib/google-cloud-sdk/bin"


def kubectl_candidates() -> list[str]:
    """Every distinct kubectl found: $HAMI_TEST_KUBECTL, PATH, gcloud's versioned ones, .ci/tools."""
    found = [os.environ["HAMI_TEST_KUBECTL"]] if os.environ.get("HAMI_TEST_KUBECTL") else []
    on_path = shutil.which("kubectl")
    if on_path:
        found.append(on_path)
    found += sorted(glob.glob(os.path.join(GCLOUD_BIN, "kubectl*")))
    for local in (ROOT / ".ci" / "tools" / "kubectl", ROOT / ".ci" / "tools" / "bin" / "kubectl"):
        if local.exists():
            found.append(str(local))
    out, seen = [], set()
    for path in found:
        real = os.path.realpath(path)
        if os.access(path, os.X_OK) and real not in seen:
            seen.add(real)
            out.append(path)
    return out


def find_kubectl() -> str:
    found = kubectl_candidates()
    if not found:
        pytest.fail("no kubectl found on PATH, in /usr/lib/google-cloud-sdk/bin or .ci/tools; "
                    "run scripts/install-kubectl")
    return found[0]


def promtool() -> str:
    """promtool from PATH or .ci/tools (scripts/install-promtool)."""
    for cand in (shutil.which("promtool"), ROOT / ".ci" / "tools" / "bin" / "promtool",
                 ROOT / ".ci" / "tools" / "promtool"):
        if cand and os.access(str(cand), os.X_OK):
            return str(cand)
    pytest.fail("promtool not found on PATH or in .ci/tools: run scripts/install-promtool (Debian package prometheus)")


def chromium() -> str:
    """Debian's chromium (scripts/install-chromium puts it on PATH); the caller FAILS without it."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    import subprocess

    proc = subprocess.run([str(ROOT / "scripts" / "install-chromium")], capture_output=True, text=True)
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"chromium not found and scripts/install-chromium failed (rc {proc.returncode}): {proc.stderr[-2000:]}")


def stop_process(proc, timeout: float = 30.0) -> None:
    """SIGTERM a process started with start_new_session=True, then SIGKILL its group if it lingers."""
    import signal
    import subprocess

    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
