"""Node choice and per-pod fitting (hami.scheduler.placement.score, hami.scheduler.placement.fit.fit_pod).

Covers: golden cases of HAMi `pkg/scheduler/score_test.go` (Test_calcScore: chosen device and
node score 0 / 15 / 7.5), node score (§6.1) and order under binpack/spread with the pod
override, the first-fit shortcut giving the node HAMi's full sort would give, FailedNodes
(`node unregistered`, NodeInsufficientDevice bare, N/M reasons), init containers against fresh
copies and app containers cumulative (§5.1), empty entries for containers without GPUs, the
node left untouched by a fit, evaluate_nodes, and the event texts of §5.4.
"""

from __future__ import annotations

from hami.scheduler.placement import messages, score
from hami.scheduler.placement.fit import pod_request
from hami.scheduler.placement.score import evaluate_nodes, select_node
from hami.scheduler.placement.usage import UsageIndex, node_score

from ._helpers import dev, info, node, req


def one_gpu_pod(**kw):
    return pod_request([req(1, 1000, 101, 30)], 0, kw.pop("annos", {}), **kw)


# --------------------------------------------------------------------------- score_test.go

def test_calc_score_one_node_one_unused_device():
    n = node("node1", [dev("uuid1", count=10, totalmem=8000)])
    sel = select_node({"node1": n}, ["node1"], one_gpu_pod())
    assert sel.node == "node1" and sel.score == 0.0
    (cd,), = sel.devices
    assert (cd.uuid, cd.type, cd.usedmem, cd.usedcores, cd.idx) == ("uuid1", "NVIDIA", 1000, 30, 0)


def test_calc_score_one_node_one_half_used_device_scores_15():
    n = node("node1", [dev("uuid1", used=5, count=10, usedmem=4000, totalmem=8000, usedcores=50)])
    sel = select_node({"node1": n}, ["node1"], one_gpu_pod())
    assert sel.node == "node1" and sel.score == 15.0 and sel.devices[0][0].uuid == "uuid1"


def test_calc_score_two_unused_devices_spread_takes_the_last():
    n = node("node1", [dev("uuid1", count=10, totalmem=8000), dev("uuid2", count=10, totalmem=8000)])
    sel = select_node({"node1": n}, ["node1"], one_gpu_pod())
    assert sel.devices[0][0].uuid == "uuid2" and sel.score == 0.0


def test_calc_score_spread_avoids_the_half_used_device():
    n = node("node1", [dev("uuid1", count=10, totalmem=8000),
                       dev("uuid2", used=5, count=10, usedmem=4000, totalmem=8000, usedcores=50)])
    sel = select_node({"node1": n}, ["node1"], one_gpu_pod())
    assert sel.devices[0][0].uuid == "uuid1" and sel.score == 7.5


def test_binpack_gpu_policy_picks_the_busier_device():
    n = node("node1", [dev("uuid1", count=10, totalmem=8000),
                       dev("uuid2", used=5, count=10, usedmem=4000, totalmem=8000, usedcores=50)])
    sel = select_node({"node1": n}, ["node1"], one_gpu_pod(gpu_policy="binpack"))
    assert sel.devices[0][0].uuid == "uuid2"


# --------------------------------------------------------------------------- node choice

def cluster():
    idle = node("idle", [dev("i0", count=10, totalmem=8000)])
    busy = node("busy", [dev("b0", count=10, used=3, usedmem=3000, totalmem=8000, usedcores=30)])
    full = node("full", [dev("f0", count=10, used=9, usedmem=7900, totalmem=8000, usedcores=90)])
    return {n.name: n for n in (idle, busy, full)}


def test_node_score_formula():
    n = cluster()["busy"]
    assert node_score(n.devices) == n.score() == 10 * (0.3 + 0.3 + 0.375)


def test_binpack_chooses_the_most_used_node_that_fits():
    nodes = cluster()
    sel = select_node(nodes, ["idle", "busy", "full"], one_gpu_pod())
    assert sel.node == "busy"
    assert sel.failed_nodes == {"full": "1/1 CardInsufficientMemory"}


def test_spread_chooses_the_least_used_node_and_pod_annotation_overrides():
    nodes = cluster()
    assert select_node(nodes, ["busy", "idle"], one_gpu_pod(node_policy="spread")).node == "idle"
    pod = one_gpu_pod(annos={"hami.io/node-scheduler-policy": "spread"})
    assert select_node(nodes, ["busy", "idle"], pod).node == "idle"


def test_first_fit_matches_full_evaluation():
    nodes = cluster()
    for pol in ("binpack", "spread"):
        pod = one_gpu_pod(node_policy=pol)
        sel = select_node(nodes, list(nodes), pod)
        fits, failed = evaluate_nodes(nodes, list(nodes), pod)
        scores = sorted((r.score, r.node) for r in fits)
        best = scores[-1][1] if pol == "binpack" else scores[0][1]
        assert sel.node == best
        assert failed == {"full": "1/1 CardInsufficientMemory"}


def test_nothing_fits_returns_every_reason():
    nodes = cluster()
    pod = pod_request([req(2, 100)], 0, {})
    sel = select_node(nodes, ["idle", "busy", "full", "ghost"], pod)
    assert sel.node is None and sel.devices == ()
    assert sel.failed_nodes == {"idle": "NodeInsufficientDevice", "busy": "NodeInsufficientDevice",
                                "full": "NodeInsufficientDevice", "ghost": "node unregistered"}


def test_fit_does_not_modify_the_node():
    nodes = cluster()
    before = [(d.used, d.usedmem, d.usedcores) for d in nodes["busy"].devices]
    select_node(nodes, ["busy"], one_gpu_pod())
    assert [(d.used, d.usedmem, d.usedcores) for d in nodes["busy"].devices] == before


# --------------------------------------------------------------------------- containers

def test_app_containers_are_cumulative():
    n = node("n", [dev("g", count=10, totalmem=8000)])
    ok = pod_request([req(1, 4000), req(1, 4000)], 0, {})
    sel = select_node({"n": n}, ["n"], ok)
    assert [c[0].uuid for c in sel.devices] == ["g", "g"]
    too_much = pod_request([req(1, 6000), req(1, 6000)], 0, {})
    sel = select_node({"n": n}, ["n"], too_much)
    assert sel.node is None and sel.failed_nodes == {"n": "1/1 CardInsufficientMemory"}


def test_init_containers_each_fit_a_fresh_copy():
    n = node("n", [dev("g", count=10, totalmem=8000)])
    pod = pod_request([req(1, 6000), req(1, 6000), req(1, 6000)], 2, {})
    sel = select_node({"n": n}, ["n"], pod)
    assert sel.node == "n" and len(sel.devices) == 3
    bad = pod_request([req(1, 9000), req(1, 100)], 1, {})
    assert select_node({"n": n}, ["n"], bad).failed_nodes == {"n": "1/1 CardInsufficientMemory"}


def test_containers_without_gpu_get_empty_entries():
    n = node("n", [dev("g", count=10, totalmem=8000)])
    pod = pod_request([None, req(1, 100), req(0)], 1, {})
    sel = select_node({"n": n}, ["n"], pod)
    assert len(sel.devices) == 3 and sel.devices[0] == () and sel.devices[2] == ()
    assert sel.devices[1][0].uuid == "g"


def test_score_weights_annotation_error_surfaces_at_request_build():
    import pytest

    from hami.scheduler.placement.policy import PolicyError
    with pytest.raises(PolicyError):
        pod_request([req()], 0, {"hami.io/device-scoring-weights": "slot=a"})


def test_index_nodes_work_with_select_node_and_model_names():
    idx = UsageIndex()
    idx.set_node("n1", [info("GPU-0", index=0), info("GPU-1", index=1)])
    sel = select_node(idx.nodes, ["n1"], one_gpu_pod())
    assert sel.node == "n1" and sel.devices[0][0].uuid == "GPU-1"
    idx.add_pod("default/a", "n1", sel.devices, namespace="default")
    sel = select_node(idx.nodes, ["n1"], one_gpu_pod())
    assert sel.devices[0][0].uuid == "GPU-0"  # spread: the emptier card


# --------------------------------------------------------------------------- events

def test_filtering_failed_events_group_nodes_per_reason():
    msgs = messages.filtering_failed_messages({
        "node2": "1/1 CardInsufficientMemory",
        "node1": "1/2 CardInsufficientMemory, 1/2 CardNotHealth",
        "node3": "NodeInsufficientDevice",
        "node4": "node unregistered",
    })
    assert msgs == ["2 nodes CardInsufficientMemory(node1,node2)", "1 nodes CardNotHealth(node1)"]
    assert messages.no_available_node_message(4) == "no available node, 4 nodes do not meet"


def test_filtering_succeed_and_binding_texts():
    assert messages.filtering_succeed_message("node1", [("node1", 15.0)], 2) == \
        "find fit node(node1), 1 nodes not fit, 1 nodes fit(node1:15.00)"
    assert messages.binding_succeed_message("n1", "default", "p") == "Successfully binding node [n1] to default/p"
    assert score.NODE_UNREGISTERED == "node unregistered"


def test_calc_score_two_nodes_two_containers_share_each_nodes_device():
    # score_test.go: two nodes with one unused device each, two containers (30 and 40 cores).
    nodes = {"node1": node("node1", [dev("uuid1", count=10, totalmem=8000)]),
             "node2": node("node2", [dev("uuid2", count=10, totalmem=8000)])}
    pod = pod_request([req(1, 1000, 101, 30), req(1, 1000, 101, 40)], 0, {})
    fits, failed = evaluate_nodes(nodes, ["node1", "node2"], pod)
    assert failed == {}
    got = {r.node: ([[(c.uuid, c.usedmem, c.usedcores) for c in ctr] for ctr in r.devices], r.score) for r in fits}
    assert got == {"node1": ([[("uuid1", 1000, 30)], [("uuid1", 1000, 40)]], 0.0),
                   "node2": ([[("uuid2", 1000, 30)], [("uuid2", 1000, 40)]], 0.0)}
