"""Security, checked on running processes:
- profiling and aiomonitor are off by default (config defaults, the CLI with no flags), a running
  scheduler and monitor answer 404 on /debug/pprof, and when they are switched on, aiomonitor's
  and the debug server's listening sockets are bound to 127.0.0.1 only (read from /proc/net/tcp);
- no secret in logs at any -v: scheduler, node agent and monitor run as real `hami` processes at
  -v=0 and -v=5 with a kubeconfig holding a bearer token (and the token in the environment), do
  real work (register, filter, bind, scrape), and neither the token nor its base64 form appears in
  their output.
The chart side (webhook TLS-only, RBAC rules against the calls the code makes) is tested in
tests/deploy/test_webhook_tls.py and tests/deploy/test_rbac.py; docs/reliability.md lists them."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import socket
import sys

import aiohttp
import pytest
import yaml

from hami.config import DebugSettings, build_config
from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, start_env, stop_env
from tests.ports import free_ports
from tests.reliability._record import ROOT, record
from tests.reliability._roles import gpu_doc, write_yaml

pytestmark = pytest.mark.timeout(90)
HAMI = [sys.executable, "-m", "hami.cli.main"]


def listening(port: int) -> set[str]:
    """Local addresses listening on `port` (IPv4 and IPv6), from /proc/net/tcp*."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                lines = fh.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            addr, st = parts[1], parts[3]
            host, _, p = addr.rpartition(":")
            if st == "0A" and int(p, 16) == port:
                if len(host) == 8:
                    out.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(host)[::-1]))
                else:
                    raw = bytes.fromhex(host)
                    out.add(socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))
    return out


def test_profiling_and_aiomonitor_are_off_by_default():
    cfg = build_config({}, env={})
    assert cfg.debug.profiling is False and cfg.debug.aiomonitor is False and cfg.debug.debug_bind_address == ""
    assert DebugSettings() == cfg.debug


async def test_running_roles_serve_no_debug_endpoints_by_default(apiserver):
    env = await start_env(apiserver, [node_obj("n0", handshake=requesting_now())])
    try:
        for port in (env.sched.port, env.sched.metrics_port):
            async with env.http.get(f"http://127.0.0.1:{port}/debug/pprof/") as r:
                assert r.status == 404
    finally:
        await stop_env(env)


async def test_aiomonitor_and_debug_server_bind_loopback_only_when_on():
    from hami.obs.aiomon import run_aiomonitor
    from hami.obs.profiling import start_debug_server

    # aiomonitor binds inside the library and reports no port it bound: ports chosen ahead, the one place
    ports = free_ports(3)
    settings = DebugSettings(aiomonitor=True, aiomonitor_port=ports[0], aiomonitor_webui_port=ports[1],
                             aiomonitor_console_port=ports[2])
    stop = asyncio.Event()
    task = asyncio.create_task(run_aiomonitor(settings, stop))
    try:
        await eventually(lambda: listening(ports[0]) and listening(ports[1]), timeout=15, interval=0.1)
        assert listening(ports[0]) == {"127.0.0.1"} and listening(ports[1]) == {"127.0.0.1"}
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    runner, debug_port = await start_debug_server(":0")  # no host given: loopback, never all interfaces
    try:
        assert listening(debug_port) == {"127.0.0.1"}
    finally:
        await runner.cleanup()


# --------------------------------------------------------------------------- no secrets in logs

def token_kubeconfig(path: str, server: str, token: str) -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {"server": server}}],
           "users": [{"name": "u", "user": {"token": token}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    write_yaml(path, doc)
    return path


async def run_roles(apiserver, tmp_path, verbosity: int, token: str) -> str:
    kubeconfig = token_kubeconfig(str(tmp_path / f"kc-{verbosity}"), apiserver.url, token)
    gpus = str(tmp_path / "gpus.yaml")
    write_yaml(gpus, gpu_doc())
    sock_dir = f"/tmp/hami-sec-{os.getpid()}-{verbosity}"
    os.makedirs(sock_dir, exist_ok=True)
    ports_file = tmp_path / f"ports-{verbosity}.json"  # every listener on port 0: the child says which it bound
    envs = {**os.environ, "PYTHONPATH": ROOT, "KUBE_TOKEN": token, "NODE_NAME": "n1"}
    cmd = HAMI + ["--role", "scheduler,node-agent,monitor", "--kubeconfig", kubeconfig, f"-v={verbosity}",
                  "--http_bind", "127.0.0.1:0", "--scheduler-metrics-bind-address", "127.0.0.1:0",
                  "--monitor-metrics-bind-address", "127.0.0.1:0", "--ports-file", str(ports_file), "--node-name", "n1",
                  "--gpu-backend", "fake", "--fake-gpus", gpus, "--kubelet-socket-dir", sock_dir,
                  "--hook-path", str(tmp_path / "hook"), "--cache-dir", str(tmp_path / "containers"),
                  "--register-interval", "1s"]
    proc = await asyncio.create_subprocess_exec(*cmd, env=envs, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    output = bytearray()

    async def drain():
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            output.extend(chunk)

    reader = asyncio.create_task(drain())
    try:
        async with aiohttp.ClientSession() as http:
            await eventually(lambda: proc.returncode is not None or ports_file.exists(), timeout=120, interval=0.1)
            assert proc.returncode is None, output.decode(errors="replace")[-3000:]
            bound = json.loads(ports_file.read_text())
            ext, metrics = bound["scheduler-extender"], (bound["scheduler-metrics"], bound["monitor-metrics"])
            # Real work: the agent registers n1; the scheduler filters and binds a pod; scrapes.
            await eventually(lambda: "hami.io/node-nvidia-register" in (
                apiserver.store.get("nodes", "", "n1")["metadata"].get("annotations") or {}), timeout=20)
            pod = apiserver.store.create("pods", "default", pod_obj(f"sec-{verbosity}", mem=1000)).obj
            for path, body in (("/filter", {"Pod": pod, "NodeNames": ["n0", "n1"]}),
                               ("/bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                                          "PodUID": pod["metadata"]["uid"], "Node": "n0"}),
                               ("/filter", {"Pod": "garbage"})):
                async with http.post(f"http://{ext}{path}", json=body) as r:
                    assert r.status == 200
            for address in metrics:
                async with http.get(f"http://{address}/metrics") as r:
                    assert r.status == 200
            await asyncio.sleep(1.0)
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        await reader
    return output.decode(errors="replace")


@pytest.mark.parametrize("verbosity", [0, 5])
async def test_no_token_in_logs_at_any_verbosity(apiserver, tmp_path, verbosity):
    apiserver.store.create("nodes", "", node_obj("n0", handshake=requesting_now()))
    apiserver.store.create("nodes", "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    token = "hami-test-" + secrets.token_hex(16)
    out = await run_roles(apiserver, tmp_path, verbosity, token)
    lines = out.splitlines()
    assert len(lines) > 3, out  # the roles really logged
    if verbosity == 5:
        assert len(lines) > 10
    forms = (token, token[10:], base64.b64encode(token.encode()).decode(), base64.b64encode(
        f"Bearer {token}".encode()).decode())
    leaks = [line for line in lines if any(f in line for f in forms)]
    assert not leaks, leaks[:5]
    assert "Bearer" not in out
    record(f"no token in logs (-v={verbosity})", log_lines=len(lines), token_found=0)


def test_chart_tests_for_tls_and_rbac_exist():
    """The chart half of §6 lives with the chart tests; fail loudly if they disappear."""
    for rel, names in (("tests/deploy/test_webhook_tls.py",
                        ("test_webhook_goes_to_the_https_port_and_nothing_listens_in_plain_http",)),
                       ("tests/deploy/test_rbac.py", ("test_every_call_the_code_makes_is_granted",
                                                      "test_every_granted_verb_is_used_by_the_code"))):
        with open(os.path.join(ROOT, rel)) as fh:
            text = fh.read()
        for name in names:
            assert f"def {name}(" in text, (rel, name)
    assert yaml  # the chart tests render YAML with the same library
