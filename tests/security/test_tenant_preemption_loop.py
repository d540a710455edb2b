"""A tenant's crowd of pending GPU pods against the GPU-preemption controller's share of the event loop
on the embedded API server with the scheduler role (--gpu-preemption):

- 60 pending pods refused on GPU shares (kube-scheduler's PodScheduled condition, as another
  replica's /filter leaves them) on 40 full nodes: each is refit and decided once, a fit at most
  NODES_PER_STEP nodes at a time with the loop given back between two steps and between two pods,
  and at most DECISIONS_PER_TICK pods a tick;
- then, with nothing changing (the node agents' heartbeats only), none is refit again;
- a change that could help them (a node's labels) has each refit and decided once more, then no more.
Assertions count work and loop turns, never time."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.scheduler.placement.fit import CARD_INSUFFICIENT_MEMORY
from hami.scheduler.preemption import controller
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env

pytestmark = pytest.mark.timeout(120)
MERGE = "application/merge-patch+json"
NODES, PENDING = 40, 60


def running_pod(name: str, node: str, mem: int) -> dict:
    """A pod hami placed and the kubelet runs: its placement annotations and nodeName."""
    pod = pod_obj(name, mem=mem)
    devices = codec.encode_pod_devices([[ContainerDevice(gpu_uuid(node, 0), "NVIDIA", mem, 0)]])
    pod["metadata"]["annotations"] = {codec.VGPU_NODE_ANNOTATION: node, codec.ALLOCATED_ANNOTATION: devices,
                                      codec.TO_ALLOCATE_ANNOTATION: devices, codec.BIND_PHASE_ANNOTATION: "success"}
    pod["spec"]["nodeName"] = node
    return pod


def refused_on_shares(store, name: str) -> None:
    status = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                              "message": f"0/{NODES} nodes are available: {NODES} {CARD_INSUFFICIENT_MEMORY}."}]}
    store.patch("pods", "default", name, orjson.dumps({"status": status}), MERGE, subresource="status")


async def test_many_pending_pods_are_decided_a_few_at_a_time_and_not_again_until_something_changes(apiserver):
    store = apiserver.store
    async with running_env(apiserver, hami_nodes(NODES, gpus=1), gpu_preemption=True) as env:
        p = env.sched.preempter
        loop = asyncio.get_running_loop()
        calls: list[tuple[bool, int, int, str]] = []  # (loop turned since the last call, nodes, tick, pod)
        turned = [True]
        real = p.share_failures

        def mark() -> None:
            turned[0] = True

        def counting(pod, names):
            calls.append((turned[0], len(names), p.ticks, pod["metadata"]["name"]))
            turned[0] = False
            loop.call_soon(mark)  # runs only if the controller gives the loop back before its next fit
            return real(pod, names)

        p.share_failures = counting
        for i in range(NODES):
            store.create("pods", "default", running_pod(f"run-{i}", f"n{i}", 30720))  # 10 GiB left on each
        index = env.sched.state.index
        await eventually(lambda: all(list(index.pods_on(f"n{i}")) for i in range(NODES)), 10)
        for i in range(PENDING):  # 20 GiB each, priority 0 like everything running: no preemption can help
            store.create("pods", "default", pod_obj(f"crowd-{i}", mem=20480))
            refused_on_shares(store, f"crowd-{i}")
        await eventually(lambda: len(p.refusals) == PENDING, 60)
        assert set(p.refusals.values()) == {"no lower-priority pod uses GPUs on the nodes it was refused"}

        first = list(calls)
        pods = [name for *_, name in first]
        assert sorted(set(pods)) == sorted(f"crowd-{i}" for i in range(PENDING))
        steps = -(-NODES // controller.NODES_PER_STEP)
        assert len(first) == PENDING * steps  # each refit once, in steps of at most NODES_PER_STEP nodes
        assert max(n for _, n, _, _ in first) <= controller.NODES_PER_STEP
        assert all(turned_before for turned_before, *_ in first[1:])  # the loop ran between any two steps
        per_tick: dict[int, set[str]] = {}
        for _, _, tick, name in first:
            per_tick.setdefault(tick, set()).add(name)
        assert max(len(v) for v in per_tick.values()) <= controller.DECISIONS_PER_TICK
        assert p.decisions == PENDING

        # nothing changes but the node agents' heartbeats: 10 more ticks, no refit, no decision
        for i in range(NODES):
            store.patch("nodes", "", f"n{i}", orjson.dumps({"metadata": {"annotations": {
                codec.HANDSHAKE_ANNOTATION: codec.encode_handshake_reported(time.time(), None)}}}), MERGE)
        ticks = p.ticks
        await eventually(lambda: p.ticks >= ticks + 10, 30)
        assert len(calls) == len(first) and p.decisions == PENDING

        # a node's labels change (a pod's node affinity may now allow it): each is refit again, once
        generation = p.generation
        store.patch("nodes", "", "n1", orjson.dumps({"metadata": {"labels": {"zone": "b"}}}), MERGE)
        await eventually(lambda: p.generation > generation, 10)
        await eventually(lambda: p.decisions >= 2 * PENDING, 60)
        again = [name for *_, name in calls[len(first):]]
        assert set(again) == set(pods)
        ticks = p.ticks
        await eventually(lambda: p.ticks >= ticks + 3, 30)
        assert p.decisions == 2 * PENDING  # nothing changed since: no third decision
        assert all(w.backoff >= controller.BACKOFF_MIN_S for w in p.watched.values())
