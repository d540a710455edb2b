"""The image, built and run for real (buildah, no daemon): scripts/build-image --local, scripts/image-smoke.

Covers: `scripts/build-image --local` builds every stage the Dockerfile needs here (a Debian bookworm
base made by mmdebstrap, the wheel stage, the stand-in HAMi-core stage, the runtime stage) and prints
the image name on its last line; `scripts/image-smoke` passes on it: `hami --version`, user 65532,
`--check-config` for every role with the args, env, user and mounts the chart renders, libvgpu.so and
VERSION where the node agent looks (VERSION saying stand-in), no compiler/pip/dev extras, and the
embedded system with the demo workload reaching Running pods inside the image; the image's size and
layer sizes are printed and stay under a ceiling; the smoke fails on an image that runs as root.

Runs where buildah and mmdebstrap are installed and the user is root (CI's .ci/run installs them).
Elsewhere it skips naming what is missing, except under CI=true (.ci/run sets it): there a missing
tool fails the test, so CI never stays green without building the image. The base tarball is cached in
HAMI_IMAGE_CACHE (default ~/.cache/hami-image) and the layers in buildah's storage, so a rerun takes seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from hami import __version__
from tests.deploy.chart import ROOT

SMOKE = ROOT / "scripts" / "image-smoke"
CEILING_MIB = 300  # the Debian base (~125 MiB) + the venv (~115 MiB), with room; a compiler or a pip cache breaks it


def _missing() -> str:
    if os.geteuid() != 0:
        return "not root (buildah --isolation chroot builds as root)"
    absent = [t for t in ("buildah", "mmdebstrap") if shutil.which(t) is None]
    return f"{' and '.join(absent)} not installed (apt-get install -y buildah mmdebstrap)" if absent else ""


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab, .ci/run): the image must be built, a skip would hide it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(autouse=True)
def _image_tools():
    missing = _missing()
    if missing and in_ci():
        pytest.fail(f"CI=true and the image cannot be built here: {missing}", pytrace=False)
    if missing:
        pytest.skip(missing)


def _build() -> str:
    out = subprocess.run([str(ROOT / "scripts" / "build-image"), "--local"], capture_output=True, text=True,
                         timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    name = out.stdout.strip().splitlines()[-1]
    assert name == f"localhost/hami:{__version__}"
    return name


def _smoke(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SMOKE), name], capture_output=True, text=True, timeout=400, cwd=ROOT)


def test_the_built_image_passes_the_smoke_stays_small_and_the_smoke_can_fail(record_property):
    """One test, so pytest-xdist never runs two builds of the same image at once."""
    image = _build()
    out = _smoke(image)
    print(out.stdout)
    assert out.returncode == 0 and "0 FAIL" in out.stdout, out.stdout[-6000:] + out.stderr[-2000:]
    for check in ("hami --version", "image user is 65532", "Deployment/hami-scheduler --check-config (default values)",
                  "DaemonSet/device-plugin --check-config (default values)",
                  "DaemonSet/vgpu-monitor --check-config (default values)", "every role checked (default values)",
                  "every role checked (prod-values.yaml)", "no compiler, pip, pip cache or dev extras",
                  "--role all --embedded --demo-workload reaches Running pods"):
        assert re.search(rf"^OK +{re.escape(check)}", out.stdout, re.M), check
    assert "VERSION stand-in-not-hami-core" in out.stdout
    total = float(re.search(r"^image \S+: ([\d.]+) MiB in (\d+) layers", out.stdout, re.M).group(1))
    layers = [float(m) for m in re.findall(r"^  layer \d+: +([\d.]+) MiB", out.stdout, re.M)]
    record_property("image_mib", total)
    assert total < CEILING_MIB and layers and abs(sum(layers) - total) < 1, out.stdout
    _smoke_fails_an_image_that_runs_as_root(image)


def _smoke_fails_an_image_that_runs_as_root(image: str) -> None:
    bad = f"localhost/hami-smoke-root:{__version__}"
    ctr = subprocess.run(["buildah", "from", "--pull=false", image], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        subprocess.run(["buildah", "config", "--user", "0:0", ctr], check=True, capture_output=True)
        subprocess.run(["buildah", "commit", "--quiet", ctr, bad], check=True, capture_output=True)
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
    try:
        out = _smoke(bad)
    finally:
        subprocess.run(["buildah", "rmi", bad], capture_output=True)
    assert out.returncode == 1
    assert re.search(r"^FAIL image user is 65532: 0:0", out.stdout, re.M), out.stdout
    assert re.search(r"^FAIL the default user runs as 65532", out.stdout, re.M), out.stdout
