"""Preemption for pods with DRA claims in the embedded kube-scheduler loop (in process, real claims).

One node publishes one exclusive GPU and a second GPU with 40960 MiB of `memory` capacity shared
through `allowMultipleAllocations`. A low-priority pod holds the exclusive GPU through a claim; a
high-priority pod whose claim (from a ResourceClaimTemplate) also needs an exclusive GPU cannot be
allocated. With `dra_preemption` (KEP-5690, what the embedded `--dra` cluster runs) the dry run
counts the low pod's claim as released, the low pod is deleted, the resourceclaim controller
deallocates its claim and the high pod runs there. Without it (Kubernetes 1.36) nobody is preempted.

A victim is only taken when its claims free what the preemptor lacks: a low pod on the shared GPU
stays while a low pod on the exclusive one goes; a claim another (higher-priority) pod also reserves
is not released by preempting one of its pods.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from hami.kube.client import ApiError
from hami.sim.controllers.resourceclaims import ResourceClaimController
from hami.sim.dynamicresources import DynamicResources, released_by
from hami.sim.kubelet.termination import PodTerminator
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for
from tests.sim._kubesched import FAST

DRIVER = "gpu.example.com"
CLASS = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
MEMORY = {"value": "40960Mi", "requestPolicy": {"default": "1Mi", "validRange": {"min": "1Mi"}}}
SLICE = {"metadata": {"name": "n1-gpus"}, "spec": {
    "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
    "devices": [
        {"name": "gpu-0", "attributes": {"kind": {"string": "whole"}}},
        {"name": "gpu-1", "attributes": {"kind": {"string": "shared"}}, "allowMultipleAllocations": True,
         "capacity": {"memory": MEMORY}},
    ]}}


def _request(kind: str, memory: str | None = None) -> dict:
    exactly = {"deviceClassName": "gpu",
               "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].kind == "{kind}"'}}]}
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"name": "gpu", "exactly": exactly}


def _claim(name: str, kind: str, memory: str | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [_request(kind, memory)]}}}


def _pod(name: str, priority: int, *, claim: str = "", template: str = "") -> dict:
    ref = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {
        "schedulerName": "default-scheduler", "priorityClassName": f"p{priority}",
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", **ref}]}}


async def _until(check, what: str, timeout: float = 15.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got:
            return got
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _cluster(apiserver, *, dra_preemption: bool, controller: bool = True):
    client = await client_for(apiserver.kubeconfig)
    apiserver.store.create("nodes", "", {"metadata": {"name": "n1"},
                                         "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    await client.create("deviceclasses", CLASS)
    for value in (10, 400, 500, 1000):
        await client.create("priorityclasses", {"metadata": {"name": f"p{value}"}, "value": value})
    await client.create("resourceslices", SLICE)
    await client.create("resourceclaimtemplates", {"metadata": {"name": "whole", "namespace": "default"},
                                                   "spec": {"spec": {"devices": {"requests": [_request("whole")]}}}},
                        "default")
    loop = KubeSchedulerLoop(client, ExtenderConfig(""), "default-scheduler", timings=FAST,
                             dra=DynamicResources(client), dra_preemption=dra_preemption)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)),
             asyncio.create_task(PodTerminator(client, stop_seconds=0.0).run(stop))]
    if controller:
        tasks.append(asyncio.create_task(ResourceClaimController(client).run(stop)))

    async def node_of(name: str) -> str:
        try:
            return ((await client.get("pods", name, "default")).get("spec") or {}).get("nodeName") or ""
        except ApiError as exc:
            if exc.status == 404:
                return ""
            raise

    async def gone(name: str) -> bool:
        try:
            await client.get("pods", name, "default")
        except ApiError as exc:
            return exc.status == 404
        return False

    async def message(name: str) -> str:
        pod = await client.get("pods", name, "default")
        return next((c.get("message") or "" for c in (pod.get("status") or {}).get("conditions") or []
                     if c.get("type") == "PodScheduled"), "")

    async def create(pod: dict, claim: dict | None = None) -> None:
        if claim is not None:
            await client.create("resourceclaims", claim, "default")
        await client.create("pods", pod, "default")

    try:
        yield {"client": client, "loop": loop, "node_of": node_of, "gone": gone, "message": message,
               "create": create}
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await client.close()


async def test_a_high_priority_claim_pod_preempts_the_low_priority_holder_of_its_device(apiserver):
    async with _cluster(apiserver, dra_preemption=True) as c:
        await c["create"](_pod("low-shared", 10, claim="low-shared"), _claim("low-shared", "shared", "8Gi"))
        await c["create"](_pod("low-whole", 10, claim="low-whole"), _claim("low-whole", "whole"))
        assert await _until(lambda: c["node_of"]("low-whole"), "low-whole bound") == "n1"
        assert await _until(lambda: c["node_of"]("low-shared"), "low-shared bound") == "n1"
        await c["create"](_pod("high", 1000, template="whole"))
        assert await _until(lambda: c["node_of"]("high"), "high bound after preemption") == "n1"
        # Only the holder of the exclusive GPU went; the shared one frees nothing the claim needs.
        assert await c["gone"]("low-whole")
        assert await c["node_of"]("low-shared") == "n1"
        assert c["loop"].stats.preemptions == 1 and c["loop"].stats.victims == 1
        # The victim's own claim was deallocated by the controller (it is not owned by the pod).
        low = await c["client"].get("resourceclaims", "low-whole", "default")
        assert not (low.get("status") or {}).get("allocation") and not (low.get("status") or {}).get("reservedFor")
        made = [x for x in (await c["client"].list("resourceclaims", "default"))["items"]
                if x["metadata"]["name"].startswith("high-")]
        assert [r["device"] for r in made[0]["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]


async def test_kubernetes_1_36_preempts_nobody_for_a_claim(apiserver):
    async with _cluster(apiserver, dra_preemption=False) as c:
        await c["create"](_pod("low-whole", 10, claim="low-whole"), _claim("low-whole", "whole"))
        assert await _until(lambda: c["node_of"]("low-whole"), "low-whole bound") == "n1"
        await c["create"](_pod("high", 1000, template="whole"))
        text = await _until(lambda: c["message"]("high"), "high unschedulable")
        assert text.startswith("0/1 nodes are available: 1 cannot allocate all claims: claim default/high-")
        assert "request gpu" in text and "preemption" not in text
        assert c["loop"].stats.preemptions == 0 and await c["node_of"]("low-whole") == "n1"


async def test_a_claim_shared_with_a_more_important_pod_is_not_freed_by_preemption(apiserver):
    async with _cluster(apiserver, dra_preemption=True) as c:
        await c["create"](_pod("low", 10, claim="shared"), _claim("shared", "whole"))
        assert await _until(lambda: c["node_of"]("low"), "low bound") == "n1"
        await c["create"](_pod("mid", 500, claim="shared"))  # same claim: reserved by both pods
        assert await _until(lambda: c["node_of"]("mid"), "mid bound") == "n1"
        await c["create"](_pod("high", 400, template="whole"))
        text = await _until(lambda: c["message"]("high"), "high unschedulable")
        # The dry run's own verdict: the claim stays allocated, the node still refuses.
        assert " preemption: 0/1 nodes are available: 1 cannot allocate all claims: claim default/high-" in text
        assert c["loop"].stats.victims == 0 and await c["node_of"]("low") == "n1"


def test_released_by_needs_every_reserving_pod():
    claim = {"status": {"allocation": {"devices": {"results": []}},
                        "reservedFor": [{"resource": "pods", "name": "a", "uid": "u-a"},
                                        {"resource": "pods", "name": "b", "uid": "u-b"}]}}
    assert not released_by(claim, frozenset({"u-a"}))
    assert released_by(claim, frozenset({"u-a", "u-b"}))
    assert not released_by({"status": {"reservedFor": [{"uid": "u-a"}]}}, frozenset({"u-a"}))  # not allocated
    assert not released_by({"status": {"allocation": {}, "reservedFor": []}}, frozenset({"u-a"}))


@pytest.mark.parametrize("reserved", [[], [{"uid": "me"}]])
def test_postfilter_picks_an_own_claim_allocated_elsewhere(reserved):
    dra = DynamicResources.__new__(DynamicResources)
    pin = {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}
    claim = {"metadata": {"name": "c"}, "status": {"allocation": pin, "reservedFor": reserved}}
    pod = {"metadata": {"uid": "me"}}
    assert dra.unavailable_claim(pod, [claim], ["n2"]) is claim
    assert dra.unavailable_claim(pod, [claim], ["n1"]) is None  # refused only where it is allocated
    other = {**claim, "status": {**claim["status"], "reservedFor": [*reserved, {"uid": "other"}]}}
    assert dra.unavailable_claim(pod, [other], ["n2"]) is None


async def test_a_preemptor_holds_what_it_freed_and_does_not_preempt_again_while_it_is_reclaimed(apiserver):
    """KEP-5690's claim nomination: once `high` has preempted `low`, its allocation on the nominated node
    (gpu-0, with low's claim released) is recorded; while low's claim is still allocated (no
    resourceclaim controller runs) `high` is not eligible to preempt again and says why; once the
    claim is deallocated `high` is bound there and its nomination ends."""
    async with _cluster(apiserver, dra_preemption=True, controller=False) as c:
        await c["create"](_pod("low", 10, claim="low-whole"), _claim("low-whole", "whole"))
        assert await _until(lambda: c["node_of"]("low"), "low bound") == "n1"
        await c["create"](_pod("high", 1000, claim="high-whole"), _claim("high-whole", "whole"))
        await _until(lambda: c["gone"]("low"), "low preempted")
        loop = c["loop"]
        nom = loop.nominations.by_pod["default/high"]
        assert nom.node == "n1" and nom.victim_claims == {"default/low-whole"}
        (held,) = nom.held
        assert [r["device"] for r in held["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
        assert loop.nominations.settling("default/high")
        text = await _until(lambda: _with(c["message"]("high"), "not eligible"), "high's next attempt")
        assert "preemption: not eligible due to resource claims still being deallocated on the nominated node" in text
        assert loop.stats.preemptions == 1
        # the resourceclaim controller's deallocation of the victim's claim, done here
        low = apiserver.store.get("resourceclaims.resource.k8s.io", "default", "low-whole")
        apiserver.store.update("resourceclaims.resource.k8s.io", "default", "low-whole", {**low, "status": {}},
                               subresource="status")
        assert await _until(lambda: c["node_of"]("high"), "high bound once low's claim is deallocated") == "n1"
        await _until(lambda: _true(not loop.nominations.by_pod), "the nomination ended")


async def _with(text, needle: str) -> str:
    got = await text
    return got if needle in got else ""


async def _true(value: bool) -> bool:
    return value


class _Claims:
    """What ClaimNominations reads of DynamicResources: the claims as the scheduler sees them."""

    def __init__(self, claims: dict):
        self.claims = claims

    def current_claims(self) -> dict:
        return dict(self.claims)


def _allocated(name: str, device: str, uid: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": [_request("whole")]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": uid, "uid": uid}] if uid else []}}


def test_held_capacity_counts_for_pods_of_lower_or_equal_priority_on_that_node_only():
    from hami.kubesched.allocator import Outcome
    from hami.sim.dranominate import ClaimNominations

    victim = _allocated("low-whole", "gpu-0", uid="u-low")
    claims = _Claims({"default/low-whole": victim})
    noms = ClaimNominations(claims)
    mine = _claim("high-whole", "whole")
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}
    noms.nominate("default/high", "n1", 1000, [mine], Outcome(True, {"default/high-whole": alloc}),
                  frozenset({"u-low"}))
    assert noms.settling("default/high")
    claims.claims["default/low-whole"] = {**victim, "status": {}}  # the controller deallocated it
    assert not noms.settling("default/high")
    held = noms.usage_on("n1", 500, "default/mid")
    assert held is not None and held != noms.usage_on("n1", 500, "default/high")  # its own hold is not in its way
    assert noms.usage_on("n1", 2000, "default/top") is None  # a more important pod may take it
    assert noms.usage_on("n2", 500, "default/mid") is None
    noms.forget("default/high")
    assert noms.usage_on("n1", 500, "default/mid") is None
