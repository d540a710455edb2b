"""Property: placements chosen by select_node never over-commit a GPU.

Random clusters and random sequences of pods (GPU count, gpumem or percentage, cores up to 120,
init containers, policies, numa-bind, mutex) are placed with select_node and recorded with
UsageIndex.add_pod, with random deletions in between. After every step, for every device:
used <= count, usedmem <= totalmem, usedcores <= totalcore. Also: a successful selection's
devices are on the chosen node, one entry per container, and a failed one names every node.
And: the first-fit node choice equals the fit-every-node-then-sort choice (performance.md).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDeviceRequest, DeviceInfo
from hami.scheduler.placement.fit import pod_request
from hami.scheduler.placement.score import evaluate_nodes, select_node
from hami.scheduler.placement.usage import UsageIndex

gpu = st.builds(
    lambda count, mem, core, numa: (count, mem, core, numa),
    st.integers(1, 4), st.sampled_from([1000, 4000, 8000]), st.sampled_from([100, 200]), st.integers(0, 1),
)
cluster = st.lists(st.lists(gpu, min_size=1, max_size=4), min_size=1, max_size=4)

request = st.one_of(
    st.none(),
    st.builds(
        lambda nums, mem, pct, cores: ContainerDeviceRequest(nums, "NVIDIA", mem, pct if mem == 0 else 101, cores),
        st.integers(1, 3), st.sampled_from([0, 0, 500, 1000, 3000, 7000]), st.sampled_from([101, 10, 50, 100]),
        st.sampled_from([0, 10, 30, 50, 100, 120]),
    ),
)
pod = st.tuples(
    st.lists(request, min_size=1, max_size=4),
    st.integers(0, 2),
    st.sampled_from(["spread", "binpack", "mutex", "numa", "binpack,numa"]),
    st.sampled_from(["binpack", "spread"]),
    st.booleans(),
)
ops = st.lists(st.one_of(pod, st.integers(0, 50)), min_size=1, max_size=25)


def check(idx: UsageIndex) -> None:
    for n in idx.nodes.values():
        for d in n.devices:
            assert 0 <= d.used <= d.count, d
            assert 0 <= d.usedmem <= d.totalmem, d
            assert 0 <= d.usedcores <= d.totalcore, d


def build_index(nodes) -> tuple[UsageIndex, list[str]]:
    """A UsageIndex of nodes n0, n1, ... from the `cluster` strategy's (count, mem, cores, numa) tuples."""
    idx = UsageIndex()
    names = []
    for i, gpus in enumerate(nodes):
        name = f"n{i}"
        names.append(name)
        idx.set_node(name, [
            DeviceInfo(id=f"{name}-g{j}", count=c, devmem=m, devcore=core, type="NVIDIA A100", index=j,
                       numa=numa, health=True)
            for j, (c, m, core, numa) in enumerate(gpus)
        ])
    return idx, names


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster, ops)
def test_random_placements_never_over_commit(nodes, steps):
    idx, names = build_index(nodes)
    placed: list[str] = []
    for k, step in enumerate(steps):
        if isinstance(step, int):
            if placed:
                idx.remove_pod(placed.pop(step % len(placed)))
            check(idx)
            continue
        reqs, num_init, gpol, npol, numa_bind = step
        num_init = min(num_init, len(reqs))
        annos = {"nvidia.com/numa-bind": "true"} if numa_bind else {}
        p = pod_request(reqs, num_init, annos, gpu_policy=gpol, node_policy=npol)
        sel = select_node(idx.nodes, names, p)
        if sel.node is None:
            assert set(sel.failed_nodes) == set(names)
            continue
        assert len(sel.devices) == len(reqs)
        node = idx.nodes[sel.node]
        for ctr, r in zip(sel.devices, reqs, strict=True):
            assert len(ctr) == (r.nums if r is not None else 0)
            assert all(c.uuid in node.by_id for c in ctr)
        key = f"ns/p{k}"
        idx.add_pod(key, sel.node, sel.devices, num_init=num_init)
        placed.append(key)
        check(idx)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster, st.lists(pod, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_first_fit_picks_the_node_a_full_evaluation_picks(nodes, pods, rnd):
    """performance.md shortcut: trying nodes in score order and stopping at the first fit gives
    the node HAMi's fit-everything-then-sort would give (same score; ties by name order)."""
    idx, names = build_index(nodes)
    for k, (reqs, num_init, gpol, npol, numa_bind) in enumerate(pods):
        num_init = min(num_init, len(reqs))
        annos = {"nvidia.com/numa-bind": "true"} if numa_bind else {}
        p = pod_request(reqs, num_init, annos, gpu_policy=gpol, node_policy=npol)
        order = list(names)
        rnd.shuffle(order)
        sel = select_node(idx.nodes, order, p)
        fits, failed = evaluate_nodes(idx.nodes, order, p)
        if sel.node is None:
            assert fits == [] and failed == sel.failed_nodes
            continue
        scores = [r.score for r in fits]
        best = max(scores) if npol != "spread" else min(scores)
        assert sel.score == best
        assert sel.node == fits[0].node and sel.devices == fits[0].devices
        idx.add_pod(f"ns/p{k}", sel.node, sel.devices, num_init=num_init)
        check(idx)
