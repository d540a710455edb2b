"""HAMi's NVIDIA Fit (hami.scheduler.placement.fit.fit_devices) and reason strings.

Covers: the TestDevices_Fit table and TestFit_DeviceCordon of HAMi
`pkg/device/nvidia/device_test.go` and Test_fitInCertainDevice of `pkg/scheduler/score_test.go`
(ported case by case), every reason key of §5.3/§5.4,
GenReason/ParseReason formatting (`pkg/device/common/common_test.go`), the backward walk over
the sorted list, numa-bind grouping, mutex, use/nouse type and UUID filters, vgpu-mode,
memory percentage, core clamp, the ResourceQuota hook, topology-aware selection and MIG.
"""

from __future__ import annotations

import pytest

from hami.scheduler.placement import fit
from hami.scheduler.placement.fit import fit_devices, fit_options, gen_reason, parse_reason
from hami.scheduler.placement.usage import Quota, QuotaView

from ._helpers import dev, req


def run(devices, request, annos=None, **kw):
    return fit_devices(devices, request, fit_options(annos or {}), **kw)


# --------------------------------------------------------------------------- device_test.go TestDevices_Fit

GOLDEN = [
    # (name, devices, request, annos, want_fit, want_ids, want_reason)
    ("fit success", [dev("dev-0"), dev("dev-1")], req(1, 64, 0, 50), {}, True, ["dev-1"], ""),
    ("fit fail: memory not enough", [dev("dev-0")], req(1, 512, 0, 50), {}, False, [],
     "1/1 CardInsufficientMemory"),
    ("fit fail: core not enough", [dev("dev-0", totalmem=1024, usedcores=100)], req(1, 512, 0, 50), {},
     False, [], "1/1 CardInsufficientCore"),
    ("fit fail: type mismatch", [dev("dev-0")], req(1, 512, 0, 50, type="OtherType"), {}, False, [],
     "1/1 CardTypeMismatch"),
    ("fit fail: user assign use uuid mismatch", [dev("dev-1", totalmem=1280)], req(2, 512, 0, 50),
     {fit.USE_GPUUUID: "dev-0"}, False, [], "1/1 CardUuidMismatch"),
    ("fit fail: user assign no use uuid match", [dev("dev-0", totalmem=1280)], req(2, 512, 0, 50),
     {fit.NOUSE_GPUUUID: "dev-0"}, False, [], "1/1 CardUuidMismatch"),
    ("fit fail: card overused", [dev("dev-0", used=100, totalmem=1280)], req(1, 512, 0, 50), {}, False, [],
     "1/1 CardTimeSlicingExhausted"),
    ("fit fail: card exclusively", [dev("dev-0", used=20, totalmem=1280)], req(1, 512, 0, 100), {}, False,
     [], "1/1 ExclusiveDeviceAllocateConflict"),
    ("fit fail: CardComputeUnitsExhausted", [dev("dev-0", used=20, totalmem=1280, usedcores=100)],
     req(1, 512, 0, 0), {}, False, [], "1/1 CardComputeUnitsExhausted"),
    ("fit fail: AllocatedCardsInsufficientRequest", [dev("dev-0", used=20, totalmem=1280, usedcores=10)],
     req(2, 512, 0, 20), {}, False, [], "1/1 AllocatedCardsInsufficientRequest"),
    ("fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards",
     [dev("dev-0", totalmem=1280), dev("dev-1", index=1, totalmem=1280)], req(3, 512, 0, 20), {}, False, [],
     "2/2 AllocatedCardsInsufficientRequest"),
    ("fit success: memory percentage", [dev("dev-0", used=20, totalmem=1280, usedcores=10)], req(1, 0, 10, 20),
     {}, True, ["dev-0"], ""),
    ("fit fail: CardNotHealth", [dev("dev-0", used=20, totalmem=1280, usedcores=10, health=False)],
     req(1, 0, 10, 20), {}, False, [], "1/1 CardNotHealth"),
]


@pytest.mark.parametrize("name,devices,request_,annos,want_fit,want_ids,want_reason", GOLDEN,
                         ids=[g[0] for g in GOLDEN])
def test_hami_fit_golden_cases(name, devices, request_, annos, want_fit, want_ids, want_reason):
    ok, chosen, reason = run(devices, request_, annos)
    assert ok is want_fit
    assert reason == want_reason
    if want_fit:
        assert [c.uuid for c in chosen] == want_ids


def test_memory_percentage_resolves_to_share_of_card_memory():
    ok, chosen, _ = run([dev("dev-0", totalmem=1280)], req(1, 0, 10, 20))
    assert ok and chosen[0].usedmem == 128 and chosen[0].usedcores == 20 and chosen[0].type == "NVIDIA"


def test_core_request_above_100_is_clamped_to_100():
    # spec §5.3: coresreq > 100 is set to 100 inside Fit (device.go:772-776).
    ok, chosen, _ = run([dev("dev-0", totalmem=1280)], req(1, 512, 0, 120))
    assert ok and chosen[0].usedcores == 100
    ok, _, reason = run([dev("dev-0", totalmem=1280, used=1)], req(1, 512, 0, 120))
    assert not ok and reason == "1/1 ExclusiveDeviceAllocateConflict"


# --------------------------------------------------------------------------- TestFit_DeviceCordon

def cordon_devices():
    return [dev("dev-0"), dev("dev-1")]


def test_cordoned_device_is_skipped_and_sibling_fits():
    ok, chosen, reason = run(cordon_devices(), req(1, 64, 101, 50), cordoned=frozenset({"dev-1"}))
    assert ok and chosen[0].uuid == "dev-0", reason


def test_all_devices_cordoned_fails_with_card_cordoned():
    ok, _, reason = run(cordon_devices(), req(1, 64, 101, 50), cordoned=frozenset({"dev-0", "dev-1"}))
    assert not ok and reason == "2/2 CardCordoned"


def test_cordon_leaves_existing_usage_alone():
    devices = cordon_devices()
    devices[1].used, devices[1].usedcores, devices[1].usedmem = 1, 50, 64
    ok, chosen, _ = run(devices, req(1, 64, 101, 50), cordoned=frozenset({"dev-1"}))
    assert ok and chosen[0].uuid == "dev-0" and devices[1].used == 1


# --------------------------------------------------------------------------- walk order, filters

def test_fit_walks_the_sorted_list_from_the_end():
    devices = [dev(f"d{i}", index=i) for i in range(4)]
    ok, chosen, _ = run(devices, req(2, 10))
    assert ok and [c.uuid for c in chosen] == ["d3", "d2"]
    assert [c.idx for c in chosen] == [3, 2]


def test_use_gputype_is_a_case_insensitive_substring_match():
    devices = [dev("a", type="NVIDIA A100-SXM4-40GB"), dev("b", type="NVIDIA Tesla V100")]
    ok, chosen, _ = run(devices, req(1, 10), {fit.USE_GPUTYPE: "a100"})
    assert ok and chosen[0].uuid == "a"
    ok, chosen, _ = run(devices, req(1, 10), {fit.NOUSE_GPUTYPE: "V100,"})
    assert ok and chosen[0].uuid == "a"
    ok, _, reason = run(devices, req(1, 10), {fit.USE_GPUTYPE: "H100"})
    assert not ok and reason == "2/2 CardTypeMismatch"
    # members are trimmed; a list of only empty members constrains nothing it can match
    ok, chosen, _ = run(devices, req(1, 10), {fit.USE_GPUTYPE: "H100, v100 "})
    assert ok and chosen[0].uuid == "b"
    ok, _, reason = run(devices, req(1, 10), {fit.USE_GPUTYPE: ",,"})
    assert not ok and reason == "2/2 CardTypeMismatch"


def test_blank_type_and_uuid_annotations_mean_no_constraint():
    devices = [dev("a")]
    for key in (fit.USE_GPUTYPE, fit.NOUSE_GPUTYPE, fit.USE_GPUUUID, fit.NOUSE_GPUUUID):
        ok, _, _ = run(devices, req(1, 10), {key: "  "})
        assert ok, key


def test_use_gpuuuid_members_are_trimmed_exact_matches():
    devices = [dev("GPU-a"), dev("GPU-b")]
    ok, chosen, _ = run(devices, req(1, 10), {fit.USE_GPUUUID: " GPU-a , GPU-x"})
    assert ok and chosen[0].uuid == "GPU-a"
    ok, _, reason = run(devices, req(1, 10), {fit.USE_GPUUUID: "GPU"})
    assert not ok and reason == "2/2 CardUuidMismatch"


def test_vgpu_mode_annotation_must_contain_card_mode():
    devices = [dev("a", mode="hami-core"), dev("b", mode="mps")]
    ok, chosen, _ = run(devices, req(1, 10), {fit.VGPU_MODE: "mps"})
    assert ok and chosen[0].uuid == "b"
    ok, _, reason = run(devices, req(1, 10), {fit.VGPU_MODE: "mig"})
    assert not ok and reason == "2/2 CardTypeMismatch"


def test_mutex_policy_rejects_used_cards():
    devices = [dev("idle", index=1), dev("busy", used=1)]
    annos = {"hami.io/gpu-scheduler-policy": "mutex"}
    ok, chosen, _ = run(devices, req(1, 10), annos)
    assert ok and chosen[0].uuid == "idle"
    ok, _, reason = run([dev("busy", used=1)], req(1, 10), annos)
    assert not ok and reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_mutex_in_a_chain_still_applies():
    ok, _, reason = run([dev("busy", used=1)], req(1, 10), {"hami.io/gpu-scheduler-policy": "binpack, mutex"})
    assert not ok and reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_numa_bind_needs_all_gpus_on_one_numa_node():
    annos = {fit.NUMA_BIND: "true"}
    # walked from the end: d3(numa1), d2(numa0) -> numa change resets after one device collected.
    devices = [dev("d0", numa=0, used=100), dev("d1", numa=0, used=100), dev("d2", numa=0), dev("d3", numa=1)]
    ok, _, reason = run(devices, req(2, 10), annos)
    assert not ok
    assert parse_reason(reason) == {"NumaNotFit": 1, "CardTimeSlicingExhausted": 2,
                                    "AllocatedCardsInsufficientRequest": 1}
    devices = [dev("d0", numa=0), dev("d1", numa=0), dev("d2", numa=1), dev("d3", numa=1)]
    ok, chosen, _ = run(devices, req(2, 10), annos)
    assert ok and [c.uuid for c in chosen] == ["d3", "d2"]


def test_numa_bind_accepts_go_parsebool_spellings():
    assert fit_options({fit.NUMA_BIND: "1"}).numa_bind
    assert fit_options({fit.NUMA_BIND: "True"}).numa_bind
    assert not fit_options({fit.NUMA_BIND: "yes"}).numa_bind


def test_quota_hook_rejects_cards_that_would_exceed_the_namespace_quota():
    quota = QuotaView(Quota(used=1000, limit=2048), None)
    opts = fit_options({}, quota=quota)
    ok, _, reason = fit_devices([dev("a", totalmem=4096)], req(1, 2000), opts)
    assert not ok and reason == "1/1 ResourceQuotaNotFit"
    ok, _, _ = fit_devices([dev("a", totalmem=4096)], req(1, 1000), opts)
    assert ok


def test_topology_aware_picks_best_connected_pair():
    devices = [dev(f"g{i}", index=i) for i in range(3)]
    scores = {"g0": {"g1": 10, "g2": 90}, "g1": {"g0": 10, "g2": 20}, "g2": {"g0": 90, "g1": 20}}
    ok, chosen, _ = run(devices, req(2, 10), {"hami.io/gpu-scheduler-policy": "topology-aware"}, pair_scores=scores)
    assert ok and sorted(c.uuid for c in chosen) == ["g0", "g2"]
    ok, chosen, _ = run(devices, req(1, 10), {"hami.io/gpu-scheduler-policy": "topology-aware"}, pair_scores=scores)
    assert ok and [c.uuid for c in chosen] == ["g1"]


def test_mig_card_is_offered_again_for_several_slices():
    from hami.device.model import MigPlacement, MigProfile

    prof = MigProfile("1g.5gb", memory_mb=4864, core=15, slice_count=1,
                      placements=tuple(MigPlacement(i, 1) for i in range(7)))
    d = dev("mig0", mode="mig", totalmem=40960, count=7)
    d.mig_profiles = (prof,)
    ok, chosen, _ = run([d], req(2, 4000))
    assert ok and [c.uuid for c in chosen] == ["mig0", "mig0"]
    d.mig_in_use = [MigPlacement(i, 1) for i in range(7)]
    ok, _, reason = run([d], req(1, 4000))
    assert not ok and reason == "1/1 CardMigTopologyInfeasible"


# --------------------------------------------------------------------------- reasons

def test_gen_reason_sorts_entries_as_strings():
    text = gen_reason({"CardInsufficientCore": 1, "CardInsufficientMemory": 2, "CardUuidMismatch": 3,
                       "CardTimeSlicingExhausted": 4}, 10)
    assert text == ("1/10 CardInsufficientCore, 2/10 CardInsufficientMemory, "
                    "3/10 CardUuidMismatch, 4/10 CardTimeSlicingExhausted")
    assert gen_reason({"B": 10, "A": 2}, 12) == "10/12 B, 2/12 A"


def test_parse_reason_reads_counts_and_ignores_free_text():
    assert parse_reason("3/8 CardInsufficientMemory, 2/8 CardInsufficientCore, 3/8 CardNotHealth") == {
        "CardInsufficientMemory": 3, "CardInsufficientCore": 2, "CardNotHealth": 3}
    assert parse_reason("AddResourceUsage failed for device GPU-0fc3eda5: device is full") == {}
    assert parse_reason("") == {}
    assert parse_reason("NodeInsufficientDevice") == {}


def test_every_reason_key_has_hamis_spelling():
    assert fit.CARD_UUID_MISMATCH == "CardUuidMismatch"
    keys = {fit.CARD_TYPE_MISMATCH, fit.CARD_UUID_MISMATCH, fit.CARD_TIME_SLICING_EXHAUSTED,
            fit.CARD_COMPUTE_UNITS_EXHAUSTED, fit.CARD_INSUFFICIENT_MEMORY, fit.CARD_INSUFFICIENT_CORE,
            fit.CARD_NOT_HEALTH, fit.CARD_CORDONED, fit.NUMA_NOT_FIT, fit.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
            fit.CARD_NOT_FOUND_CUSTOM_FILTER_RULE, fit.CARD_MIG_TOPOLOGY_INFEASIBLE, fit.NODE_INSUFFICIENT_DEVICE,
            fit.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, fit.RESOURCE_QUOTA_NOT_FIT, fit.MODE_NOT_FIT}
    assert len(keys) == 16 and all(k.isidentifier() for k in keys)


def test_reasons_count_each_rejected_card_once():
    devices = [dev("a", health=False), dev("b", used=100), dev("c", usedmem=128), dev("d", usedcores=100)]
    ok, _, reason = run(devices, req(1, 64, 101, 10))
    assert not ok
    assert reason == ("1/4 CardInsufficientCore, 1/4 CardInsufficientMemory, 1/4 CardNotHealth, "
                      "1/4 CardTimeSlicingExhausted")


# --------------------------------------------------------------------------- score_test.go Test_fitInCertainDevice

def _certain(**kw):
    base = dict(numa=1, used=1, count=4, totalmem=8192, usedmem=2048, usedcores=1, totalcore=4)
    base.update(kw)
    return [dev("test-0", **base)]


CERTAIN = [
    ("allocated device", _certain(), req(1, 1024, 100, 1), True, ""),
    ("card type don't match", _certain(), req(1, 1024, 100, 1, type="test"), False, "1/1 CardTypeMismatch"),
    ("device count less than device used", _certain(used=5), req(1, 1024, 100, 1), False,
     "1/1 CardTimeSlicingExhausted"),
    ("core limit exceed 100", _certain(), req(1, 1024, 100, 200), False, "1/1 CardInsufficientCore"),
    ("card insufficient remaining memory", _certain(totalmem=8000, usedmem=8000), req(1, 0, 100, 100), False,
     "1/1 CardInsufficientMemory"),
    ("exclusive access to a card in use", _certain(usedcores=0, totalcore=100), req(1, 100, 100, 100), False,
     "1/1 ExclusiveDeviceAllocateConflict"),
    ("can't allocate core=0 job to an already full GPU", _certain(totalcore=1), req(1, 1024, 100, 0), False,
     "1/1 CardComputeUnitsExhausted"),
]


@pytest.mark.parametrize("name,devices,request_,want_fit,want_reason", CERTAIN, ids=[c[0] for c in CERTAIN])
def test_hami_fit_in_certain_device_cases(name, devices, request_, want_fit, want_reason):
    ok, chosen, reason = run(devices, request_)
    assert ok is want_fit and reason == want_reason
    if ok:
        assert [(c.uuid, c.usedmem, c.usedcores, c.type) for c in chosen] == [("test-0", 1024, 1, "NVIDIA")]


@pytest.mark.parametrize(
    ("annotation", "fits"),
    [("\x1cGPU-a\x1f", False), ("GPU-a\x85", True), ("GPU-a\u00a0", True), ("GPU-b, GPU-a ", True), ("GPU-b", False)],
    ids=["ascii-separators", "nel", "nbsp", "spaces", "other-uuid"],
)
def test_use_gpuuuid_members_are_trimmed_like_go_strings_trimspace(annotation, fits):
    """devices.go trims members with strings.TrimSpace: Unicode spaces yes, \\x1c-\\x1f (which str.strip drops) no."""
    from hami.scheduler.placement.podfilter import split_uuids

    allowed = split_uuids(annotation)
    assert ("GPU-a" in allowed) is fits
