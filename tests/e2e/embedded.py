"""One `hami --role all --embedded` process for an e2e module: free ports, its state folder, kubectl
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

from tests.ports import free_ports
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
    ports: dict[str, int]
    run: Callable  # kubectl: stdout, or with results=True the CompletedProcess when check=False
    proc: subprocess.Popen

    @property
    def log(self) -> Path:
        return self.state / "hami.log"

    def slices(self) -> int:
        res = subprocess.run([find_kubectl(), "get", "resourceslices", "-o", "json"], env=self.env,
                             capture_output=True, text=True, timeout=60)
        return len(json.loads(res.stdout)["items"]) if res.returncode == 0 and res.stdout else 0


def kubectl_runner(env: dict, *, results: bool = False) -> Callable:
    kubectl = find_kubectl()

    def run(*args, check=True, stdin=None):
        res = subprocess.run([kubectl, *args], env=env, capture_output=True, text=True, input=stdin, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res if results and not check else res.stdout
    return run


@contextlib.contextmanager
def embedded_system(state: Path, *flags: str, results: bool = False) -> Iterator[System]:
    """`hami --role all --embedded` with `flags`, every listener on a free loopback port; yields once its
    kubeconfig is written."""
    ports = dict(zip(("api", "ext", "smetrics", "mmetrics", "ui"), free_ports(5), strict=True))
    cmd = [sys.executable, "-m", "hami.cli.main", "--role", "all", "--embedded",
           "--sim-state-dir", str(state), "--sim-listen", f"127.0.0.1:{ports['api']}",
           "--http_bind", f"127.0.0.1:{ports['ext']}",
           "--scheduler-metrics-bind-address", f"127.0.0.1:{ports['smetrics']}",
           "--monitor-metrics-bind-address", f"127.0.0.1:{ports['mmetrics']}",
           "--ui-bind-address", f"127.0.0.1:{ports['ui']}", *flags]
    state.mkdir(parents=True, exist_ok=True)
    log = open(state / "hami.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kubeconfig = str(state / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    try:
        wait_until(lambda: proc.poll() is None and os.path.exists(kubeconfig), 60, what="kubeconfig")
        yield System(state, env, kubeconfig, ports, kubectl_runner(env, results=results), proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
