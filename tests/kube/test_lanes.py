"""The client's rate lanes (hami.kube.lanes, docs/kube-client.md) over the embedded API server:
which lane each request takes, a flooded background lane never delays the critical one, 429 +
Retry-After is honoured with bounded retries, the embedded server's realistic knobs (latency,
APF-like in-flight limit), and the per-role defaults kept equal to the documented table and to
what the Helm chart renders."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from hami.config import KubeSettings, build_config
from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, EventRecorder
from hami.kube.lanes import (
    BACKGROUND,
    CRITICAL,
    DEFAULT_TIMEOUT,
    MAX_RETRIES,
    MAX_RETRY_AFTER,
    ROLE_BUDGETS,
    background,
    budgets_for,
    lane_for,
    retry_after_seconds,
)
from tests.kube.helpers import client_for, node_obj, pod_obj

ROOT = Path(__file__).resolve().parents[2]


def test_lane_of_each_kind_of_request():
    assert lane_for("create", "events") == BACKGROUND
    assert lane_for("update", "leases") == BACKGROUND
    assert lane_for("list", "pods") == BACKGROUND
    assert lane_for("watch", "nodes") == BACKGROUND
    assert lane_for("patch", "nodes") == CRITICAL  # the node lock
    assert lane_for("create", "pods/binding") == CRITICAL
    with background():
        assert lane_for("patch", "nodes") == BACKGROUND  # a handshake or a registration
    assert lane_for("patch", "nodes") == CRITICAL


def test_flags_replace_the_role_default_lane_by_lane():
    crit, bg = budgets_for("scheduler", None, None, None, None)
    assert (crit, bg) == ROLE_BUDGETS["scheduler"]
    crit, bg = budgets_for("node-agent", 7.0, None, None, 3)
    assert (crit.qps, crit.burst) == (7.0, ROLE_BUDGETS["node-agent"][0].burst)
    assert (bg.qps, bg.burst) == (ROLE_BUDGETS["node-agent"][1].qps, 3)
    assert budgets_for("no-such-role", None, None, None, None) == ROLE_BUDGETS["default"]


def test_cli_flags_reach_the_lanes():
    cfg = build_config({"kube_qps": 11.0, "kube_burst": 12, "kube_background_qps": 3.0,
                        "kube_background_burst": 4, "kube_timeout": "2s"}, env={})
    assert (cfg.kube.qps, cfg.kube.burst, cfg.kube.background_qps, cfg.kube.background_burst,
            cfg.kube.timeout) == (11.0, 12, 3.0, 4, 2.0)


def test_retry_after_from_header_or_status_details():
    assert retry_after_seconds("2", None) == 2.0
    assert retry_after_seconds(None, {"details": {"retryAfterSeconds": 3}}) == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", None) is None
    assert retry_after_seconds("100000", None) == MAX_RETRY_AFTER  # capped
    assert retry_after_seconds(None, None) is None


# --------------------------------------------------------------------------- defaults, docs, chart

def _documented_defaults() -> dict[str, tuple[float, int, float, int]]:
    text = (ROOT / "docs" / "kube-client.md").read_text()
    table = text.split("<!-- lane-defaults", 1)[1].split("<!-- /lane-defaults -->", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[0-9.]+", cells[1]):
            rows[cells[0]] = (float(cells[1]), int(cells[2]), float(cells[3]), int(cells[4]))
    return rows


def test_defaults_are_the_documented_ones_and_at_least_kube_schedulers():
    documented = _documented_defaults()
    code = {role: (c.qps, c.burst, b.qps, b.burst) for role, (c, b) in ROLE_BUDGETS.items() if role != "sim"}
    assert documented == code
    sched = ROLE_BUDGETS["scheduler"][0]
    assert sched.qps >= 50 and sched.burst >= 100  # kube-scheduler's --kube-api-qps 50 / burst 100
    assert DEFAULT_TIMEOUT > 0  # every request but a watch has a deadline by default


def test_chart_renders_the_default_lanes_of_each_role():
    from tests.deploy.chart import container, rendered

    docs = rendered("default")

    def lane_args(kind: str, name_part: str, role: str) -> dict[str, str]:
        for d in docs:
            if d["kind"] != kind:
                continue
            for c in d["spec"]["template"]["spec"]["containers"]:
                args = list(c.get("command", [])) + list(c.get("args", []))
                if "--role" in args and args[args.index("--role") + 1] == role:
                    return dict(a[2:].split("=", 1) for a in args if a.startswith("--kube-"))
        raise AssertionError(f"no {role} container in {kind} {name_part}")

    assert container  # the shared helper module is importable (same renderer as tests/deploy)
    documented = _documented_defaults()
    for kind, role in (("Deployment", "scheduler"), ("DaemonSet", "node-agent"), ("DaemonSet", "monitor")):
        got = lane_args(kind, role, role)
        q, b, bq, bb = documented[role]
        assert float(got["kube-qps"]) == q and int(got["kube-burst"]) == b, (role, got)
        assert float(got["kube-background-qps"]) == bq and int(got["kube-background-burst"]) == bb, (role, got)
        assert got["kube-timeout"] == f"{int(DEFAULT_TIMEOUT)}s"


async def test_default_client_has_a_deadline_and_role_budgets(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig), role="scheduler")
    try:
        assert c.timeout == DEFAULT_TIMEOUT
        assert (c.budgets[CRITICAL], c.budgets[BACKGROUND]) == ROLE_BUDGETS["scheduler"]
    finally:
        await c.close()


# --------------------------------------------------------------------------- behaviour

async def test_flooded_background_lane_never_delays_critical_writes(apiserver):
    """A flood of events and LISTs on a tiny background lane; the critical writes of a bind (lock,
    pod patch, binding) still go at once: their lane never waited."""
    c = await client_for(apiserver.kubeconfig, qps=1000, burst=100, background_qps=2, background_burst=1)
    try:
        await c.create("nodes", node_obj("n1"))
        await c.create("pods", pod_obj("p1"), "default")
        setup_writes = c.lane_stats[CRITICAL].writes
        rec = EventRecorder(c, "hami-scheduler", max_pending=10_000)
        for i in range(2000):
            rec.record(("default", f"p{i}", f"u{i}"), NORMAL, "FilteringSucceed", "m")
        stop = asyncio.Event()
        writer = asyncio.create_task(rec.run(stop))
        lists = [asyncio.create_task(c.list_pods()) for _ in range(20)]
        await asyncio.sleep(0)  # the flood is queued on the background lane
        await c.patch_node("n1", {"metadata": {"annotations": {"hami.io/mutex.lock": "x"}}})
        await c.patch_pod("default", "p1", {"metadata": {"annotations": {"hami.io/bind-phase": "allocating"}}})
        await c.bind_pod("default", "p1", "", "n1")
        # The background lane is saturated (its waiters outnumber its tokens) while the bind is done.
        assert not all(t.done() for t in lists)
        assert rec.pending > 0
        assert c.buckets[CRITICAL].waited == 0.0
        assert c.lane_stats[CRITICAL].writes - setup_writes == 3
        stop.set()
        for t in lists:
            t.cancel()
        writer.cancel()
        await asyncio.gather(writer, *lists, return_exceptions=True)
    finally:
        await c.close()


async def test_429_retry_after_is_honoured_then_the_write_succeeds(apiserver):
    c = await client_for(apiserver.kubeconfig)
    waits: list[float] = []

    async def recording_sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    c.sleep = recording_sleep
    try:
        await c.create("nodes", node_obj("n1"))
        apiserver.faults.fail_next_writes(2, 429)  # Retry-After: 1
        out = await c.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
        assert out["metadata"]["annotations"]["a"] == "1"
        assert c.lane_stats[CRITICAL].throttled == 2 and c.lane_stats[CRITICAL].retries == 2
        assert len(waits) == 2 and all(1.0 <= w <= 1.2 for w in waits)  # Retry-After plus jitter
        assert c.requests[("patch", "nodes", "429")] == 2
    finally:
        await c.close()


async def test_429_retries_are_bounded(apiserver):
    c = await client_for(apiserver.kubeconfig, timeout=0)

    async def no_sleep(seconds: float) -> None:
        return None

    c.sleep = no_sleep
    try:
        await c.create("nodes", node_obj("n1"))
        apiserver.faults.fail_next_writes(100, 429)
        with pytest.raises(ApiError) as info:
            await c.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
        assert info.value.status == 429
        assert c.requests[("patch", "nodes", "429")] == MAX_RETRIES + 1
    finally:
        apiserver.faults.reset()
        await c.close()


async def test_429_retry_never_passes_the_deadline(apiserver):
    c = await client_for(apiserver.kubeconfig, timeout=0.5)  # Retry-After 1 s would pass it
    try:
        await c.create("nodes", node_obj("n1"))
        apiserver.faults.fail_next_writes(1, 429)
        with pytest.raises(ApiError) as info:
            await c.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
        assert info.value.status == 429 and c.lane_stats[CRITICAL].retries == 0
    finally:
        apiserver.faults.reset()
        await c.close()


async def test_embedded_server_in_flight_limit_answers_429_and_clients_get_through(apiserver):
    c = await client_for(apiserver.kubeconfig, timeout=0)
    try:
        for i in range(4):
            await c.create("nodes", node_obj(f"n{i}"))
        apiserver.faults.max_inflight = 2  # Retry-After: 1
        apiserver.faults.write_delay = 0.05
        await asyncio.gather(*(c.patch_node(f"n{i}", {"metadata": {"annotations": {"a": "1"}}})
                               for i in range(4)))
        assert apiserver.throttled > 0  # APF-like: some were refused with 429 ...
        assert c.lane_stats[CRITICAL].retries == apiserver.throttled  # ... and retried until served
        nodes = (await c.list_nodes())["items"]
        assert all(n["metadata"]["annotations"]["a"] == "1" for n in nodes)
    finally:
        apiserver.faults.reset()
        await c.close()


async def test_embedded_server_read_and_write_latency_knobs(apiserver):
    c = await client_for(apiserver.kubeconfig)
    try:
        apiserver.faults.read_delay, apiserver.faults.write_delay = 0.001, 0.005
        await c.create("nodes", node_obj("n1"))
        await c.get_node("n1")
        assert list(apiserver.faults.applied) == [0.005, 0.001]
    finally:
        apiserver.faults.reset()
        await c.close()


async def test_urgent_waiters_take_the_next_token_ahead_of_the_queue():
    """Writes made under a held node lock (lanes.urgent) go before binds still queueing for their
    lock write; the queue keeps its own order; no token is ever overdrawn."""
    from hami.kube.lanes import TokenBucket

    bucket = TokenBucket(100.0, 1)
    await bucket.acquire()  # the one banked token is gone: everyone below waits
    order: list[str] = []

    async def take(name: str, is_urgent: bool) -> None:
        await bucket.acquire(urgent=is_urgent)
        order.append(name)

    queued = [asyncio.create_task(take(f"lock-{i}", False)) for i in range(4)]
    await asyncio.sleep(0)  # the four are queued
    late = asyncio.create_task(take("bind-under-lock", True))
    await asyncio.gather(*queued, late)
    assert order[0] == "bind-under-lock"
    assert order[1:] == ["lock-0", "lock-1", "lock-2", "lock-3"]
    assert bucket.tokens >= 0.0

