"""A tenant's DRA selector against the CEL evaluator's cost:

- each evaluation is metered against kube-scheduler's runtime limit (resource.k8s.io
  CELSelectorExpressionMaxCost, 1,000,000); past the limit the selector is refused with an error
  naming it, also when `||` would absorb the error of one side;
- a nested selector of 131 characters (10 x 10 x 10 x 10 steps per device) under a deadline stops
  there with an error naming it, instead of running for many seconds;
- `hami doctor pod` and the web UI diagnose a DRA pod carrying it off the event loop: the loop keeps
  turning while the diagnosis runs, and the diagnosis names the selector that ran out of time.
Assertions count loop turns and read errors, never time."""

from __future__ import annotations

import asyncio
import time

import pytest

from hami.doctor.dra import diagnose_dra_pod
from hami.doctor.pod import off_loop
from hami.kubesched import cel
from tests.dra._objects import DEVICE_CLASS, DRIVER, claim, gpu_device, slice_for

pytestmark = pytest.mark.timeout(60)
TEN = "[0,1,2,3,4,5,6,7,8,9]"
NESTED = f"{TEN}.all(a,{TEN}.all(b,{TEN}.all(c,{TEN}.all(d,a+b+c+d>=0))))"  # 10,000 innermost steps


def test_kube_schedulers_cost_limit_is_the_default():
    assert cel.COST_LIMIT == 1_000_000 and cel.SelectorCompiler().cost_limit == cel.COST_LIMIT


def test_a_selector_over_the_cost_limit_is_refused_naming_it():
    compiler = cel.SelectorCompiler(cost_limit=5_000)
    assert compiler.matches(f"{TEN}.all(a, a >= 0)", {})  # cheap: about 40
    expensive = f"{TEN}.all(a,{TEN}.all(b,{TEN}.all(c,a+b+c>=0)))"  # about 8,000
    for expression in (expensive, f"{expensive} || true"):
        with pytest.raises(cel.CelError) as err:
            compiler.matches(expression, {})
        assert "cost limit exceeded" in str(err.value) and "[0,1,2,3,4,5,6,7,8,9].all(a," in str(err.value)
        assert "CELSelectorExpressionMaxCost" in str(err.value)


def test_a_nested_selector_stops_at_its_deadline_naming_it():
    assert len(NESTED) <= 131
    with cel.deadline(0.3, time.monotonic), pytest.raises(cel.CelError) as err:
        cel.SelectorCompiler().matches(NESTED, {})
    assert "not evaluated within 0.3 s" in str(err.value) and NESTED[:40] in str(err.value)
    assert cel.SelectorCompiler().matches("1 + 1 == 2", {})  # outside the block: no deadline


async def test_the_diagnosis_of_a_pod_with_it_runs_off_the_loop():
    mine = claim("c1", memory_mib=1000, selectors=(NESTED,))
    slices = [slice_for("n1", [gpu_device(i) for i in range(8)])]
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}]}, "status": {"phase": "Pending"}}
    turns = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    d = await off_loop(diagnose_dra_pod, pod, {"default/c1": mine}, slices, {DRIVER: DEVICE_CLASS}, ["n1"],
                       seconds=0.5)
    done.set()
    await ticking
    assert turns >= 5  # the loop kept turning while the selectors ran
    assert d.leaf == "dra-cannot-allocate"
    assert any("not evaluated within 0.5 s" in e for e in d.evidence), d.evidence
