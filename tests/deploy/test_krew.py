"""deploy/krew/hami.yaml: a krew v1alpha2 Plugin whose version is the package's, whose archive
(scripts/krew-package, reproducible) has the sha256 it names and holds the `bin` it names, executable;
and the launcher in it runs `kubectl hami` (its --help) with the installed package."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile

import yaml

from tests.deploy.chart import ROOT

MANIFEST = ROOT / "deploy" / "krew" / "hami.yaml"


def _package() -> bytes:
    """scripts/krew-package's archive(), built in this process."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("krew_package", str(ROOT / "scripts" / "krew-package"))
    spec = importlib.util.spec_from_loader("krew_package", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod.archive()


def test_the_manifest_names_the_package_version_and_the_archives_sha256(tmp_path):
    doc = yaml.safe_load(MANIFEST.read_text())
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == "hami"
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    spec = doc["spec"]
    assert spec["version"] == f"v{version}" and spec["shortDescription"]
    (platform,) = spec["platforms"]
    assert platform["bin"] == "kubectl-hami" and platform["uri"].endswith(f"kubectl-hami-v{version}.tar.gz")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "krew-package"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=True)
    data = (tmp_path / f"kubectl-hami-v{version}.tar.gz").read_bytes()
    assert out.stdout.strip() == hashlib.sha256(data).hexdigest() == platform["sha256"]
    assert _package() == data  # reproducible: a second build is the same bytes
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.getmember("kubectl-hami")
        assert member.mode & 0o111
        launcher = tar.extractfile(member).read().decode()
    assert "python3 -m hami.kubectlhami.cli" in launcher


def test_the_launcher_runs_kubectl_hami(tmp_path):
    import os

    venv_bin = os.path.dirname(sys.executable)  # its python3 is the one hami is installed for
    out = subprocess.run(["sh", str(ROOT / "deploy" / "krew" / "kubectl-hami"), "--help"], cwd=tmp_path,
                         env={"PATH": f"{venv_bin}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: kubectl hami") and "top gpus" in out.stdout
