"""The placement reaches the device plugin through the Binding only: /bind writes the
node lock and one Binding; the pod's first version that carries `hami.io/vgpu-node` is the one that
sets spec.nodeName (no earlier write names a node, so a replica dying before the binding leaves
nothing); HAMi's GetPendingPod conditions hold on that version (Pending, bind-phase allocating,
bind-time, vgpu-node naming the node, the node lock naming the pod); the node agent's real
Allocate (PodAllocator, reading informer caches as on a node) finds the pod, answers the
devices /filter chose, labels the pod `hami.io/vgpu-node` and releases the lock."""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from hami.agent import allocate as alloc
from hami.agent.deviceplugin import PodAllocator
from hami.config import KubeSettings
from hami.device import codec
from hami.device.nodeconfig import DeviceSettings
from hami.kube.client import KubeClient
from hami.kube.informer import Informer
from hami.kube.nodelock import NodeLocker
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as e:
        yield e


async def test_the_device_plugin_finds_the_placement_that_came_only_in_the_binding(env, apiserver, tmp_path):
    watcher = apiserver.store.watch("pods", "default")  # every version of the pod, in order
    pod = env.create_pod(pod_obj("b1", mem=3000, cores=30))
    node = (await env.filter(pod, ["n0", "n1"]))["NodeNames"][0]
    patches = env.client.total_requests(verb="patch", resource="pods")
    assert (await env.bind(pod, node))["Error"] == ""
    assert env.client.total_requests(verb="patch", resource="pods") == patches  # nothing but the Binding

    versions = [orjson.loads(line)["object"] for line in watcher.take()]
    watcher.close()
    placed = [v for v in versions if (v["metadata"].get("annotations") or {}).get(codec.VGPU_NODE_ANNOTATION)]
    assert placed and placed[0]["spec"].get("nodeName") == node  # the same write set both
    assert all(not v["spec"].get("nodeName") for v in versions[: versions.index(placed[0])])
    first = placed[0]
    annos = first["metadata"]["annotations"]
    # HAMi's GetPendingPod (pkg/util/util.go) on that version:
    assert first["status"].get("phase", "Pending") == "Pending"
    assert annos[codec.BIND_PHASE_ANNOTATION] == "allocating" and codec.BIND_TIME_ANNOTATION in annos
    assert annos[codec.VGPU_NODE_ANNOTATION] == node
    assert alloc.allocating_pods([first], node) == [first]
    lock = codec.decode_node_lock(apiserver.store.get("nodes", "", node)["metadata"]["annotations"][
        codec.NODE_LOCK_ANNOTATION])
    assert (lock.namespace, lock.name) == ("default", "b1")  # GetAllocatePodByNode's way in
    [[dev]] = [c for c in codec.decode_pod_devices(annos[codec.TO_ALLOCATE_ANNOTATION]) if c]
    assert (dev.usedmem, dev.usedcores) == (3000, 30)
    assert env.sched.placer.held.get(pod["metadata"]["uid"]) is None  # forgotten once bound

    # The node agent's real Allocate, from its own informer caches.
    agent = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig), role="node-agent")
    pods = Informer(agent, "pods", field_selector=f"spec.nodeName={node}")
    nodes = Informer(agent, "nodes", field_selector=f"metadata.name={node}")
    stop = asyncio.Event()
    tasks = [asyncio.create_task(pods.run(stop)), asyncio.create_task(nodes.run(stop))]
    try:
        assert await pods.wait_synced(10) and await nodes.wait_synced(10)
        hook = str(tmp_path)
        os.makedirs(os.path.join(hook, "vgpu"))
        for f in ("libvgpu.so", "ld.so.preload"):
            (tmp_path / "vgpu" / f).write_bytes(b"")
        allocator = PodAllocator(agent, node, lambda: pods.store, lambda: nodes.store, lambda: DeviceSettings(),
                                 hook, locker=NodeLocker(agent, nodes, lambda a, b: pods.store.get(f"{a}/{b}")),
                                 vgpu_lock_dir=str(tmp_path / "lock"))
        allocator._prepare_dirs = lambda containers: None  # no container dirs on this machine
        [answer] = await allocator.allocate([[f"{node}-req-0"]])
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == dev.uuid
        stored = apiserver.store.get("pods", "default", "b1")
        assert stored["metadata"]["annotations"][codec.BIND_PHASE_ANNOTATION] == "success"
        assert stored["metadata"]["labels"][codec.VGPU_NODE_ANNOTATION] == node  # HAMi's monitor reads it
        await eventually(lambda: codec.NODE_LOCK_ANNOTATION not in (
            apiserver.store.get("nodes", "", node)["metadata"].get("annotations") or {}))
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await agent.close()
