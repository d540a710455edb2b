"""GPU and node policies (hami.scheduler.placement.policy).

Covers: device ordering for binpack, spread, mutex, numa-bind and comma chains as in HAMi
`pkg/scheduler/policy/gpu_policy.go` and its tests (`gpu_policy_test.go`: score primary with
NUMA as tie-break, #1806), pod annotation overrides, PolicyContains, device-scoring-weights
parsing, float32 scores (§6.2 golden numbers; the exact-integer shortcut equal to rounding every
operand, hypothesis over values around 2**24), node order (node_policy_test.go) and the port
of Go's pdqsort (sorted output, stable for n <= 12, and equal to golden orders
recorded from Go 1.19's sort.Sort in tests/scheduler/data/go_sort_golden.json).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.device.model import ScoringWeights
from hami.scheduler.placement import policy
from hami.scheduler.placement.policy import (
    PolicyError,
    device_score,
    f32,
    go_sort,
    gpu_policy_for,
    node_order_descending,
    node_policy_for,
    parse_scoring_weights,
    policy_contains,
    sort_devices,
    sorted_devices,
)

from ._helpers import dev, req


def order(devs_scores, pol, numa_bind=False):
    items = [(s, d) for d, s in devs_scores]
    sort_devices(items, pol, numa_bind)
    return [d.id for _, d in items]


@given(scores=st.lists(st.tuples(st.sampled_from([0.0, 1.5, 2.25, 7.0, -0.0]), st.integers(0, 2)),
                       min_size=0, max_size=16),
       pol=st.sampled_from(["binpack", "spread", "mutex", "numa", " spread", "binpack,numa"]),
       numa_bind=st.booleans())
def test_sorted_devices_gives_sort_devices_order(scores, pol, numa_bind):
    """The keyed-tuple sort of the plain policies answers the order sort_devices gives, ties
    (equal scores, equal NUMA nodes, 0.0 and -0.0) included, for every policy and size."""
    devs = [dev(f"d{i}", numa=numa, used=i % 3) for i, (_, numa) in enumerate(scores)]
    items = [(s, d) for (s, _), d in zip(scores, devs, strict=True)]
    want = list(items)
    sort_devices(want, pol, numa_bind)
    assert [d.id for d in sorted_devices(list(items), pol, numa_bind)] == [d.id for _, d in want]


def test_binpack_sorts_score_ascending_so_fullest_card_is_tried_first():
    a, b, c = dev("a", numa=1), dev("b", numa=0), dev("c", numa=0)
    # gpu_policy_test.go (#1806): score is primary, NUMA only breaks ties.
    assert order([(a, 5.0), (b, 9.0), (c, 1.0)], "binpack") == ["c", "a", "b"]
    assert order([(a, 5.0), (b, 5.0)], "binpack") == ["b", "a"]


def test_spread_sorts_score_descending_so_emptiest_card_is_tried_first():
    a, b, c = dev("a", numa=1), dev("b", numa=0), dev("c", numa=0)
    assert order([(a, 5.0), (b, 9.0), (c, 1.0)], "spread") == ["b", "a", "c"]
    assert order([(a, 5.0), (b, 5.0)], "spread") == ["b", "a"]
    # unknown policy behaves as spread
    assert order([(a, 5.0), (b, 9.0), (c, 1.0)], "topology-aware") == ["b", "a", "c"]


def test_mutex_puts_idle_cards_last():
    a, b, c = dev("a", used=0, numa=1), dev("b", used=3), dev("c", used=0, numa=0)
    assert order([(a, 0.0), (b, 9.0), (c, 0.0)], "mutex") == ["b", "c", "a"]


def test_numa_bind_groups_cards_by_numa():
    a, b, c, d = dev("a", numa=0), dev("b", numa=1), dev("c", numa=0), dev("d", numa=1)
    scores = [(a, 1.0), (b, 2.0), (c, 3.0), (d, 4.0)]
    assert order(scores, "binpack", numa_bind=True) == ["b", "d", "a", "c"]
    assert order(scores, "spread", numa_bind=True) == ["c", "a", "d", "b"]


def test_chain_applies_keys_in_written_order_with_index_tie_break():
    a, b, c = dev("a", numa=1, index=2), dev("b", numa=0, index=1), dev("c", numa=0, index=0)
    scores = [(a, 1.0), (b, 1.0), (c, 1.0)]
    assert order(scores, "numa") == ["c", "b", "a"]
    assert order([(a, 1.0), (b, 2.0), (c, 3.0)], "binpack,numa") == ["a", "b", "c"]
    assert order([(a, 1.0), (b, 2.0), (c, 3.0)], "numa,spread") == ["c", "b", "a"]
    # mutex/topology-aware are not sort keys; an empty chain means spread
    assert order([(a, 1.0), (b, 2.0), (c, 3.0)], "mutex,topology-aware") == ["c", "b", "a"]
    # numa-bind forces numa first
    assert order([(a, 9.0), (b, 2.0), (c, 3.0)], "spread,binpack", numa_bind=True) == ["c", "b", "a"]


def test_gpu_sort_chain_dedupes_and_trims():
    assert policy.gpu_sort_chain(" binpack , numa,binpack,mutex") == ("binpack", "numa")


def test_pod_annotations_override_configured_policies():
    annos = {"hami.io/node-scheduler-policy": "spread", "hami.io/gpu-scheduler-policy": "binpack,numa"}
    assert node_policy_for(annos, "binpack") == "spread"
    assert gpu_policy_for(annos, "spread") == "binpack,numa"
    assert node_policy_for({}, "binpack") == "binpack"
    assert gpu_policy_for(None, "spread") == "spread"


def test_policy_contains_splits_and_trims():
    assert policy_contains("mutex", "mutex")
    assert not policy_contains("spread", "mutex")
    assert not policy_contains("", "mutex")
    assert policy_contains("mutex,spread", "mutex")
    assert policy_contains("spread, numa , mutex", "mutex")
    assert not policy_contains("mutexx,spread", "mutex")


def test_node_order_binpack_prefers_highest_score_spread_lowest():
    assert node_order_descending("binpack")
    assert node_order_descending("anything")
    assert not node_order_descending("spread")


@pytest.mark.parametrize("text,want", [
    ("slot=1,core=1,memory=3", ScoringWeights(1, 1, 3)),
    (" slot=0 , core=2,memory=0", ScoringWeights(0, 2, 0)),
])
def test_scoring_weights_parse(text, want):
    assert parse_scoring_weights(text) == want


@pytest.mark.parametrize("text", ["", "slot=1,core=1", "slot=1,core=1,memory=x", "slot=-1,core=1,memory=1",
                                  "slot=0,core=0,memory=0", "slot=1,core=1,memory=1,gpu=2", "slot=1,slot=1,core=1"])
def test_scoring_weights_reject_bad_text_naming_the_annotation(text):
    with pytest.raises(PolicyError) as e:
        parse_scoring_weights(text)
    assert "hami.io/device-scoring-weights" in str(e.value)


def test_device_score_golden_numbers():
    # score_test.go: 5 of 10 slots, 4000/8000 MiB, 50/100 cores, request 1 GPU 1000 MiB 30 cores.
    d = dev("u", used=5, count=10, usedmem=4000, totalmem=8000, usedcores=50)
    assert device_score(d, [req(1, 1000, 101, 30)]) == f32(10 * (0.6 + 0.8 + 0.625))
    # model-name devices ignore the request (type equality quirk, §6.2)
    d.type = "NVIDIA A100"
    assert device_score(d, [req(1, 1000, 101, 30)]) == 15.0
    # percentage requests use the card's memory; weights scale each term
    d.type = "NVIDIA"
    assert device_score(d, [req(1, 0, 50, 0)], ScoringWeights(0, 0, 1)) == f32(10 * f32(8000 / 8000))
    assert device_score(dev("z", count=0), [req()]) == 0.0


def test_scores_are_float32():
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)


# --------------------------------------------------------------------------- Go's sort

@given(st.lists(st.integers(0, 5), max_size=80))
def test_go_sort_sorts(values):
    data = list(values)
    go_sort(data, lambda i, j: data[i] < data[j])
    assert data == sorted(values)


@given(st.lists(st.integers(0, 3), max_size=12))
def test_go_sort_is_stable_up_to_twelve_items(values):
    data = list(enumerate(values))
    go_sort(data, lambda i, j: data[i][1] < data[j][1])
    assert data == sorted(enumerate(values), key=lambda t: t[1])


def test_sort_devices_for_many_cards_is_deterministic_and_ordered():
    rng = random.Random(7)
    devs = [(float(rng.randint(0, 3)), dev(f"d{i}", index=i, numa=rng.randint(0, 1))) for i in range(40)]
    a, b = list(devs), list(devs)
    sort_devices(a, "binpack", False)
    sort_devices(b, "binpack", False)
    assert [d.id for _, d in a] == [d.id for _, d in b]
    keys = [(s, d.numa) for s, d in a]
    assert keys == sorted(keys)


def test_go_sort_matches_go_sort_sort_output():
    """Golden orders produced by Go 1.19's sort.Sort for lists with many equal keys."""
    import json
    import pathlib

    data = json.loads((pathlib.Path(__file__).parent / "data" / "go_sort_golden.json").read_text())
    assert len(data["cases"]) >= 40
    for case in data["cases"]:
        items = [(k, i) for i, k in enumerate(case["keys"])]
        go_sort(items, lambda i, j, items=items: items[i][0] < items[j][0])
        assert [i for _, i in items] == case["order"], len(case["keys"])


def test_scores_match_go_float32_arithmetic_bit_for_bit():
    """Device and node scores recorded from Go's float32 arithmetic (amd64)."""
    import json
    import pathlib
    import struct
    from types import SimpleNamespace

    from hami.scheduler.placement.usage import score_from_sums

    data = json.loads((pathlib.Path(__file__).parent / "data" / "float32_scores_golden.json").read_text())

    def bits(x):
        return struct.unpack("<I", struct.pack("<f", x))[0]

    for case in data["cases"]:
        count, tcore, tmem, used, uc, um, _, core, mem, ws, wc, wm = case["in"]
        d = SimpleNamespace(count=count, totalcore=tcore, totalmem=tmem, used=used, usedcores=uc,
                            usedmem=um, type="NVIDIA")
        got = device_score(d, [req(1, mem, 101, core)], ScoringWeights(ws, wc, wm))
        assert bits(got) == case["device_bits"], case
        node = score_from_sums(used + 1, uc + core, um + mem, count, tcore, tmem)
        assert bits(node) == case["node_bits"], case


def test_compute_score_ignores_requests_of_other_types():
    # gpu_policy_test.go TestComputeScore device: 2/10 slots, 1/4 cores, 2048/8192 MiB -> 7.
    d = dev("test-device", type="", totalcore=4, totalmem=8192, count=10, used=2, usedcores=1, usedmem=2048)
    assert device_score(d, []) == 7.0
    # §6.2: only requests whose type equals the device type count, so these add nothing.
    assert device_score(d, [req(1, 1024, 0, 1, type="type1"), req(2, 0, 50, 2, type="type2")]) == 7.0


def _device_score_reference(dev, requests, weights):
    """device_score as first written: every operand rounded to float32, as Go's float32 code."""
    count, tcore, tmem = dev.count, dev.totalcore, dev.totalmem
    if count == 0 or tcore == 0 or tmem == 0:
        return 0.0
    req = core = mem = 0
    for r in requests:
        if r.type != dev.type:
            continue
        req += 1
        core += r.coresreq
        mem += r.memreq
    us = f32(f32(req + dev.used) / f32(count))
    cs = f32(f32(core + dev.usedcores) / f32(tcore))
    ms = f32(f32(mem + dev.usedmem) / f32(tmem))
    a, b, c = f32(f32(weights.slot) * us), f32(f32(weights.core) * cs), f32(f32(weights.memory) * ms)
    return f32(f32(10.0) * f32(f32(a + b) + c))


_ints = st.one_of(st.integers(-(1 << 26), 1 << 26), st.sampled_from([0, 1, (1 << 24) - 1, 1 << 24, (1 << 24) + 1]))


@given(count=_ints, tcore=_ints, tmem=_ints, used=_ints, uc=_ints, um=_ints, mem=_ints, core=_ints,
       ws=st.integers(0, 5), wc=st.integers(0, 5), wm=st.integers(0, 5))
def test_device_score_shortcut_for_exact_integers_equals_rounding_every_operand(count, tcore, tmem, used, uc, um,
                                                                              mem, core, ws, wc, wm):
    from types import SimpleNamespace

    d = SimpleNamespace(count=count, totalcore=tcore, totalmem=tmem, used=used, usedcores=uc, usedmem=um,
                        type="NVIDIA")
    weights = ScoringWeights(ws, wc, wm)
    reqs = [req(1, mem, 101, core)]
    assert device_score(d, reqs, weights) == _device_score_reference(d, reqs, weights)
