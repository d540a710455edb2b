"""Tests for hami.device.request: Kubernetes quantities and per-container device requests.

Covers: the exact quantity parser (suffixes, exponents, Go's odd accepted forms, rejects);
AsInt64 / Value() semantics; GenerateResourceRequests goldens from HAMi
pkg/device/nvidia/device_test.go (TestGenerateResourceRequests, _MemoryFactor, _DefaultMemory);
the spec §4 rules (101 sentinel, clamping, defaults, memoryFactor, invalid memory empties the
request, limits before requests, int32 wrap); init-containers-first ordering from
pkg/device/devices_test.go (TestResourcereqs_*, TestPodRequiresDevice); webhook presence helpers
(Test_MutateAdmission, Test_MutateAdmission_MemoryPercentageValidation); hypothesis: any pod-shaped
dict gives one entry per container and never raises, quantity text round-trips.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.codec import CodecError
from hami.device.model import ContainerDeviceRequest, NvidiaConfig
from hami.device.request import (
    app_containers_request_devices,
    container_request,
    names_hami_resource,
    parse_quantity,
    pod_requests,
    pod_requests_devices,
    quantity_as_int64,
    quantity_value,
    resource_in_limits,
    resource_int,
    resource_present,
    resource_value,
)

CFG = NvidiaConfig()


def ctr(limits=None, requests=None, name="c") -> dict:
    res = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": name, "resources": res}


def req(nums, memreq=0, pct=101, cores=0) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums=nums, type="NVIDIA", memreq=memreq, mempercentagereq=pct, coresreq=cores)


# --------------------------------------------------------------------------- quantities

QUANTITIES = [
    ("1", Fraction(1)), ("4096", Fraction(4096)), ("16Gi", Fraction(16 << 30)), ("500m", Fraction(1, 2)),
    ("1e3", Fraction(1000)), ("1E3", Fraction(1000)), ("1.5", Fraction(3, 2)), ("1.0", Fraction(1)),
    ("-2", Fraction(-2)), ("+3", Fraction(3)), (".5", Fraction(1, 2)), ("1.", Fraction(1)),
    ("1k", Fraction(1000)), ("2M", Fraction(2_000_000)), ("1Ki", Fraction(1024)), ("1.5Gi", Fraction(3 << 29)),
    ("100n", Fraction(1, 10_000_000)), ("3u", Fraction(3, 1_000_000)), ("1E", Fraction(10**18)),
    ("2e-3", Fraction(1, 500)), ("5e+2", Fraction(500)), ("-", Fraction(0)), ("Ki", Fraction(0)),
    ("0e999999999", Fraction(0)), (7, Fraction(7)),
]


@pytest.mark.parametrize(("text", "want"), QUANTITIES, ids=[repr(q[0]) for q in QUANTITIES])
def test_parse_quantity_is_exact(text, want):
    assert parse_quantity(text) == want


@pytest.mark.parametrize("text", ["", "1K", "1Kii", "abc", "1.2.3", "1e", "1 ", " 1", "1ee3", "1e3.5", "1x", "1e99999",
                                  None, 1.5, [], "１"])
def test_parse_quantity_rejects_what_kubernetes_rejects(text):
    with pytest.raises(CodecError) as err:
        parse_quantity(text)
    assert err.value.field == "quantity"


@pytest.mark.parametrize(
    ("text", "as_int", "value"),
    [("1", 1, 1), ("16Gi", 16 << 30, 16 << 30), ("500m", None, 1), ("1.5", None, 2), ("-1.5", None, -2),
     ("99999999999999999999", None, 99999999999999999999), ("9223372036854775807", 2**63 - 1, 2**63 - 1),
     ("bogus", None, None), ("50m", None, 1), ("99.1", None, 100)],
)
def test_as_int64_and_value_semantics(text, as_int, value):
    """Quantity.AsInt64 (exact integer within int64) and Quantity.Value (rounded away from zero)."""
    assert quantity_as_int64(text) == as_int
    assert quantity_value(text) == value


@given(n=st.integers(-(2**62), 2**62), suffix=st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "e2", "E3"]))
@settings(deadline=None, max_examples=100)
def test_integer_quantities_round_trip(n, suffix):
    mult = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "e2": 100, "E3": 1000}
    assert parse_quantity(f"{n}{suffix}") == n * mult[suffix]


@given(text=st.text(st.sampled_from(list("0123456789.+-eEinumkKMGTP ")), max_size=12))
@settings(deadline=None, max_examples=150)
def test_quantity_helpers_never_raise_anything_but_codec_error(text):
    try:
        parse_quantity(text)
    except CodecError:
        pass
    quantity_as_int64(text)
    quantity_value(text)


# --------------------------------------------------------------------------- GenerateResourceRequests

GOLDEN = [
    ("gpu count only - defaults to 100% memory", ctr({"nvidia.com/gpu": "1"}), req(1, 0, 100, 0)),
    ("gpu count + explicit memory", ctr({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096"}), req(2, 4096, 101, 0)),
    ("gpu count + memory percentage", ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
     req(1, 0, 50, 0)),
    ("gpu count + explicit cores", ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}), req(1, 0, 100, 50)),
    ("no gpu resource - returns empty request", ctr({}), None),
    ("gpu in Requests (not Limits) - falls back to Requests", ctr(requests={"nvidia.com/gpu": "1"}),
     req(1, 0, 100, 0)),
]


@pytest.mark.parametrize(("container", "want"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_generate_resource_requests_golden(container, want):
    """pkg/device/nvidia/device_test.go TestGenerateResourceRequests (and spec scheduler.md §4 examples)."""
    assert container_request(container, CFG) == want


def test_memory_factor_multiplies_memory():
    """nvidia/device_test.go TestGenerateResourceRequests_MemoryFactor: 1024 x 2 = 2048."""
    cfg = NvidiaConfig(memory_factor=2)
    assert container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}), cfg).memreq == 2048


def test_default_memory_applies_when_nothing_is_asked():
    """nvidia/device_test.go TestGenerateResourceRequests_DefaultMemory: memreq 512, percentage stays 101."""
    got = container_request(ctr({"nvidia.com/gpu": "1"}), NvidiaConfig(default_memory=512))
    assert (got.memreq, got.mempercentagereq) == (512, 101)


RULES = [
    ("memory not an integer empties the request", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1.5"}, CFG, None),
    ("memory 16Gi exceeds int32 and empties the request", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"},
     CFG, None),
    ("negative memory empties the request", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-1"}, CFG, None),
    ("memory over MaxInt32/factor empties the request", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1073741824"},
     NvidiaConfig(memory_factor=2), None),
    ("memory at MaxInt32/factor is kept", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1073741823"},
     NvidiaConfig(memory_factor=2), req(1, 2147483646, 101, 0)),
    ("percentage over 100 is clamped", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, CFG,
     req(1, 0, 100, 0)),
    ("percentage 0 stays unset then whole card", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"},
     CFG, req(1, 0, 100, 0)),
    ("negative percentage stays unset with default memory", {"nvidia.com/gpu": "1",
                                                              "nvidia.com/gpumem-percentage": "-5"},
     NvidiaConfig(default_memory=1000), req(1, 1000, 101, 0)),
    ("fractional percentage is ignored", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50m"}, CFG,
     req(1, 0, 100, 0)),
    ("explicit memory 0 means unset", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}, CFG, req(1, 0, 100, 0)),
    ("memory and percentage both kept", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100",
                                         "nvidia.com/gpumem-percentage": "30"}, CFG, req(1, 100, 30, 0)),
    ("default cores", {"nvidia.com/gpu": "1"}, NvidiaConfig(default_cores=20), req(1, 0, 100, 20)),
    ("explicit cores beat default cores", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"},
     NvidiaConfig(default_cores=20), req(1, 0, 100, 0)),
    ("cores over 100 are kept here (Fit clamps)", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}, CFG,
     req(1, 0, 100, 150)),
    ("fractional cores fall back to default", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0.5"},
     NvidiaConfig(default_cores=7), req(1, 0, 100, 7)),
    ("fractional count is no request", {"nvidia.com/gpu": "500m"}, CFG, None),
    ("zero count is no request", {"nvidia.com/gpu": "0"}, CFG, None),
    ("negative count is no request", {"nvidia.com/gpu": "-1"}, CFG, None),
    ("count wraps like Go int32", {"nvidia.com/gpu": "4294967297"}, CFG, req(1, 0, 100, 0)),
    ("count 1e0 is an integer", {"nvidia.com/gpu": "1e0"}, CFG, req(1, 0, 100, 0)),
    ("invalid count text is no request", {"nvidia.com/gpu": "lots"}, CFG, None),
    ("memory-only container asks for nothing", {"nvidia.com/gpumem": "1000"}, CFG, None),
    ("custom resource names", {"hami.io/gpu": "2", "hami.io/gpumem": "10"},
     NvidiaConfig(resource_count_name="hami.io/gpu", resource_memory_name="hami.io/gpumem"), req(2, 10, 101, 0)),
]


@pytest.mark.parametrize(("limits", "cfg", "want"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_request_rules_of_spec_section_4(limits, cfg, want):
    """spec scheduler.md §4 and nvidia/device.go GenerateResourceRequests."""
    assert container_request(ctr(limits), cfg) == want


def test_limits_win_over_requests_per_resource():
    container = ctr({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "300"})
    assert container_request(container, CFG) == req(2, 300, 101, 0)


# --------------------------------------------------------------------------- pods


def pod(init=(), app=()) -> dict:
    spec: dict = {"containers": list(app)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


GPU = ctr({"nvidia.com/gpu": "1"})
GPU2 = ctr({"nvidia.com/gpu": "2"})
NOGPU = ctr({"cpu": "1"})


def test_init_containers_come_first():
    """devices_test.go TestResourcereqs_WithInitContainers / _MultipleInitAndRegularContainers."""
    got = pod_requests(pod(init=[GPU2, NOGPU], app=[GPU2, GPU2]), CFG)
    assert [r.nums if r else None for r in got] == [2, None, 2, 2]
    got = pod_requests(pod(init=[ctr({}), GPU], app=[GPU]), CFG)
    assert [r is not None for r in got] == [False, True, True]


def test_empty_pod_has_no_entries():
    """devices_test.go TestResourcereqs_EmptyPod."""
    assert pod_requests({"spec": {}}, CFG) == ()
    assert pod_requests({}, CFG) == ()


@pytest.mark.parametrize(
    ("p", "want"),
    [
        (None, False),
        (pod(init=[NOGPU], app=[NOGPU]), False),
        (pod(init=[NOGPU], app=[GPU]), True),
        (pod(init=[GPU], app=[NOGPU]), True),
        (pod(init=[GPU], app=[GPU]), True),
    ],
    ids=["nil pod", "no device request", "regular-container-only", "init-container-only", "both"],
)
def test_pod_requests_devices_like_pod_requires_device(p, want):
    """devices_test.go TestPodRequiresDevice."""
    assert pod_requests_devices(p, CFG) is want


def test_node_lock_is_only_for_app_container_requests():
    """nvidia/device.go LockNode looks at app containers only."""
    assert app_containers_request_devices(pod(init=[GPU], app=[NOGPU]), CFG) is False
    assert app_containers_request_devices(pod(app=[NOGPU, GPU]), CFG) is True


# --------------------------------------------------------------------------- webhook helpers


@pytest.mark.parametrize(
    ("limits", "want"),
    [({"nvidia.com/gpu": "1"}, True), ({"nvidia.com/gpucores": "1"}, True), ({"nvidia.com/gpumem": "1"}, True),
     ({"nvidia.com/gpumem-percentage": "1"}, True), ({}, False), ({"cpu": "1"}, False)],
    ids=["count", "cores", "mem", "percentage", "none", "cpu-only"],
)
def test_names_hami_resource(limits, want):
    """nvidia/device_test.go Test_MutateAdmission: which containers carry a HAMi resource."""
    assert names_hami_resource(ctr(limits), CFG) is want


@pytest.mark.parametrize(
    ("raw", "as_int"),
    [("0", 0), ("50", 50), ("100", 100), ("50m", None), ("50.5", None), ("99.1", None), ("101", 101), ("-1", -1)],
)
def test_percentage_read_for_webhook_validation(raw, as_int):
    """nvidia/device_test.go Test_MutateAdmission_MemoryPercentageValidation inputs, in limits and
    in requests: the webhook rejects what is not an integer in 0..100."""
    for container in (ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": raw}),
                      ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpumem-percentage": raw})):
        assert resource_int(container, "nvidia.com/gpumem-percentage") == as_int
        assert resource_present(container, "nvidia.com/gpumem-percentage")


def test_presence_helpers_distinguish_limits_and_requests():
    container = ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpucores": "70"})
    assert resource_in_limits(container, "nvidia.com/gpu") and not resource_in_limits(container, "nvidia.com/gpucores")
    assert resource_present(container, "nvidia.com/gpucores") and not resource_present(container, "nvidia.com/gpumem")
    assert resource_value(container, "nvidia.com/gpucores") == 70
    assert not resource_present(container, "")


# --------------------------------------------------------------------------- properties

quantity_text = st.one_of(
    st.integers(-5, 2**40).map(str),
    st.sampled_from(["1.5", "500m", "16Gi", "1e3", "-1", "0", "abc", "", "1Ki", "0.5"]),
    st.integers(),
    st.none(),
)
resource_map = st.dictionaries(
    st.sampled_from(list(CFG.resource_names) + ["cpu", "memory"]), quantity_text, max_size=5
)
container_shape = st.one_of(
    st.builds(lambda limits, requests: {"resources": {"limits": limits, "requests": requests}}, resource_map,
              resource_map),
    st.just({}), st.just({"resources": None}), st.just({"resources": {"limits": []}}), st.just("not a dict"),
)


@given(init=st.lists(container_shape, max_size=3), app=st.lists(container_shape, max_size=3),
       factor=st.integers(1, 4), default_memory=st.integers(0, 5000), default_cores=st.integers(0, 100))
@settings(deadline=None, max_examples=150)
def test_any_pod_shape_gives_one_entry_per_container(init, app, factor, default_memory, default_cores):
    cfg = NvidiaConfig(memory_factor=factor, default_memory=default_memory, default_cores=default_cores)
    got = pod_requests({"spec": {"initContainers": init, "containers": app}}, cfg)
    assert len(got) == len(init) + len(app)
    for r in got:
        if r is not None:
            assert r.nums > 0 and r.type == "NVIDIA"
            assert 0 <= r.memreq <= 2**31 - 1
            assert 1 <= r.mempercentagereq <= 101
            assert r.mempercentagereq != 101 or r.memreq > 0
