"""Shared pieces of the kube-scheduler loop tests: a scheduler role, the loop, a device-plugin stand-in."""

from __future__ import annotations

import asyncio
import contextlib

import orjson

from hami.device import codec
from hami.kubesched.schedqueue import QueueTimings
from hami.sim.kubelet.termination import PodTerminator
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for, node_obj
from tests.kube.scheduler_env import requesting_now, running_env

FAST = QueueTimings(initial_backoff=0.05, max_backoff=0.2, max_in_unschedulable=300.0,
                    backoff_flush_interval=0.02, unschedulable_flush_interval=30.0)
LOCK = codec.NODE_LOCK_ANNOTATION
MERGE = "application/merge-patch+json"


def gpu_node(name: str, gpus: int = 1, **kw) -> dict:
    return node_obj(name, gpus, mem=kw.pop("mem", 40960), handshake=requesting_now(), **kw)


def merge(store, key: str, ns: str, name: str, patch: dict, sub: str = "") -> None:
    store.patch(key, ns, name, orjson.dumps(patch), MERGE, subresource=sub)


async def device_plugin(store, stop: asyncio.Event) -> None:
    """What the node agent's Allocate does for every bound pod: bind-phase=success, node lock released."""
    while not stop.is_set():
        for e in store.list("pods", "")[1]:
            pod = e.obj
            node = (pod.get("spec") or {}).get("nodeName")
            meta = pod["metadata"]
            annos = meta.get("annotations") or {}
            if not node or annos.get(codec.BIND_PHASE_ANNOTATION) != "allocating":
                continue
            with contextlib.suppress(Exception):
                merge(store, "pods", meta["namespace"], meta["name"],
                      {"metadata": {"annotations": {codec.BIND_PHASE_ANNOTATION: "success"}}})
                value = (store.get("nodes", "", node)["metadata"].get("annotations") or {}).get(LOCK)
                if value and codec.decode_node_lock(value).owned_by(meta["namespace"], meta["name"]):
                    merge(store, "nodes", "", node, {"metadata": {"annotations": {LOCK: None}}})
        await asyncio.sleep(0.01)


class Cluster:
    def __init__(self, env, loop: KubeSchedulerLoop):
        self.env, self.loop, self.store = env, loop, env.store

    def create(self, pod: dict) -> None:
        self.store.create("pods", pod["metadata"].get("namespace", "default"), pod)

    def pod(self, name: str) -> dict:
        return self.store.get("pods", "default", name)

    def node_of(self, name: str) -> str:
        return (self.pod(name).get("spec") or {}).get("nodeName") or ""

    def annotations(self, name: str) -> dict:
        return self.pod(name)["metadata"].get("annotations") or {}

    def where(self, name: str) -> str:
        return self.loop.queue.location(f"default/{name}")


@contextlib.asynccontextmanager
async def running_cluster(apiserver, nodes, *, ext: dict | None = None, parks: bool = False,
                          stop_seconds: float = 0.0, loop_kw: dict | None = None, **sched):
    """The scheduler role, the faithful kube-scheduler loop (`parks=True`: the extender_parks
    divergence, for tests that model HAMi's parked-pod reports), a device-plugin stand-in and the
    simulated kubelet's stop half (graceful deletions end after `stop_seconds`); `loop_kw`: more settings
    of the loop (e.g. percentage_of_nodes_to_score)."""
    async with running_env(apiserver, nodes, **sched) as env:
        client = await client_for(apiserver.kubeconfig)
        loop = KubeSchedulerLoop(client, ExtenderConfig(env.sched.url, **(ext or {})), "hami-scheduler", timings=FAST,
                                 extender_parks=parks, **(loop_kw or {}))
        terminator = PodTerminator(client, stop_seconds=stop_seconds)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(device_plugin(env.store, stop)),
                 asyncio.create_task(terminator.run(stop))]
        await loop.pods.wait_synced(10)
        try:
            yield Cluster(env, loop)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 10)
            await client.close()
