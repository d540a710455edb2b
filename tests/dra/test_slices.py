"""The ResourceSlice builder and the claim allocation reader (pure), with hypothesis.

Covers: slices validate (strict) against the resource.k8s.io/v1 schema of Kubernetes 1.34, 1.36 and
1.37; one pool per node, devices named as HAMi's driver names them with its attributes (type hami-gpu,
uuid, productName, versions as semver) plus index, numa, memoryBytes, nvlinkDomain, migEnabled;
capacity memory (bytes, 1Mi steps, times deviceMemoryScaling), cores (100 x deviceCoreScaling, one
claim at most 100) and shares (deviceSplitCount, default 1), allowMultipleAllocations; filtered GPUs
left out, unhealthy ones tainted NoSchedule (gpu-lost, xid, unhealthy) or withdrawn with the flag;
`next_pool` writes nothing when nothing changed (a restart does not churn, a stamped taint is no
change), bumps the generation by one on every change and deletes slices no longer laid out;
quantities print in Go's canonical form and parse back; NVLink groups; `shares` never hands out more
than a device has, sums several results on one device, counts shares (default 1, the whole device
without consumable capacity), gives adminAccess results no capacity and never mixes them with
ordinary ones, and raises only ClaimError on any input; a static MIG GPU is published as its
instances (type mig, whole, exclusive, schema-valid), which a claim takes whole and never mixes with
whole GPUs; a MIG-capable GPU publishes its CounterSet in a slice of its own (8 sets per slice at
most) and every profile placement as a device consuming it, the whole GPU consuming all of it.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.nodeconfig import DeviceSettings, FilterDevices
from hami.device.request import parse_quantity
from hami.dra.pool import next_pool, pool_slices
from hami.dra.shares import ClaimError, published_gpus, shares
from hami.dra.slices import (
    DRIVER,
    MAX_ATTRIBUTES_AND_CAPACITY,
    TAINT_GPU_LOST,
    TAINT_UNHEALTHY,
    TAINT_XID,
    GpuExtras,
    GpuState,
    MigSlice,
    binary_quantity,
    build_slice,
    devices_for,
    health_taints,
    layout_for,
    nvlink_domains,
    semver,
)
from hami.gpu.backend import GpuInfo
from hami.gpu.mig import geometries

MIB = 1 << 20
PROFILES = geometries()["A100-40GB"]


def gpu(i: int, mem: int = 40960, healthy: bool = True, minor: int = -1) -> GpuInfo:
    return GpuInfo(f"GPU-{i:08d}-0000-4000-8000-000000000000", i, "NVIDIA A100-SXM4-40GB", mem, numa=i // 4,
                   healthy=healthy, minor=minor)


gpus_st = st.lists(st.tuples(st.integers(1, 200_000), st.booleans()), min_size=0, max_size=8).map(
    lambda xs: [gpu(i, m, h) for i, (m, h) in enumerate(xs)])


@pytest.mark.parametrize("version", ["1.34", "1.37"])
def test_slice_validates_against_the_kubernetes_schema(version):
    extras = {gpu(0).uuid: GpuExtras("8.0", "580.65.06", "13.0", "Nvidia", "Ampere", "0000:3b:00.0", 0, False)}
    s = build_slice("n1", devices_for([gpu(0), gpu(1)], extras=extras), 3, node_uid="uid-1")
    kubernetes_validate.validate(s, version, strict=True)
    bad = build_slice("n1", devices_for([gpu(0)]), 1)
    bad["spec"]["devices"][0]["capacity"]["memory"]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, version, strict=True)


def test_device_carries_hamis_attributes_and_shareable_capacity():
    extras = {gpu(0).uuid: GpuExtras("9.0", "580.65.06", "13.0", "Nvidia", "Hopper", "0000:3b:00.0", 0, True)}
    [d] = devices_for([gpu(0, minor=3)], extras=extras)
    assert d["name"] == "hami-gpu-3"
    a = d["attributes"]
    assert a["type"] == {"string": "hami-gpu"}
    assert a["uuid"] == {"string": gpu(0).uuid}
    assert a["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert (a["index"], a["minor"], a["numa"]) == ({"int": 0}, {"int": 3}, {"int": 0})
    assert a["memoryBytes"] == {"int": 40960 * MIB}
    assert a["cudaComputeCapability"] == {"version": "9.0.0"}
    assert a["driverVersion"] == {"version": "580.65.6"}
    assert a["nvlinkDomain"] == {"int": 0} and a["migEnabled"] == {"bool": True}
    assert a["pcieBusID"] == {"string": "0000:3b:00.0"}
    assert d["allowMultipleAllocations"] is True
    mem, cores = d["capacity"]["memory"], d["capacity"]["cores"]
    assert mem["value"] == "40Gi" and mem["requestPolicy"]["validRange"] == {"min": "1Mi", "max": "40Gi", "step": "1Mi"}
    assert cores["value"] == "100" and cores["requestPolicy"]["validRange"] == {"min": "0", "max": "100", "step": "1"}
    s = build_slice("node-a", [d], 1)
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == "node-a"


def test_unknown_facts_are_left_out_not_guessed():
    [d] = devices_for([gpu(0)], extras={gpu(0).uuid: GpuExtras(driver_version="not-a-version")})
    assert "driverVersion" not in d["attributes"] and "cudaComputeCapability" not in d["attributes"]
    assert "nvlinkDomain" not in d["attributes"] and d["name"] == "hami-gpu-0"  # minor unknown: the index


@given(gpus_st, st.sets(st.integers(0, 7)), st.booleans())
def test_filtered_gpus_are_left_out_and_unhealthy_ones_tainted_or_withdrawn(gpus, filtered_idx, withdraw):
    settings = DeviceSettings(filter=FilterDevices(index=tuple(sorted(filtered_idx))))
    states = {g.uuid: GpuState(taints=tuple(health_taints(g.healthy))) for g in gpus}
    devs = layout_for(gpus, settings, states, withdraw_unhealthy=withdraw).devices()
    want = [g for g in gpus if g.index not in filtered_idx and (g.healthy or not withdraw)]
    assert [d["attributes"]["uuid"]["string"] for d in devs] == [g.uuid for g in want]
    assert len({d["name"] for d in devs}) == len(devs)
    for d, g in zip(devs, want, strict=True):
        assert len(d["attributes"]) + len(d["capacity"]) <= MAX_ATTRIBUTES_AND_CAPACITY
        assert parse_quantity(d["capacity"]["memory"]["value"]) == g.memory_total_mib * MIB
        assert d.get("taints", []) == ([] if g.healthy else [{"key": TAINT_UNHEALTHY, "value": "true",
                                                              "effect": "NoSchedule"}])
    assert {p.name: p.memory_mib for p in published_gpus(devs).values()} == \
        {d["name"]: g.memory_total_mib for d, g in zip(devs, want, strict=True)}


@given(st.lists(gpus_st, min_size=1, max_size=6))
def test_generation_moves_only_on_change_and_a_restart_does_not_churn(states):
    stored, gen = {}, 0
    for gpus in states:
        layout = layout_for(gpus, states={g.uuid: GpuState(taints=tuple(health_taints(g.healthy))) for g in gpus})
        out = next_pool(stored, "n1", layout)
        if stored and [d for s in stored.values() for d in s["spec"].get("devices", [])] == layout.devices():
            assert out is None
            continue
        gen += 1
        assert out.generation == gen and {s["spec"]["pool"]["generation"] for s in out.put} == {gen}
        stored = {s["metadata"]["name"]: {**s, "metadata": {**s["metadata"], "resourceVersion": str(gen)}}
                  for s in out.put}
        assert next_pool(stored, "n1", layout) is None  # the restarted plugin sees what it wrote


def test_a_stamped_taint_is_not_a_change_and_a_gone_partitioned_gpu_deletes_its_slices():
    sick = gpu(0, healthy=False)
    layout = layout_for([sick], states={sick.uuid: GpuState(taints=tuple(health_taints(False, xids={48: 2})))})
    [body] = next_pool({}, "n1", layout).put
    assert body["spec"]["devices"][0]["taints"] == [{"key": TAINT_XID, "value": "48", "effect": "NoSchedule"}]
    body["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-29T07:00:00Z"  # the API server's stamp
    assert next_pool({body["metadata"]["name"]: body}, "n1", layout) is None
    mig = gpu(1, 40960)
    stored = {s["metadata"]["name"]: s for s in next_pool({}, "n1", layout_for(
        [mig], states={mig.uuid: GpuState(profiles=PROFILES)})).put}
    assert len(stored) == 3
    out = next_pool(stored, "n1", layout_for([gpu(2)]))
    assert sorted(out.delete) == sorted(n for n in stored if n != "n1-" + DRIVER) and out.generation == 2


def test_health_taints_name_the_fault_with_no_schedule_only():
    assert health_taints(True) == []
    assert health_taints(True, xids={79: 1}) == []  # the backend decides which XIDs make a GPU unhealthy
    assert health_taints(False, xids={79: 1}) == [{"key": TAINT_GPU_LOST, "value": "true", "effect": "NoSchedule"}]
    assert health_taints(False, lost=True)[0]["key"] == TAINT_GPU_LOST
    assert health_taints(False, xids={48: 1, 63: 3, 94: 3}) == [{"key": TAINT_XID, "value": "63",
                                                               "effect": "NoSchedule"}]
    assert health_taints(False) == [{"key": TAINT_UNHEALTHY, "value": "true", "effect": "NoSchedule"}]
    assert all(t["key"].startswith(DRIVER + "/") for t in health_taints(False) + health_taints(False, lost=True))


@given(st.integers(0, 1 << 62))
def test_binary_quantity_is_canonical_and_parses_back(n):
    text = binary_quantity(n)
    assert parse_quantity(text) == n
    assert text == str(n) or not text[:-2].endswith("024") or int(text[:-2]) % 1024 != 0


@given(st.lists(st.integers(0, 999), min_size=1, max_size=3))
def test_semver_pads_and_strips_leading_zeros(parts):
    text = ".".join(f"{p:02d}" for p in parts)
    assert semver(text) == ".".join(str(p) for p in parts + [0] * (3 - len(parts)))
    assert semver(text + ".x") is None and semver("") is None


@given(st.dictionaries(st.tuples(st.integers(0, 7), st.integers(0, 7)), st.integers(0, 4), max_size=12))
def test_nvlink_domain_is_the_lowest_index_of_the_connected_group(pairs):
    dom = nvlink_domains(pairs)
    for (a, b), n in pairs.items():
        if n > 0 and a != b:
            assert dom[a] == dom[b]
    for i, d in dom.items():
        assert d <= i and dom[d] == d


# --------------------------------------------------------------------------- claims

PUB = published_gpus(devices_for([gpu(0, 1024), gpu(1, 2048)]))
names = st.sampled_from(["hami-gpu-0", "hami-gpu-1"])
quantities = st.one_of(st.integers(0, 4096).map(lambda m: f"{m}Mi"), st.integers(0, 5 << 30).map(str),
                       st.text(max_size=6), st.integers(-5, 5))


@settings(max_examples=300)
@given(st.lists(st.tuples(names, quantities, st.one_of(st.integers(0, 120).map(str), st.just("0.5"))), max_size=5))
def test_shares_never_exceed_a_device_and_sum_results_per_device(results):
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": DRIVER, "pool": "n1", "device": d, "request": f"r{i}",
         "consumedCapacity": {"memory": m, "cores": c}} for i, (d, m, c) in enumerate(results)]}}}}
    try:
        out = shares(claim, driver=DRIVER, pool="n1", published=PUB)
    except ClaimError:
        return
    assert out and len({s.device for s in out}) == len(out)
    for s in out:
        assert 1 <= s.memory_mib <= PUB[s.device].memory_mib
        assert 0 <= s.cores <= 100
        want = sum(parse_quantity(m) for d, m, _ in results if d == s.device)
        assert s.memory_mib == int(want // MIB)
        assert s.requests == tuple(f"r{i}" for i, (d, _, _) in enumerate(results) if d == s.device)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                           lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                  st.dictionaries(st.sampled_from(
                                                      ["status", "allocation", "devices", "results", "driver",
                                                       "pool", "device", "consumedCapacity", "memory", "cores"]),
                                                      kids, max_size=4)), max_leaves=12)


@settings(max_examples=300)
@given(json_values)
def test_any_claim_shape_is_a_claim_error_or_a_valid_share(claim):
    try:
        out = shares(claim, driver=DRIVER, pool="n1", published=PUB)
    except ClaimError:
        return
    assert len({s.device for s in out}) == len(out)  # one share per device
    for s in out:
        assert s.device in PUB and s.uuid == PUB[s.device].uuid  # only devices this node publishes
        assert 1 <= s.memory_mib <= PUB[s.device].memory_mib
        assert 0 <= s.cores <= 100
        assert s.requests and all(isinstance(r, str) for r in s.requests)


def test_missing_consumed_capacity_means_the_whole_device():
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": DRIVER, "pool": "n1", "device": "hami-gpu-1", "request": "g"}]}}}}
    [s] = shares(claim, driver=DRIVER, pool="n1", published=PUB)
    assert (s.memory_mib, s.cores) == (2048, 100)


# --------------------------------------------------------------------------- MIG


def test_a_mig_gpu_is_published_as_its_instances_whole_and_exclusive():
    migs = {gpu(0).uuid: [MigSlice("MIG-b", "3g.20gb", 4, 4, 20096), MigSlice("MIG-a", "1g.5gb", 0, 1, 4864),
                          MigSlice("", "1g.5gb", 1, 1, 4864)]}  # no MIG uuid (no compute instance): left out
    devs = devices_for([gpu(0), gpu(1)], extras={gpu(0).uuid: GpuExtras("8.0", mig_enabled=True)}, migs=migs)
    assert [d["name"] for d in devs] == ["hami-gpu-0-mig-0-1", "hami-gpu-0-mig-4-4", "hami-gpu-1"]
    m = devs[0]
    assert m["attributes"]["type"] == {"string": "mig"} and m["attributes"]["uuid"] == {"string": "MIG-a"}
    assert m["attributes"]["parentUUID"] == {"string": gpu(0).uuid}
    assert m["attributes"]["profile"] == {"string": "1g.5gb"}
    assert m["attributes"]["memoryBytes"] == {"int": 4864 * MIB}
    assert m["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
    assert m["capacity"] == {"memory": {"value": "4864Mi"}} and "allowMultipleAllocations" not in m
    kubernetes_validate.validate(build_slice("n1", devs, 1), "1.34", strict=True)
    pub = published_gpus(devs)
    assert pub["hami-gpu-0-mig-0-1"].mig and not pub["hami-gpu-1"].mig


def test_a_mig_instance_is_taken_whole_and_never_mixed_with_whole_gpus():
    devs = devices_for([gpu(0), gpu(1, 2048)], migs={gpu(0).uuid: [MigSlice("MIG-a", "1g.5gb", 0, 1, 4864)]})
    pub = published_gpus(devs)

    def claim(*results):
        return {"status": {"allocation": {"devices": {"results": [
            {"driver": DRIVER, "pool": "n1", "device": d, "request": "g", **({"consumedCapacity": c} if c else {})}
            for d, c in results]}}}}

    [s] = shares(claim(("hami-gpu-0-mig-0-1", None)), driver=DRIVER, pool="n1", published=pub)
    assert (s.uuid, s.memory_mib, s.cores, s.mig) == ("MIG-a", 4864, 100, True)
    with pytest.raises(ClaimError, match="is a MIG instance: it is taken whole"):
        shares(claim(("hami-gpu-0-mig-0-1", {"memory": "1Gi"})), driver=DRIVER, pool="n1", published=pub)
    with pytest.raises(ClaimError, match="mixes MIG instances and whole GPUs"):
        shares(claim(("hami-gpu-0-mig-0-1", None), ("hami-gpu-1", {"memory": "1Gi", "cores": "5"})),
               driver=DRIVER, pool="n1", published=pub)


# --------------------------------------------------------------------------- split count, scaling, admin


def _claim(*results):
    return {"status": {"allocation": {"devices": {"results": [
        {"driver": DRIVER, "pool": "n1", "request": "g", **r} for r in results]}}}}


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_split_count_is_a_shares_capacity_and_scaling_scales_memory_and_cores(version):
    settings = DeviceSettings(split_count=4, memory_scaling=1.5, core_scaling=2.0)
    [d] = layout_for([gpu(0, 40960)], settings).devices()
    assert d["capacity"]["shares"] == {"value": "4", "requestPolicy": {
        "default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}}}
    assert d["capacity"]["memory"]["value"] == "60Gi"  # 40 GiB x 1.5: over-commit, as device-plugin mode
    assert d["capacity"]["cores"] == {"value": "200", "requestPolicy": {
        "default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}
    kubernetes_validate.validate(build_slice("n1", [d], 1), version, strict=True)
    pub = published_gpus([d])["hami-gpu-0"]
    assert (pub.memory_mib, pub.cores, pub.shares) == (61440, 200, 4)
    [s] = shares(_claim({"device": "hami-gpu-0", "consumedCapacity": {"memory": "1Gi", "cores": "10"}}),
                 driver=DRIVER, pool="n1", published={"hami-gpu-0": pub})
    assert s.shares == 1  # not consumed: the policy's default
    [s] = shares(_claim({"device": "hami-gpu-0"}), driver=DRIVER, pool="n1", published={"hami-gpu-0": pub})
    assert (s.shares, s.cores) == (4, 100)  # no consumable capacity: the whole device
    with pytest.raises(ClaimError, match="5 shares, the device has 4"):
        shares(_claim({"device": "hami-gpu-0", "consumedCapacity": {"memory": "1Gi", "shares": "5"}}),
               driver=DRIVER, pool="n1", published={"hami-gpu-0": pub})
    with pytest.raises(ClaimError, match="one claim takes at most 100"):
        shares(_claim({"device": "hami-gpu-0", "consumedCapacity": {"memory": "1Gi", "cores": "150"}}),
               driver=DRIVER, pool="n1", published={"hami-gpu-0": pub})
    with pytest.raises(ClaimError, match="unknown capacity 'shares'"):  # a device without the capacity
        shares(_claim({"device": "hami-gpu-0", "consumedCapacity": {"shares": "1"}}),
               driver=DRIVER, pool="n1", published=published_gpus(layout_for([gpu(0)], DeviceSettings(
                   split_count=0)).devices()))


def _admin(claim: dict, *names: str) -> dict:
    claim["spec"] = {"devices": {"requests": [{"name": n, "exactly": {"deviceClassName": DRIVER, "adminAccess": True}}
                                              for n in names]}}
    return claim


def test_admin_access_consumes_nothing_and_is_never_mixed_with_ordinary_use():
    pub = published_gpus(devices_for([gpu(0), gpu(1)]))
    admin = {"device": "hami-gpu-1", "adminAccess": True, "request": "watch",
             "consumedCapacity": {"memory": "1Mi", "cores": "0", "shares": "1"}}
    [s] = shares(_admin(_claim(admin), "watch"), driver=DRIVER, pool="n1", published=pub)
    assert (s.admin, s.cores, s.shares, s.uuid) == (True, 0, 0, gpu(1).uuid)
    with pytest.raises(ClaimError, match="mixes adminAccess and ordinary devices"):
        shares(_admin(_claim(admin, {"device": "hami-gpu-0"}), "watch"), driver=DRIVER, pool="n1", published=pub)
    with pytest.raises(ClaimError, match="adminAccess: expected bool"):
        shares(_claim({"device": "hami-gpu-1", "adminAccess": "yes"}), driver=DRIVER, pool="n1", published=pub)
    # status is the scheduler's to write: an admin result for a request that never asked is forged
    with pytest.raises(ClaimError, match="does not ask for it"):
        shares(_claim(admin), driver=DRIVER, pool="n1", published=pub)
    with pytest.raises(ClaimError, match="does not ask for it"):
        shares(_admin(_claim(admin), "other"), driver=DRIVER, pool="n1", published=pub)


# --------------------------------------------------------------------------- MIG partitions (KEP-4815)


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_a_mig_capable_gpu_publishes_counters_in_their_own_slice_and_partitions_consuming_them(version):
    g, plain = gpu(0, 40960, minor=0), gpu(1, 40960, minor=1)
    layout = layout_for([g, plain], states={g.uuid: GpuState(profiles=PROFILES)})
    slices = pool_slices("n1", layout, 3, node_uid="u1")
    for s in slices:
        kubernetes_validate.validate(s, version, strict=True)
        assert s["spec"]["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 3}
        assert ("devices" in s["spec"]) != ("sharedCounters" in s["spec"])  # the API keeps them apart
    main, part, counters = slices
    assert [d["name"] for d in main["spec"]["devices"]] == ["hami-gpu-1"]
    [cs] = counters["spec"]["sharedCounters"]
    assert cs["name"] == "hami-gpu-0-counters"
    assert cs["counters"]["multiprocessors"] == {"value": "98"} and cs["counters"]["memory-slice-7"] == {"value": "1"}
    devs = {d["name"]: d for d in part["spec"]["devices"]}
    n_placements = sum(len(p.placements) for p in PROFILES)
    assert len(devs) == 1 + n_placements
    whole = devs["hami-gpu-0"]
    assert whole["allowMultipleAllocations"] and whole["consumesCounters"][0]["counters"] == cs["counters"]
    p = devs["hami-gpu-0-mig-3g-20gb-4"]
    assert p["attributes"]["type"] == {"string": "mig"} and "uuid" not in p["attributes"]
    assert p["attributes"]["profile"] == {"string": "3g.20gb"} and p["attributes"]["migSize"] == {"int": 4}
    assert p["consumesCounters"] == [{"counterSet": "hami-gpu-0-counters", "counters": {
        "multiprocessors": {"value": "42"}, "memory": {"value": "19968Mi"},
        **{f"memory-slice-{i}": {"value": "1"} for i in range(4, 8)}}}]
    order = [d["name"] for d in part["spec"]["devices"]][1:]
    assert order[0].startswith("hami-gpu-0-mig-1g-5gb-") and order[-1] == "hami-gpu-0-mig-7g-40gb-0"
    # every set of partitions whose counters fit is a layout NVML allows: no memory slice twice
    pub = published_gpus(layout.devices())
    pp = pub["hami-gpu-0-mig-3g-20gb-4"]
    assert (pp.kind, pp.uuid, pp.profile, pp.start, pp.size, pp.mig) == ("partition", g.uuid, "3g.20gb", 4, 4, True)
    [s] = shares(_claim({"device": "hami-gpu-0-mig-3g-20gb-4"}), driver=DRIVER, pool="n1", published=pub)
    assert (s.kind, s.uuid, s.profile, s.start, s.size, s.memory_mib) == ("partition", g.uuid, "3g.20gb", 4, 4,
                                                                          19968)


def test_nine_partitionable_gpus_spread_their_counter_sets_over_two_slices():
    gpus = [gpu(i, 40960, minor=i) for i in range(9)]
    slices = pool_slices("n1", layout_for(gpus, states={g.uuid: GpuState(profiles=PROFILES) for g in gpus}), 1)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 1]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)} == {1 + 9 + 2}
    for s in slices:
        kubernetes_validate.validate(s, "1.37", strict=True)
