"""Hostile annotations on live objects (node and pod annotations): a running scheduler
watches 30 nodes whose register, handshake and node-lock annotations are damaged versions of
valid ones, and 40 pods whose vgpu-node and devices-allocated annotations are damaged, next to
one healthy node with two correctly annotated pods. No informer handler fails; the damaged
objects are refused with a reason (FailedNodes) or ignored (unreadable pods), the healthy
node's usage counts exactly its two readable pods, a new pod is filtered onto the healthy node
and bound there, and a bind to a node whose lock annotation is garbage gets a clear error."""

from __future__ import annotations

import random

import pytest

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.kube import informer as informer_mod
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, start_env, stop_env
from tests.reliability._fuzz import damage_text as _damage
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(60)


class SpyLog:
    def __init__(self, inner):
        self.inner, self.failures = inner, []

    def exception(self, *args, **kwargs):
        self.failures.append((args, kwargs))
        return self.inner.exception(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_damaged_annotations_on_live_objects_are_refused_and_scheduling_goes_on(apiserver, monkeypatch):
    spy = SpyLog(informer_mod.log)
    monkeypatch.setattr(informer_mod, "log", spy)
    rng = random.Random(11)
    good = node_obj("good", 2, handshake=requesting_now())
    store = apiserver.store
    store.create("nodes", "", good)
    reg = good["metadata"]["annotations"][codec.REGISTER_ANNOTATION]
    for i in range(30):
        n = node_obj(f"bad{i}", 2, handshake=_damage(rng, requesting_now()))
        annos = n["metadata"]["annotations"]
        annos[codec.REGISTER_ANNOTATION] = _damage(rng, reg)
        if i % 3 == 0:
            annos[codec.NODE_LOCK_ANNOTATION] = _damage(rng, codec.encode_node_lock(1_790_000_000, "default", "x"))
        store.create("nodes", "", n)
    env = await start_env(apiserver)
    try:
        uuid = codec.decode_node_devices(reg)[0].id
        valid = codec.encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", 1000, 10)]])
        for i in range(42):
            text = valid if i < 2 else _damage(rng, valid)
            node = "good" if i < 2 or i % 2 else _damage(rng, "good")
            pod = pod_obj(f"p{i}", scheduler="other", annotations={
                "hami.io/vgpu-node": node, codec.ALLOCATED_ANNOTATION: text, "hami.io/bind-phase": "success"})
            store.create("pods", "default", pod)
            if i < 2 or node == "good":
                store.bind("default", f"p{i}", {"target": {"name": "good"}})
        names = ["good"] + [f"bad{i}" for i in range(30)]
        await env.sched.state.pods.wait_for(lambda: len(env.sched.state.pods.store) >= 42, 10)
        # The healthy node counts at least its two readable pods; a damaged text that still decodes
        # is simply another reading of the same device (never a crash, never a negative count).
        usage = env.sched.state.index.node("good")
        assert usage is not None, (env.sched.state.usable, env.sched.state.registered.get("good"))
        (dev, _) = usage.devices
        assert dev.used >= 2 and dev.usedmem >= 2000
        newcomer = env.create_pod(pod_obj("newcomer", mem=2000))
        out = await env.filter(newcomer, names)
        assert out["NodeNames"] == ["good"], out
        broken = set()
        for name in names[1:]:
            try:
                codec.decode_node_devices(store.get("nodes", "", name)["metadata"]["annotations"][
                    codec.REGISTER_ANNOTATION])
            except codec.CodecError:
                broken.add(name)
        assert len(broken) > 20
        refused = await env.filter(newcomer, sorted(broken))
        assert refused["NodeNames"] is None and set(refused["FailedNodes"]) == broken
        assert all(refused["FailedNodes"].values())
        out = await env.filter(newcomer, names)
        assert out["NodeNames"] == ["good"], out
        assert (await env.bind(newcomer, "good")) == {"Error": ""}
        locked = [f"bad{i}" for i in range(0, 30, 3)]
        stranger = env.create_pod(pod_obj("stranger", gpus=1, mem=100))
        errors = []
        for name in locked:
            env.sched.placer.commit(stranger, stranger["metadata"]["uid"], name,
                                    ((codec.decode_pod_devices(valid)[0][0],),), ())
            err = (await env.bind(stranger, name))["Error"]
            errors.append(err)
        assert all(errors), errors  # a garbage lock (or registration) is an error, not a crash
        assert spy.failures == []
        record("hostile annotations on live objects", fuzz_inputs=30 * 3 + 40, failed_nodes=len(refused["FailedNodes"]),
               bind_errors=len(errors))
    finally:
        await stop_env(env)
