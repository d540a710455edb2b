"""/filter on more nodes than it fully evaluates (the kept candidate order and the cached name
list), over HTTP against the embedded API server.

Covers: request after request (the same list, so the decoder's cache serves it, and a reordered
subset), the node /filter answers is the node `select_node` picks on the usage the request met,
for binpack and spread; a pod no node fits gets FailedNodes equal to select_node's, for every
named node including an unregistered name; a lock this replica does not hold bends no policy,
while a node holding this replica's own decision is passed for the next best; pods placed this
way bind; full-Nodes bodies read node by node (nodescan) answer what the full
decode answers, unchanged Nodes taken from the scanner's cache.
"""

from __future__ import annotations

import random

import orjson
import pytest

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.scheduler.placement.fit import pod_request
from hami.scheduler.placement.score import select_node
from hami.scheduler.placer import FULL_EVALUATION_MAX_NODES
from tests.kube.helpers import gpu_uuid, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env

N = FULL_EVALUATION_MAX_NODES + 16


def _user(i: int, node: str, gpu: int, mem: int) -> dict:
    devs = codec.encode_pod_devices(((ContainerDevice(gpu_uuid(node, gpu), "NVIDIA", mem, 5),),))
    return pod_obj(f"user-{i}", annotations={"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": devs,
                                            "hami.io/vgpu-devices-to-allocate": devs})


@pytest.fixture
async def env(apiserver):
    rng = random.Random(16)
    for i in range(60):
        n = rng.randrange(N)
        apiserver.store.create("pods", "default", _user(i, f"n{n}", rng.randrange(2), rng.choice([1000, 8000, 30000])))
    async with running_env(apiserver, hami_nodes(N)) as e:
        yield e


def _expected(env, pod: dict, names: list[str]) -> tuple[str | None, dict]:
    ext = env.sched.placer
    requests, num_init = ext.requests_fn(pod)
    annos = pod["metadata"].get("annotations") or {}
    preq = pod_request(requests, num_init, annos, gpu_policy=ext.cfg.gpu_scheduler_policy,
                       node_policy=ext.cfg.node_scheduler_policy, namespace="default")
    sel = select_node(env.sched.state.index.nodes, names, preq)
    return sel.node, sel.failed_nodes


@pytest.mark.parametrize("policy", ["binpack", "spread"])
async def test_answers_equal_select_node_request_after_request(env, policy):
    names = [f"n{i}" for i in range(N)]
    subset = names[::-1][: N - 3]
    for i in range(24):
        pod = env.create_pod(pod_obj(f"p{i}", mem=[2000, 9000, 20000][i % 3], cores=10,
                                     annotations={"hami.io/node-scheduler-policy": policy}))
        ask = names if i % 4 else subset
        want, _ = _expected(env, pod, ask)
        out = await env.filter(pod, ask)
        assert out["NodeNames"] == [want] and not out["Error"], (i, out)
        # its bind comes before the next filter: no held decision steers that one (test_busy.py)
        env.forget_held()
    assert env.sched.extender.args.hits >= 12


async def test_nothing_fits_lists_every_node_as_select_node_does(env):
    names = ["ghost"] + [f"n{i}" for i in range(N)]
    pod = env.create_pod(pod_obj("huge", mem=200000))
    _, failed = _expected(env, pod, names)
    for _ in range(2):
        out = await env.filter(pod, names)
        assert out["NodeNames"] is None and out["FailedNodes"] == failed and len(failed) == N + 1
        assert list(out["FailedNodes"])[0] == "ghost"


async def test_a_node_held_by_our_burst_is_passed_for_the_next_best_and_the_pods_bind(env):
    env.sched.placer.monotonic = lambda: 0.0  # a burst: both decisions within one lock hold
    names = [f"n{i}" for i in range(N)]
    first = env.create_pod(pod_obj("first", mem=1000))
    best, _ = _expected(env, first, names)
    env.sched.state.locked.add(best)  # a lock this replica does not hold, nothing pending here:
    assert (await env.filter(first, names))["NodeNames"] == [best]  # the policy's best all the same
    env.sched.state.locked.discard(best)
    second = env.create_pod(pod_obj("second", mem=1000))
    assert _expected(env, second, names)[0] == best  # binpack alone would stack it on `best`
    out = await env.filter(second, names)
    chosen = out["NodeNames"][0]
    assert chosen != best  # `first` is held on `best`: our own burst contends for it
    for name, node in (("first", best), ("second", chosen)):
        assert not (await env.bind(env.pod("default", name), node))["Error"]
        stored = env.pod("default", name)
        assert stored["metadata"]["annotations"]["hami.io/vgpu-node"] == node
        assert stored["spec"]["nodeName"] == node


async def test_full_nodes_scanned_answers_equal_the_full_decode(env, monkeypatch):
    import hami.scheduler.extender.server as extmod

    ext = env.sched.extender
    items = [env.sched.state.nodes.store[f"n{i}"] for i in range(N)]
    # a node the scheduler does not know, its keys in the same order as the others
    items.append(dict(items[0], metadata={"name": "stranger", "annotations": {}}, status={}))
    for i, mem in enumerate([1000, 20000, 200000, 1000]):
        pod = env.create_pod(pod_obj(f"full-{i}", mem=mem))
        body = orjson.dumps({"Pod": pod, "Nodes": {"kind": "NodeList", "items": items}})
        assert len(body) >= extmod.SCAN_MIN_BYTES
        monkeypatch.setattr(extmod, "SCAN_MIN_BYTES", 1 << 40)
        want = await ext.filter(body)
        monkeypatch.setattr(extmod, "SCAN_MIN_BYTES", 16384)
        reused = ext.nodescan.reused
        out = await env.filter(pod, nodes={"kind": "NodeList", "items": items})
        assert out == orjson.loads(orjson.dumps(want))
        assert i == 0 or ext.nodescan.reused == reused + len(items)
    assert out["Nodes"]["items"][0]["metadata"]["name"].startswith("n")
    assert want["Nodes"] is not None
