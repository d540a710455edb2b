"""kube-scheduler's node sampling (percentageOfNodesToScore) against HAMi's node policy, through the
embedded loop, the real extender over HTTP and the embedded API server.

Covers: on 120 GPU nodes, the same binpack pods placed one at a time (each bound, its lock released and
counted by the scheduler before the next is created) after an anchor pod made n110 the fullest node:
- at 100 (the chart's setting, the loop's default) every cycle hands the extender all 120 nodes and
  every pod lands where HAMi's own selection over the whole cluster puts it (hami.scheduler.placement,
  as scripts/bench_e2e's one_at_a_time, fed the placements actually made): n110, until it is full;
- at 0 (kube-scheduler's adaptive default) each cycle hands over 100 nodes, a window that moves 100
  nodes on per cycle, so one cycle in six leaves n110 out and that pod lands elsewhere: the bend the
  chart's 100 prevents. Six pods fit on n110 after the anchor, so six consecutive cycles (every
  window start) run while it is the best node, and at least one pod must be bent.
"""

from __future__ import annotations

from hami.config import Config
from hami.device import codec
from hami.scheduler.placement import fit, score
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.role import make_requests_fn
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.sim._kubesched import gpu_node, running_cluster

NODES = 120  # over kube-scheduler's minFeasibleNodesToFind (100): sampling applies
ANCHOR_NODE, ANCHOR_MEM = "n110", 16000  # outside the first window (n000..n099)
POD_MEM, PODS = 4000, 6  # 16000 + 6 x 4000 fits the 40960 MiB card: n110 stays best for all six


class WholeCluster:
    """HAMi's own node choice over every node of the cluster, its usage fed what was actually placed."""

    def __init__(self, nodes: list[dict]):
        self.cfg = Config()
        self.requests_fn = make_requests_fn(self.cfg)
        self.index = UsageIndex(self.cfg.nvidia, self.cfg.vendors)
        self.names = [n["metadata"]["name"] for n in nodes]
        for n in nodes:
            self.index.set_node(n["metadata"]["name"], codec.decode_node_devices(
                n["metadata"]["annotations"][codec.REGISTER_ANNOTATION]))

    def _request(self, pod: dict):
        requests, num_init = self.requests_fn(pod)
        sched = self.cfg.scheduler
        return fit.pod_request(requests, num_init, {}, gpu_policy=sched.gpu_scheduler_policy,
                               node_policy=sched.node_scheduler_policy, namespace="default",
                               vendors=self.cfg.vendors), num_init

    def best(self, pod: dict) -> str | None:
        return score.select_node(self.index.nodes, self.names, self._request(pod)[0]).node

    def place(self, pod: dict) -> None:
        devices = codec.decode_pod_devices(pod["metadata"]["annotations"][codec.ALLOCATED_ANNOTATION])
        self.index.add_pod(f"default/{pod['metadata']['name']}", pod["spec"]["nodeName"], devices,
                           namespace="default", num_init=self._request(pod)[1])

    def used_mem(self, node: str) -> int:
        return sum(d.usedmem for d in self.index.nodes[node].devices)


async def place_one_at_a_time(apiserver, percentage: int):
    """(where each pod landed, where HAMi's policy over the whole cluster put it) and the loop's stats."""
    nodes = [gpu_node(f"n{i:03d}") for i in range(NODES)]
    whole = WholeCluster(nodes)
    async with running_cluster(apiserver, nodes, loop_kw={"percentage_of_nodes_to_score": percentage}) as c:
        sched = c.env.sched

        async def bound_and_counted(name: str) -> None:
            await eventually(lambda: c.node_of(name) and c.annotations(name).get(
                codec.BIND_PHASE_ANNOTATION) == "success", 10)
            whole.place(c.pod(name))
            node = c.node_of(name)
            await eventually(lambda: not sched.state.locked and not sched.placer.held and sum(
                d.usedmem for d in sched.state.index.node(node).devices) == whole.used_mem(node), 10)

        c.create(pod_obj("anchor", mem=ANCHOR_MEM, annotations={"nvidia.com/use-gpuuuid": gpu_uuid(ANCHOR_NODE, 0)}))
        await bound_and_counted("anchor")
        assert c.node_of("anchor") == ANCHOR_NODE
        placed = []
        for i in range(PODS):
            pod = pod_obj(f"p{i}", mem=POD_MEM)
            want = whole.best(pod)
            c.create(pod)
            await bound_and_counted(f"p{i}")
            placed.append((c.node_of(f"p{i}"), want))
        return placed, c.loop.stats


async def test_at_100_every_pod_lands_on_hamis_choice_over_the_whole_cluster(apiserver):
    placed, stats = await place_one_at_a_time(apiserver, 100)
    assert placed == [(ANCHOR_NODE, ANCHOR_NODE)] * PODS
    assert stats.nodes_to_extender == NODES * stats.filters  # every cycle saw every node


async def test_at_kube_schedulers_adaptive_default_sampling_bends_binpack(apiserver):
    placed, stats = await place_one_at_a_time(apiserver, 0)
    assert all(want == ANCHOR_NODE for _, want in placed)  # HAMi's choice over the cluster never moved
    bent = [got for got, want in placed if got != want]
    assert bent, placed  # some pods landed where the window, not the policy, put them
    assert ANCHOR_NODE not in bent
    assert stats.nodes_to_extender == 100 * stats.filters  # numFeasibleNodesToFind(0, 120) = 100 per cycle
