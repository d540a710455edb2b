"""The role runner: lazy role imports, supervised named tasks, failure exit codes, signal draining."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from hami.app import expand_roles
from tests.ports import free_ports

HERE = os.path.dirname(__file__)


def _spawn(table, argv):
    root = os.path.dirname(os.path.dirname(HERE))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.foundation.fake_roles", json.dumps(table), *argv],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_line(proc, needle, timeout=20.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen in {seen!r}")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("all", ("scheduler", "node-agent", "monitor")),
        ("monitor,sim", ("sim", "monitor")),
        ("scheduler, scheduler", ("scheduler",)),
    ],
    ids=["all-means-three", "sim-first", "dedup"],
)
def test_expand_roles(spec, expected):
    assert expand_roles(spec) == expected


def test_expand_roles_rejects_unknown_role_naming_it():
    with pytest.raises(ValueError, match="unknown role 'gpu'"):
        expand_roles("scheduler,gpu")


def test_failing_role_ends_process_nonzero_and_is_named_in_log():
    table = {"scheduler": "tests.foundation.roles.serving", "node-agent": "tests.foundation.roles.failing"}
    proc = _spawn(table, ["--role", "scheduler,node-agent"])
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert 'role="node-agent"' in err
    assert "GPU backend exploded" in err
    assert "serving drained" in out  # the healthy role was drained, not killed


def test_sigterm_drains_roles_and_exits_zero():
    proc = _spawn({"scheduler": "tests.foundation.roles.serving"}, ["--role", "scheduler"])
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving drained" in out


def test_second_signal_forces_exit_when_a_role_ignores_stop():
    proc = _spawn({"monitor": "tests.foundation.roles.stubborn"}, ["--role", "monitor"])
    _wait_for_line(proc, "stubborn ready")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # still draining (the drain deadline is 10 s)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 130


def test_monitor_role_never_imports_grpc_or_pynvml():
    code = (
        "import sys; from hami.app import load_role; from hami.cli import main; "
        "load_role('monitor'); "
        "bad = [m for m in ('grpc', 'pynvml') if m in sys.modules]; "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_version_and_help_list_roles_and_flags():
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for word in ("scheduler", "node-agent", "monitor", "--http_bind", "--node-lock-timeout", "doctor"):
        assert word in res.stdout
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "--version"], capture_output=True, text=True)
    assert res.stdout.startswith("hami ")


def test_debug_server_and_aiomonitor_start_on_loopback_only_when_asked():
    import urllib.request

    # aiomonitor binds inside the library and reports no port it bound: its ports are chosen ahead;
    # the debug listener takes port 0 and the process names it in its --ports-file
    tel, web_ui, con = free_ports(3)
    state = tempfile.mkdtemp(prefix="hami-test-runner-")
    ports_file = os.path.join(state, "ports.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami.cli.main", "--role", "sim", "--sim-listen", "127.0.0.1:0",
         "--sim-kubeconfig", os.path.join(state, "kubeconfig"), "--profiling", "--debug-bind-address", ":0",
         "--ports-file", ports_file,
         "--aiomonitor", "--aiomonitor-port", str(tel), "--aiomonitor-webui-port", str(web_ui),
         "--aiomonitor-console-port", str(con)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not os.path.exists(ports_file):
            time.sleep(0.1)
        with open(ports_file) as f:
            bound = json.load(f)
        assert set(bound) == {"api", "debug"}, bound
        dbg = int(bound["debug"].rsplit(":", 1)[1])
        body = urllib.request.urlopen(f"http://{bound['debug']}/debug/pprof/", timeout=10).read().decode()
        assert "goroutine" in body
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        for port in (dbg, tel, web_ui):
            local = [line.split()[3] for line in listening.splitlines() if line.split()[3].endswith(f":{port}")]
            assert local and all(addr.startswith("127.0.0.1:") for addr in local), (port, local)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        left = os.path.exists(ports_file)
        shutil.rmtree(state, ignore_errors=True)
    assert proc.returncode == 0
    assert not left  # a clean stop removes the ports file: it never names ports nobody holds
