"""hami.kubesched.allocator and hami.kubesched.cel: DRA structured allocation for one node, pure.

Covers: the DeviceClass and request CEL selectors (driver, attributes by domain, capacity as a
quantity, semver, errors); exactly.count; consumable capacity (two claims share a GPU up to its
memory, a third is refused with a reason naming the claim, the request and the capacity;
requestPolicy rounding and defaults); exclusive devices; matchAttribute constraints on NUMA;
status.allocation's shape (results with consumedCapacity and shareID, nodeSelector); a claim
already allocated elsewhere; bad claims refused by field; and the hypothesis property: for random
device capacities and claim sequences the allocator never over-commits memory or cores.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kubesched.allocator import Allocator, Usage, inventory
from hami.kubesched.cel import CelError, SelectorCompiler, device_activation
from tests.dra._objects import DEVICE_CLASS, DRIVER, MIB, claim, gpu_device, slice_for

CLASSES = {DRIVER: DEVICE_CLASS}


def _alloc(claims, devices, usage=None, node="n1"):
    inv = inventory([slice_for(node, devices)])
    return Allocator(new_share_id=lambda: "share").allocate(claims, node, inv, usage or Usage(), CLASSES)


def test_a_gpumem_claim_gets_one_shared_gpu_with_consumed_capacity():
    out = _alloc([claim("c1", memory_mib=4000, cores=30)], [gpu_device(0)])
    assert out.ok, out.reason
    alloc = out.allocations["default/c1"]
    assert alloc["devices"]["results"] == [{
        "request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "share",
        "consumedCapacity": {"memory": str(4000 * MIB), "cores": "30"}}]
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]


def test_two_claims_share_a_gpu_up_to_its_memory_and_a_third_is_refused():
    devices = [gpu_device(0, memory_mib=8000)]
    inv = inventory([slice_for("n1", devices)])
    a = Allocator()
    usage = Usage()
    for name in ("c1", "c2"):
        out = a.allocate([claim(name, memory_mib=4000)], "n1", inv, usage, CLASSES)
        assert out.ok, out.reason
        usage.add_allocation(out.allocations[f"default/{name}"])
    out = a.allocate([claim("c3", memory_mib=1)], "n1", inv, usage, CLASSES)
    assert not out.ok
    assert out.reason == "claim default/c3: request gpu: not enough free memory on any matching device"
    assert out.details == ["n1/gpu-0: memory 1Mi requested, 0 of 8000Mi free"]


def test_cores_are_consumed_too_and_unrequested_capacity_takes_all_of_it():
    devices = [gpu_device(0)]
    out = _alloc([claim("c1", memory_mib=100, cores=60), claim("c2", memory_mib=100, cores=60)], devices)
    assert not out.ok and "cores 60 requested, 40 of 100 free" in out.details[0]
    # No capacity requested: the policy defaults (all the memory, no cores), so no memory is left.
    out = _alloc([claim("whole"), claim("c2", memory_mib=1)], devices)
    assert not out.ok and out.reason.startswith("claim default/c2") and "memory" in out.reason
    assert out.details == ["n1/gpu-0: memory 1Mi requested, 0 of 8000Mi free"]


def test_request_policy_rounds_memory_up_to_the_step():
    dev = gpu_device(0)
    out = _alloc([claim("c1", requests=[{"name": "gpu", "exactly": {
        "deviceClassName": DRIVER, "capacity": {"requests": {"memory": "1500000"}}}}])], [dev])
    assert out.ok
    assert out.allocations["default/c1"]["devices"]["results"][0]["consumedCapacity"]["memory"] == str(2 * MIB)


def test_count_picks_distinct_devices_and_fails_when_too_few():
    out = _alloc([claim("c1", count=2, memory_mib=100)], [gpu_device(0), gpu_device(1)])
    assert out.ok
    assert [r["device"] for r in out.allocations["default/c1"]["devices"]["results"]] == ["gpu-0", "gpu-1"]
    out = _alloc([claim("c1", count=3, memory_mib=100)], [gpu_device(0), gpu_device(1)])
    assert not out.ok and "(2 of 3 devices)" in out.reason


def test_request_selectors_on_uuid_and_product_name():
    devs = [gpu_device(0, model="NVIDIA T4"), gpu_device(1, model="NVIDIA A100")]
    sel = f'device.attributes["{DRIVER}"].productName in ["NVIDIA A100"]'
    out = _alloc([claim("c1", memory_mib=10, selectors=(sel,))], devs)
    assert out.allocations["default/c1"]["devices"]["results"][0]["device"] == "gpu-1"
    out = _alloc([claim("c1", memory_mib=10, selectors=(f'device.attributes["{DRIVER}"].uuid == "nope"',))], devs)
    assert not out.ok and out.reason == "claim default/c1: request gpu: no device matches the request's selectors"
    assert out.details[0].startswith("n1/gpu-0: request selector")


def test_a_cel_runtime_error_is_named():
    out = _alloc([claim("c1", selectors=(f'device.attributes["{DRIVER}"].missing == 1',))], [gpu_device(0)])
    assert not out.ok and "runtime error" in out.reason and "missing" in out.reason


def test_capacity_selectors_compare_quantities():
    devs = [gpu_device(0, memory_mib=8000), gpu_device(1, memory_mib=40000)]
    sel = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0'
    out = _alloc([claim("c1", memory_mib=10, selectors=(sel,))], devs)
    assert out.allocations["default/c1"]["devices"]["results"][0]["device"] == "gpu-1"


def test_match_attribute_keeps_two_requests_on_one_numa_node():
    devs = [gpu_device(0, numa=0), gpu_device(1, numa=1), gpu_device(2, numa=1)]
    req = [{"name": n, "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": str(7000 * MIB)}}}}
           for n in ("a", "b")]
    numa = [{"matchAttribute": f"{DRIVER}/numa"}]
    # Free: the first pick (gpu-0, NUMA 0) has no partner there; backtracking puts both on NUMA 1.
    out = _alloc([claim("c1", requests=req, constraints=numa)], devs)
    assert out.ok, out.reason
    assert [r["device"] for r in out.allocations["default/c1"]["devices"]["results"]] == ["gpu-1", "gpu-2"]
    # gpu-1 mostly taken: no NUMA node holds both; without the constraint they spread over two.
    usage = Usage()
    usage.add_allocation({"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "gpu-1",
                                                   "shareID": "x", "consumedCapacity": {"memory": str(7000 * MIB)}}]}})
    out = _alloc([claim("c1", requests=req, constraints=numa)], devs, usage)
    assert not out.ok
    assert out.reason == (f"claim default/c1: no set of devices satisfies the constraints (matchAttribute "
                          f"{DRIVER}/numa) with enough free capacity")
    out = _alloc([claim("c1", requests=req)], devs, usage)
    assert [r["device"] for r in out.allocations["default/c1"]["devices"]["results"]] == ["gpu-0", "gpu-2"]


def test_exclusive_devices_serve_one_claim():
    devs = [gpu_device(0, multi=False)]
    out = _alloc([claim("c1"), claim("c2")], devs)
    assert not out.ok
    assert out.reason == ("claim default/c2: request gpu: every matching device is in use "
                          "(allocated exclusively to another claim)")
    one = _alloc([claim("c1")], devs).allocations["default/c1"]["devices"]["results"][0]
    assert "shareID" not in one and "consumedCapacity" not in one


def test_a_claim_allocated_to_another_node_fails_here_and_an_unknown_class_is_named():
    done = claim("c1")
    done["status"] = {"allocation": {"devices": {"results": []}, "nodeSelector": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}
    out = _alloc([done], [gpu_device(0)])
    assert not out.ok and out.reason == "claim default/c1 is allocated to node n2"
    bad = claim("c2")
    bad["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope"
    assert _alloc([bad], [gpu_device(0)]).reason == "claim default/c2: request gpu: device class nope not found"


@pytest.mark.parametrize("mutate,field", [
    (lambda c: c["spec"]["devices"].update(requests=[]), "spec.devices.requests"),
    (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count=33),
     "number of requested devices 33 exceeds the claim limit of 32"),
    (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count="2"), "spec.devices.requests[0].exactly"),
    (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(capacity={"requests": {"memory": "x"}}),
     "spec.devices.requests[0].exactly.capacity.requests[memory]"),
    (lambda c: c["spec"]["devices"]["requests"][0].update(firstAvailable=[{}]),
     "spec.devices.requests[0].firstAvailable"),
])
def test_bad_claims_are_refused_naming_the_field(mutate, field):
    c = claim("c1")
    mutate(c)
    out = _alloc([c], [gpu_device(0)])
    assert not out.ok and out.reason.startswith(f"claim default/c1: {field}")


def test_cel_environment_and_limits():
    cel = SelectorCompiler()
    act = device_activation(DRIVER, {**gpu_device(0), "attributes": {
        **gpu_device(0)["attributes"], "driverVersion": {"version": "550.54.15"}}}, multi=True)
    assert cel.matches(f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("535.0.0"))', act)
    assert cel.matches('device.allowMultipleAllocations && device.driver == "' + DRIVER + '"', act)
    assert not cel.matches('"uuid" in device.attributes["other.example.com"]', act)
    with pytest.raises(CelError, match="must evaluate to bool"):
        cel.matches("1 + 1", act)
    with pytest.raises(CelError, match="compilation failed"):
        cel.matches("device.driver ==", act)
    with pytest.raises(CelError, match="over the limit"):
        cel.check("true || " * 2000 + "true")


# --------------------------------------------------------------------------- property

_device = st.tuples(st.integers(1, 4096), st.integers(1, 100), st.booleans())
_claim = st.tuples(st.integers(0, 5000), st.one_of(st.none(), st.integers(0, 120)), st.integers(1, 3))


@settings(max_examples=150, deadline=None)
@given(st.lists(_device, min_size=1, max_size=4), st.lists(_claim, min_size=1, max_size=12))
def test_the_allocator_never_over_commits_memory_or_cores(devs, claims):
    devices = [gpu_device(i, memory_mib=m, cores=c, multi=multi) for i, (m, c, multi) in enumerate(devs)]
    inv = inventory([slice_for("n1", devices)])
    a = Allocator()
    usage = Usage()
    holders: dict[str, int] = {}
    for n, (mem, cores, count) in enumerate(claims):
        out = a.allocate([claim(f"c{n}", memory_mib=mem, cores=cores, count=count)], "n1", inv, usage, CLASSES)
        if not out.ok:
            assert out.reason.startswith(f"claim default/c{n}")
            continue
        alloc = out.allocations[f"default/c{n}"]
        results = alloc["devices"]["results"]
        assert len(results) == count and len({r["device"] for r in results}) == count
        usage.add_allocation(alloc)
        for r in results:
            holders[r["device"]] = holders.get(r["device"], 0) + 1
    for dev in inv.pools_for("n1")[0].devices:
        used = usage.consumed.get(dev.key, {})
        for cap, total in dev.capacity.items():
            assert used.get(cap, Fraction(0)) <= total, (dev.name, cap)
        if not dev.multi:
            assert holders.get(dev.name, 0) <= 1
        if dev.key in usage.exclusive:
            assert dev.key not in usage.consumed


def test_match_attribute_on_the_numa_and_nvlink_attributes_hami_publishes():
    """The node side's slices (hami.dra.slices) carry `numa` and `nvlinkDomain`: a two-GPU claim
    constrained on either lands on one NUMA node / one NVLink group, wherever free memory allows."""
    from hami.dra.slices import GpuExtras, build_slice, devices_for
    from hami.gpu.backend import GpuInfo

    gpus = [GpuInfo(f"GPU-{i}", i, "NVIDIA A100-SXM4-40GB", 40960, numa=i // 2) for i in range(4)]
    extras = {f"GPU-{i}": GpuExtras(nvlink_domain=0 if i in (0, 3) else 1) for i in range(4)}
    inv = inventory([build_slice("n1", devices_for(gpus, extras=extras), 1)])
    devs = inv.pools_for("n1")[0].devices
    pair = [{"name": n, "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": str(30000 * MIB)}}}}
            for n in ("a", "b")]
    usage = Usage()  # GPU 0 mostly taken: NUMA 0 cannot hold the pair, NVLink group 0 (0, 3) cannot either
    usage.add_allocation({"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": devs[0].name,
                                                   "shareID": "x", "consumedCapacity": {"memory": str(30000 * MIB)}}]}})
    a = Allocator()
    for attr, want in (("numa", {2, 3}), ("nvlinkDomain", {1, 2})):
        c = claim("c1", requests=pair, constraints=[{"matchAttribute": f"{DRIVER}/{attr}"}])
        out = a.allocate([c], "n1", inv, usage, CLASSES)
        assert out.ok, out.reason
        picked = {next(d for d in devs if d.name == r["device"]).raw["attributes"]["index"]["int"]
                  for r in out.allocations["default/c1"]["devices"]["results"]}
        assert picked == want, (attr, picked)
