"""A tenant's DRA selector against the CEL evaluator's cost:

- each evaluation is metered against kube-scheduler's runtime limit (resource.k8s.io
  CELSelectorExpressionMaxCost, 1,000,000); past the limit the selector is refused with an error
  naming it, also when `||` would absorb the error of one side;
- a nested selector of 130 characters (10 x 10 x 10 x 10 steps per device, seconds each here) under
  a deadline stops there with an error naming it, instead of running for many seconds;
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


async def test_the_ui_answers_while_it_diagnoses_a_pod_carrying_it(apiserver):
    """Through the web UI over HTTP: the pod page of a DRA pod whose claim carries the nested selector
    comes back with the diagnosis naming the selector that ran out of time, and while it runs the
    UI's loop keeps turning and answers /healthz."""
    import aiohttp
    from aiohttp import web

    from hami.config import Config, KubeSettings
    from hami.ui.role import Ui
    from tests.kube.helpers import client_for, eventually

    client = await client_for(apiserver.kubeconfig)
    await client.create("deviceclasses", DEVICE_CLASS)
    await client.create("resourceslices", slice_for("n1", [gpu_device(i) for i in range(8)]))
    # eight devices asked: the selector runs on each (one evaluation takes seconds here)
    await client.create("resourceclaims", claim("c1", count=8, memory_mib=1000, selectors=(NESTED,)), "default")
    apiserver.store.create("nodes", "", {"metadata": {"name": "n1"}})
    apiserver.store.create("pods", "default", {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}]}})
    ui = Ui(Config(kube=KubeSettings(kubeconfig=apiserver.kubeconfig)), client)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(i.run(stop)) for i in ui.informers()]
    await eventually(lambda: "default/p" in ui.pods.store, 10)
    runner = web.AppRunner(ui.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    turns, health = 0, []
    done = asyncio.Event()

    async def ticker():
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0.01)

    try:
        async with aiohttp.ClientSession() as http:
            ticking = asyncio.create_task(ticker())
            page = asyncio.create_task(http.get(url + "/pod/default/p"))
            await eventually(lambda: ui.diagnoses.made == 1, 10)
            async with http.get(url + "/healthz") as r:  # answered while the diagnosis runs
                health.append(r.status)
            async with await page as r:
                body = await r.text()
                assert r.status == 200
            done.set()
            await ticking
        assert health and ui.diagnoses.made == 1
        assert turns >= 50  # the diagnosis ran 5 s in a thread: the loop turned meanwhile
        assert "not evaluated within 5 s" in body and "[0,1,2,3,4,5,6,7,8,9].all(a," in body, body[-3000:]
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await client.close()
