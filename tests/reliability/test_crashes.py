"""Crashes:
- a scheduler replica dies between taking the node lock and posting the binding: the lock stays
  on the node and refuses other pods until it expires (fake clock, --node-lock-timeout); then
  another replica takes it over, the orphaned pod is schedulable again, and no GPU is double-booked;
- a scheduler replica dies after taking the node lock and before the binding (the Binding carries the
  placement, so the holder has no bind-phase): the lock refuses other pods only until it is older than
  the longest possible /bind (--node-lock-orphan-timeout, 45 s), then is taken over, far inside the
  5-minute expiry;
- the node agent is stopped while an Allocate is in flight (its pod patch never answers): the pod
  ends bind-phase=failed, the node lock is released, and after the agent restarts the next pod's
  Allocate hands out that pod's own devices, never the orphan's;
- the kubelet restarts (three times in a row, once with its plugin sockets wiped): the device
  plugin re-registers each time and Allocate works afterwards."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import grpc
import orjson
import pytest

from hami.agent.role import Agent
from hami.device import codec
from hami.gpu.fake import FakeBackend
from hami.scheduler.role import start_scheduler
from tests.agent.harness import LOCK, NODE, U1, U2, NodeHarness
from tests.kube.helpers import config_for, eventually, node_obj, pod_obj
from tests.kube.scheduler_env import Env, requesting_now, stop_env
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(60)
MERGE = "application/merge-patch+json"


def annos(obj: dict) -> dict:
    return obj["metadata"].get("annotations") or {}


async def env_with_clock(apiserver, clock) -> Env:
    s = await start_scheduler(config_for(apiserver.kubeconfig), clock=clock)
    assert await s.state.wait_synced(10)
    return Env(apiserver, s, aiohttp.ClientSession())


class FakeClock:
    """Wall time plus an offset a test moves forward."""

    def __init__(self):
        self.t0, self.offset = time.time(), 0.0

    def __call__(self) -> float:
        return self.t0 + self.offset


async def killed_between_lock_and_binding(apiserver, clock) -> tuple[dict, dict]:
    """Replica A takes n0's lock for `orphan` and dies at its Binding (nothing after it runs); returns
    (orphan, other), two 20,000 MiB pods for the one 40,960 MiB GPU."""
    apiserver.store.create("nodes", "", node_obj("n0", 1, mem=40960, handshake=requesting_now()))
    a = await env_with_clock(apiserver, clock)
    orphan = a.create_pod(pod_obj("orphan", mem=20000))
    other = a.create_pod(pod_obj("other", mem=20000))
    killed = asyncio.Event()

    async def die(*args, **kwargs):  # the process dies here: nothing after this line runs
        killed.set()
        raise asyncio.CancelledError

    a.sched.client.bind_pod = die
    assert (await a.filter(orphan, ["n0"]))["NodeNames"] == ["n0"]
    bind = asyncio.create_task(a.bind(orphan, "n0"))
    await asyncio.wait_for(killed.wait(), 10)
    await asyncio.gather(bind, return_exceptions=True)
    await stop_env(a)
    return orphan, other


async def test_scheduler_killed_between_lock_and_binding(apiserver):
    clock = FakeClock()
    orphan, other = await killed_between_lock_and_binding(apiserver, clock)
    node = apiserver.store.get("nodes", "", "n0")
    assert codec.decode_node_lock(annos(node)[LOCK]).owned_by("default", "orphan")
    # the Binding carries the placement and bind-phase (one write): dead before it, the orphan has none
    assert "hami.io/bind-phase" not in annos(apiserver.store.get("pods", "default", "orphan"))

    b = await env_with_clock(apiserver, clock)
    try:
        # Before expiry the dead attempt's lock holds the node.
        assert (await b.filter(other, ["n0"]))["NodeNames"] == ["n0"]
        err = (await b.bind(other, "n0"))["Error"]
        assert "node lock contention" in err and "default/orphan" in err
        clock.offset = b.sched.config.scheduler.node_lock_timeout + 1  # fake time: the lock expires
        assert (await b.filter(other, ["n0"]))["NodeNames"] == ["n0"]
        assert (await b.bind(other, "n0"))["Error"] == ""
        assert codec.decode_node_lock(annos(apiserver.store.get("nodes", "", "n0"))[LOCK]).owned_by("default", "other")
        # The device plugin allocates `other` and releases the lock.
        apiserver.store.patch("pods", "default", "other",
                              b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}', MERGE)
        apiserver.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {"annotations": {LOCK: None}}}), MERGE)
        # The orphan is schedulable again, next to `other`, without double booking.
        orphan = apiserver.store.get("pods", "default", "orphan")
        assert (await b.filter(orphan, ["n0"]))["NodeNames"] == ["n0"]
        assert (await b.bind(orphan, "n0"))["Error"] == ""
        used = [0, 0]
        for name in ("orphan", "other"):
            pod = apiserver.store.get("pods", "default", name)
            assert pod["spec"]["nodeName"] == "n0"
            for ctr in codec.decode_pod_devices(annos(pod)[codec.ALLOCATED_ANNOTATION]):
                for d in ctr:
                    used[0] += 1
                    used[1] += d.usedmem
        assert used == [2, 40000]
        (dev,) = b.sched.state.index.node("n0").devices
        assert (dev.used, dev.usedmem) == (2, 40000)
        record("scheduler killed between lock and binding", lock_timeout_s=b.sched.config.scheduler.node_lock_timeout,
               takeovers=b.sched.locker.takeovers, double_booked=0)
    finally:
        await stop_env(b)


async def test_dead_binders_lock_is_taken_over_after_the_longest_bind_not_the_expiry(apiserver):
    clock = FakeClock()
    orphan, other = await killed_between_lock_and_binding(apiserver, clock)
    assert codec.decode_node_lock(annos(apiserver.store.get("nodes", "", "n0"))[LOCK]).owned_by("default", "orphan")
    assert annos(apiserver.store.get("pods", "default", "orphan")).get("hami.io/bind-phase") is None

    b = await env_with_clock(apiserver, clock)
    try:
        sc = b.sched.config.scheduler
        assert sc.node_lock_orphan_timeout + 15 < sc.node_lock_timeout  # the point: far inside the expiry
        clock.offset = sc.node_lock_orphan_timeout - 1  # a live /bind could still be this old: the lock holds
        assert (await b.filter(other, ["n0"]))["NodeNames"] == ["n0"]
        err = (await b.bind(other, "n0"))["Error"]
        assert "node lock contention" in err and "default/orphan" in err
        clock.offset = sc.node_lock_orphan_timeout + 1  # older than any /bind: its binder is dead
        assert (await b.filter(other, ["n0"]))["NodeNames"] == ["n0"]
        assert (await b.bind(other, "n0"))["Error"] == ""
        assert codec.decode_node_lock(annos(apiserver.store.get("nodes", "", "n0"))[LOCK]).owned_by("default", "other")
        assert b.sched.locker.takeovers == 1
        assert apiserver.store.get("pods", "default", "orphan")["spec"].get("nodeName") is None
        record("scheduler killed holding a lock (no bind-phase)", orphan_timeout_s=sc.node_lock_orphan_timeout,
               lock_expiry_s=sc.node_lock_timeout, taken_over_after_s=clock.offset, takeovers=b.sched.locker.takeovers)
    finally:
        await stop_env(b)


class HangingWrites:
    """The agent's API client, except that the Allocate patch (devices-to-allocate) never answers."""

    def __init__(self, client):
        self._client = client
        self.hung = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self._client, name)

    async def patch_pod(self, namespace, name, patch, *args, **kwargs):
        if "hami.io/vgpu-devices-to-allocate" in ((patch.get("metadata") or {}).get("annotations") or {}):
            self.hung.set()
            await asyncio.Event().wait()
        return await self._client.patch_pod(namespace, name, patch, *args, **kwargs)


async def test_agent_killed_during_allocate_fails_the_pod_and_releases_the_lock():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        orphan = await h.create_pod("orphan", {"main": 1}, f"{U1},NVIDIA,30000,60:;")
        hanging = HangingWrites(h.client)
        h.agent.allocator.client = hanging
        alloc = asyncio.create_task(h.kubelet.allocate_pod(orphan))
        await asyncio.wait_for(hanging.hung.wait(), 10)
        # Kill the agent mid-Allocate (its gRPC server cancels the call).
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        with pytest.raises(grpc.aio.AioRpcError):  # kubelet sees the RPC fail, whatever the code
            await alloc
        assert annos(await h.pod("orphan"))["hami.io/bind-phase"] == "failed"
        assert LOCK not in annos(await h.node())

        # The agent comes back; the next pod gets its own devices, not the orphan's.
        await h.start_agent()
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        nxt = await h.create_pod("next", {"main": 1}, f"{U2},NVIDIA,1000,10:;", bind_time=200)
        (c,) = (await h.kubelet.allocate_pod(nxt)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U2
        assert c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
        assert annos(await h.pod("next"))["hami.io/bind-phase"] == "success"
        assert annos(await h.pod("orphan"))["hami.io/bind-phase"] == "failed"
        assert LOCK not in annos(await h.node())
        record("agent killed during Allocate", orphan_phase="failed", lock_released=True,
               next_pod_devices="its own")


async def test_kubelet_restarts_plugin_reregisters_every_time():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        loop = asyncio.get_running_loop()
        times = []
        for i, wipe in enumerate((False, True, False)):
            await h.kubelet.restart(remove_plugin_sockets=wipe)
            started = loop.time()
            assert await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
            times.append(loop.time() - started)
            # the kubelet serves the registration before the agent's Register call returns and counts it
            await eventually(lambda i=i: h.agent.plugin.registrations == i + 2, timeout=10)
        pod = await h.create_pod("after", {"main": 1}, f"{U1},NVIDIA,1000,10:;")
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U1
        assert LOCK not in annos(await h.node())
        record("kubelet restart", restarts=3, registrations=h.agent.plugin.registrations,
               max_reregister_s=round(max(times), 2))
    assert h.leftover_sockets == []


class DeadClient:
    """What a SIGKILLed agent writes: nothing (every call fails before reaching the server)."""

    def __getattr__(self, name):
        async def dead(*args, **kwargs):
            raise ConnectionError("process killed")
        return dead


async def test_agent_hard_killed_during_allocate_never_hands_out_the_orphans_devices():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        orphan = await h.create_pod("orphan", {"main": 1}, f"{U1},NVIDIA,30000,60:;", bind_time=100)
        hanging = HangingWrites(h.client)
        h.agent.allocator.client = hanging
        alloc = asyncio.create_task(h.kubelet.allocate_pod(orphan))
        await asyncio.wait_for(hanging.hung.wait(), 10)
        h.agent.allocator.client = DeadClient()  # SIGKILL: no clean-up write gets out
        h.agent.locker.client = DeadClient()
        h.stop.set()
        await asyncio.wait_for(h.task, 20)
        with pytest.raises(grpc.aio.AioRpcError):
            await alloc
        assert annos(await h.pod("orphan"))["hami.io/bind-phase"] == "allocating"
        # kubelet rejects the pod whose Allocate failed (UnexpectedAdmissionError)
        await h.client.request("patch", "pods/status", "PATCH", "/api/v1/namespaces/default/pods/orphan/status",
                               body={"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}},
                               content_type="application/merge-patch+json")
        # The agent restarts; the scheduler has taken the node lock over for the next pod (the orphan is
        # terminal): the next pod gets its own devices. (Without a lock nothing is served: a forged
        # placement gets no devices.)
        h.stop = asyncio.Event()
        h.agent = Agent(h.client, NODE, FakeBackend(h.gpu_file, node_name=NODE), h.settings,
                        socket_dir=h.sockets, hook_path=h.hook, tick=0.05)
        ready = asyncio.Event()
        h.task = asyncio.create_task(h.agent.run(h.stop, ready))
        await asyncio.wait_for(ready.wait(), 20)
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        await h.client.patch_node(NODE, {"metadata": {"annotations": {LOCK: None}}})
        nxt = await h.create_pod("next", {"main": 1}, f"{U2},NVIDIA,1000,10:;", bind_time=200, lock=True)
        await h.agent.pods.wait_for(lambda: (h.agent.pods.store.get("default/orphan", {}).get("status") or {})
                                    .get("phase") == "Failed", 10)
        (c,) = (await h.kubelet.allocate_pod(nxt)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U2 and c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
        assert annos(await h.pod("next"))["hami.io/bind-phase"] == "success"
        record("agent hard-killed during Allocate", orphan_phase="Failed (kubelet)", next_pod_devices="its own")
