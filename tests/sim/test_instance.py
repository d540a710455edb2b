"""A second embedded instance beside the first, and a run that cleans up after itself.

Covers: default listeners that are taken move to free loopback ports with a line saying which and the
flag that sets it; flags the user gave never move; the pprof listener only with --profiling, the two
metrics listeners not when --metrics-bind-address is given; the real bind probe; the per-user kubeconfig
pointer is written 0600 in the user's home and withdrawn only while it still holds this run's file; two
`hami --role all --embedded` processes at once, both serving nodes on different API servers, the second
saying what it moved, each removing its own temp state folder on exit.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from hami.sim.instance import (
    move_busy_defaults,
    port_is_free,
    publish_kubeconfig,
    publish_state,
    withdraw_kubeconfig,
    withdraw_state,
)
from tests.tools import find_kubectl


def test_taken_defaults_move_and_say_which():
    flags = {"embedded": True}
    taken = {"127.0.0.1:6443", "127.0.0.1:9395"}
    picks = iter(["127.0.0.1:40001", "127.0.0.1:40002"])
    lines = move_busy_defaults(flags, is_free=lambda a: a not in taken, pick=lambda: next(picks))
    assert flags["sim_listen"] == "127.0.0.1:40001" and flags["scheduler_metrics_bind_address"] == "127.0.0.1:40002"
    assert "http_bind" not in flags and "monitor_metrics_bind_address" not in flags
    assert "127.0.0.1:6443 is in use" in lines[0] and "--sim-listen sets it" in lines[0]
    assert "--scheduler-metrics-bind-address" in lines[1]


def test_user_flags_never_move_and_optional_listeners_only_when_opened():
    flags = {"sim_listen": "127.0.0.1:6443", "metrics_bind_address": ":9000"}
    lines = move_busy_defaults(flags, is_free=lambda a: False, pick=lambda: "127.0.0.1:1")
    assert flags["sim_listen"] == "127.0.0.1:6443"  # given: a clash stays an error naming the flag
    assert flags["http_bind"] == flags["ui_bind_address"] == "127.0.0.1:1" and len(lines) == 2
    assert "scheduler_metrics_bind_address" not in flags  # --metrics-bind-address set both
    assert "debug_bind_address" not in flags  # no --profiling: no pprof listener
    with_profiling = {"profiling": True}
    move_busy_defaults(with_profiling, is_free=lambda a: not a.endswith(":6060"), pick=lambda: "127.0.0.1:2")
    assert with_profiling == {"profiling": True, "debug_bind_address": "127.0.0.1:2"}


def test_port_probe_sees_a_listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    address = f"127.0.0.1:{s.getsockname()[1]}"
    assert not port_is_free(address)
    s.close()
    assert port_is_free(address)


def test_state_pointer_names_the_newest_run_and_is_withdrawn_only_while_it_is_ours(tmp_path):
    pointer = str(tmp_path / "home" / ".hami" / "embedded-state")
    mine, newer = tmp_path / "run1", tmp_path / "run2"
    assert publish_state(str(mine), pointer) == pointer and os.readlink(pointer) == str(mine)
    publish_state(str(newer), pointer)  # a second instance started later
    withdraw_state(str(mine), pointer)  # the first stops: the newer one's pointer stays
    assert os.readlink(pointer) == str(newer)
    withdraw_state(str(newer), pointer)
    assert not os.path.lexists(pointer)


def test_kubeconfig_pointer_is_private_and_withdrawn_only_while_it_is_ours(tmp_path):
    mine, newer = tmp_path / "a.kubeconfig", tmp_path / "b.kubeconfig"
    mine.write_text("server: a")
    newer.write_text("server: b")
    pointer = str(tmp_path / "home" / ".hami" / "embedded.kubeconfig")
    assert publish_kubeconfig(str(mine), pointer) == pointer
    assert open(pointer).read() == "server: a" and (os.stat(pointer).st_mode & 0o777) == 0o600
    publish_kubeconfig(str(newer), pointer)  # a second instance started later
    withdraw_kubeconfig(str(mine), pointer)
    assert open(pointer).read() == "server: b"  # the newer instance keeps its pointer
    withdraw_kubeconfig(str(newer), pointer)
    assert not os.path.exists(pointer)


def _start(home, *extra):
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "hami.cli.main", "--role", "all", "--embedded", "--sim-nodes", "1",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def _read_until(proc, pattern: str, timeout: float = 90.0) -> tuple[str, re.Match]:
    text, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        text += line
        m = re.search(pattern, text)
        if m:
            return text, m
    raise AssertionError(f"no {pattern!r} in output:\n{text[-3000:]}")


def _stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


@pytest.mark.xdist_group("default-ports")  # both instances start on the defaults, as users do
def test_two_embedded_instances_at_once(tmp_path, default_ports):
    first = _start(tmp_path)
    second = None
    try:
        out1, m1 = _read_until(first, r"(?m)^ +kubeconfig +(\S+)")
        second = _start(tmp_path)
        out2, m2 = _read_until(second, r"(?m)^ +kubeconfig +(\S+)")
        kube1, kube2 = m1.group(1), m2.group(1)
        assert kube1 != kube2
        assert "is in use (another hami --embedded?)" in out2  # the second says what it moved
        api1 = re.search(r"(?m)^ +API server +(\S+)", out1).group(1)
        api2 = re.search(r"(?m)^ +API server +(\S+)", out2).group(1)
        assert api1 != api2
        for kube in (kube1, kube2):
            def nodes(kube=kube):  # the banner comes before the simulated node registers
                res = subprocess.run([find_kubectl(), "--kubeconfig", kube, "get", "nodes", "-o", "name"],
                                     capture_output=True, text=True, timeout=60)
                assert res.returncode == 0, res.stderr
                return "node/gpu-node-1" in res.stdout
            deadline = time.monotonic() + 60
            while not nodes() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert nodes(), f"no node on the API server of {kube}"
        assert open(tmp_path / ".hami" / "embedded.kubeconfig").read() == open(kube2).read()
        assert os.readlink(tmp_path / ".hami" / "embedded-state") == os.path.dirname(kube2)  # the README's path
        rest = _stop(second)
        assert not os.path.lexists(tmp_path / ".hami" / "embedded-state")  # withdrawn: it was the second's
        assert "removed the embedded cluster's state folder" in rest
        assert not os.path.exists(os.path.dirname(kube2))
        assert os.path.exists(kube1)  # the first keeps running, its folder untouched
    finally:
        if second is not None and second.poll() is None:
            _stop(second)
        _stop(first)
    assert not os.path.exists(os.path.dirname(kube1))
