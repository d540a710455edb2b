"""A claim's requests round as kube-scheduler's allocator rounds them, and the node hands HAMi-core
exactly the rounded amounts (never less than the scheduler, and Kueue, counted).

kube-scheduler's rounding is `hami.kubesched.draconsumable`, checked against upstream's own cases
(tests/data/kubesched/requestpolicy.yaml, the shared golden file, by tests/kubesched/
test_goldens_requestpolicy.py); here every golden case runs again under the request policies this
node publishes (memory stepped in 1 MiB, cores and shares in 1), and for any request the amounts
it rounds to are what `hami.dra.shares` turns into the container's limits.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami.device.nodeconfig import DeviceSettings
from hami.dra.claims import claim_spec
from hami.dra.shares import published_gpus, shares
from hami.dra.slices import DRIVER, layout_for
from hami.gpu.backend import GpuInfo
from hami.kubesched.cel import format_quantity, to_quantity
from hami.kubesched.draconsumable import consumed_amount, consumption

GOLDEN = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "requestpolicy.yaml").read_text())
MIB = 1 << 20
SETTINGS = DeviceSettings(split_count=4, memory_scaling=1.0)
[DEVICE] = layout_for([GpuInfo("GPU-r0", 0, "NVIDIA A100-SXM4-40GB", 40960, minor=0)], SETTINGS).devices()
CAPS = {n: to_quantity(c["value"]) for n, c in DEVICE["capacity"].items()}
POLICIES = {n: c["requestPolicy"] for n, c in DEVICE["capacity"].items()}
PUBLISHED = published_gpus([DEVICE])


@pytest.mark.parametrize("case", GOLDEN["calculate"], ids=[c["name"] for c in GOLDEN["calculate"]])
def test_upstream_cases_hold_for_the_shape_of_our_policies(case):
    """Each golden case, scaled to one of our capacities: a policy of the same shape (validRange
    with min and step, a default) on MiB rounds the same way, MiB for unit."""
    policy = case["policy"]
    if "validValues" in policy:  # our slices publish ranges only
        assert all("validValues" not in p for p in POLICIES.values())
        return
    scaled = {k: v for k, v in policy.items() if k != "validRange"}
    if "default" in scaled:
        scaled["default"] = str(to_quantity(scaled["default"]) * MIB)
    if "validRange" in policy:
        scaled["validRange"] = {k: str(to_quantity(v) * MIB) for k, v in policy["validRange"].items()}
    requested = None if case["requested"] is None else to_quantity(case["requested"]) * MIB
    got = consumed_amount(requested, to_quantity(case["capacity"]) * MIB, scaled)
    assert got == to_quantity(case["expect"]) * MIB


def _allocate(requests: dict[str, Fraction]) -> dict[str, Fraction] | None:
    """kube-scheduler's consumedCapacity for a request on our device; None when the policy refuses."""
    got = consumption(requests, CAPS, POLICIES)
    if any(broken for _, broken in got.values()) or any(a > CAPS[n] for n, (a, _) in got.items()):
        return None
    return {n: a for n, (a, _) in got.items()}


def _share(consumed: dict[str, Fraction]):
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": DRIVER, "pool": "n1", "device": DEVICE["name"], "request": "gpu",
         "consumedCapacity": {n: format_quantity(v) for n, v in consumed.items()}}]}}}}
    [s] = shares(claim, driver=DRIVER, pool="n1", published=PUBLISHED)
    return s


@given(st.one_of(st.none(), st.integers(1, 40960 * MIB).map(Fraction), st.fractions(0, 40960 * MIB)),
       st.one_of(st.none(), st.integers(0, 100).map(Fraction)), st.one_of(st.none(), st.integers(1, 4).map(Fraction)))
def test_the_node_enforces_exactly_what_the_scheduler_rounded(memory, cores, count):
    requests = {k: v for k, v in (("memory", memory), ("cores", cores), ("shares", count)) if v is not None}
    consumed = _allocate(requests)
    if consumed is None:
        return
    assert consumed["memory"] % MIB == 0 and consumed["memory"] >= (memory or 0)  # whole MiB, rounded up
    s = _share(consumed)
    assert s.memory_mib * MIB == consumed["memory"]  # the limit is what the quota counted, not a MiB less
    assert s.cores == consumed["cores"] and s.shares == consumed["shares"]


@pytest.mark.parametrize("memory_mib,cores", [(4000, 30), (None, None), (1, 0), (40960, 100)])
def test_the_webhooks_claims_round_to_themselves(memory_mib, cores):
    """The webhook writes whole MiB and percents: nothing to round, and the node gives them as asked."""
    [req] = claim_spec(1, memory_mib, cores, [])["devices"]["requests"]
    asked = {n: to_quantity(v) for n, v in (req["exactly"].get("capacity") or {}).get("requests", {}).items()}
    consumed = _allocate(asked)
    assert consumed == {"memory": Fraction((memory_mib or 40960) * MIB), "cores": Fraction(cores or 0),
                        "shares": Fraction(1)}
    s = _share(consumed)
    assert (s.memory_mib, s.cores, s.shares) == (memory_mib or 40960, cores or 0, 1)
