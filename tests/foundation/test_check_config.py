"""`python -m hami` and `hami --role X --check-config`.

Covers: `python -m hami` is the same CLI as `hami` (version, help); --check-config on every role
prints the resolved configuration (flags over environment over the device config file) and exits 0;
it exits 2 naming the flag or the file for a bad flag value, a broken device config file, a missing
or mismatched TLS pair, a bad fake GPU file, a missing node name, a bad device-list strategy and a
library that is not a shared object; it opens no socket, starts no event loop and writes nothing
(an embedded check creates no state directory).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from hami import __version__
from hami.cli import main as cli
from hami.sim.kubelet.libstub import write_stub_library

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _py_m(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "hami", *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_python_dash_m_hami_is_the_cli():
    out = _py_m("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"hami {__version__}"
    helped = _py_m("--help")
    assert helped.returncode == 0 and "--check-config" in helped.stdout and "--role" in helped.stdout


@pytest.fixture
def no_io(monkeypatch):
    """A check that opened a socket or started an event loop fails loudly."""
    def refuse(*a, **k):
        raise AssertionError("--check-config opened a socket or ran the event loop")

    real_socket = socket.socket

    def network_socket(*a, **k):  # a network socket is refused; the AF_UNIX pair of an event loop
        family = a[0] if a else k.get("family", -1)  # (pytest-asyncio's, made per test) is not I/O
        if family in (-1, socket.AF_INET, socket.AF_INET6):
            refuse()
        return real_socket(*a, **k)

    monkeypatch.setattr(socket, "socket", network_socket)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(cli.asyncio, "run", refuse)


def _check(argv, capsys, monkeypatch, env=None):
    for key in ("NODE_NAME", "KUBECONFIG", "HOOK_PATH", "HAMI_VGPU_LIB", "HAMI_DEVICE_CONFIG_FILE",
                "DEVICE_LIST_STRATEGY", "POD_NAMESPACE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    try:
        rc = cli.main([*argv, "--check-config"])
    except SystemExit as exc:  # argparse refuses a bad value itself, with exit status 2
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_every_role_prints_its_resolved_configuration(tmp_path, capsys, monkeypatch, no_io):
    dev = tmp_path / "device-config.yaml"
    dev.write_text("nvidia:\n  deviceSplitCount: 7\n  defaultCores: 30\n")
    lib = write_stub_library(str(tmp_path / "image" / "libvgpu.so"))
    rc, out, err = _check(["--role", "scheduler,node-agent,monitor", f"--device-config-file={dev}",
                           "--kube-qps=40", "--device-list-strategy=cdi-cri,envvar"], capsys, monkeypatch,
                          env={"NODE_NAME": "gpu-7", "HOOK_PATH": str(tmp_path / "hook"), "HAMI_VGPU_LIB": lib})
    assert rc == 0, err
    cfg = json.loads(out)
    assert cfg["roles"] == ["scheduler", "node-agent", "monitor"]
    assert cfg["nvidia"]["device_split_count"] == 7 and cfg["nvidia"]["default_cores"] == 30   # file
    assert cfg["agent"]["node_name"] == cfg["monitor"]["node_name"] == "gpu-7"                # env
    assert cfg["agent"]["hook_path"] == str(tmp_path / "hook") and cfg["agent"]["vgpu_lib"] == lib
    assert cfg["kube"]["qps"] == 40.0 and cfg["kube"]["source"] == "in-cluster service account"  # flag
    assert cfg["agent"]["device_list_strategy"] == ["cdi-cri", "envvar"]
    assert not (tmp_path / "hook").exists(), "a check installs nothing"


def test_embedded_check_creates_no_state_directory(tmp_path, capsys, monkeypatch, no_io):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    rc, out, err = _check(["--embedded"], capsys, monkeypatch)
    assert rc == 0, err
    assert json.loads(out)["kube"]["source"] == "embedded API server"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "env", "named"), [
    (["--role", "scheduler", "--kube-burst=-3"], {}, "--kube-burst"),
    (["--role", "scheduler", "--node-scheduler-policy=random"], {}, "--node-scheduler-policy"),
    (["--role", "scheduler", "--http_bind=8080"], {}, "--http_bind"),
    (["--role", "node-agent"], {}, "--node-name"),
    (["--role", "node-agent", "--gpu-backend=cuda"], {"NODE_NAME": "n"}, "--gpu-backend"),
    (["--role", "node-agent", "--device-list-strategy=volume-mounts"], {"NODE_NAME": "n"}, "--device-list-strategy"),
    (["--role", "node-agent", "--device-id-strategy=serial"], {"NODE_NAME": "n"}, "--device-id-strategy"),
    (["--role", "node-agent"], {"NODE_NAME": "n", "DEVICE_LIST_STRATEGY": "cdi"}, "--device-list-strategy"),
    (["--role", "monitor", "--gpu-backend=fake"], {}, "--fake-gpus"),
    (["--role", "dra", "--gpu-backend=fake"], {}, "--node-name"),
    (["--role", "dra", "--gpu-backend=fake"], {"NODE_NAME": "n"}, "--fake-gpus"),
    (["--role", "scheduler", "--cert_file=/tls/tls.crt"], {}, "--key_file"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_flags_exit_2_naming_the_flag(argv, env, named, capsys, monkeypatch, no_io):
    rc, out, err = _check(argv, capsys, monkeypatch, env=env)
    assert rc == 2 and out == ""
    assert named in err


def test_bad_files_exit_2_naming_the_file(tmp_path, capsys, monkeypatch, no_io):
    broken = tmp_path / "device-config.yaml"
    broken.write_text("nvidia:\n  deviceSplitCount: [\n")
    rc, _, err = _check(["--role", "scheduler", f"--device-config-file={broken}"], capsys, monkeypatch)
    assert rc == 2 and str(broken) in err and "line" in err

    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_text("not a certificate\n")
    key.write_text("not a key\n")
    rc, _, err = _check(["--role", "scheduler", f"--cert_file={crt}", f"--key_file={key}"], capsys, monkeypatch)
    assert rc == 2 and str(crt) in err

    rc, _, err = _check(["--role", "scheduler", f"--cert_file={tmp_path}/none.crt", f"--key_file={key}"],
                        capsys, monkeypatch)
    assert rc == 2 and f"{tmp_path}/none.crt" in err and "--cert_file" in err

    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - uuid: GPU-1\n")  # memory_mib missing
    rc, _, err = _check(["--role", "monitor", "--gpu-backend=fake", f"--fake-gpus={fake}"], capsys, monkeypatch,
                        env={"NODE_NAME": "n"})
    assert rc == 2 and str(fake) in err and "memory_mib" in err

    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    rc, _, err = _check(["--role", "scheduler", f"--kubeconfig={kc}"], capsys, monkeypatch)
    assert rc == 2 and str(kc) in err and "clusters" in err

    lib = tmp_path / "libvgpu.so"
    lib.write_bytes(b"\x7fELF" + bytes(20))
    rc, _, err = _check(["--role", "node-agent", f"--vgpu-lib={lib}"], capsys, monkeypatch, env={"NODE_NAME": "n"})
    assert rc == 2 and str(lib) in err and "--vgpu-lib" in err


def test_a_good_fake_gpu_file_and_kubeconfig_pass(tmp_path, capsys, monkeypatch, no_io):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {uuid: GPU-1, memory_mib: 1024}\n")
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n")
    rc, out, err = _check(["--role", "node-agent,monitor", "--gpu-backend=fake", f"--fake-gpus={fake}",
                           f"--kubeconfig={kc}"], capsys, monkeypatch, env={"NODE_NAME": "n"})
    assert rc == 0, err
    assert json.loads(out)["kube"]["source"] == str(kc)
