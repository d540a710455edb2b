"""Concurrency: two scheduler replicas behind one embedded API server, 1,000 pods of
mixed sizes onto 50 simulated nodes (4 GPUs each, more demand than capacity), placed by
kube-scheduler-like callers that spread requests over both replicas and retry with backoff when
/bind fails. A device-plugin stand-in marks each bound pod bind-phase=success and releases its
node lock, as Allocate does. At the end: no GPU over-committed in memory, cores or slots; every
pod either bound (nodeName == vgpu-node, allocated devices registered on that node, consistent
annotations) or pending with a FilteringFailed event; no node lock left behind."""

from __future__ import annotations

import asyncio
import collections
import random
import time

import orjson
import pytest

from hami.device import codec
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, start_env, stop_env
from tests.reliability._record import record

NODES, GPUS, PODS = 50, 4, 1000
GPU_MEM, SLOTS = 40960, 10
LOCK = codec.NODE_LOCK_ANNOTATION
CALLERS = 8  # concurrent scheduling cycles in flight (kube-scheduler binds asynchronously)

pytestmark = pytest.mark.timeout(180)


def mixed_pod(i: int, rng: random.Random) -> dict:
    gpus = rng.choice((1, 1, 1, 2))
    mem = rng.choice((1024, 2048, 4096, 8192, 12288, 20480))
    cores = rng.choice((0, 10, 20, 30, 50))
    return pod_obj(f"w{i:04d}", gpus=gpus, mem=mem, cores=cores)


def plugin_allocate(store, name: str, node: str) -> None:
    """The device plugin's Allocate effect: bind-phase=success, our node lock released."""
    store.patch("pods", "default", name, b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}',
                "application/merge-patch+json")
    value = (store.get("nodes", "", node)["metadata"].get("annotations") or {}).get(LOCK)
    if value and codec.decode_node_lock(value).owned_by("default", name):
        store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {LOCK: None}}}),
                    "application/merge-patch+json")


async def test_two_replicas_1000_pods_50_nodes_no_overcommit_no_lock_left(apiserver):
    nodes = [node_obj(f"n{i:02d}", GPUS, mem=GPU_MEM, count=SLOTS, handshake=requesting_now()) for i in range(NODES)]
    a = await start_env(apiserver, nodes)
    b = await start_env(apiserver)
    replicas = [a, b]
    names = [n["metadata"]["name"] for n in nodes]
    rng = random.Random(9)
    pods = [a.create_pod(mixed_pod(i, rng)) for i in range(PODS)]
    stats = collections.Counter()
    sem = asyncio.Semaphore(CALLERS)

    async def cycle(i: int, pod: dict) -> str | None:
        """kube-scheduler for one pod: filter, bind; backoff and retry on bind failure; give up
        (stay pending) after three consecutive no-fit answers."""
        prng = random.Random(i)
        no_fit, attempt, delay = 0, 0, 0.02
        while attempt < 60:
            env = replicas[(i + attempt) % 2]
            attempt += 1
            async with sem:
                out = await env.filter(pod, names)
                node = (out.get("NodeNames") or [None])[0]
                if node is None:
                    assert out["Error"] == "" and out["FailedNodes"], out
                    stats["nofit"] += 1
                    no_fit += 1
                    if no_fit >= 3:
                        return None
                else:
                    no_fit = 0
                    err = (await env.bind(pod, node))["Error"]
                    if not err:
                        plugin_allocate(apiserver.store, pod["metadata"]["name"], node)
                        return node
                    stats["bind_failed"] += 1
            await asyncio.sleep(delay * (0.5 + prng.random()))
            delay = min(delay * 2, 0.5)
        raise AssertionError(f"pod {i} neither bound nor settled after {attempt} attempts")

    # A realistic API server: etcd-like latency and APF's 429s under a small in-flight
    # limit (Retry-After 0: the clients' jittered retries, not seconds of sleep, keep the test fast).
    faults = apiserver.faults
    faults.read_delay, faults.write_delay, faults.max_inflight, faults.retry_after = 0.001, 0.005, 6, 0
    crit_before = sum(env.sched.client.lane_stats["critical"].writes for env in replicas)
    started = time.perf_counter()
    try:
        placed = await asyncio.gather(*(cycle(i, p) for i, p in enumerate(pods)))
        faults.reset()
        elapsed = time.perf_counter() - started
        crit = sum(env.sched.client.lane_stats["critical"].writes for env in replicas) - crit_before
        await asyncio.gather(*(env.sched.events.flush() for env in replicas))
        bound = sum(1 for p in placed if p)
        pending = PODS - bound
        labels = sum(env.sched.labeler.queued for env in replicas)
        assert labels >= bound, (labels, bound)  # the label writer saw every bound pod
        assert bound > PODS // 2 and pending > 0, (bound, pending)  # both outcomes really happen

        registered = {}
        for n in apiserver.store.list("nodes", "")[1]:
            annos = n.obj["metadata"].get("annotations") or {}
            assert LOCK not in annos, f"lock left on {n.obj['metadata']['name']}: {annos[LOCK]}"
            registered[n.obj["metadata"]["name"]] = {d.id: d for d in codec.decode_node_devices(
                annos[codec.REGISTER_ANNOTATION])}
        failed_events = {e.obj["involvedObject"]["name"] for e in apiserver.store.list("events", "default")[1]
                         if e.obj["reason"] == "FilteringFailed"}
        used: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        for e in apiserver.store.list("pods", "default")[1]:
            obj = e.obj
            name = obj["metadata"]["name"]
            annos = obj["metadata"].get("annotations") or {}
            node = obj["spec"].get("nodeName")
            if not node:
                assert name in failed_events, f"pending pod {name} has no FilteringFailed event"
                continue
            assert annos["hami.io/vgpu-node"] == node  # came in the Binding, with nodeName
            # the label comes later, off the critical path (hami.scheduler.extender.labeler): queued
            assert (obj["metadata"].get("labels") or {}).get("hami.io/vgpu-node") in (None, node)
            assert annos["hami.io/bind-phase"] == "success"
            devices = codec.decode_pod_devices(annos[codec.ALLOCATED_ANNOTATION])
            assert annos[codec.TO_ALLOCATE_ANNOTATION] == annos[codec.ALLOCATED_ANNOTATION]
            want = sum(int(c["resources"]["limits"]["nvidia.com/gpu"]) for c in obj["spec"]["containers"])
            flat = [d for ctr in devices for d in ctr]
            assert len(flat) == want and len({d.uuid for d in flat}) == want, (name, flat)
            for d in flat:
                assert d.uuid in registered[node], (name, d.uuid, node)
                u = used[d.uuid]
                u[0] += 1
                u[1] += d.usedmem
                u[2] += d.usedcores
        assert sum(u[0] for u in used.values()) == sum(
            len([d for ctr in codec.decode_pod_devices(e.obj["metadata"]["annotations"][codec.ALLOCATED_ANNOTATION])
                 for d in ctr]) for e in apiserver.store.list("pods", "default")[1] if e.obj["spec"].get("nodeName"))
        for uuid, (slots, mem, cores) in used.items():
            assert slots <= SLOTS and mem <= GPU_MEM and cores <= 100, (uuid, slots, mem, cores)
        assert a.sched.extender.filters > 0 and b.sched.extender.filters > 0
        assert apiserver.throttled > 0  # the 429s really happened
        record("concurrency", pods=PODS, nodes=NODES, replicas=2, bound=bound, pending=pending,
               throttled_429=apiserver.throttled,
               bind_retries=stats["bind_failed"], nofit_answers=stats["nofit"],
               overcommit_refusals=a.sched.binder.overcommit_refusals + b.sched.binder.overcommit_refusals,
               critical_writes_per_bound_pod=round(crit / max(bound, 1), 2), seconds=round(elapsed, 1))
    finally:
        await stop_env(a)
        await stop_env(b)
