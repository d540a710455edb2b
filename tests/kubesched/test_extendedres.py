"""KEP-5004 (hami.kubesched.extendedres): which DeviceClass serves an extended resource, what a pod
wants of it, where DRA serves it, and the claim kube-scheduler builds (upstream's request names)."""

from __future__ import annotations

from hami.kubesched import extendedres as er


def _class(name: str, ext: str | None = None) -> dict:
    return {"metadata": {"name": name}, "spec": {"extendedResourceName": ext} if ext else {}}


def test_class_mapping_explicit_and_implicit_names():
    m = er.class_mapping([_class("b", "nvidia.com/gpu"), _class("a", "nvidia.com/gpu"), _class("c")])
    assert m["nvidia.com/gpu"] == "a"  # of two classes naming it, the first by name
    assert m["deviceclass.resource.kubernetes.io/c"] == "c" and m["deviceclass.resource.kubernetes.io/b"] == "b"


def _ctr(name: str, limits: dict, restart: str | None = None) -> dict:
    c = {"name": name, "resources": {"limits": limits}}
    if restart:
        c["restartPolicy"] = restart
    return c


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
       "spec": {"initContainers": [_ctr("i1", {"nvidia.com/gpu": "1"}), _ctr("i2", {"nvidia.com/gpu": "3"}),
                                   _ctr("side", {"nvidia.com/gpu": "1"}, "Always")],
                "containers": [_ctr("a", {"cpu": "1", "nvidia.com/gpu": "2"}), _ctr("b", {"memory": "1Gi"})]}}
MAP = {"nvidia.com/gpu": "gpu-class"}


def test_what_a_pod_wants_long_lived_sum_against_the_largest_init():
    assert er.pod_wants(POD, MAP) == {"nvidia.com/gpu": 3}
    assert er.pod_wants(POD, {"example.com/fpga": "f"}) == {}


def test_dra_serves_a_resource_only_where_no_device_plugin_advertises_it():
    assert er.needs_dra({"nvidia.com/gpu": 1}, {"status": {"allocatable": {"nvidia.com/gpu": "4"}}}) == set()
    assert er.needs_dra({"nvidia.com/gpu": 1}, {"status": {"allocatable": {"cpu": "8"}}}) == {"nvidia.com/gpu"}
    assert er.needs_dra({"nvidia.com/gpu": 1}, {"status": {"allocatable": {"nvidia.com/gpu": "0"}}}) == {
        "nvidia.com/gpu"}


def test_the_special_claim_has_upstreams_requests_mappings_and_metadata():
    claim, mappings = er.special_claim(POD, {"nvidia.com/gpu"}, MAP, name="pending")
    reqs = {r["name"]: r["exactly"]["count"] for r in claim["spec"]["devices"]["requests"]}
    # init containers that are not sidecars share the largest of their requests (i2's); the sidecar
    # and the app container each get their own; the index is the resource's in the sorted names
    assert reqs == {"container-1-request-0": 3, "container-2-request-0": 1, "container-3-request-1": 2}
    assert [r["name"] for r in claim["spec"]["devices"]["requests"]] == sorted(reqs)
    assert {(m["containerName"], m["requestName"]) for m in mappings} == {
        ("i1", "container-1-request-0"), ("i2", "container-1-request-0"), ("side", "container-2-request-0"),
        ("a", "container-3-request-1")}
    meta = claim["metadata"]
    assert meta["generateName"] == "p-extended-resources-" and meta["annotations"] == {er.ANNOTATION: "true"}
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["ownerReferences"][0]["controller"] is True
    assert er.find_claim(POD, [claim]) is claim
    assert er.find_claim({"metadata": {"uid": "other"}}, [claim]) is None
