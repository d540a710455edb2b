"""hami.doctor.dra: why a pod with DRA claims is Pending (pure).

Covers each leaf: the templated claim not yet made, a claim that does not exist, no node
publishing devices, claims that would fit now, and claims no node can allocate, with the
selector or capacity named per device (a type annotation's selector, a full GPU).
"""

from __future__ import annotations

from hami.doctor.dra import ADMIN_LABEL, diagnose_dra_pod
from tests.dra._objects import DEVICE_CLASS, DRIVER, MIB, claim, gpu_device, slice_for

CLASSES = {DRIVER: DEVICE_CLASS}


def _pod(**claims_spec):
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"resourceClaims": [{"name": "gpu", **claims_spec}]}, "status": {"phase": "Pending"}}


def test_waiting_missing_and_no_devices():
    d = diagnose_dra_pod(_pod(resourceClaimTemplateName="t"), {}, [], CLASSES, ["n1"])
    assert d.leaf == "dra-claim-not-created" and "'gpu'" in d.summary
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {}, [], CLASSES, ["n1"])
    assert d.leaf == "dra-claim-missing" and d.summary == "ResourceClaim default/c1 does not exist"
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": claim("c1")}, [], CLASSES, ["n1"])
    assert d.leaf == "dra-no-devices"


def test_capacity_and_selectors_named_per_device():
    full = claim("other", memory_mib=8000)
    full["status"] = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1",
                                                              "device": "gpu-0", "shareID": "s",
                                                              "consumedCapacity": {"memory": str(8000 * MIB)}}]}}}
    mine = claim("c1", memory_mib=4000, selectors=(
        f'device.attributes["{DRIVER}"].productName.upperAscii().contains("A100")',))
    slices = [slice_for("n1", [gpu_device(0), gpu_device(1, model="Tesla T4")])]
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": mine, "default/other": full}, slices,
                         CLASSES, ["n1", "n2"])
    assert d.leaf == "dra-cannot-allocate"
    assert "n1: n1/gpu-0: memory 4000Mi requested, 0 of 8000Mi free" in d.evidence
    assert any(e.startswith("n1: n1/gpu-1: request selector") and e.endswith("is false") for e in d.evidence)
    assert "1 node(s): claim default/c1: request gpu: no devices published for this node" in d.evidence
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": mine}, slices, CLASSES, ["n1"])
    assert d.leaf == "dra-fits-now" and d.summary == "its claims would be allocated on n1 now"


def _selector_slice() -> dict:
    """A slice for every node labelled gpu=a100 (nodeSelector, no nodeName)."""
    s = slice_for("pool", [gpu_device(0)])
    del s["spec"]["nodeName"]
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu", "operator": "In", "values": ["a100"]}]}]}
    return s


def test_node_selector_slices_match_the_node_objects_labels():
    node = {"metadata": {"name": "n1", "labels": {"gpu": "a100"}}}
    mine = claim("c1", memory_mib=1000)
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": mine}, [_selector_slice()], CLASSES, [node])
    assert d.leaf == "dra-fits-now" and d.summary == "its claims would be allocated on n1 now"
    bare = {"metadata": {"name": "n1", "labels": {}}}
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": mine}, [_selector_slice()], CLASSES, [bare])
    assert d.leaf == "dra-cannot-allocate"
    assert "1 node(s): claim default/c1: request gpu: no devices published for this node" in d.evidence


def test_taint_not_tolerated_is_named_per_device():
    dev = gpu_device(0)
    dev["taints"] = [{"key": "gpu.example.com/xid", "value": "79", "effect": "NoSchedule"}]
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": claim("c1", memory_mib=1000)},
                         [slice_for("n1", [dev])], CLASSES, [{"metadata": {"name": "n1"}}])
    assert d.leaf == "dra-cannot-allocate"
    assert ("n1: n1/gpu-0: tainted gpu.example.com/xid=79:NoSchedule and the request does not tolerate it"
            in d.evidence)
    assert d.summary.endswith("claim default/c1: request gpu: every matching device is tainted "
                              "gpu.example.com/xid=79:NoSchedule and the request does not tolerate it")


def test_exhausted_counters_are_named_with_the_numbers():
    """A partitionable GPU (KEP-4815): the whole card holds its counter set, a partition finds none left."""
    gib = 1 << 30
    whole = {"name": "gpu-0", "attributes": {"type": {"string": "hami-gpu"}, "productName": {"string": "A100"}},
             "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": str(40 * gib)}}}]}
    part = {"name": "gpu-0-mig-1g", "attributes": {"type": {"string": "hami-gpu"}, "profile": {"string": "1g"}},
            "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": str(10 * gib)}}}]}
    devices = slice_for("n1", [whole, part])
    counters = slice_for("n1", [])
    counters["metadata"]["name"] = "n1-counters"
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [{"name": "gpu-0-counters", "counters": {"memory": {"value": str(40 * gib)}}}]
    for s in (devices, counters):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    held = claim("other")
    held["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}
    mine = claim("c1", selectors=(f'device.attributes["{DRIVER}"].profile == "1g"',))
    d = diagnose_dra_pod(_pod(resourceClaimName="c1"), {"default/c1": mine, "default/other": held},
                         [devices, counters], CLASSES, [{"metadata": {"name": "n1"}}])
    assert d.leaf == "dra-cannot-allocate"
    assert "n1: n1/gpu-0-mig-1g: counter gpu-0-counters/memory: needs 10240Mi, 0 of 40960Mi left" in d.evidence
    assert d.summary.endswith("request gpu: the counters of every matching device are exhausted")


def test_a_template_asking_admin_access_in_an_unlabelled_namespace_is_named():
    tmpl = {"metadata": {"name": "t", "namespace": "default"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "adminAccess": True}}]}}}}
    pod = _pod(resourceClaimTemplateName="t")
    d = diagnose_dra_pod(pod, {}, [], CLASSES, ["n1"], {"default/t": tmpl}, {})
    assert d.leaf == "dra-admin-access-refused"
    assert d.summary == ("the claim for pod claim 'gpu' cannot be made: request gpu asks adminAccess, and namespace "
                         "default is not labelled resource.kubernetes.io/admin-access=true: the API server refuses "
                         "such a claim")
    labelled = {"resource.kubernetes.io/admin-access": "true"}
    assert diagnose_dra_pod(pod, {}, [], CLASSES, ["n1"], {"default/t": tmpl}, labelled).leaf == \
        "dra-claim-not-created"
    d = diagnose_dra_pod(pod, {}, [], CLASSES, ["n1"], {}, labelled)
    assert d.leaf == "dra-template-missing" and d.summary.startswith("ResourceClaimTemplate default/t ")


async def test_doctor_pod_reads_the_cluster_s_dra_objects_and_nodes(apiserver):
    """Through the API: a nodeSelector slice matches the labelled Node object the doctor reads, so the
    pending pod's claim is explained by that node's device (capacity with its numbers), and a pod
    whose template asks admin access in an unlabelled namespace is told why its claim is never made."""
    import argparse

    from hami.doctor.pod import diagnose
    from tests.kube.helpers import client_for

    store = apiserver.store
    store.create("nodes", "", {"metadata": {"name": "n1", "labels": {"gpu": "a100"}}})
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.create("deviceclasses", DEVICE_CLASS)
        await client.create("resourceslices", _selector_slice())
        await client.create("resourceclaims", claim("big", memory_mib=9000), "default")
        pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "big"}]}}
        await client.create("pods", pod, "default")
        d = await diagnose(client, argparse.Namespace(pod="default/p"))
        assert d.leaf == "dra-cannot-allocate"
        assert d.evidence == (
            "1 node(s): claim default/big: request gpu: not enough free memory on any matching device",
            "n1: pool/gpu-0: memory: 9000Mi is not allowed by its request policy (1Mi..8000Mi in steps of 1Mi)")
        # The API server refuses such a template in an unlabelled namespace: the label went afterwards.
        store.create("namespaces", "", {"metadata": {"name": "tools", "labels": {ADMIN_LABEL: "true"}}})
        await client.create("resourceclaimtemplates", {"metadata": {"name": "admin", "namespace": "tools"},
                                                       "spec": {"spec": {"devices": {"requests": [
                                                           {"name": "gpu", "exactly": {"deviceClassName": DRIVER,
                                                                                       "adminAccess": True}}]}}}},
                            "tools")
        store.patch("namespaces", "", "tools", b'{"metadata":{"labels":null}}', "application/merge-patch+json")
        tpod = {"metadata": {"name": "t", "namespace": "tools"}, "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "admin"}]}}
        await client.create("pods", tpod, "tools")
        d = await diagnose(client, argparse.Namespace(pod="tools/t"))
        assert d.leaf == "dra-admin-access-refused" and "namespace tools is not labelled" in d.summary
    finally:
        await client.close()
