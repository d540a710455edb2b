"""One `hami --role all --embedded` process for an e2e module: every listener on port 0 (the kernel
picks the port at bind time; the process reports them in its --ports-file), its state folder, kubectl
against its kubeconfig, and a stop that never leaves the process behind; `wait_until`, the e2e tests'
one wait on a condition."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.tools import find_kubectl


def wait_until(predicate, timeout=60.0, interval=0.3, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last error on timeout
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}: last={last!r}")


@dataclass
class System:
    state: Path
    env: dict
    kubeconfig: str
    ports: dict[str, int]  # api, ext (the extender), smetrics, mmetrics (the monitor), ui
    run: Callable  # kubectl: stdout, or with results=True the CompletedProcess when check=False
    proc: subprocess.Popen

    @property
    def log(self) -> Path:
        return self.state / "hami.log"

    def slices(self) -> int:
        res = subprocess.run([find_kubectl(), "get", "resourceslices", "-o", "json"], env=self.env,
                             capture_output=True, text=True, timeout=60)
        return len(json.loads(res.stdout)["items"]) if res.returncode == 0 and res.stdout else 0


def create_at_once(env: dict, manifests: list[str], timeout: float = 60) -> tuple[list[int], list[str]]:
    """`kubectl create -f -` of each manifest, every process started before any is waited on (admission
    races): the indexes of the manifests admitted, and the stderr of each refused one."""
    procs = [subprocess.Popen([find_kubectl(), "create", "-f", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in manifests]
    errs = [p.communicate(m, timeout=timeout)[1] for p, m in zip(procs, manifests, strict=True)]
    return ([i for i, p in enumerate(procs) if p.returncode == 0],
            [e for p, e in zip(procs, errs, strict=True) if p.returncode != 0])


def kubectl_runner(env: dict, *, results: bool = False) -> Callable:
    kubectl = find_kubectl()

    def run(*args, check=True, stdin=None):
        res = subprocess.run([kubectl, *args], env=env, capture_output=True, text=True, input=stdin, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res if results and not check else res.stdout
    return run


# the keys of System.ports -> the listener names of the --ports-file (hami.listeners)
PORT_NAMES = {"api": "api", "ext": "scheduler-extender", "smetrics": "scheduler-metrics",
              "mmetrics": "monitor-metrics", "ui": "ui"}


def bound_ports(ports_file: Path) -> dict[str, int]:
    """System.ports from a --ports-file."""
    addresses = json.loads(ports_file.read_text())
    return {key: int(addresses[name].rsplit(":", 1)[1]) for key, name in PORT_NAMES.items()}


@contextlib.contextmanager
def embedded_system(state: Path, *flags: str, results: bool = False) -> Iterator[System]:
    """`hami --role all --embedded` with `flags`, every listener on a loopback port the kernel picks; yields
    once every role is ready (its --ports-file is written)."""
    state.mkdir(parents=True, exist_ok=True)
    ports_file = state / "ports.json"
    cmd = [sys.executable, "-m", "hami.cli.main", "--role", "all", "--embedded",
           "--sim-state-dir", str(state), "--sim-listen", "127.0.0.1:0", "--http_bind", "127.0.0.1:0",
           "--scheduler-metrics-bind-address", "127.0.0.1:0", "--monitor-metrics-bind-address", "127.0.0.1:0",
           "--ui-bind-address", "127.0.0.1:0", "--ports-file", str(ports_file), *flags]
    log = open(state / "hami.log", "w")  # noqa: SIM115
    # HOME: the instance's ~/.hami pointers go to its own folder, never over the user's embedded default
    # (the README's commands, running beside, read ~/.hami/embedded.kubeconfig)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "HOME": str(state)})
    kubeconfig = str(state / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    try:
        wait_until(lambda: proc.poll() is None and ports_file.exists(), 180, what="the ports file")
        assert (state / ".hami" / "embedded.kubeconfig").exists()  # its pointer went to its own HOME
        yield System(state, env, kubeconfig, bound_ports(ports_file), kubectl_runner(env, results=results), proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
