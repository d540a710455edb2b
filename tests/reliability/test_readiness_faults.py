"""Honest readiness under a frozen or failing API server:
- the embedded API server runs as its own process and is frozen with SIGSTOP: the scheduler's
  /readyz turns 503 naming it ("API server not answering"), and 200 again once it gets SIGCONT
  (windows shortened by --api-probe-after / --api-unready-after; the times are recorded, not asserted);
- critical writes failing (HTTP 500 on every write) while reads still answer: /bind fails and
  /readyz turns 503 ("critical writes failing"), reads alone never clear it; once writes succeed
  again the dry-run write probe makes it ready within a tick;
- the liveness hook itself: a 404 or 409 is an answer, a 5xx, 429 or no answer is a failure."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import aiohttp
import pytest

from hami.kube.liveness import is_failure
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import config_for, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]
FAST = {"api_probe_after": 1.0, "api_unready_after": 0.5}


async def readyz(http: aiohttp.ClientSession, port: int) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status, await r.text()


async def until(http: aiohttp.ClientSession, port: int, want: int, timeout: float) -> str:
    """Poll /readyz until it answers `want`; its text then (fails the test after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        code, text = await readyz(http, port)
        if code == want:
            return text
        assert time.monotonic() < deadline, f"/readyz still {code}: {text}"
        await asyncio.sleep(0.05)


@pytest.fixture
def sim_process(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    log = open(tmp_path / "sim.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "hami.cli.main", "--role", "sim", "--sim-listen", "127.0.0.1:0",
                             "--sim-kubeconfig", str(kubeconfig)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 30
    while not kubeconfig.exists() or not json.loads(kubeconfig.read_text() or "{}"):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "sim.log").read_text()[-2000:]
        time.sleep(0.05)
    yield proc, str(kubeconfig)
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


async def test_frozen_api_server_makes_the_scheduler_unready_and_recovery_ready(sim_process):
    proc, kubeconfig = sim_process
    s = await start_scheduler(config_for(kubeconfig, **FAST))
    http = aiohttp.ClientSession()
    try:
        assert await s.state.wait_synced(10)
        await until(http, s.metrics_port, 200, 10)
        os.kill(proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        text = await until(http, s.metrics_port, 503, 30)
        unready_after = time.monotonic() - frozen
        assert "API server not answering" in text
        os.kill(proc.pid, signal.SIGCONT)
        thawed = time.monotonic()
        await until(http, s.metrics_port, 200, 10)
        ready_after = time.monotonic() - thawed
        record("API server frozen (SIGSTOP)", probe_after_s=FAST["api_probe_after"],
               unready_after_s=round(unready_after, 1), ready_again_after_s=round(ready_after, 1),
               probes=s.liveness.probes)
    finally:
        await http.close()
        await s.close()


async def test_failing_critical_writes_make_the_scheduler_unready_until_a_write_succeeds(apiserver):
    async with running_env(apiserver, hami_nodes(1), **FAST) as env:
        port = env.sched.metrics_port
        assert (await readyz(env.http, port))[0] == 200
        pod = env.create_pod(pod_obj("p", mem=1000))
        assert (await env.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
        apiserver.faults.fail_next_writes(10_000, 500)
        assert (await env.bind(pod, "n0"))["Error"]
        assert "critical writes failing" in await until(env.http, port, 503, 20)
        await asyncio.sleep(FAST["api_probe_after"] * 2)  # reads (watches, probes) answer meanwhile
        assert (await readyz(env.http, port))[0] == 503
        apiserver.faults.reset()
        await until(env.http, port, 200, 10)
        assert env.sched.liveness.probe_failures >= 1


@pytest.mark.parametrize("code,failure", [("200", False), ("404", False), ("409", False), ("422", False),
                                          ("500", True), ("503", True), ("429", True), ("error", True)])
def test_what_counts_as_an_answer(code, failure):
    assert is_failure(code) is failure


async def test_the_liveness_watch_sleeps_until_a_probe_is_due_instead_of_ticking(apiserver):
    """Idle is idle: while the API server answers, the watch sleeps until a probe would be due (one
    wake per `probe_after` at most), not every `tick`."""
    from hami.kube.liveness import ApiLiveness
    from tests.kube.helpers import client_for, eventually

    client = await client_for(apiserver.kubeconfig)
    stop = asyncio.Event()
    try:
        await client.request("get", "version", "GET", "/version")  # an answer just now
        live = ApiLiveness(client, probe_after=30.0, tick=0.01)
        running = asyncio.create_task(live.run(stop))
        await eventually(lambda: live.wakes == 1)
        # Asleep until the probe is due (30 s after the answer), not for one tick: no wake per tick.
        assert live.asleep_for > 20.0 and live.probes == 0
        stop.set()
        await running
    finally:
        await client.close()


async def traced_transient(work) -> int:
    """Bytes allocated and freed again while `work` (an awaitable) ran: the traced peak above its
    start and end, as scripts/soak's meter counts it."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        await work
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - max(before, after)


async def test_a_liveness_probe_reads_its_answer_without_a_256_kib_read(sim_process):
    """Idle is cheap: each probe (GET /version after probe_after of silence, ~6 a minute while watches
    only bookmark) reads its small answer in SMALL_ANSWER pieces, far below the 256 KiB read the same
    GET made plainly costs. The API server is its own process: only the scheduler's side is traced."""
    from hami.kube.liveness import ApiLiveness
    from tests.kube.helpers import client_for

    _, kubeconfig = sim_process
    client = await client_for(kubeconfig)
    try:
        live = ApiLiveness(client)
        await live.probe()  # connections open, code paths warm
        await client.request("get", "version", "GET", "/version")
        probe = min([await traced_transient(live.probe()) for _ in range(3)])
        plain = min([await traced_transient(client.request("get", "version", "GET", "/version")) for _ in range(3)])
        assert live.probes == 4 and live.probe_failures == 0 and live.failing_since is None
        assert probe < 64 * 1024, probe
        assert plain >= 200 * 1024, plain  # what each probe cost before
    finally:
        await client.close()
