"""Install from a wheel, outside the source tree.

Covers: `python -m build` makes an sdist and a wheel from pyproject.toml, README.md and hami/ alone
(the files the image's wheel stage copies); the wheel holds every non-Python file of the package
(the device-plugin .proto and stubs, vendors.yaml, the MIG geometries). A fresh venv outside the
source tree gets that wheel with its dependencies resolved from the package index at the LOWEST
versions pyproject.toml allows (uv's `--resolution lowest-direct` over the declared dependencies):
every runtime dependency is then at its declared floor (asserted), `hami --version`,
`python -m hami --help` and `hami --role X --check-config` for every role work, hami is imported from
the venv (not the checkout), the packaged data loads, the generated gRPC code imports under the
grpcio/protobuf floors (constraints/floor.txt), and the whole embedded system (API server, scheduler,
node agents over gRPC, monitor) runs from that venv until sample pods are Running.

The build runs without isolation (setuptools from the dev venv); the resolution is real (the index
or pip/uv's cache, which CI's own install has just filled).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from hami import __version__

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "hami", src / "hami", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp / "dist"), str(src)])
    (wheel,) = (tmp / "dist").glob("hami-*.whl")
    assert list((tmp / "dist").glob("hami-*.tar.gz"))
    env_dir = tmp / "venv"
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv (a dev dependency) is needed to resolve the lowest allowed versions"
    _run([uv, "venv", "-q", "--python", sys.executable, str(env_dir)])
    py = env_dir / "bin" / "python"
    reqs = tmp / "declared.txt"
    reqs.write_text("\n".join(_declared()) + "\n")
    _run([uv, "pip", "install", "-q", "--python", str(py), "--resolution", "lowest-direct",
          "-r", str(reqs), str(wheel)])
    return {"wheel": wheel, "py": py, "bin": env_dir / "bin", "tmp": tmp, "uv": uv}


def _declared() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def _floor(spec: str) -> tuple[str, str]:
    """("kubernetes-asyncio", "31") from "kubernetes-asyncio>=31,<37"."""
    m = re.match(r"^([A-Za-z0-9_.-]+)\s*(?:\[[^]]*\])?\s*.*?>=\s*([0-9][0-9.]*)", spec)
    assert m, f"dependency without a >= floor: {spec!r}"
    return m.group(1).lower().replace("_", "-"), m.group(2)


def test_every_runtime_dependency_runs_at_its_declared_floor(wheel_venv):
    out = _run([wheel_venv["uv"], "pip", "freeze", "--python", str(wheel_venv["py"])]).stdout
    installed = {name.lower().replace("_", "-"): version
                 for name, _, version in (ln.partition("==") for ln in out.splitlines() if "==" in ln)}
    for spec in _declared():
        name, floor = _floor(spec)
        got = installed.get(name)
        assert got is not None, f"{name} not installed from the wheel's metadata"
        # the lowest release at or above the floor: it starts with the floor's own numbers
        # (kubernetes-asyncio>=31 -> 31.1.0: the index has no 31.0.0)
        assert got.split(".")[:len(floor.split("."))] == floor.split(".") or got == floor, (name, floor, got)


def test_wheel_holds_every_package_data_file(wheel_venv):
    names = set(zipfile.ZipFile(wheel_venv["wheel"]).namelist())
    data = {str(p.relative_to(ROOT)) for p in (ROOT / "hami").rglob("*")
            if p.is_file() and p.suffix in (".proto", ".pyi", ".yaml", ".json")}
    assert data and data <= names
    assert "hami/__main__.py" in names and "hami/agent/_pb/api_pb2_grpc.py" in names


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAMI_", "PYTHON", "KUBECONFIG", "NODE_NAME", "HOOK_PATH", "VIRTUAL_ENV"))}
    env["HOME"] = str(tmp)
    return env


def test_console_script_and_python_dash_m_run_from_the_wheel(wheel_venv):
    env, cwd = _clean_env(wheel_venv["tmp"]), wheel_venv["tmp"]
    out = _run([str(wheel_venv["bin"] / "hami"), "--version"], env=env, cwd=cwd)
    assert out.stdout.strip() == f"hami {__version__}"
    out = _run([str(wheel_venv["py"]), "-m", "hami", "--help"], env=env, cwd=cwd)
    assert "--check-config" in out.stdout
    probe = ("import hami, grpc, google.protobuf as pb; from hami.agent._pb import api_pb2, api_pb2_grpc;"
             "from importlib.resources import files; import yaml;"
             "yaml.safe_load(files('hami.device').joinpath('vendors.yaml').read_text());"
             "yaml.safe_load(files('hami.gpu.data').joinpath('mig_geometries.yaml').read_text());"
             "print(hami.__file__); print(grpc.__version__, pb.__version__)")
    out = subprocess.run([str(wheel_venv["py"]), "-c", probe], capture_output=True, text=True, env=env, cwd=cwd,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    where, versions = out.stdout.splitlines()
    assert where.startswith(str(wheel_venv["tmp"] / "venv")) and str(ROOT) not in where
    floors = dict(ln.split("==") for ln in (ROOT / "constraints" / "floor.txt").read_text().splitlines()
                  if ln and not ln.startswith("#"))
    assert versions.split() == [floors["grpcio"], floors["protobuf"]]


@pytest.mark.parametrize("role", ["scheduler", "node-agent", "monitor", "all"])
def test_check_config_for_every_role_from_the_wheel(wheel_venv, role):
    env = {**_clean_env(wheel_venv["tmp"]), "NODE_NAME": "gpu-node-1"}
    out = _run([str(wheel_venv["bin"] / "hami"), "--role", role, "--check-config"], env=env, cwd=wheel_venv["tmp"])
    assert '"roles"' in out.stdout


@pytest.mark.xdist_group("default-ports")  # with --dist loadgroup: hami on its default ports, as the README runs it
def test_the_embedded_system_runs_from_the_wheel_at_the_floors(wheel_venv, default_ports):
    """All roles in one process from the floors venv: pods are scheduled, allocated over gRPC and
    reported Running by the demo workload, none failed."""
    env = _clean_env(wheel_venv["tmp"])
    proc = subprocess.Popen([str(wheel_venv["bin"] / "hami"), "--role", "all", "--embedded", "--demo-workload"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=wheel_venv["tmp"])
    seen, deadline = [], time.monotonic() + 120
    try:
        for line in proc.stdout:
            seen.append(line)
            m = re.match(r"demo: (\d+) submitted \| running (\d+) \| pending \d+ \([^)]*\) \| failed (\d+)", line)
            if m and int(m.group(2)) >= 3:
                assert int(m.group(3)) == 0, line
                break
            assert time.monotonic() < deadline, "no 3 pods Running in 120 s:\n" + "".join(seen[-30:])
        else:
            raise AssertionError("hami exited before 3 pods ran:\n" + "".join(seen[-30:]))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert not any("Traceback" in ln for ln in seen), "".join(seen[-30:])
