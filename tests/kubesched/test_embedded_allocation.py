"""The embedded kube-scheduler loop allocates Kubernetes 1.36 claims through the API (in process).

A driver's ResourceSlice published through the embedded API server (a tainted GPU first, a GPU
with a `shares` capacity of 2 and `allowMultipleAllocations`, an exclusive GPU, an
`allNodes` network device, a GPU that needs binding conditions), a DeviceClass, and pods whose
claims use the new fields, scheduled by `KubeSchedulerLoop` with the DynamicResources plugin and
bound by its DefaultBinder:

- `firstAvailable`: the first subrequest no device serves is passed over, the result is named
  `<request>/<subrequest>`;
- the tainted GPU is skipped by claims without a toleration, and taken by one that tolerates it
  (the result carries the toleration);
- two claims share the `shares` GPU (each consumes the policy's default, 1), a third stays
  Pending with the DynamicResources reason;
- `adminAccess`: refused by the API server outside a labelled namespace; in one, the claim gets
  the GPU another pod holds exclusively, and holds nothing afterwards;
- `distinctAttribute` puts two requests on GPUs with different models;
- a device of an `allNodes` slice is allocated with no node selector;
- binding conditions: the pod is bound only after the driver sets the condition True; a failure
  condition sends it back to scheduling with its allocation cleared.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from hami.kube.client import ApiError, resource_path
from hami.sim.dynamicresources import DynamicResources
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for, eventually
from tests.sim._kubesched import FAST

DRIVER = "gpu.example.com"
CLASS = {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
SHARES = {"value": "2", "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "2", "step": "1"}}}


def _gpu(name: str, model: str, **extra) -> dict:
    return {"name": name, "attributes": {"model": {"string": model}}, **extra}


SLICE = {"metadata": {"name": "n1-gpus"}, "spec": {
    "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
    "devices": [
        _gpu("gpu-0", "A100", allowMultipleAllocations=True, capacity={"shares": SHARES},
             taints=[{"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}]),
        _gpu("gpu-1", "A100", allowMultipleAllocations=True, capacity={"shares": SHARES}),
        _gpu("gpu-2", "H100"),
    ]}}
FABRIC = {"metadata": {"name": "fabric"}, "spec": {
    "driver": DRIVER, "allNodes": True, "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
    "devices": [_gpu("link-0", "fabric")]}}
WAITING = {"metadata": {"name": "n1-prepared"}, "spec": {
    "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1-prepared", "generation": 1, "resourceSliceCount": 1},
    "devices": [_gpu(f"gpu-{i}", "B200", bindingConditions=["Attached"], bindingFailureConditions=["AttachFailed"])
                for i in (8, 9)]}}


def _exactly(**kw) -> dict:
    return {"deviceClassName": "gpu", **kw}


def _model(m: str) -> list[dict]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{m}"'}}]


def _claim(name: str, requests: list[dict], ns: str = "default", **devices) -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"devices": {"requests": requests, **devices}}}


def _pod(name: str, claim: str, ns: str = "default") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}}


async def _until(check, what: str, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got:
            return got
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def cluster(apiserver):
    client = await client_for(apiserver.kubeconfig)
    store = apiserver.store
    store.create("nodes", "", {"metadata": {"name": "n1", "labels": {"zone": "a"}},
                               "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    store.create("namespaces", "", {"metadata": {"name": "monitoring",
                                                 "labels": {"resource.kubernetes.io/admin-access": "true"}}})
    await client.create("deviceclasses", CLASS)
    for s in (SLICE, FABRIC, WAITING):
        await client.create("resourceslices", s)
    dra = DynamicResources(client, binding_timeout=10.0, binding_poll=0.02)
    loop = KubeSchedulerLoop(client, ExtenderConfig(""), "default-scheduler", timings=FAST, dra=dra)
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))

    async def claim(ns: str, name: str) -> dict:
        return await client.get("resourceclaims", name, ns)

    async def bound(ns: str, name: str) -> str:
        return ((await client.get("pods", name, ns)).get("spec") or {}).get("nodeName") or ""

    async def results(ns: str, name: str) -> list[dict]:
        c = await claim(ns, name)
        return (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []

    async def run(ns: str, name: str, requests: list[dict], **devices) -> list[dict]:
        await client.create("resourceclaims", _claim(name, requests, ns, **devices), ns)
        await client.create("pods", _pod(name, name, ns), ns)
        await _until(lambda: bound(ns, name), f"{ns}/{name} bound")
        return await results(ns, name)

    try:
        yield {"client": client, "run": run, "claim": claim, "bound": bound, "results": results, "loop": loop,
               "dra": dra}
    finally:
        stop.set()
        await task
        await client.close()


async def test_first_available_taints_and_shares(cluster):
    run, client = cluster["run"], cluster["client"]
    # No H200 is published: the first subrequest is passed over; the tainted gpu-0 is skipped.
    got = await run("default", "first", [{"name": "gpu", "firstAvailable": [
        {"name": "h200", **_exactly(selectors=_model("H200"))},
        {"name": "a100", **_exactly(selectors=_model("A100"))}]}])
    assert [(r["request"], r["device"], r["consumedCapacity"]) for r in got] == [("gpu/a100", "gpu-1", {"shares": "1"})]
    assert got[0]["shareID"]
    got = await run("default", "second", [{"name": "gpu", "exactly": _exactly(selectors=_model("A100"))}])
    assert [(r["device"], r["consumedCapacity"]) for r in got] == [("gpu-1", {"shares": "1"})]
    # gpu-1's two shares are taken and gpu-0 is tainted: the third waits with the plugin's reason.
    await client.create("resourceclaims", _claim("third", [{"name": "gpu", "exactly": _exactly(
        selectors=_model("A100"))}]), "default")
    await client.create("pods", _pod("third", "third"), "default")

    async def refused():
        for c in (await client.get("pods", "third", "default")).get("status", {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and "cannot allocate all claims" in c.get("message", ""):
                return c["message"]
        return None
    message = await _until(refused, "third unschedulable")
    assert "claim default/third: request gpu:" in message and f"{DRIVER}/xid=79:NoSchedule" in message
    assert not await cluster["bound"]("default", "third")
    # A claim that tolerates the taint gets gpu-0, and its result says which toleration it used.
    tol = {"key": f"{DRIVER}/xid", "operator": "Exists", "effect": "NoSchedule"}
    got = await run("default", "tolerant", [{"name": "gpu", "exactly": _exactly(
        selectors=_model("A100"), tolerations=[tol])}])
    assert [(r["device"], r["tolerations"]) for r in got] == [("gpu-0", [tol])]


async def test_admin_access_needs_the_namespace_label_and_shares_an_exclusive_gpu(cluster):
    run, client = cluster["run"], cluster["client"]
    got = await run("default", "owner", [{"name": "gpu", "exactly": _exactly(selectors=_model("H100"))}])
    assert [r["device"] for r in got] == ["gpu-2"] and "shareID" not in got[0]
    admin = [{"name": "gpu", "exactly": _exactly(selectors=_model("H100"), adminAccess=True)}]
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", _claim("watch", admin), "default")
    assert err.value.status == 422
    assert "spec.devices.requests[0].exactly.adminAccess: Forbidden" in err.value.message
    got = await run("monitoring", "watch", admin)
    assert [(r["device"], r.get("adminAccess")) for r in got] == [("gpu-2", True)]
    # The admin claim holds nothing: once the owner is gone the GPU is free for an ordinary claim.
    await client.delete("pods", "owner", "default")
    await client.request("replace", "resourceclaims/status", "PUT",
                         resource_path("resourceclaims", "default", "owner", "status"),
                         body={**await cluster["claim"]("default", "owner"), "status": {}},
                         content_type="application/json")
    got = await run("default", "next", [{"name": "gpu", "exactly": _exactly(selectors=_model("H100"))}])
    assert [r["device"] for r in got] == ["gpu-2"]


async def test_distinct_attribute_and_all_nodes_devices(cluster):
    run = cluster["run"]
    got = await run("default", "pair", [{"name": "a", "exactly": _exactly(selectors=[{"cel": {
        "expression": f'device.attributes["{DRIVER}"].model != "fabric" && '
                      f'device.attributes["{DRIVER}"].model != "B200"'}}])},
                                         {"name": "b", "exactly": _exactly(selectors=[{"cel": {
        "expression": f'device.attributes["{DRIVER}"].model in ["A100", "H100"]'}}])}],
        constraints=[{"distinctAttribute": f"{DRIVER}/model"}])
    assert [r["device"] for r in got] == ["gpu-1", "gpu-2"]
    claim = await cluster["claim"]("default", "pair")
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    got = await run("default", "link", [{"name": "net", "exactly": _exactly(selectors=_model("fabric"))}])
    assert [(r["pool"], r["device"]) for r in got] == [("fabric", "link-0")]
    assert "nodeSelector" not in (await cluster["claim"]("default", "link"))["status"]["allocation"]


async def test_binding_conditions_hold_the_pod_until_the_driver_says_so(cluster):
    client, claim = cluster["client"], cluster["claim"]

    async def device_status(name: str, condition: str) -> None:
        c = await claim("default", name)
        device = c["status"]["allocation"]["devices"]["results"][0]["device"]
        c["status"]["devices"] = [{"driver": DRIVER, "pool": "n1-prepared", "device": device, "conditions": [
            {"type": condition, "status": "True", "reason": "Test", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
        await client.request("replace", "resourceclaims/status", "PUT",
                             resource_path("resourceclaims", "default", name, "status"), body=c,
                             content_type="application/json")

    b200 = [{"name": "gpu", "exactly": _exactly(selectors=_model("B200"))}]
    await client.create("resourceclaims", _claim("late", b200), "default")
    await client.create("pods", _pod("late", "late"), "default")
    got = await _until(lambda: cluster["results"]("default", "late"), "late allocated")
    assert got[0]["bindingConditions"] == ["Attached"] and got[0]["bindingFailureConditions"] == ["AttachFailed"]
    assert (await claim("default", "late"))["status"]["allocation"]["allocationTimestamp"]
    dra = cluster["dra"]
    checks = dra.binding_checks
    await eventually(lambda: dra.binding_checks >= checks + 3, 10)  # PreBind looked at the unmet conditions
    assert not await cluster["bound"]("default", "late")  # PreBind waits for the driver
    await device_status("late", "Attached")
    assert await _until(lambda: cluster["bound"]("default", "late"), "late bound") == "n1"

    await client.create("resourceclaims", _claim("broken", b200), "default")
    await client.create("pods", _pod("broken", "broken"), "default")
    await _until(lambda: cluster["results"]("default", "broken"), "broken allocated")
    attempts = cluster["loop"].stats.attempts.get("default/broken", 0)
    await device_status("broken", "AttachFailed")

    async def retried():
        return cluster["loop"].stats.attempts.get("default/broken", 0) > attempts
    await _until(retried, "broken scheduled again")
    assert not await cluster["bound"]("default", "broken")
    with contextlib.suppress(AssertionError):
        await _until(lambda: cluster["bound"]("default", "broken"), "never", timeout=0.3)
    assert not await cluster["bound"]("default", "broken")
