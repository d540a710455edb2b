"""The candidate order /filter keeps between requests (hami.scheduler.placement.nodeorder).

Covers: `first_fit` gives `select_node`'s node, devices and score on every request of a sequence
in which placements and removals change usage between requests (the order patched from the
index's change log), under binpack and spread, with name lists that are subsets, reordered,
repeat names or name unregistered nodes, and with busy (mid-allocation) nodes taken only when no
other node fits; FailedNodes equal to select_node's, key order included, when nothing fits; a
change made outside add/remove (invalidate, a cordon) is seen; a stale entry met on the walk
re-sorts instead of answering from it; a reader left behind by the bounded log re-sorts; node
removal and re-registration; nodes whose free-memory bound is below the request are passed by
on the way to a fit, and fitted for their reasons when nothing fits; with `pending` (a burst's
queue per node) idle nodes first, then each pending level in turn, least first (hypothesis,
against select_node per level), FailedNodes in walk order when nothing fits; with `tie_rank` too,
the node contention.choose takes over the fits in the policy's order (hypothesis).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDevice
from hami.scheduler.placement import contention
from hami.scheduler.placement.changelog import ChangeLog
from hami.scheduler.placement.fit import memory_need, pod_request, try_pod
from hami.scheduler.placement.nodeorder import NameList, first_fit
from hami.scheduler.placement.policy import node_order_descending
from hami.scheduler.placement.score import evaluate_nodes, select_node
from hami.scheduler.placement.usage import UsageIndex

from ._helpers import info, req


def _index(n_nodes: int, gpus: int = 2) -> UsageIndex:
    idx = UsageIndex()
    for n in range(n_nodes):
        idx.set_node(f"n{n}", [info(f"G{n}-{g}", index=g, count=4, devmem=8000) for g in range(gpus)])
    return idx


def _expected(idx: UsageIndex, names, pod, busy):
    """What /filter's select_node path answers (extender._choose with avoid_locked)."""
    if busy:
        free = [n for n in names if n not in busy]
        if free and len(free) < len(names):
            sel = select_node(idx.nodes, free, pod)
            if sel.node is not None:
                return sel
    return select_node(idx.nodes, names, pod)


def _walk(idx: UsageIndex, names: NameList, pod, busy=()):
    return first_fit(names, idx.nodes, idx.changes, node_order_descending(pod.node_policy),
                     lambda n: try_pod(n, pod), busy, need=memory_need(pod))


def _check(idx, names_list, names, pod, busy=()):
    want = _expected(idx, list(names_list), pod, busy)
    got = _walk(idx, names, pod, busy)
    assert got.node == want.node
    if want.node is None:
        assert list(got.failed.items()) == list(want.failed_nodes.items())
    else:
        assert got.fit == (want.devices, want.mig)
        assert got.usage.score_value == want.score
    return got


ops = st.lists(st.tuples(st.integers(0, 29), st.integers(0, 1), st.integers(0, 8000), st.booleans()),
               min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["binpack", "spread"]),
    order=st.permutations(list(range(30))),
    take=st.integers(1, 30),
    extra=st.lists(st.sampled_from(["ghost-a", "ghost-b", "n3", "n7"]), max_size=3),
    busy=st.sets(st.integers(0, 29), max_size=6),
    steps=ops,
    mem=st.sampled_from([1000, 4000, 7000, 9000]),
)
def test_first_fit_matches_select_node_across_changing_usage(policy, order, take, extra, busy, steps, mem):
    idx = _index(30)
    names_list = [f"n{i}" for i in order[:take]] + extra
    names = NameList(names_list)
    busy_names = {f"n{i}" for i in busy}
    for k, (node, gpu, used, remove) in enumerate(steps):
        pod = pod_request([req(1, mem, 101, 10)], 0, {}, node_policy=policy)
        _check(idx, names_list, names, pod)
        _check(idx, names_list, names, pod, busy_names)
        key = f"p{k % 7}"
        if remove:
            idx.remove_pod(key)
        else:
            idx.add_pod(key, f"n{node}", ((ContainerDevice(f"G{node}-{gpu}", "NVIDIA", used, 5),),))


def test_nothing_fits_lists_unregistered_first_then_every_node_in_order():
    idx = _index(5)
    names_list = ["n2", "ghost", "n0", "n4", "n1", "n3"]
    pod = pod_request([req(1, 100000, 101, 0)], 0, {})
    got = _check(idx, names_list, NameList(names_list), pod)
    assert got.node is None and list(got.failed)[0] == "ghost" and len(got.failed) == 6


def test_busy_node_taken_only_when_no_other_fits():
    idx = _index(4)
    names_list = [f"n{i}" for i in range(4)]
    names = NameList(names_list)
    idx.add_pod("p", "n2", ((ContainerDevice("G2-0", "NVIDIA", 7500, 0),),))  # n2 scores highest
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    assert _check(idx, names_list, names, pod, {"n2"}).node != "n2"
    big = pod_request([req(1, 8000, 101, 0)], 0, {})  # n2's second card is whole: the free node wins
    assert _check(idx, names_list, names, big, {"n0", "n1", "n3"}).node == "n2"
    for n in ("n0", "n1", "n3"):
        idx.add_pod(f"full-{n}", n, ((ContainerDevice(f"G{n[1:]}-0", "NVIDIA", 8000, 0),
                                      ContainerDevice(f"G{n[1:]}-1", "NVIDIA", 8000, 0)),))
    assert _check(idx, names_list, names, pod, {"n2"}).node == "n2"


def _expected_pending(idx: UsageIndex, names: list[str], pod, pending: dict[str, int]):
    """The reference of the pending-aware walk: select_node over the idle candidates, else over the
    candidates of each pending level in turn, least pending first; nothing fits: select_node over all."""
    for level in sorted({pending.get(n, 0) for n in names}):
        sel = select_node(idx.nodes, [n for n in names if pending.get(n, 0) == level], pod)
        if sel.node is not None:
            return sel
    return select_node(idx.nodes, names, pod)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["binpack", "spread"]),
    order=st.permutations(list(range(12))),
    queued=st.dictionaries(st.integers(0, 11), st.integers(1, 3), max_size=12),
    used=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 1), st.integers(0, 8000)), max_size=12),
    mem=st.sampled_from([1000, 4000, 7000, 9000]),
)
def test_pending_walk_takes_idle_nodes_then_the_least_pending(policy, order, queued, used, mem):
    idx = _index(12)
    for k, (node, gpu, m) in enumerate(used):
        idx.add_pod(f"p{k}", f"n{node}", ((ContainerDevice(f"G{node}-{gpu}", "NVIDIA", m, 5),),))
    names_list = [f"n{i}" for i in order]
    pending = {f"n{i}": q for i, q in queued.items()}
    pod = pod_request([req(1, mem, 101, 10)], 0, {}, node_policy=policy)
    want = _expected_pending(idx, names_list, pod, pending)
    got = first_fit(NameList(names_list), idx.nodes, idx.changes, node_order_descending(policy),
                    lambda n: try_pod(n, pod), need=memory_need(pod), pending=lambda n: pending.get(n, 0))
    assert got.node == want.node
    if want.node is None:
        assert list(got.failed.items()) == list(want.failed_nodes.items())
    else:
        assert got.fit == (want.devices, want.mig)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["binpack", "spread"]),
    order=st.permutations(list(range(12))),
    queued=st.dictionaries(st.integers(0, 11), st.integers(1, 3), max_size=12),
    used=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 1), st.sampled_from([0, 1000, 2000])), max_size=8),
    identity=st.text(max_size=4),
)
def test_ranked_walk_equals_contention_choose_when_every_node_fits(policy, order, queued, used, identity):
    """The walk /filter takes on many nodes answers what contention.choose answers on the fits in
    the policy's order: past a contended node, the replica's rank among the idle nodes of equal score."""
    idx = _index(12)
    for k, (node, gpu, m) in enumerate(used):
        idx.add_pod(f"p{k}", f"n{node}", ((ContainerDevice(f"G{node}-{gpu}", "NVIDIA", m, 5),),))
    names_list = [f"n{i}" for i in order]
    pending = {f"n{i}": q for i, q in queued.items()}
    pod = pod_request([req(1, 100, 101, 1)], 0, {}, node_policy=policy)  # fits every node

    def rank(n):
        return contention.rank(identity, n)

    fits, _ = evaluate_nodes(idx.nodes, names_list, pod)
    want = contention.choose(fits, lambda n: pending.get(n, 0), rank)
    got = first_fit(NameList(names_list), idx.nodes, idx.changes, node_order_descending(policy),
                    lambda n: try_pod(n, pod), need=memory_need(pod), pending=lambda n: pending.get(n, 0),
                    tie_rank=rank)
    assert got.node == want.node and got.fit == (want.devices, want.mig)


def test_usage_changed_outside_add_and_remove_is_seen_through_invalidate():
    idx = _index(6)
    names_list = [f"n{i}" for i in range(6)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    _check(idx, names_list, names, pod)
    node = idx.nodes["n4"]
    node.devices[0].used += 3  # not through add_pod: invalidate() is what logs the change
    node.devices[0].usedmem += 5000
    node.invalidate()
    assert _check(idx, names_list, names, pod).node == "n4"


def test_a_stale_entry_met_on_the_walk_resorts_instead_of_answering_from_it():
    idx = _index(6)
    names_list = [f"n{i}" for i in range(6)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    idx.add_pod("p", "n4", ((ContainerDevice("G4-0", "NVIDIA", 5000, 0),),))
    assert _check(idx, names_list, names, pod).node == "n4"
    node = idx.nodes["n4"]
    node.changes = None  # a change the log never hears of
    idx.nodes["n1"].changes = None
    node.devices[0].usedmem = 0
    node.devices[0].used = 0
    node.invalidate()
    n1 = idx.nodes["n1"]
    n1.devices[1].used = 2
    n1.invalidate()
    before = names.order(True).rebuilds
    assert _check(idx, names_list, names, pod).node == "n1"
    assert names.order(True).rebuilds == before + 1


def test_one_name_list_walked_over_two_indexes_follows_each():
    """The order keeps each node's usage by position: a NameList walked over another index (its
    own nodes and log) is sorted again from that index, never answered from the other's nodes."""
    names_list = [f"n{i}" for i in range(6)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    a, b = _index(6), _index(6)
    a.add_pod("p", "n2", ((ContainerDevice("G2-0", "NVIDIA", 5000, 0),),))
    b.add_pod("p", "n4", ((ContainerDevice("G4-0", "NVIDIA", 5000, 0),),))
    assert _check(a, names_list, names, pod).node == "n2"
    got = _check(b, names_list, names, pod)
    assert got.node == "n4" and got.usage is b.nodes["n4"]
    assert _check(a, names_list, names, pod).usage is a.nodes["n2"]


def test_reader_behind_a_trimmed_log_resorts():
    idx = _index(10)
    idx.changes = ChangeLog(limit=4)
    names_list = [f"n{i}" for i in range(10)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    _check(idx, names_list, names, pod)
    before = names.order(True).rebuilds
    for k in range(12):
        idx.add_pod(f"p{k}", f"n{k % 10}", ((ContainerDevice(f"G{k % 10}-0", "NVIDIA", 100 * k, 0),),))
    _check(idx, names_list, names, pod)
    assert names.order(True).rebuilds == before + 1


def test_removed_and_reregistered_nodes_follow_the_index():
    idx = _index(8)
    names_list = [f"n{i}" for i in range(8)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {}, node_policy="spread")
    idx.add_pod("p", "n0", ((ContainerDevice("G0-0", "NVIDIA", 100, 0),),))
    _check(idx, names_list, names, pod)
    for n in range(7):
        idx.remove_node(f"n{n}")
    assert _check(idx, names_list, names, pod).node == "n7"
    idx.set_node("n3", [info("G3-0", count=4, devmem=8000)])
    assert _check(idx, names_list, names, pod).node in {"n3", "n7"}
    idx.remove_node("n3")
    idx.remove_node("n7")
    got = _check(idx, names_list, names, pod)
    assert got.node is None and set(got.failed.values()) == {"node unregistered"}


def test_a_node_uncordoned_after_being_passed_by_is_chosen_again():
    idx = _index(4)
    names_list = [f"n{i}" for i in range(4)]
    names = NameList(names_list)
    idx.add_pod("p", "n1", ((ContainerDevice("G1-0", "NVIDIA", 100, 0),),))  # n1 scores highest
    idx.set_cordon("n1", {"G1-0", "G1-1"})
    pod = pod_request([req(1, 6000, 101, 0)], 0, {})
    assert _check(idx, names_list, names, pod).node != "n1"
    idx.set_cordon("n1", ())
    assert _check(idx, names_list, names, pod).node == "n1"


def test_full_nodes_are_passed_by_without_a_fit_attempt():
    idx = _index(6)
    names_list = [f"n{i}" for i in range(6)]
    names = NameList(names_list)
    for n in range(5):  # n0..n4 full and scoring above n5
        idx.add_pod(f"p{n}", f"n{n}", ((ContainerDevice(f"G{n}-0", "NVIDIA", 7900, 0),
                                        ContainerDevice(f"G{n}-1", "NVIDIA", 7900, 0)),))
    pod = pod_request([req(1, 1000, 101, 0)], 0, {})
    got = _check(idx, names_list, names, pod)
    assert got.node == "n5" and got.tried == 1
    huge = pod_request([req(1, 9000, 101, 0)], 0, {})
    got = _check(idx, names_list, names, huge)
    assert got.node is None and len(got.failed) == 6


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.permutations(list(range(12))),
    queued=st.dictionaries(st.integers(0, 11), st.integers(1, 3), max_size=12),
    full=st.sets(st.integers(0, 11), max_size=8),
    identity=st.text(max_size=4),
)
def test_ranked_tie_takes_the_highest_ranked_idle_fit_of_its_score_when_some_do_not_fit(order, queued, full,
                                                                                       identity):
    """Equal scores everywhere (a fresh cluster), some nodes too full for the pod: past a contended
    node the walk answers the idle node that fits and ranks highest (the earliest among equal ranks)."""
    idx = _index(12)
    for n in full:  # 7,000 MiB used on both GPUs: a 2,000 MiB pod fits nowhere on it, and its score differs
        for g in range(2):
            idx.add_pod(f"f{n}-{g}", f"n{n}", ((ContainerDevice(f"G{n}-{g}", "NVIDIA", 7000, 5),),))
    names_list = [f"n{i}" for i in order]
    pending = {f"n{i}": q for i, q in queued.items()}
    pod = pod_request([req(1, 2000, 101, 1)], 0, {})

    def rank(n):
        return contention.rank(identity, n)

    fits, _ = evaluate_nodes(idx.nodes, names_list, pod)
    want = contention.choose(fits, lambda n: pending.get(n, 0), rank) if fits else None
    got = first_fit(NameList(names_list), idx.nodes, idx.changes, node_order_descending("binpack"),
                    lambda n: try_pod(n, pod), need=memory_need(pod), pending=lambda n: pending.get(n, 0),
                    tie_rank=rank)
    assert got.node == (want.node if want is not None else None)


def test_a_tie_of_a_thousand_idle_nodes_fits_a_few_not_all():
    """/filter past a contended node on 1,000 identical nodes: only a node ranked above the best fit
    so far is fitted (the record ranks of the walk), not all 1,000."""
    idx = _index(1000)
    names_list = [f"n{i}" for i in range(1000)]
    idx.add_pod("busy", "n0", ((ContainerDevice("G0-0", "NVIDIA", 100, 5),),))  # the fullest: binpack's first
    pod = pod_request([req(1, 100, 101, 1)], 0, {})
    fitted: list[str] = []

    def counted_fit(n):
        fitted.append(n.name)
        return try_pod(n, pod)

    def rank(n):
        return contention.rank("replica-a", n)

    walk = first_fit(NameList(names_list), idx.nodes, idx.changes, True, counted_fit, need=memory_need(pod),
                     pending=lambda n: 1 if n == "n0" else 0, tie_rank=rank)
    assert walk.node == max(names_list[1:], key=rank)
    assert len(fitted) < 40


def test_a_stale_pending_node_is_checked_when_no_idle_node_fits():
    """The walk passes a pending node by without reading its score; when no idle node fits and the
    pending ones are fitted, a stale one among them re-sorts first, so the answer is the fallback
    select_node gives over the live scores."""
    idx = _index(4)
    names_list = [f"n{i}" for i in range(4)]
    names = NameList(names_list)
    pod = pod_request([req(1, 100, 101, 0)], 0, {})
    for i in range(4):
        idx.add_pod(f"p{i}", f"n{i}", ((ContainerDevice(f"G{i}-0", "NVIDIA", 1000 * (i + 1), 0),),))
    first_fit(names, idx.nodes, idx.changes, True, lambda n: try_pod(n, pod), need=memory_need(pod),
              pending=lambda n: 0)
    n2 = idx.nodes["n2"]
    n2.changes = None  # a change the log never hears of: n2 is now the fullest
    n2.devices[0].usedmem += 20000
    n2.invalidate()
    pending = {n: 1 for n in names_list}  # every node pending: all are passed by, then fitted
    before = names.order(True).rebuilds
    got = first_fit(names, idx.nodes, idx.changes, True, lambda n: try_pod(n, pod), need=memory_need(pod),
                    pending=lambda n: pending[n])
    assert names.order(True).rebuilds == before + 1
    assert got.node == select_node(idx.nodes, names_list, pod).node == "n2"
