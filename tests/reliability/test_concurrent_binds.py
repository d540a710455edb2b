"""kube-scheduler's binds are never refused by the extender's listener.

Go's HTTP transport dials one connection per request in flight, so a burst of binds waiting on the API
limiter is a thousand connections open at once; the listener used to close every one past 256 at
accept, and kube-scheduler counts each as a failed binding cycle. Here, against the running scheduler
at its shipped listener defaults:
- 1,000 pods on 1,000 nodes, each filtered, then bound on its own connection, all 1,000 connections open at once
  before any request is sent: every one is answered 200 with no error, none reset or closed unanswered,
  and every pod is bound;
- with the trusted class's budget cut to 50, the same 1,000 connections wait in the kernel's accept
  queue instead (accept pauses at the total) and are all answered too;
- meanwhile a slowloris flood from an untrusted source holds no more than its own cap and is closed at
  the header deadline.
No test measures time: each waits on answers and EOFs, and the listener's deadlines run on a clock
the test moves (Guard.clock)."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import orjson
import pytest

from hami.config import ListenSettings
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import Clock, config_for, eventually, pod_obj
from tests.kube.scheduler_env import Env, hami_nodes, stop_env

pytestmark = pytest.mark.timeout(300)
PODS = 1000


async def bind_all_at_once(port: int, pods: list[dict], nodes: dict[str, str]) -> list[bytes]:
    """Every bind on its own connection, all connections open before the first request is sent."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in pods]
    for (_, w), pod in zip(conns, pods, strict=True):
        meta = pod["metadata"]
        body = orjson.dumps({"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                             "Node": nodes[meta["name"]]})
        w.write(b"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    async def answer(reader: asyncio.StreamReader) -> bytes:
        try:
            return await asyncio.wait_for(reader.read(), 240)
        except ConnectionResetError:
            return b"RESET"

    outs = await asyncio.gather(*(answer(r) for r, _ in conns))
    for _, w in conns:
        w.close()
    return outs


async def start_env(apiserver, listen: ListenSettings) -> Env:
    for n in hami_nodes(PODS, gpus=1):  # a node each: binds to one node wait on its lock (HAMi's node lock)
        apiserver.store.create("nodes", "", n)
    cfg = config_for(apiserver.kubeconfig)
    # The API server runs in this process, on this loop: on a loaded machine a thousand lock PATCHes
    # queue behind each other for longer than the 10 s request deadline meant for a real API server.
    cfg = dataclasses.replace(cfg, listen=listen, kube=dataclasses.replace(cfg.kube, timeout=120.0))
    sched = await start_scheduler(cfg)
    assert await sched.state.wait_synced(10)
    # The extender's deadlines on a clock the test moves: a loaded machine that takes longer than the
    # header deadline to open the thousand connections (or the flood) closes none of them early.
    sched.runners[0].guard.clock = Clock()
    return Env(apiserver, sched, aiohttp.ClientSession())


async def burst(env: Env) -> tuple[list[bytes], list[dict]]:
    pods = [env.create_pod(pod_obj(f"p{i}", mem=100)) for i in range(PODS)]
    nodes = {}
    for i, pod in enumerate(pods):
        assert (await env.filter(pod, [f"n{i}"]))["NodeNames"] == [f"n{i}"], pod["metadata"]["name"]
        nodes[pod["metadata"]["name"]] = f"n{i}"
    port = int(env.sched.url.rsplit(":", 1)[1])
    return await bind_all_at_once(port, pods, nodes), pods


def assert_all_bound(env: Env, outs: list[bytes], pods: list[dict]) -> None:
    resets = [o for o in outs if o in (b"", b"RESET")]
    assert not resets, f"{len(resets)} of {len(outs)} binds got no answer"
    for out in outs:
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), out[:200]
        assert orjson.loads(body).get("Error", "") == "", body
    for pod in pods:
        assert env.pod("default", pod["metadata"]["name"])["spec"].get("nodeName")


@pytest.mark.parametrize("trusted_connections", [ListenSettings().trusted_connections, 50])
async def test_a_thousand_concurrent_binds_are_all_answered(apiserver, trusted_connections):
    env = await start_env(apiserver, ListenSettings(trusted_connections=trusted_connections))  # else defaults
    try:
        outs, pods = await burst(env)
        assert_all_bound(env, outs, pods)
        guard = env.sched.runners[0].guard
        assert guard.refused == 0
        if trusted_connections < PODS:
            assert guard.budget.pauses >= 1  # accept paused at the total; the kernel held the rest
    finally:
        await stop_env(env)


async def test_an_untrusted_slowloris_flood_cannot_take_the_binds_budget(apiserver):
    # 127.0.0.1 is kube-scheduler; the flood comes from 127.0.0.2
    env = await start_env(apiserver, ListenSettings(header_timeout=3.0, max_connections=20,
                                                    trusted_sources=("127.0.0.1/32",)))
    try:
        port = int(env.sched.url.rsplit(":", 1)[1])
        flood = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0)) for _ in range(60)]
        for _, w in flood:
            w.write(b"POST /bind HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        guard = env.sched.runners[0].guard
        await eventually(lambda: guard.refused == 40, 10)  # past their own cap: closed at accept
        assert guard.budget.untrusted == 20
        outs, pods = await burst(env)
        assert_all_bound(env, outs, pods)
        assert guard.budget.untrusted == 20 and guard.header_timeouts == 0  # the flood still holds its cap
        guard.clock.now += 3.0
        assert guard.expire_overdue() == 20
        slow = await asyncio.gather(*(asyncio.wait_for(r.read(), 60) for r, _ in flood))
        assert slow == [b""] * 60  # closed: 40 at accept, 20 at the header deadline
        assert guard.header_timeouts == 20
        for _, w in flood:
            w.close()
    finally:
        await stop_env(env)
