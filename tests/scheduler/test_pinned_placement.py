"""A placement outlives its annotations, in the scheduler's cache on the embedded API server:
a pod counted while bound where its placement says stays counted, by UID, with the devices it was
counted with, whatever its annotations later say (stripped, or rewritten to fewer devices), through a
per-pod resync and a full rebuild; the init-container release (status) still shrinks it; it is
released when it ends (Succeeded, or deleted), and a pod of the same name with a new UID is a new pod."""

from __future__ import annotations

import orjson

from hami.device import codec
from hami.device.model import ContainerDevice
from tests.kube.helpers import eventually, gpu_uuid
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.scheduler.test_state_io import placed, used

MERGE = "application/merge-patch+json"
KEYS = (codec.VGPU_NODE_ANNOTATION, codec.ALLOCATED_ANNOTATION, codec.TO_ALLOCATE_ANNOTATION)


def patch(store, name: str, body: dict, sub: str = "") -> None:
    store.patch("pods", "default", name, orjson.dumps(body), MERGE, subresource=sub)


async def test_a_bound_pod_stays_counted_whatever_its_annotations_say_until_it_ends(apiserver):
    store = apiserver.store
    uid = store.create("pods", "default", placed("p", "n0", 30000, 30)).obj["metadata"]["uid"]
    async with running_env(apiserver, hami_nodes(1)) as env:
        state = env.sched.state
        await eventually(lambda: used(env, "n0") == (1, 30000, 30))
        assert uid in state.pinned
        patch(store, "p", {"metadata": {"annotations": dict.fromkeys(KEYS)}})
        await eventually(lambda: not (state.pod("default", "p")["metadata"].get("annotations") or {}))
        assert used(env, "n0") == (1, 30000, 30)
        smaller = codec.encode_pod_devices(((ContainerDevice(gpu_uuid("n0", 0), "NVIDIA", 1, 0),),))
        patch(store, "p", {"metadata": {"annotations": {codec.VGPU_NODE_ANNOTATION: "n0",
                                                        codec.ALLOCATED_ANNOTATION: smaller}}})
        await eventually(lambda: (state.pod("default", "p")["metadata"].get("annotations") or {}).get(
            codec.ALLOCATED_ANNOTATION) == smaller)
        assert used(env, "n0") == (1, 30000, 30)
        patch(store, "p", {"metadata": {"annotations": dict.fromkeys(KEYS)}})
        await eventually(lambda: not (state.pod("default", "p")["metadata"].get("annotations") or {}))
        state.resync_pod("default/p", state.pod("default", "p"))
        assert used(env, "n0") == (1, 30000, 30) and uid in state.pinned
        state.rebuild()
        assert used(env, "n0") == (1, 30000, 30) and uid in state.pinned
        assert state.index.pod(uid).namespace == "default"  # its namespace's quota counts it too
        patch(store, "p", {"status": {"phase": "Succeeded"}}, sub="status")
        await eventually(lambda: used(env, "n0") == (0, 0, 0))
        assert uid not in state.pinned


async def test_a_pinned_pod_still_shrinks_when_its_init_containers_are_done_and_is_freed_on_delete(apiserver):
    store = apiserver.store
    uid = store.create("pods", "default", placed("i", "n0", 4000, 40, init=True)).obj["metadata"]["uid"]
    async with running_env(apiserver, hami_nodes(1)) as env:
        state = env.sched.state
        await eventually(lambda: used(env, "n0") == (1, 4000, 40))
        patch(store, "i", {"metadata": {"annotations": dict.fromkeys(KEYS)}})
        await eventually(lambda: not (state.pod("default", "i")["metadata"].get("annotations") or {}))
        assert used(env, "n0") == (1, 4000, 40)
        patch(store, "i", {"status": {"phase": "Running", "initContainerStatuses": [
            {"name": "init", "state": {"terminated": {"exitCode": 0}}}]}}, sub="status")
        await eventually(lambda: used(env, "n0") == (1, 2000, 40))  # the app container's share only
        store.delete("pods", "default", "i")
        await eventually(lambda: used(env, "n0") == (0, 0, 0))
        assert uid not in state.pinned and state.index.pod(uid) is None
        # The same name again is another pod (another UID): counted from its own annotations.
        store.create("pods", "default", placed("i", "n0", 1000, 10))
        await eventually(lambda: used(env, "n0") == (1, 1000, 10))


async def test_an_unbound_pods_placement_is_still_rolled_back(apiserver):
    """Not pinned before it is bound: a rollback of /filter's placement still frees its devices."""
    store = apiserver.store
    store.create("pods", "default", placed("u", "n0", 5000, 5, bound=False))
    async with running_env(apiserver, hami_nodes(1)) as env:
        patch_node = {"metadata": {"annotations": {
            codec.NODE_LOCK_ANNOTATION: codec.encode_node_lock(1_790_000_000, "default", "u")}}}
        store.patch("nodes", "", "n0", orjson.dumps(patch_node), MERGE)
        await eventually(lambda: used(env, "n0") == (1, 5000, 5))
        assert not env.sched.state.pinned
        patch(store, "u", {"metadata": {"annotations": dict.fromkeys(KEYS)}})
        await eventually(lambda: used(env, "n0") == (0, 0, 0))
