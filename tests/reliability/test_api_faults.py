"""API server faults with every role running (scheduler, node agent + kubelet,
monitor, kube-scheduler loop; see _roles.py) on the restartable embedded server:
- the server restarts in the middle of watches while objects change: every role's watch cache
  converges to the server's state within 5 s;
- forced 410 Gone (the watch window compacted while the server was down): the scheduler re-lists,
  and its GPU usage equals a fresh scheduler's recomputation (nothing counted twice, the deleted
  pod's usage gone);
- watches that answer and then go silent: detected (silent-watch timeout) and re-established by
  every informer, caches converge once the server speaks again;
- slow answers, 429 and 500 on every write: each role's writes during the fault window stay
  bounded (backoff, no busy loop), and once the faults stop the work completes (pod bound,
  registration restored)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from hami.device import codec
from hami.scheduler.extender.hamiflow import patch_at_filter
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import start_env, stop_env
from tests.reliability._record import record
from tests.reliability._roles import AGENT_NODE, Roles

pytestmark = pytest.mark.timeout(90)
MERGE = "application/merge-patch+json"


@pytest.fixture
async def roles(apiserver):
    r = await Roles(apiserver).start()
    try:
        yield r
    finally:
        await r.close()


def other_pod(name: str, node: str | None = None) -> dict:
    pod = pod_obj(name, gpus=0, scheduler="default-scheduler")
    if node:
        pod["spec"]["nodeName"] = node
    return pod


async def converge(roles: Roles, timeout: float = 5.0) -> float:
    """Seconds (loop time) until every cache equals the server; fails after `timeout`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        await eventually(lambda: not roles.lagging(), timeout=timeout, interval=0.01)
    except AssertionError:
        raise AssertionError(f"caches still lagging after {timeout}s: {roles.lagging()}") from None
    return loop.time() - start


async def test_restart_mid_watch_every_role_converges_within_5s(roles, apiserver):
    store = apiserver.store
    for i in range(3):
        store.create("pods", "default", other_pod(f"a{i}", AGENT_NODE))
    await converge(roles, 10)
    await eventually(lambda: len(store.watchers()) >= len(roles.informers()))
    times = []
    for round_ in range(3):
        await apiserver.stop()
        store.create("pods", "default", other_pod(f"r{round_}", AGENT_NODE))
        store.create("pods", "default", other_pod(f"x{round_}"))
        store.delete("pods", "default", f"a{round_}")
        store.patch("nodes", "", "n2", orjson.dumps({"metadata": {"labels": {"round": str(round_)}}}), MERGE)
        store.patch("nodes", "", AGENT_NODE, orjson.dumps({"metadata": {"labels": {"round": str(round_)}}}), MERGE)
        await asyncio.sleep(0.2)  # the roles notice the server is gone and back off
        await apiserver.start()
        times.append(await converge(roles, 5.0))
    assert {k for k in roles.informers()["monitor/pods"].store} == {f"default/r{i}" for i in range(3)}
    record("restart mid-watch", restarts=3, caches=len(roles.informers()),
           max_converge_s=round(max(times), 2))


def usage_of(sched) -> dict[str, tuple[int, int, int]]:
    out = {}
    for name in sorted(sched.state.index.nodes):
        for d in sched.state.index.nodes[name].devices:
            out[d.id] = (d.used, d.usedmem, d.usedcores)
    return out


async def test_forced_410_relists_without_duplicate_usage(roles, apiserver):
    env, store = roles.env, apiserver.store
    patch_at_filter(env.sched.extender)  # HAMi's flow: the placement is on the pod before its bind
    for i in range(4):
        pod = env.create_pod(pod_obj(f"g{i}", scheduler="other", mem=3000, cores=20))
        out = await env.filter(pod, ["n2", "n3"])
        node = out["NodeNames"][0]
        store.bind("default", f"g{i}", {"target": {"name": node}})
        store.patch("pods", "default", f"g{i}", b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}',
                    MERGE)
    await converge(roles, 10)
    before = usage_of(env.sched)
    assert sum(u[1] for u in before.values()) == 4 * 3000
    relists = env.sched.state.pods.relists_gone
    await apiserver.stop()
    store.delete("pods", "default", "g0")
    store.patch("pods", "default", "g1", b'{"metadata":{"labels":{"touched":"yes"}}}', MERGE)
    store.compact()
    await apiserver.start()
    await eventually(lambda: env.sched.state.pods.relists_gone > relists, timeout=10)
    seconds = await converge(roles, 5.0)
    after = usage_of(env.sched)
    assert sum(u[1] for u in after.values()) == 3 * 3000
    fresh = await start_env(apiserver)
    try:
        await eventually(lambda: usage_of(fresh.sched) == after, timeout=5)
    finally:
        await stop_env(fresh)
    record("410 Gone", relists=env.sched.state.pods.relists_gone - relists, converge_s=round(seconds, 2),
           usage_equal_to_recomputation=True)


async def test_silent_watches_are_detected_and_reestablished(roles, apiserver):
    store = apiserver.store
    infs = roles.informers()
    for inf in infs.values():
        inf.silent_timeout = 0.5
    await eventually(lambda: len(store.watchers()) >= len(infs) and all(i.watches for i in infs.values()))
    before = {name: inf.silent_reconnects for name, inf in infs.items()}
    apiserver.faults.silent_watch = True
    await apiserver.restart()  # every watch reconnects into silence
    store.create("pods", "default", other_pod("during-silence", AGENT_NODE))
    store.patch("nodes", "", "n3", b'{"metadata":{"labels":{"silent":"yes"}}}', MERGE)
    try:
        await eventually(lambda: all(inf.silent_reconnects > before[n] for n, inf in infs.items()), timeout=10)
    except AssertionError:
        raise AssertionError({n: (i.silent_reconnects, i.watches, i.errors) for n, i in infs.items()}) from None
    assert roles.lagging()  # nothing got through while silent
    apiserver.faults.silent_watch = False
    seconds = await converge(roles, 5.0)
    record("silent watch", informers=len(infs), silent_timeout_s=0.5, converge_s=round(seconds, 2))


def write_attempts(client, code: str) -> int:
    return sum(n for (verb, _, c), n in client.requests.items() if c == code and verb not in ("get", "list", "watch"))


@pytest.mark.parametrize("fault", ["429", "500", "slow"])
async def test_write_faults_give_bounded_retries_then_completion(roles, apiserver, fault):
    store, faults = apiserver.store, apiserver.faults
    await eventually(lambda: codec.REGISTER_ANNOTATION in (
        store.get("nodes", "", AGENT_NODE)["metadata"].get("annotations") or {}), timeout=10)
    clients = roles.clients()
    counts0 = {n: sum(c.requests.values()) for n, c in clients.items()}
    window = 3.0
    if fault == "slow":
        faults.delay = 0.3
        faults.write_delay = 0.3
    else:
        faults.fail_next_writes(10**9, int(fault))
    # Work that needs writes: a pod to schedule, and the agent's registration to restore.
    store.create("pods", "default", pod_obj("work", mem=2000))
    store.patch("nodes", "", AGENT_NODE, orjson.dumps(
        {"metadata": {"annotations": {codec.REGISTER_ANNOTATION: None}}}), MERGE)
    await asyncio.sleep(window)
    code = "error" if fault == "slow" else fault
    failed = {n: write_attempts(c, code) for n, c in clients.items()}
    sent = {n: sum(c.requests.values()) - counts0[n] for n, c in clients.items()}
    faults.reset()
    if fault != "slow":
        assert sum(failed.values()) > 0  # the roles really hit the fault
        for name, n in failed.items():
            assert n <= 12, f"{name} retried {n} writes in {window}s under {fault}: busy loop"
    for name, n in sent.items():
        assert n <= 40, f"{name} sent {n} requests in {window}s under {fault}"
    # Once the server behaves, everything completes.
    await eventually(lambda: store.get("pods", "default", "work")["spec"].get("nodeName"), timeout=15)
    await eventually(lambda: codec.REGISTER_ANNOTATION in (
        store.get("nodes", "", AGENT_NODE)["metadata"].get("annotations") or {}), timeout=15)
    record(f"write faults ({fault})", window_s=window, failed_writes=failed, requests_in_window=sent)
