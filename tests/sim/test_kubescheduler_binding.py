"""The embedded kube-scheduler loop's binding cycle runs on its own task, as schedule_one.go's
goroutine does: the next pod is filtered while the previous pod's bind is still in flight; a bind
error forgets the assumed pod and sends it to backoffQ, from where it is scheduled again; with more
extender replicas behind one Service each cycle (filter and its bind) talks to one replica, round robin.
Stub extenders over real HTTP record what they were asked, in order."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for, eventually
from tests.ports import serve_app
from tests.sim._kubesched import FAST


def pending_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


class StubExtender:
    """Filter says yes to the first node; bind waits for `release` when the pod is in `hold`,
    and answers an error the first `fail_first` times for a pod in `fail`."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log
        self.hold: set[str] = set()
        self.release = asyncio.Event()
        self.fail: dict[str, int] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/bind", self.bind)
        return app

    async def filter(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.log.append((self.name, "filter", body["Pod"]["metadata"]["name"]))
        return web.json_response({"NodeNames": body["NodeNames"][:1], "FailedNodes": {}, "Error": ""})

    async def bind(self, request: web.Request) -> web.Response:
        body = await request.json()
        pod = body["PodName"]
        self.log.append((self.name, "bind", pod))
        if pod in self.hold:
            await self.release.wait()
        if self.fail.get(pod, 0) > 0:
            self.fail[pod] -= 1
            return web.json_response({"Error": f"node {body['Node']} is locked by another pod"})
        self.log.append((self.name, "bound", pod))
        return web.json_response({"Error": ""})


async def _run(apiserver, stubs: list[StubExtender], pods: list[str]):
    urls, runners = [], []
    for stub in stubs:
        url, runner = await serve_app(stub.app())
        urls.append(url)
        runners.append(runner)
    client = await client_for(apiserver.kubeconfig)
    await client.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    loop = KubeSchedulerLoop(client, ExtenderConfig(urls[0], replica_urls=tuple(urls[1:])), "hami-scheduler",
                             timings=FAST)
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))
    await loop.pods.wait_synced(10)
    for name in pods:
        await client.create("pods", pending_pod(name), "default")

    async def close():
        for stub in stubs:
            stub.release.set()  # a held bind must not keep the stub server's shutdown waiting
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        for r in runners:
            await r.cleanup()
    return loop, close


async def test_next_pod_is_filtered_while_the_previous_bind_is_in_flight(apiserver):
    log: list = []
    stub = StubExtender("a", log)
    stub.hold.add("p1")
    loop, close = await _run(apiserver, [stub], ["p1", "p2"])
    try:
        await eventually(lambda: ("a", "bound", "p2") in log)
        assert ("a", "bound", "p1") not in log  # p1's bind is still waiting: p2 went past it
        stub.release.set()
        await eventually(lambda: ("a", "bound", "p1") in log)
        await eventually(lambda: loop.stats.bound == 2)
        assert loop.stats.binds == 2 and loop.stats.errors == 0
    finally:
        await close()


async def test_a_bind_error_sends_the_pod_back_through_backoff_and_it_is_scheduled_again(apiserver):
    log: list = []
    stub = StubExtender("a", log)
    stub.fail["p1"] = 2
    loop, close = await _run(apiserver, [stub], ["p1"])
    try:
        await eventually(lambda: ("a", "bound", "p1") in log)
        assert [e for e in log if e[2] == "p1"] == [("a", "filter", "p1"), ("a", "bind", "p1")] * 3 + [("a", "bound",
                                                                                                        "p1")]
        assert loop.stats.attempts["default/p1"] == 3
        assert sum(loop.stats.bind_errors.values()) == 2
        assert loop.queue.location("default/p1") in ("", None)  # done: out of every queue
    finally:
        await close()


async def test_replicas_behind_a_service_take_whole_cycles_in_turn(apiserver):
    log: list = []
    a, b = StubExtender("a", log), StubExtender("b", log)
    loop, close = await _run(apiserver, [a, b], ["p1", "p2", "p3", "p4"])
    try:
        await eventually(lambda: loop.stats.bound == 4)
        served = {}
        for replica, _verb, pod in log:
            served.setdefault(pod, set()).add(replica)
        assert all(len(r) == 1 for r in served.values())  # filter and bind of a pod on one replica
        assert sorted(r.pop() for r in served.values()) == ["a", "a", "b", "b"]
    finally:
        await close()
