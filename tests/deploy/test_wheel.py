"""Install from a wheel, outside the source tree (issue 14).

Covers: `python -m build` makes an sdist and a wheel from pyproject.toml, README.md and hami/ alone
(the files the image's wheel stage copies); the wheel holds every non-Python file of the package
(the device-plugin .proto and stubs, vendors.yaml, the MIG geometries); in a fresh venv outside the
source tree with that wheel and the floor versions of grpcio and protobuf (constraints/floor.txt),
`hami --version`, `python -m hami --help` and `hami --role X --check-config` for every role work, hami
is imported from the venv (not the checkout), the packaged data loads, and the generated gRPC code
imports under the floors.

Speed, honestly: the build runs without isolation (setuptools from the dev venv) and the venv gets
the wheel and the two floor packages with --no-deps; hami's other dependencies come from the dev
venv's site-packages through a .pth line placed after the venv's own. The wheel's content, its entry
point and the floors are what is proven; the resolution of the other dependencies is not.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
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
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    own = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # the dev venv's packages, after the venv's own (the wheel and the floors win)
    Path(own, "zz-dev-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel),
          "-r", str(ROOT / "constraints" / "floor.txt")])
    return {"wheel": wheel, "py": py, "bin": env_dir / "bin", "tmp": tmp}


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
