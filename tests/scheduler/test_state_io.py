"""The watch-fed scheduler state against the embedded API server: pods count once they carry
hami.io/vgpu-node, a re-LIST after 410 Gone does not count any pod twice and leaves the caches a
fresh scheduler builds (thousands changed, stepped through the loop), a watch broken by a
server restart heals and the cache converges on what changed while it was down, terminal and
deleted pods release their devices, init-container usage collapses, and a node's registration
is decoded once per change of its text."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.kube.informer import REPLACE_STEP
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env, start_env, stop_env


def placed(name: str, node: str, mem: int, cores: int = 0, *, gpu: int = 0, init: bool = False,
           bound: bool = True) -> dict:
    dev = ContainerDevice(gpu_uuid(node, gpu), "NVIDIA", mem, cores)
    containers = ((dev,),) if not init else ((dev,), (ContainerDevice(dev.uuid, "NVIDIA", mem // 2, cores),))
    text = codec.encode_pod_devices(containers)
    p = pod_obj(name, annotations={"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": text,
                                   "hami.io/vgpu-devices-to-allocate": text},
                init=[{"name": "init", "image": "x"}] if init else None)
    if bound:
        p["spec"]["nodeName"] = node  # bound where its placement says: hami placed it
    return p


def used(env, node: str, gpu: int = 0) -> tuple[int, int, int]:
    d = env.sched.state.index.node(node).by_id[gpu_uuid(node, gpu)]
    return d.used, d.usedmem, d.usedcores


@pytest.fixture
async def env(apiserver):
    apiserver.store.create("pods", "default", placed("a", "n0", 1000, 10))
    apiserver.store.create("pods", "default", placed("b", "n0", 2000, 20))
    apiserver.store.create("pods", "default", pod_obj("unplaced", mem=5))
    async with running_env(apiserver, hami_nodes(2)) as e:
        yield e


async def test_pods_with_vgpu_node_are_counted_once(env):
    assert used(env, "n0") == (2, 3000, 30)
    assert env.sched.state.index.pod_count == 2


async def test_a_counted_pods_key_is_one_string_however_often_it_changes(env, apiserver):
    """The informer's store and the state's maps hold one "ns/name" string per pod, not copies."""
    state = env.sched.state
    uid = state.pod("default", "a")["metadata"]["uid"]
    stored = next(k for k in state.pods.store if k == "default/a")
    assert state.uid_keys[uid] is stored and state.pods.dispatching_key is None
    for i in range(3):
        pod = apiserver.store.get("pods", "default", "a")
        pod["metadata"]["labels"] = {"round": str(i)}
        apiserver.store.update("pods", "default", "a", pod)
    await eventually(lambda: (state.pod("default", "a")["metadata"].get("labels") or {}).get("round") == "2")
    held = next(k for k in state.pod_keys if k == "default/a")
    assert state.uid_keys[uid] is held is stored and state.pod_keys[held] == uid
    assert used(env, "n0") == (2, 3000, 30)


async def test_relist_after_gone_counts_nothing_twice(env, apiserver):
    pods = env.sched.state.pods
    await eventually(lambda: apiserver.store.watchers())
    await apiserver.stop()
    apiserver.store.create("pods", "default", placed("c", "n0", 500))
    apiserver.store.compact()
    await apiserver.start()
    await eventually(lambda: pods.relists_gone >= 1 and "default/c" in pods.store, timeout=10)
    assert used(env, "n0") == (3, 3500, 30)
    assert env.sched.state.index.pod_count == 3


def cache_view(state) -> dict:
    """What a scheduler's caches hold, in a form two schedulers' caches compare in."""
    index = state.index
    return {
        "pods": dict(state.pods.store), "nodes": dict(state.nodes.store), "quotas": dict(state.quotas.store),
        "records": {uid: index.pod(uid) for uid in state.uid_keys},
        "devices": {name: [(d.id, d.count, d.totalmem, d.totalcore, d.used, d.usedmem, d.usedcores, d.health)
                           for d in n.devices] for name, n in index.nodes.items()},
        "registered": dict(state.registered), "usable": set(state.usable), "locked": set(state.locked),
        "pod_keys": dict(state.pod_keys), "uid_keys": dict(state.uid_keys), "pinned": set(state.pinned),
    }


async def test_a_relist_of_thousands_leaves_the_caches_a_fresh_scheduler_builds(apiserver):
    """A re-list after 410 Gone goes through the store a step at a time (hami.kube.informer); with
    pods vanished, ended and new and nodes changed and gone in between, the caches it leaves equal
    those a scheduler started afterwards builds from one LIST."""
    n = int(2.5 * REPLACE_STEP)
    for i in range(n):
        apiserver.store.create("pods", "default", placed(f"p{i}", f"n{i % 40}", 100, 1, gpu=i % 2))
    async with running_env(apiserver, hami_nodes(40, count=100)) as env:
        state = env.sched.state
        await eventually(lambda: len(apiserver.store.watchers()) >= 3)
        before = {inf.kind: inf.replaced for inf in state.informers()}
        await apiserver.stop()
        for i in range(0, n, 3):
            apiserver.store.delete("pods", "default", f"p{i}")
        for i in range(1, n, 6):
            pod = apiserver.store.get("pods", "default", f"p{i}")
            apiserver.store.update("pods", "default", f"p{i}", {**pod, "status": {"phase": "Succeeded"}},
                                   subresource="status")
        for i in range(n, n + REPLACE_STEP):
            apiserver.store.create("pods", "default", placed(f"p{i}", f"n{i % 40}", 200, 2, gpu=i % 2))
        apiserver.store.delete("nodes", "", "n39")
        apiserver.store.patch("nodes", "", "n38", b'{"metadata":{"labels":{"v":"2"}}}',
                              "application/merge-patch+json")
        apiserver.store.compact()
        await apiserver.start()
        await eventually(lambda: all(inf.relists_gone >= 1 and inf.replaced > before[inf.kind]
                                     for inf in state.informers()), timeout=20)
        assert state.index.pod_count == n - len(range(0, n, 3)) - len(range(1, n, 6)) + REPLACE_STEP
        fresh = await start_env(apiserver)
        try:
            # both follow the same watches from here (a handshake write moves a node in both)
            await eventually(lambda: cache_view(state) == cache_view(fresh.sched.state), timeout=10)
            assert cache_view(state) == cache_view(fresh.sched.state)
        finally:
            await stop_env(fresh)


async def test_restart_heals_and_converges(env, apiserver):
    await eventually(lambda: len(apiserver.store.watchers()) >= 3)
    await apiserver.stop()
    apiserver.store.delete("pods", "default", "a")
    apiserver.store.create("pods", "default", placed("d", "n1", 700, 7))
    await apiserver.start()
    await eventually(lambda: env.sched.state.index.pod_count == 2 and used(env, "n1") == (1, 700, 7), timeout=10)
    assert used(env, "n0") == (1, 2000, 20)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_terminal_pods_release_devices(env, apiserver, phase):
    obj = apiserver.store.get("pods", "default", "a")
    obj = {**obj, "status": {"phase": phase}}
    apiserver.store.update("pods", "default", "a", obj, subresource="status")
    await eventually(lambda: used(env, "n0") == (1, 2000, 20))


async def test_deleted_pods_release_devices(env, apiserver):
    apiserver.store.delete("pods", "default", "b")
    await eventually(lambda: used(env, "n0") == (1, 1000, 10))


async def test_init_container_usage_collapses_then_shrinks(env, apiserver):
    apiserver.store.create("pods", "default", placed("i", "n1", 4000, 40, init=True))
    # init uses 4000/40, the app container 2000/40: HAMi counts max(init, app) = 4000 and 40 cores
    await eventually(lambda: used(env, "n1") == (1, 4000, 40))
    obj = apiserver.store.get("pods", "default", "i")
    status = {"phase": "Running", "initContainerStatuses": [
        {"name": "init", "state": {"terminated": {"exitCode": 0}}}]}
    apiserver.store.update("pods", "default", "i", {**obj, "status": status}, subresource="status")
    await eventually(lambda: used(env, "n1") == (1, 2000, 40))


async def test_registration_is_decoded_once_per_change(env, apiserver):
    state = env.sched.state
    await asyncio.sleep(0.1)
    before = state.decode_count
    for i in range(5):
        apiserver.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {"labels": {"i": str(i)}}}),
                              "application/merge-patch+json")
    await eventually(lambda: state.nodes.store["n0"]["metadata"]["labels"].get("i") == "4")
    assert state.decode_count == before
    reg = apiserver.store.get("nodes", "", "n0")["metadata"]["annotations"][codec.REGISTER_ANNOTATION]
    apiserver.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {"annotations": {
        codec.REGISTER_ANNOTATION: reg.replace('"count":10', '"count":5')}}}), "application/merge-patch+json")
    await eventually(lambda: state.index.node("n0").devices[0].count == 5)
    assert state.decode_count == before + 1
    assert used(env, "n0") == (2, 3000, 30)  # pods re-applied on the re-registered node


def test_pod_updates_keep_the_mig_placements_of_its_annotation():
    """The informer's recount passes hami.io/vgpu-mig-allocations on, so a status update does not
    free the MIG placement the extender took (a later pod would be handed the same one)."""
    from hami.device.model import DeviceInfo, MigPlacement
    from hami.scheduler.cache.state import ClusterState

    state = ClusterState(None)
    state.index.set_node("n0", (DeviceInfo(id="GPU-1", count=7, devmem=40960, devcore=100, type="NVIDIA A100",
                                           index=0, numa=0, mode="mig", health=True),), frozenset(), {})
    devices = ((ContainerDevice("GPU-1", "NVIDIA", 10240, 0),),)
    placement = MigPlacement(6, 1)
    state.index.add_pod("u1", "n0", devices, namespace="default", mig=(("GPU-1", placement),))
    annotations = {codec.VGPU_NODE_ANNOTATION: "n0", codec.ALLOCATED_ANNOTATION: codec.encode_pod_devices(devices),
                   codec.MIG_ALLOCATIONS_ANNOTATION: codec.encode_mig_allocations(
                       [codec.MigAllocation(0, 0, "GPU-1", "1g.10gb", placement)])}
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": annotations},
           "spec": {"containers": [{"name": "c"}], "nodeName": "n0"}, "status": {"phase": "Running"}}
    state.on_pod("MODIFIED", pod, pod)
    assert state.index.pod("u1").mig == (("GPU-1", placement),)
    assert state.index.node("n0").by_id["GPU-1"].mig_in_use == [placement]
    state.on_pod("DELETED", pod, None)
    assert state.index.node("n0").by_id["GPU-1"].mig_in_use == []
