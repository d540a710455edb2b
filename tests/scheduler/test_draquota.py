"""HAMi's namespace quotas under DRA (admission.draquota, quotaledger): what claims hold, the hard
limits read as HAMi reads them, the refusal text, and the reservation ledger's parser."""

from __future__ import annotations

import asyncio

import orjson
from hypothesis import given
from hypothesis import strategies as st

from hami.kube.client import ApiError
from hami.scheduler.admission import draquota, quotaledger
from hami.scheduler.admission.draquota import Amounts, Limits
from tests.dra._objects import DRIVER, claim

NAMES = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")


def test_a_claim_counts_its_requests_until_allocated_then_what_it_consumed():
    c = claim("a", count=2, memory_mib=3000, cores=20)
    assert draquota.claim_amounts(c, DRIVER) == Amounts(2, 6000, 40)
    # allocated without a memory request: the whole card kube-scheduler consumed
    whole = {**claim("b"), "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0", "shareID": "x",
         "consumedCapacity": {"memory": str(40960 << 20), "cores": "0"}}]}}}}
    assert draquota.claim_amounts(whole, DRIVER) == Amounts(1, 40960, 0)
    admin = {**claim("c"), "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0", "adminAccess": True}]}}}}
    assert draquota.claim_amounts(admin, DRIVER) == Amounts()
    assert draquota.claim_amounts(claim("d", memory_mib=1000), "other-class") == Amounts()


def test_first_available_counts_its_largest_subrequest():
    c = claim("f", requests=[{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER, "count": 1, "capacity": {"requests": {"memory": "8000Mi"}}},
        {"name": "small", "deviceClassName": DRIVER, "count": 2, "capacity": {"requests": {"memory": "2000Mi"}}}]}])
    assert draquota.claim_amounts(c, DRIVER) == Amounts(2, 8000, 0)


def test_namespace_usage_skips_claims_being_deleted():
    gone = claim("g", memory_mib=5000)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert draquota.namespace_usage([claim("a", memory_mib=1000), gone], DRIVER) == Amounts(1, 1000, 0)


def test_hard_limits_as_hami_reads_them_smallest_wins():
    quotas = [{"metadata": {"name": "a"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "8000",
                                                              "requests.nvidia.com/gpu": "4"}}},
              {"metadata": {"name": "b"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "6000",
                                                              "limits.nvidia.com/gpucores": "150", "cpu": "4"}}}]
    assert draquota.hard_limits(quotas, *NAMES) == Limits(4, 6000, 150)
    assert draquota.hard_limits(quotas, *NAMES, memory_factor=2) == Limits(4, 12000, 150)
    assert not draquota.hard_limits([{"spec": {"hard": {"cpu": "4"}}}], *NAMES).any


def test_over_names_the_limit_and_keeps_hamis_zero_means_none():
    assert draquota.over(Limits(None, 8000, None), Amounts(1, 6000, 0), Amounts(1, 6000, 0)) == \
        "nvidia.com/gpumem: 6000 requested, 6000 of 8000 used"
    assert draquota.over(Limits(None, 8000, None), Amounts(1, 2000, 0), Amounts(1, 6000, 0)) == ""
    assert draquota.over(Limits(2, None, None), Amounts(2, 0, 0), Amounts(1, 0, 0)).startswith("nvidia.com/gpu:")
    assert draquota.over(Limits(0, None, None), Amounts(), Amounts(1, 0, 0))  # Kubernetes: 0 GPUs is none
    assert draquota.over(Limits(None, 0, 0), Amounts(), Amounts(1, 9000, 50)) == ""  # HAMi: 0 is no limit


def test_a_reservation_is_satisfied_only_once_every_claim_of_its_pod_exists():
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {"r": "id1"}},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
           "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}}
    assert quotaledger.satisfied([pod], lambda k: k == "ns/p-gpu", "r") == {"id1"}
    assert quotaledger.satisfied([pod], lambda k: False, "r") == set()
    # a device-plugin pod (no claims in its immutable spec) counts through Kubernetes' quota once it exists
    no_claims = {"metadata": {"name": "q", "namespace": "ns", "annotations": {"r": "id2"}}, "spec": {}}
    assert quotaledger.satisfied([no_claims], lambda k: False, "r") == {"id2"}
    assert quotaledger.satisfied([{"metadata": {"name": "u"}, "spec": {}}], lambda k: True, "r") == set()


def test_the_ledger_parser_drops_expired_and_corrupt_entries():
    text = '{"a": [1, 6000, 0, 200.0], "b": [1, 6000, 0, 50.0], "c": "x", "d": [1, 2, 3]}'
    assert quotaledger.parse(text, 100.0) == {"a": [1, 6000, 0, 200.0]}
    assert quotaledger.parse("not json", 0.0) == {} and quotaledger.parse(None, 0.0) == {}


@given(st.text(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=20).map(lambda v: __import__("orjson").dumps(v).decode()))
def test_the_ledger_parser_never_raises_and_keeps_only_well_formed_live_entries(text):
    out = quotaledger.parse(text, 0.0)
    for v in out.values():
        assert isinstance(v, list) and len(v) == 4 and v[3] > 0
        assert not any(isinstance(x, bool) for x in v)


def test_device_plugin_pods_usage_takes_kubernetes_gpu_count_and_hamis_memory():
    quotas = [{"status": {"used": {"requests.nvidia.com/gpu": "2", "cpu": "1"}}},
              {"status": {"used": {"limits.nvidia.com/gpu": "3"}}}, {"spec": {}}]
    assert draquota.device_plugin_usage(quotas, "nvidia.com/gpu", 5000, 30) == Amounts(3, 5000, 30)
    assert draquota.device_plugin_usage([], "nvidia.com/gpu", 0, 0) == Amounts()


class _Quotas:
    """The API's ResourceQuota `q` for the ledger: GET answers it, a replace with a stale resourceVersion
    is 409, as the API server's precondition."""

    def __init__(self, quota: dict):
        self.quota = {**quota, "metadata": {**quota["metadata"], "resourceVersion": "1"}}
        self.writes = 0

    async def get(self, kind, name, ns):
        got = orjson.loads(orjson.dumps(self.quota))
        await asyncio.sleep(0)  # the other admission reads too before either writes
        return got

    async def replace(self, kind, name, obj, ns):
        if obj["metadata"]["resourceVersion"] != self.quota["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        self.writes += 1
        self.quota = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.writes + 1)}}
        return self.quota


def _dp_ledger(api, claims, k8s_cached_gpus=0, pods=()):
    return quotaledger.QuotaLedger(
        api, claims_of=lambda ns: claims, pods_of=lambda ns: list(pods), claim_exists=lambda k: True,
        quotas_of=lambda ns: [api.quota], device_class=DRIVER, names=NAMES, clock=lambda: 100.0,
        others_of=lambda ns: Amounts(k8s_cached_gpus, 0, 0))


async def test_device_plugin_pods_reserve_their_gpu_count_beside_the_claims():
    """Claims hold 1 of 3 GPUs; device-plugin pods reserve 1 each: the third is refused while the first
    two are reserved (Kubernetes' own count does not see the claims), and once a reserved pod exists
    its reservation gives way to Kubernetes' count, read from the quota just fetched."""
    api = _Quotas({"metadata": {"name": "q"}, "spec": {"hard": {"requests.nvidia.com/gpu": "3"}},
                   "status": {"used": {"requests.nvidia.com/gpu": "0"}}})
    ledger = _dp_ledger(api, [claim("a", count=1)])
    assert await ledger.reserve("t", "r1", Amounts(1, 0, 0), "r") == ""
    assert await ledger.reserve("t", "r2", Amounts(1, 0, 0), "r") == ""
    assert await ledger.reserve("t", "r3", Amounts(1, 0, 0), "r") == \
        "exceeding resource quota: nvidia.com/gpu: 1 requested, 3 of 3 used"
    # pod r1 exists: its GPU is in the quota's status.used though the informer's copy (0) lags
    api.quota["status"] = {"used": {"requests.nvidia.com/gpu": "1"}}
    created = [{"metadata": {"name": "p1", "namespace": "t", "annotations": {"r": "r1"}}, "spec": {}}]
    ledger = _dp_ledger(api, [claim("a", count=1)], pods=created)
    assert await ledger.reserve("t", "r4", Amounts(1, 0, 0), "r") == \
        "exceeding resource quota: nvidia.com/gpu: 1 requested, 3 of 3 used"  # claim 1 + used 1 + r2 1


async def test_two_device_plugin_reservations_at_once_one_rereads_the_other():
    api = _Quotas({"metadata": {"name": "q"}, "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    ledger = _dp_ledger(api, [claim("a", count=1)])
    got = await asyncio.gather(*(ledger.reserve("t", f"r{i}", Amounts(1, 0, 0), "r") for i in range(2)))
    assert sorted(got) == ["", "exceeding resource quota: nvidia.com/gpu: 1 requested, 2 of 2 used"]
    assert ledger.conflicts >= 1 and api.writes == 1
