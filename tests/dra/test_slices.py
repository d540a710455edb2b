"""The ResourceSlice builder and the claim allocation reader (pure), with hypothesis.

Covers: slices validate (strict) against the resource.k8s.io/v1 schema of Kubernetes 1.34 and 1.37;
one pool per node, devices named as HAMi's driver names them with its attributes (type hami-gpu,
uuid, productName, versions as semver) plus index, numa, memoryBytes, nvlinkDomain, migEnabled;
capacity memory (bytes, 1Mi steps) and cores (0-100), allowMultipleAllocations; unhealthy and
filtered GPUs withdrawn; `next_slice` writes nothing when nothing changed (a restart does not churn)
and bumps the generation by one on every change; quantities print in Go's canonical form and parse
back; NVLink groups; `shares` never hands out more than a device has, sums several results on one
device, and raises only ClaimError on any input; a MIG GPU is published as its instances (type mig,
whole, exclusive, schema-valid), which a claim takes whole and never mixes with whole GPUs.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.nodeconfig import DeviceSettings, FilterDevices
from hami.device.request import parse_quantity
from hami.dra.shares import ClaimError, published_gpus, shares
from hami.dra.slices import (
    DRIVER,
    MAX_ATTRIBUTES_AND_CAPACITY,
    GpuExtras,
    MigSlice,
    binary_quantity,
    build_slice,
    devices_for,
    next_slice,
    nvlink_domains,
    semver,
)
from hami.gpu.backend import GpuInfo

MIB = 1 << 20


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


@given(gpus_st, st.sets(st.integers(0, 7)))
def test_withdrawn_gpus_are_the_unhealthy_and_the_filtered(gpus, filtered_idx):
    settings = DeviceSettings(filter=FilterDevices(index=tuple(sorted(filtered_idx))))
    devs = devices_for(gpus, settings)
    want = [g for g in gpus if g.healthy and g.index not in filtered_idx]
    assert [d["attributes"]["uuid"]["string"] for d in devs] == [g.uuid for g in want]
    assert len({d["name"] for d in devs}) == len(devs)
    for d, g in zip(devs, want, strict=True):
        assert len(d["attributes"]) + len(d["capacity"]) <= MAX_ATTRIBUTES_AND_CAPACITY
        assert parse_quantity(d["capacity"]["memory"]["value"]) == g.memory_total_mib * MIB
    assert {p.name: p.memory_mib for p in published_gpus(devs).values()} == \
        {d["name"]: g.memory_total_mib for d, g in zip(devs, want, strict=True)}


@given(st.lists(gpus_st, min_size=1, max_size=6))
def test_generation_moves_only_on_change_and_a_restart_does_not_churn(states):
    current, gen = None, 0
    for gpus in states:
        devs = devices_for(gpus)
        out = next_slice(current, "n1", devs)
        if current is not None and current["spec"]["devices"] == devs:
            assert out is None
            continue
        gen += 1
        assert out["spec"]["pool"]["generation"] == gen
        current = {**out, "metadata": {**out["metadata"], "resourceVersion": str(gen)}}
        assert next_slice(current, "n1", devs) is None  # the restarted plugin sees what it wrote
    assert next_slice(current, "n2", current["spec"]["devices"])["spec"]["pool"]["name"] == "n2"


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
        shares(claim, driver=DRIVER, pool="n1", published=PUB)
    except ClaimError:
        pass


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
    assert m["attributes"]["parentUUID"] == {"string": gpu(0).uuid} and m["attributes"]["profile"] == {"string": "1g.5gb"}
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
