"""A running scheduler (role pieces) over the embedded API server, for the scheduler I/O tests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import orjson

from hami.device import codec
from hami.scheduler.role import Scheduler, start_scheduler
from tests.kube.helpers import config_for, node_obj


def requesting_now() -> str:
    return codec.encode_handshake_requesting(time.time(), None)


class Env:
    def __init__(self, apiserver, sched: Scheduler, http: aiohttp.ClientSession):
        self.apiserver, self.sched, self.http = apiserver, sched, http
        self.store = apiserver.store
        self.client = sched.client

    async def filter(self, pod: dict, names=None, *, nodes=None, raw: bytes | None = None) -> dict:
        body = raw if raw is not None else orjson.dumps(
            {"Pod": pod, "NodeNames": names} if nodes is None else {"Pod": pod, "Nodes": nodes})
        async with self.http.post(self.sched.url + "/filter", data=body) as r:
            assert r.status == 200
            return orjson.loads(await r.read())

    async def bind(self, pod: dict, node: str) -> dict:
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        async with self.http.post(self.sched.url + "/bind", data=orjson.dumps(body)) as r:
            assert r.status == 200
            return orjson.loads(await r.read())

    def create_pod(self, pod: dict) -> dict:
        return self.store.create("pods", pod["metadata"]["namespace"], pod).obj

    def pod(self, ns: str, name: str) -> dict:
        return self.store.get("pods", ns, name)

    def placement(self, ns: str, name: str) -> dict:
        """The pod's annotations with what /filter decided and holds until /bind writes it."""
        stored = self.store.get("pods", ns, name)
        annos = dict(stored["metadata"].get("annotations") or {})
        held = self.sched.placer.held.get(stored["metadata"].get("uid", ""))
        if held is not None and held.annotations:
            annos.update(held.annotations)
        return annos

    def forget_held(self) -> None:
        """Forget every decision this replica's /filter holds (as a restarted or another replica sees it)."""
        for uid in list(self.sched.placer.held):
            self.sched.placer.forget(uid)

    def api_reads(self) -> int:
        return self.client.total_requests(verb="get") + self.client.total_requests(verb="list")


async def start_env(apiserver, nodes=(), *, identity: str | None = None, **sched) -> Env:
    for n in nodes:
        apiserver.store.create("nodes", "", n)
    s = await start_scheduler(config_for(apiserver.kubeconfig, **sched), identity=identity)
    assert await s.state.wait_synced(10)
    assert s.access is not None and await s.access.wait_answered(10)  # readiness checks RBAC too
    return Env(apiserver, s, aiohttp.ClientSession())


async def stop_env(env: Env) -> None:
    await env.http.close()
    await env.sched.close()


@contextlib.asynccontextmanager
async def running_env(apiserver, nodes=(), **sched) -> AsyncIterator[Env]:
    """start_env ... stop_env around a block (the body of every `env` fixture)."""
    env = await start_env(apiserver, nodes, **sched)
    try:
        yield env
    finally:
        await stop_env(env)


def hami_nodes(n: int, gpus: int = 2, **kw) -> list[dict]:
    return [node_obj(f"n{i}", gpus, handshake=requesting_now(), **kw) for i in range(n)]
