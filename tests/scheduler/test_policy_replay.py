"""HAMi's node and GPU policy cases replayed in 50 seeded random orders in ONE scheduler process
(hami.scheduler.placement.contention): each case is filtered, bound and its lock released by the
agent through the real extender HTTP path against the embedded API server, and the node and GPU
chosen are HAMi's every time, whatever was placed before it.

The cases: `TestLess` of pkg/scheduler/policy/node_policy_test.go (spread takes the lower scored
node, binpack the higher, whichever comes first in the request), `Test_Filter` of
pkg/scheduler/scheduler_test.go (the node x GPU policy matrix) and the two-node cases of
`Test_calcScore` (pkg/scheduler/score_test.go; ties go to the earlier node in the request), plus
a binpack-against-spread example (two nodes, one running a 1,000 MiB pod, spread). Each replayed case gets nodes of
its own, so nothing contends for its candidates; as kube-scheduler's binding cycles run on their
own goroutines, a case's bind may come after the next cases' filters (the seed decides, up to
three decisions held at once), so this replica has decisions pending elsewhere while a case is
decided: a policy must not bend for that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env
from tests.scheduler.test_bind_io import plugin_allocate

ORDERS = 50
MAX_HELD = 3  # decisions held at once (filter answered, bind not yet sent)
CARD_MEM = 8000


@dataclass(frozen=True)
class Case:
    """Two nodes (in request order), each a list of cards (id, used MiB, used cores); the pod's
    request and policy annotations; HAMi's node and card."""

    name: str
    nodes: tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...]
    want_node: str
    want_card: str
    mem: int = 1000
    cores: int = 20
    node_policy: str = ""
    gpu_policy: str = ""


def card(dev: str, mem: int = 0, cores: int = 0) -> tuple[str, int, int]:
    return (dev, mem, cores)


HALF = (4000, 50)  # score_test.go's "50% core, 50% mem"

CASES = [
    # node_policy_test.go TestLess: i = the first node in the request, j = the second.
    Case("TestLess/Spread strategy, i score higher",
         (("node1", (card("d1", *HALF),)), ("node2", (card("d2"),))), "node2", "d2", node_policy="spread"),
    Case("TestLess/Spread strategy, j score higher",
         (("node1", (card("d1"),)), ("node2", (card("d2", *HALF),))), "node1", "d1", node_policy="spread"),
    Case("TestLess/Default strategy (Binpack), i score lower",
         (("node1", (card("d1"),)), ("node2", (card("d2", *HALF),))), "node2", "d2", node_policy="binpack"),
    Case("TestLess/Default strategy (Binpack), j score lower",
         (("node1", (card("d1", *HALF),)), ("node2", (card("d2"),))), "node1", "d1", node_policy="binpack"),
    # scheduler_test.go Test_Filter: node1 device1 at 25 %, node2 device4 at 75 %.
    *(Case(f"Test_Filter/node use {np} gpu use {gp} policy",
           (("node1", (card("device1", 2000, 25), card("device2"))),
            ("node2", (card("device3"), card("device4", 6000, 75)))),
           want_node, want_card, node_policy=np, gpu_policy=gp)
      for gp, np, want_node, want_card in (("binpack", "binpack", "node2", "device4"),
                                           ("spread", "binpack", "node2", "device3"),
                                           ("binpack", "spread", "node1", "device1"),
                                           ("spread", "spread", "node1", "device2"))),
    # score_test.go Test_calcScore, two nodes (the configured policies: binpack nodes, spread GPUs).
    Case("Test_calcScore/2 node 1 device, no use", (("node1", (card("uuid1"),)), ("node2", (card("uuid2"),))),
         "node1", "uuid1", cores=30),
    Case("Test_calcScore/2 node 1 device, node1-device1 50%",
         (("node1", (card("uuid1", *HALF),)), ("node2", (card("uuid2"),))), "node1", "uuid1", cores=30),
    Case("Test_calcScore/2 node 1 device, node1-device1 50%, spread",
         (("node1", (card("uuid1", *HALF),)), ("node2", (card("uuid2"),))), "node2", "uuid2", cores=30,
         node_policy="spread"),
    # Issue 38's example: one node running a 1,000 MiB pod, the pod asks for spread.
    Case("two nodes, one running a 1000 MiB pod, spread",
         (("node1", (card("g1", 1000, 0),)), ("node2", (card("g2"),))), "node2", "g2", node_policy="spread"),
]


def node_body(name: str, cards: list[str]) -> dict:
    infos = [DeviceInfo(id=c, count=10, devmem=CARD_MEM, devcore=100, type="NVIDIA A100-SXM4-40GB", index=i, numa=0,
                        mode="hami-core", health=True) for i, c in enumerate(cards)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {}, "annotations": {
                codec.REGISTER_ANNOTATION: codec.encode_node_devices(infos),
                codec.HANDSHAKE_ANNOTATION: requesting_now()}},
            "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(cards))},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def running_pod(name: str, node: str, uuid: str, mem: int, cores: int) -> dict:
    """An already placed pod using one card (what HAMi's test puts in the node's usage)."""
    devices = codec.encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", mem, cores)]])
    pod = pod_obj(name, mem=mem, cores=cores, annotations={
        codec.VGPU_NODE_ANNOTATION: node, codec.BIND_PHASE_ANNOTATION: "success",
        codec.ALLOCATED_ANNOTATION: devices, codec.TO_ALLOCATE_ANNOTATION: devices})
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    return pod


class Replay:
    def __init__(self, env):
        self.env = env
        self.instances = 0
        self.held: list[tuple[dict, str]] = []  # (pod, node) filtered, not yet bound

    async def setup(self, case: Case) -> tuple[str, list[str]]:
        """The case's nodes and running pods under a prefix of their own; waits for the cache."""
        self.instances += 1
        prefix = f"r{self.instances}"
        index = self.env.sched.state.index
        names, used = [], {}
        for node, cards in case.nodes:
            name = f"{prefix}-{node}"
            names.append(name)
            self.env.store.create("nodes", "", node_body(name, [f"{prefix}-{c}" for c, _, _ in cards]))
            for c, mem, cores in cards:
                if mem or cores:
                    self.env.create_pod(running_pod(f"{prefix}-{c}-user", name, f"{prefix}-{c}", mem, cores))
                    used[name] = used.get(name, 0) + mem
        await eventually(lambda: all(
            index.node(n) is not None and n in self.env.sched.state.usable
            and sum(d.usedmem for d in index.node(n).devices) == used.get(n, 0) for n in names))
        return prefix, names

    async def filter(self, case: Case) -> tuple[str, str]:
        """The case's pod filtered: (node, card) without the prefix; its bind is left held."""
        prefix, names = await self.setup(case)
        annos = {}
        if case.node_policy:
            annos[codec.NODE_SCHEDULER_POLICY_ANNOTATION] = case.node_policy
        if case.gpu_policy:
            annos[codec.GPU_SCHEDULER_POLICY_ANNOTATION] = case.gpu_policy
        pod = self.env.create_pod(pod_obj(f"{prefix}-test", mem=case.mem, cores=case.cores, annotations=annos))
        out = await self.env.filter(pod, names)
        assert out["Error"] == "" and len(out["NodeNames"]) == 1, out
        node = out["NodeNames"][0]
        devices = codec.decode_pod_devices(self.env.placement("default", pod["metadata"]["name"])
                                           [codec.TO_ALLOCATE_ANNOTATION])
        self.held.append((pod, node))
        return node.removeprefix(f"{prefix}-"), devices[0][0].uuid.removeprefix(f"{prefix}-")

    async def bind_oldest(self) -> None:
        """kube-scheduler's bind of the oldest held decision, then the agent's Allocate (lock released)."""
        pod, node = self.held.pop(0)
        assert (await self.env.bind(pod, node))["Error"] == ""
        plugin_allocate(self.env.store, pod["metadata"]["name"], node)


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver) as e:
        yield e


async def test_policy_cases_give_hamis_answer_in_every_order(env):
    replay = Replay(env)
    want = {c.name: (c.want_node, c.want_card) for c in CASES}
    for seed in range(ORDERS):
        rng = random.Random(seed)
        order = rng.sample(CASES, len(CASES))
        got = {}
        for case in order:
            got[case.name] = await replay.filter(case)
            while replay.held and (len(replay.held) >= MAX_HELD or rng.random() < 0.5):
                await replay.bind_oldest()
        while replay.held:
            await replay.bind_oldest()
        await eventually(lambda: not env.sched.state.locked and not env.sched.placer.held)
        assert got == want, f"order {seed}: {[c.name for c in order]}"
