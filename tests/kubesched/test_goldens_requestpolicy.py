"""Kubernetes' own request-policy cases (KEP-5075 rounding, policy violations, consumed capacity
per request), ported as data (tests/data/kubesched/requestpolicy.yaml), against
hami.kubesched.draconsumable: the amount a request consumes is upstream's amount; plus the
rounding HAMi's slices depend on (memory stepped in 1 MiB, shares stepped by 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched.cel import to_quantity
from hami.kubesched.draconsumable import consumed_amount, consumption, fits, violates_policy

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "requestpolicy.yaml").read_text())
MIB = 1 << 20


@pytest.mark.parametrize("case", DATA["calculate"], ids=[c["name"] for c in DATA["calculate"]])
def test_calculate_consumed_capacity(case):
    requested = None if case["requested"] is None else to_quantity(case["requested"])
    got = consumed_amount(requested, to_quantity(case["capacity"]), case["policy"])
    assert got == to_quantity(case["expect"])


@pytest.mark.parametrize("case", DATA["violate"], ids=[c["name"] for c in DATA["violate"]])
def test_violates_policy(case):
    assert violates_policy(to_quantity(case["requested"]), case["policy"]) is case["expect"]


@pytest.mark.parametrize("case", DATA["from_request"], ids=[c["name"] for c in DATA["from_request"]])
def test_consumed_capacity_from_request(case):
    caps = {n: to_quantity(c["value"]) for n, c in case["capacity"].items()}
    policies = {n: c["requestPolicy"] for n, c in case["capacity"].items() if "requestPolicy" in c}
    got = consumption({n: to_quantity(v) for n, v in case["requests"].items()}, caps, policies)
    assert {n: a for n, (a, _) in got.items()} == {n: to_quantity(v) for n, v in case["expect"].items()}


MEMORY = {"default": str(8000 * MIB), "validRange": {"min": "1Mi", "max": str(8000 * MIB), "step": "1Mi"}}
SHARES = {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}}


@pytest.mark.parametrize("requested,expect", [
    ("1500000", 2 * MIB),          # 1.43 MiB rounds up to 2 MiB
    ("1Mi", MIB), ("1", MIB),      # below the minimum: the minimum
    (str(4000 * MIB + 1), 4001 * MIB),
    ("1.5Mi", 2 * MIB),
])
def test_hami_memory_policy_rounds_up_to_whole_mib(requested, expect):
    assert consumed_amount(to_quantity(requested), to_quantity(str(8000 * MIB)), MEMORY) == expect


def test_hami_shares_policy_default_one_and_at_most_the_split_count():
    caps, pol = {"shares": to_quantity("4")}, {"shares": SHARES}
    assert consumption(None, caps, pol)["shares"] == (1, False)
    assert consumption({"shares": to_quantity("2.5")}, caps, pol)["shares"] == (3, False)  # Value() rounds up
    assert consumption({"shares": to_quantity("5")}, caps, pol)["shares"][1] is True  # above max
    held = {"shares": to_quantity("3")}
    assert fits(None, caps, pol, held, {})[0] and not fits({"shares": to_quantity("2")}, caps, pol, held, {})[0]
