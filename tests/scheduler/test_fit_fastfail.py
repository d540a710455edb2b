"""Failure fast path of the fit (`fit.fast_fail`): same reasons as the per-device walk.

Property (hypothesis, random nodes and pods): a node's cached summary, when it says no device
has the memory asked for, gives the byte-identical reason `fit_devices` gives walking every
card; and `try_pod` with the fast path (plain options) returns exactly what it returns with the
fast path switched off, for random multi-container pods, health, cordons, slot and memory
usage, non-NVIDIA cards, MIG cards, numa-bind and topology policies. Examples: the summary
follows usage changes (add_pod / remove_pod) and cordon changes, options with a filter, mutex
or quota never take the fast path, and FilteringFailed texts group nodes by reason key.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.device.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo, MigPlacement, MigProfile
from hami.scheduler.placement import fit, messages
from hami.scheduler.placement.usage import DeviceState, NodeUsage, Quota, QuotaView, UsageIndex

MIG_PROFILES = (MigProfile("1g.10gb", 10000, 15, 1, (MigPlacement(0, 1), MigPlacement(1, 1))),)

device = st.fixed_dictionaries({
    "count": st.integers(0, 3),
    "used": st.integers(0, 3),
    "totalmem": st.sampled_from([0, 1000, 4000, 8000]),
    "usedmem": st.sampled_from([0, 500, 1000, 4000, 9000]),
    "totalcore": st.sampled_from([0, 100, 200]),
    "usedcores": st.sampled_from([0, 50, 100]),
    "type": st.sampled_from(["NVIDIA A100", "NVIDIA", "NVIDIA-Tesla P4", "AMD MI100"]),
    "numa": st.integers(0, 1),
    "mode": st.sampled_from(["hami-core", "hami-core", "mps", "mig"]),
    "health": st.sampled_from([True, True, True, False]),
    "cordoned": st.sampled_from([False, False, False, True]),
})
node_devices = st.lists(device, min_size=1, max_size=6)

container = st.one_of(
    st.none(),
    st.builds(
        lambda nums, mem, pct, cores: ContainerDeviceRequest(nums, "NVIDIA", mem, pct, cores),
        st.integers(1, 4),
        st.sampled_from([-1, 0, 0, 500, 1000, 3000, 5000, 20000]),
        st.sampled_from([101, 0, 10, 50, 100]),
        st.sampled_from([0, 10, 50, 100, 120]),
    ),
)
pod_parts = st.tuples(
    st.lists(container, min_size=1, max_size=3),
    st.integers(0, 2),
    st.sampled_from(["spread", "binpack", "topology-aware", "binpack,numa"]),
    st.booleans(),
)


def make_node(specs: list[dict]) -> NodeUsage:
    devs = []
    cordoned = set()
    for i, s in enumerate(specs):
        devs.append(DeviceState(
            f"GPU-{i}", index=i, count=s["count"], totalmem=s["totalmem"], totalcore=s["totalcore"],
            type=s["type"], numa=s["numa"], mode=s["mode"], health=s["health"], used=s["used"],
            usedmem=s["usedmem"], usedcores=s["usedcores"],
            mig_profiles=MIG_PROFILES if s["mode"] == "mig" else (),
        ))
        if s["cordoned"]:
            cordoned.add(f"GPU-{i}")
    pair = {f"GPU-{a}": {f"GPU-{b}": (a * 7 + b * 3) % 5 for b in range(len(specs)) if b != a}
            for a in range(len(specs))}
    return NodeUsage("n1", devs, cordoned, pair)


def make_pod(parts) -> fit.PodRequest:
    reqs, num_init, gpu_policy, numa = parts
    annos = {fit.NUMA_BIND: "true"} if numa else {}
    return fit.pod_request(reqs, min(num_init, len(reqs)), annos, gpu_policy=gpu_policy)


def slow(pod: fit.PodRequest) -> fit.PodRequest:
    return replace(pod, options=replace(pod.options, plain=False), first=None)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_devices, container.filter(lambda r: r is not None), pod_parts)
def test_fast_reason_equals_full_walk(specs, req, parts):
    node = make_node(specs)
    opts = make_pod(parts).options
    fast = fit.fast_fail(node, req)
    if fast is None:
        return
    order = fit.device_order(node.devices, req, opts)
    type_devs = [d for d in order if d.is_nvidia]
    ok, chosen, reason = fit.fit_devices(type_devs, req, opts, node.cordoned, node.pair_scores)
    assert (ok, chosen, reason) == (False, [], fast)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_devices, pod_parts)
def test_try_pod_same_with_and_without_fast_path(specs, parts):
    pod = make_pod(parts)
    assert pod.options.plain
    fast = fit.try_pod(make_node(specs), pod)
    full = fit.try_pod(make_node(specs), slow(pod))
    assert fast == full
    # and again on the same node, now with its summary cached
    node = make_node(specs)
    fit.try_pod(node, pod)
    assert fit.try_pod(node, pod) == full


def _index() -> UsageIndex:
    idx = UsageIndex()
    idx.set_node("n1", [DeviceInfo(id=f"G{i}", index=i, count=10, devmem=8000, devcore=100,
                                   type="NVIDIA A100", health=True) for i in range(2)])
    return idx


def test_fast_path_reason_and_summary_follow_usage_changes():
    idx = _index()
    big = fit.pod_request([ContainerDeviceRequest(1, "NVIDIA", 6000, 101, 0)], 0, {})
    assert fit.try_pod(idx.node("n1"), big).__class__ is tuple
    for i in range(2):
        idx.add_pod(f"ns/p{i}", "n1", ((ContainerDevice(f"G{i}", "NVIDIA", 4000, 0),),))
    assert fit.try_pod(idx.node("n1"), big) == "2/2 CardInsufficientMemory"
    summary = idx.node("n1").fail_summary  # built by the failing fit, for this usage
    assert (summary.max_free, summary.rest) == (4000, 2), (summary.max_free, summary.rest)
    idx.remove_pod("ns/p1")
    assert idx.node("n1").fail_summary is None
    assert fit.try_pod(idx.node("n1"), big).__class__ is tuple
    idx.set_cordon("n1", ["G1"])
    assert fit.try_pod(idx.node("n1"), big) == "1/2 CardCordoned, 1/2 CardInsufficientMemory"
    idx.node("n1").cordoned = frozenset({"G0", "G1"})  # replaced without set_cordon: still seen
    assert fit.try_pod(idx.node("n1"), big) == "2/2 CardCordoned"


def test_options_with_filters_mutex_or_quota_take_the_full_walk():
    assert fit.fit_options({}).plain
    for annos in ({fit.USE_GPUTYPE: "A100"}, {fit.NOUSE_GPUTYPE: "P4"}, {fit.USE_GPUUUID: "G0"},
                  {fit.NOUSE_GPUUUID: "G0"}, {fit.VGPU_MODE: "hami-core"}):
        assert not fit.fit_options(annos).plain, annos
    assert not fit.fit_options({}, "mutex").plain
    assert not fit.fit_options({}, quota=QuotaView(Quota(0, 100), None)).plain
    assert fit.fit_options({fit.NUMA_BIND: "true"}, "topology-aware").plain


def test_percentage_memory_request_takes_the_full_walk():
    idx = _index()
    for i in range(2):
        idx.add_pod(f"ns/p{i}", "n1", ((ContainerDevice(f"G{i}", "NVIDIA", 7000, 0),),))
    req = ContainerDeviceRequest(1, "NVIDIA", 0, 50, 0)
    assert fit.fast_fail(idx.node("n1"), req) is None
    pod = fit.pod_request([req], 0, {})
    assert fit.try_pod(idx.node("n1"), pod) == "2/2 CardInsufficientMemory"


def test_filtering_failed_messages_group_shared_reasons():
    failed = {
        "n3": "8/8 CardInsufficientMemory",
        "n1": "1/8 CardInsufficientMemory, 7/8 CardTimeSlicingExhausted",
        "n2": "8/8 CardInsufficientMemory",
        "n4": "NodeInsufficientDevice",
        "n0": "node unregistered",
    }
    assert messages.filtering_failed_messages(failed) == [
        "3 nodes CardInsufficientMemory(n1,n2,n3)",
        "1 nodes CardTimeSlicingExhausted(n1)",
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_devices, container.filter(lambda r: r is not None), pod_parts,
       st.sampled_from(["NVIDIA", "NVIDIA A100", "AMD MI100"]), st.integers(0, 2))
def test_device_order_keys_plain_policies_in_one_pass_as_sort_devices_orders(specs, req, parts, rtype, again):
    """`device_order` keys the plain binpack and spread policies' devices in its scoring pass; the
    order is the reference's: every device's `device_score` (the request counted where its type is
    the device's), sorted by `policy.sort_devices` (Go's sort.Sort), for every policy, numa-bind,
    request type and usage (the score memo read again after a usage change)."""
    from hami.scheduler.placement.policy import device_score, sort_devices

    node = make_node(specs)
    req = replace(req, type=rtype)
    opts = make_pod(parts).options
    for step in range(again + 1):
        if step:
            node.devices[step % len(node.devices)].used += 1
            node.devices[0].usedmem += 700
        want = [(device_score(d, (req,), opts.weights), d) for d in node.devices]
        sort_devices(want, opts.policy, opts.numa_bind)
        assert [d.id for d in fit.device_order(node.devices, req, opts)] == [d.id for _, d in want]
