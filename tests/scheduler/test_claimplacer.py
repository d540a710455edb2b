"""The extender's node policy for pods with DRA claims (the Placer's `filter_claims`, placement.claimwalk and
claimfit, from cache/drawatch.py's watches): GPU fill from slices and allocated claims, binpack/spread order,
HAMi-style reasons for nodes the claims cannot fit, the allocation held (`placer.held.claims`) between /filter
and kube-scheduler's claim write, /prioritize."""

from __future__ import annotations

import dataclasses

from hami.config import Config
from hami.kube.informer import Informer
from hami.kubesched.allocator import Allocator, Usage, inventory
from hami.scheduler.cache.drawatch import DraWatch
from hami.scheduler.cache.state import ClusterState
from hami.scheduler.placement import claimfit, claimwalk
from hami.scheduler.placement.claimwalk import ASSUME_SECONDS
from hami.scheduler.placement.fit import parse_reason
from hami.scheduler.placer import Placer
from hami.scheduler.role import make_requests_fn
from tests.dra._objects import DEVICE_CLASS, DRIVER, claim, gpu_device, slice_for


def _allocated(c: dict, node: str, device: str, memory_mib: int) -> dict:
    return {**c, "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": node, "device": device, "shareID": "s-" + c["metadata"]["name"],
         "consumedCapacity": {"memory": str(memory_mib << 20), "cores": "0"}}]}}}}


def _pod(name: str, claim_name: str, policy: str = "") -> dict:
    annos = {"hami.io/node-scheduler-policy": policy} if policy else {}
    return {"metadata": {"name": name, "namespace": "default", "annotations": annos},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]}}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _placer(claims: list[dict], *, prioritize: bool = False, policy: str = "binpack", clock=None,
            nodes: dict | None = None) -> Placer:
    config = Config()
    config = dataclasses.replace(config, scheduler=dataclasses.replace(
        config.scheduler, node_scheduler_policy=policy, extender_prioritize=prioritize))
    state = ClusterState(None, config.nvidia)
    if nodes:  # the node watch's cache (a state without a client has none)
        state.nodes = Informer(None, "nodes")
        state.nodes.store.update(nodes)
    dra = DraWatch(None)
    clock = clock or Clock()
    p = Placer(config, state, requests_fn=make_requests_fn(config), dra=dra, monotonic=clock, work_clock=clock)
    for node in ("n1", "n2", "n3"):
        dra.slices.store[node] = slice_for(node, [gpu_device(0, memory_mib=10000), gpu_device(1, memory_mib=10000)])
    dra.classes.store[DRIVER] = DEVICE_CLASS
    for c in claims:
        dra.claims.store[f"default/{c['metadata']['name']}"] = c
    for informer in dra.informers:
        informer.synced.set()
    return p


def test_fill_counts_memory_cores_and_shares_of_allocated_claims():
    slices = [slice_for("n1", [gpu_device(0, memory_mib=10000), gpu_device(1, memory_mib=10000)])]
    pools = inventory(slices).pools_for("n1")
    assert claimfit.node_fill(pools, Usage()) == 0.0
    used = Usage.of([_allocated(claim("a"), "n1", "gpu-0", 5000)])
    # memory 5000/20000, shares 1/2 (a device without `shares` is one share), cores 0/200
    assert claimfit.node_fill(pools, used) == 10 * (0.25 + 0.5 + 0.0)
    exclusive = Usage.of([{"status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-1"}]}}}}])
    assert claimfit.node_fill(pools, exclusive) == 10 * (0.5 + 0.5 + 0.5)


def test_binpack_takes_the_fullest_node_that_fits_spread_the_emptiest():
    held = [_allocated(claim("a"), "n2", "gpu-0", 4000), _allocated(claim("b"), "n3", "gpu-0", 9000),
            _allocated(claim("c"), "n3", "gpu-1", 9000), claim("new", memory_mib=1000)]
    p = _placer(held)
    assert p.filter_claims(_pod("p", "new", "binpack"), ["n1", "n2", "n3"])["NodeNames"] == ["n3"]
    p = _placer(held)
    assert p.filter_claims(_pod("p", "new", "spread"), ["n1", "n2", "n3"])["NodeNames"] == ["n1"]
    p = _placer(held, policy="spread")  # the config's policy when the pod names none
    assert p.filter_claims(_pod("p", "new"), ["n3", "n2", "n1"])["NodeNames"] == ["n1"]


def test_binpack_skips_a_fuller_node_the_claim_does_not_fit_and_names_hamis_reason():
    held = [_allocated(claim("b"), "n3", "gpu-0", 9000), _allocated(claim("c"), "n3", "gpu-1", 9000),
            claim("new", memory_mib=2000)]
    out = _placer(held, prioritize=True).filter_claims(_pod("p", "new", "binpack"), ["n1", "n2", "n3"])
    assert out["NodeNames"] == ["n1", "n2"]
    reason = out["FailedNodes"]["n3"]
    assert parse_reason(reason) == {"CardInsufficientMemory": 2}, reason
    assert reason.startswith("2/2 CardInsufficientMemory, claim default/new: ")


def test_no_fit_anywhere_fails_every_node():
    held = [claim("new", memory_mib=20000)]
    out = _placer(held).filter_claims(_pod("p", "new"), ["n1", "n2"])
    assert out["NodeNames"] is None and set(out["FailedNodes"]) == {"n1", "n2"}
    assert all(parse_reason(r) == {"CardInsufficientMemory": 2} for r in out["FailedNodes"].values())


def test_a_selector_mismatch_is_card_type_mismatch():
    c = claim("new", selectors=(f'device.attributes["{DRIVER}"].productName == "H100"',))
    out = _placer([c]).filter_claims(_pod("p", "new"), ["n1"])
    assert parse_reason(out["FailedNodes"]["n1"]) == {"CardTypeMismatch": 2}


def test_the_answered_allocation_is_assumed_until_the_claim_shows_it_then_expires():
    clock = Clock()
    p = _placer([claim("x", memory_mib=6000), claim("y", memory_mib=6000)], clock=clock)
    assert p.filter_claims(_pod("px", "x", "binpack"), ["n1", "n2"])["NodeNames"] == ["n1"]
    # n1 now holds px's claim (assumed): binpack keeps filling it, spread moves on
    assert p.filter_claims(_pod("py", "y", "binpack"), ["n2", "n1"])["NodeNames"] == ["n1"]
    assert p.filter_claims(_pod("py", "y", "spread"), ["n1", "n2"])["NodeNames"] == ["n2"]
    assert p.claim_fills(["n1"], p.claim_usage())["n1"] > 0
    clock.now += ASSUME_SECONDS + 1
    assert p.claim_fills(["n1"], p.claim_usage())["n1"] == 0.0
    # the claim informer showing the allocation replaces the assumption
    p.filter_claims(_pod("px", "x", "binpack"), ["n1", "n2"])
    allocated = _allocated(claim("x"), "n1", "gpu-0", 6000)
    p.dra.claims.store["default/x"] = allocated
    assert p.claim_event in p.dra.claims.handlers  # the claim informer tells the Placer
    p.claim_event("MODIFIED", claim("x"), allocated)
    assert dict(p.held.claims) == {}
    assert p.claim_fills(["n1"], p.claim_usage())["n1"] > 0


def test_prioritize_scores_by_fill_per_policy():
    held = [_allocated(claim("a"), "n2", "gpu-0", 4000), claim("new", memory_mib=1000)]
    p = _placer(held)
    binpack = {s["Host"]: s["Score"] for s in p.claim_scores(_pod("p", "new", "binpack"), ["n1", "n2"])}
    spread = {s["Host"]: s["Score"] for s in p.claim_scores(_pod("p", "new", "spread"), ["n1", "n2"])}
    assert binpack == {"n1": 0, "n2": 10} and spread == {"n1": 10, "n2": 0}


def test_the_allocator_still_picks_the_devices():
    p = _placer([claim("new", memory_mib=1000)])
    out = p.filter_claims(_pod("p", "new"), ["n1"])
    assert out["NodeNames"] == ["n1"]
    want = Allocator().allocate([claim("new", memory_mib=1000)], "n1", p.dra.devices(), Usage(),
                                {DRIVER: DEVICE_CLASS})
    got = p.held.claims["default/new"].allocation
    assert p.held.claims["default/new"].node == "n1"
    assert [r["device"] for r in got["devices"]["results"]] == [
        r["device"] for r in want.allocations["default/new"]["devices"]["results"]]


async def test_before_its_watches_list_the_placer_waits_rather_than_answer_from_nothing():
    p = _placer([claim("new", memory_mib=1000)])
    p.dra.sync_timeout = 0.01
    p.dra.slices.synced.clear()
    waiting = p.filter_claims(_pod("p", "new"), ["n1"])
    assert not isinstance(waiting, dict)
    assert (await waiting) == {"Error": "the scheduler's ResourceSlice, ResourceClaim and DeviceClass watches "
                                        "have not synced"}
    p.dra.slices.synced.set()
    assert p.filter_claims(_pod("p", "new"), ["n1"])["NodeNames"] == ["n1"]


def test_an_extended_resource_pod_is_ranked_by_the_claim_kube_scheduler_will_build():
    held = [_allocated(claim("a"), "n2", "gpu-0", 4000)]
    nodes = {n: {"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8"}}} for n in ("n1", "n2", "n3")}
    p = _placer(held, nodes=nodes)
    mapped = {**DEVICE_CLASS["spec"], "extendedResourceName": "nvidia.com/gpu"}
    p.dra.classes.store[DRIVER] = {**DEVICE_CLASS, "spec": mapped}
    pod = {"metadata": {"name": "x", "namespace": "default", "uid": "u-x",
                        "annotations": {"hami.io/node-scheduler-policy": "binpack"}},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    assert p.serves_claims(pod)
    # two whole GPUs: n2 has one GPU shared already, so only n1 and n3 can give two free cards
    out = p.filter_claims(pod, ["n1", "n2", "n3"])
    assert out["NodeNames"] == ["n1"] and out == {"NodeNames": ["n1"], "FailedNodes": None, "Error": ""}
    assert dict(p.held.claims) == {}  # the claim does not exist yet: nothing to hold under its name
    p.dra.classes.store[DRIVER] = DEVICE_CLASS
    assert not p.serves_claims(pod)


class TickingClock(Clock):
    """Each look at the clock is a second later: any budget is spent after the first look."""

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_walk_past_its_time_budget_passes_the_nodes_left_to_kube_scheduler():
    never = [claim("big", memory_mib=50000)]  # fits no node: every node is refused when there is time
    assert set(_placer(never).filter_claims(_pod("p", "big"), ["n1", "n2", "n3"])["FailedNodes"]) == {"n1", "n2", "n3"}
    p = _placer(never, clock=TickingClock())
    out = p.filter_claims(_pod("p", "big"), ["n1", "n2", "n3"])
    # undecided is not refused: kube-scheduler's allocator has the last word; nothing assumed here
    assert out["NodeNames"] == ["n1", "n2", "n3"] and not out["FailedNodes"] and not p.held.claims


def test_a_search_past_its_step_budget_leaves_the_node_undecided(monkeypatch):
    held = [_allocated(claim("b"), "n3", "gpu-0", 9000), claim("new", memory_mib=1000)]
    monkeypatch.setattr(claimwalk, "FILTER_MAX_STEPS", 0)
    p = _placer(held)
    out = p.filter_claims(_pod("p", "new", "binpack"), ["n1", "n2", "n3"])
    assert out["NodeNames"] == ["n3", "n1", "n2"] and not out["FailedNodes"] and not p.held.claims  # policy order kept
    outcome = Allocator().allocate([claim("x", memory_mib=1000)], "n1", p.dra.devices(), Usage(),
                                   dict(p.dra.classes.store),
                                   max_steps=0)
    assert not outcome.ok and outcome.undecided and "gave up after 0 tries" in outcome.reason


def test_a_tenants_costly_selector_cannot_hold_filter_past_its_budget():
    """A selector of 10,000 innermost steps per device (seconds in celpy) on every device of every node: /filter
    stops evaluating at its budget and passes the nodes on, where it would otherwise refuse them all late."""
    ten = "[0,1,2,3,4,5,6,7,8,9]"
    nested = f"!{ten}.all(a,{ten}.all(b,{ten}.all(c,{ten}.all(d,a+b+c+d>=0))))"  # false, after all 10,000 steps
    import time

    p = _placer([claim("sel", memory_mib=1000, selectors=(nested,))], clock=time.thread_time)  # production clock
    out = p.filter_claims(_pod("p", "sel"), ["n1", "n2", "n3"])
    assert sorted(out["NodeNames"]) == ["n1", "n2", "n3"] and not out["FailedNodes"] and not p.held.claims


def test_a_request_for_more_devices_than_the_node_has_names_what_is_short():
    """Every device could serve, there are just too few: the reason says so, not an empty cause."""
    p = _placer([])
    outcome = Allocator().allocate([claim("three", count=3)], "n1", p.dra.devices(), Usage(),
                                   dict(p.dra.classes.store))
    assert not outcome.ok and "too few matching devices (2 of 3 devices)" in outcome.reason, outcome.reason
