"""The embedded API server's resource.k8s.io/v1 kinds, over real HTTP and real kubectl.

Covers: DeviceClass and ResourceSlice (cluster-scoped), ResourceClaim and ResourceClaimTemplate
(namespaced) created, listed and watched through kubernetes-asyncio; the claim's status
subresource (the main resource ignores .status, the spec is immutable); 422 errors naming the
field for bad objects (a selector that does not compile, a count over 32, a quantity that is
not one, a slice without a node, too many attributes); `kubectl get
resourceslices,resourceclaims,deviceclasses` with their columns.
"""

from __future__ import annotations

import asyncio

import pytest

from hami.config import KubeSettings
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from tests.dra._objects import DEVICE_CLASS, DRIVER, claim, gpu_device, slice_for
from tests.tools import find_kubectl


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig), role="sim")
    yield c
    await c.close()


async def _status_patch(client, name: str, body: dict) -> dict:
    return await client.request("patch", "resourceclaims/status", "PATCH",
                                resource_path("resourceclaims", "default", name, "status"), body=body,
                                content_type="application/merge-patch+json")


async def test_the_four_kinds_are_stored_listed_and_watched(client):
    await client.create("deviceclasses", DEVICE_CLASS)
    await client.create("resourceslices", slice_for("n1", [gpu_device(0)]))
    seen: list[str] = []
    inf = Informer(client, "resourceclaims", handler=lambda t, old, new: seen.append(
        f"{t}:{(new or old)['metadata']['name']}"))
    stop = asyncio.Event()
    task = asyncio.create_task(inf.run(stop))
    await inf.wait_synced(10)
    await client.create("resourceclaims", claim("c1", memory_mib=4000), "default")
    await client.create("resourceclaimtemplates", {"metadata": {"name": "t1"}, "spec": {
        "spec": claim("x", memory_mib=10)["spec"]}}, "default")
    for _ in range(100):
        if "ADDED:c1" in seen:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await task
    assert "ADDED:c1" in seen
    assert [s["metadata"]["name"] for s in (await client.list("resourceslices", field_selector="spec.nodeName=n1"))
            ["items"]] == [f"n1-{DRIVER}"]
    assert (await client.get("resourceclaimtemplates", "t1", "default"))["kind"] == "ResourceClaimTemplate"
    assert (await client.get("deviceclasses", DRIVER))["apiVersion"] == "resource.k8s.io/v1"


async def test_claim_status_only_through_the_subresource_and_spec_immutable(client):
    await client.create("resourceclaims", claim("c1"), "default")
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}
    got = await client.replace("resourceclaims", "c1", {**(await client.get("resourceclaims", "c1", "default")),
                                                          "status": {"allocation": alloc}}, "default")
    assert "status" not in got
    got = await _status_patch(client, "c1", {"status": {"allocation": alloc, "reservedFor": [
        {"resource": "pods", "name": "p", "uid": "u1"}]}})
    assert got["status"]["allocation"] == alloc
    changed = await client.get("resourceclaims", "c1", "default")
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    with pytest.raises(ApiError) as err:
        await client.replace("resourceclaims", "c1", changed, "default")
    assert err.value.status == 422 and "spec: Invalid value: field is immutable" in err.value.message
    with pytest.raises(ApiError) as err:
        await _status_patch(client, "c1", {"status": {"reservedFor": [{"resource": "pods", "name": "p"}]}})
    assert err.value.status == 422 and "status.reservedFor[0].uid: Required value" in err.value.message


def _bad_count(c):
    c["spec"]["devices"]["requests"][0]["exactly"]["count"] = 33


def _bad_cel(c):
    c["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "device.driver =="}}]


def _bad_quantity(c):
    c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "lots"}}


@pytest.mark.parametrize("mutate,field", [
    (_bad_count, "spec.devices.requests[0].exactly.count: Invalid value: 33"),
    (_bad_cel, "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: compilation failed"),
    (_bad_quantity, "spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: 'lots'"),
])
async def test_bad_claims_get_422_naming_the_field(client, mutate, field):
    c = claim("bad", memory_mib=1)
    mutate(c)
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", c, "default")
    assert err.value.status == 422
    assert err.value.message.startswith(f'ResourceClaim "bad" is invalid: {field}')


async def test_bad_slices_get_422_naming_the_field(client):
    s = slice_for("n1", [gpu_device(0)])
    del s["spec"]["nodeName"]
    with pytest.raises(ApiError) as err:
        await client.create("resourceslices", s)
    assert err.value.status == 422 and "spec: Invalid value: exactly one of nodeName" in err.value.message
    dev = gpu_device(0)
    dev["attributes"].update({f"a{i}": {"int": i} for i in range(40)})
    with pytest.raises(ApiError) as err:
        await client.create("resourceslices", slice_for("n1", [dev]))
    assert err.value.status == 422 and "spec.devices[0]: Too many" in err.value.message


async def test_kubectl_gets_slices_claims_and_classes(apiserver, client):
    await client.create("deviceclasses", DEVICE_CLASS)
    await client.create("resourceslices", slice_for("n1", [gpu_device(0)]))
    await client.create("resourceclaims", claim("c1", memory_mib=10), "default")
    await _status_patch(client, "c1", {"status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}})
    proc = await asyncio.create_subprocess_exec(
        find_kubectl(), "--kubeconfig", apiserver.kubeconfig, "get", "resourceslices,resourceclaims,deviceclasses",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert f"resourceslice.resource.k8s.io/n1-{DRIVER}" in text and "n1" in text
    assert "resourceclaim.resource.k8s.io/c1" in text and "allocated" in text
    assert f"deviceclass.resource.k8s.io/{DRIVER}" in text


async def test_the_1_36_fields_are_accepted_and_checked(client):
    """firstAvailable, tolerations, distinctAttribute, shared counters, taints, binding conditions
    and request policies are stored as v1 stores them; a malformed one is refused naming its field."""
    dev = {**gpu_device(0), "taints": [{"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}],
           "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"],
           "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]}
    s = slice_for("n1", [dev])
    s["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]
    await client.create("resourceslices", s)
    c = claim("fa")
    c["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": DRIVER, "tolerations": [{"key": f"{DRIVER}/xid", "operator": "Exists"}]},
        {"name": "small", "deviceClassName": DRIVER, "count": 2}]}]
    c["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{DRIVER}/uuid", "requests": ["gpu/small"]}]
    await client.create("resourceclaims", c, "default")
    got = await client.get("resourceclaims", "fa", "default")
    assert got["spec"]["devices"]["requests"][0]["firstAvailable"][1]["name"] == "small"

    bad_taint = slice_for("n2", [{**gpu_device(0), "taints": [{"key": "k", "effect": "Sometimes"}]}])
    bad_taint["metadata"]["name"] = "n2"
    with pytest.raises(ApiError) as err:
        await client.create("resourceslices", bad_taint)
    assert err.value.status == 422 and "spec.devices[0].taints[0].effect: Unsupported value" in err.value.message
    bad_tol = claim("tol")
    bad_tol["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"operator": "Equal", "value": "x"}]
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", bad_tol, "default")
    assert "exactly.tolerations[0].operator: Invalid value: operator must be Exists" in err.value.message
    unnamed = claim("sub")
    unnamed["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [{"deviceClassName": DRIVER}]}]
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", unnamed, "default")
    assert "spec.devices.requests[0].firstAvailable[0].name: Invalid value: None" in err.value.message
    both = claim("both")
    both["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/numa", "distinctAttribute": f"{DRIVER}/a"}]
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", both, "default")
    assert "exactly one of matchAttribute or distinctAttribute" in err.value.message
    admin = claim("admin")
    admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    with pytest.raises(ApiError) as err:
        await client.create("resourceclaims", admin, "default")
    assert "adminAccess: Forbidden" in err.value.message
