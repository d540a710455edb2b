"""hami.dra.podclaims: the pod's claims as the resourceclaim controller and DynamicResources read them.

Covers: direct and templated pod claims (waiting until resourceClaimStatuses names the generated
one); the generated claim (generateName, pod-claim-name annotation, controller ownerReference, the
template's spec); releasing a pod drops its reservation and deallocates a claim nobody reserves.
"""

from __future__ import annotations

from hami.dra.podclaims import POD_CLAIM_ANNOTATION, claim_names, generated_claim, owned_by, release

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
       "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"},
                                   {"name": "b", "resourceClaimTemplateName": "t"}]}}


def test_claim_names_wait_for_the_generated_claim():
    assert claim_names(POD) == (["shared"], ["b"])
    done = {**POD, "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x1"}]}}
    assert claim_names(done) == (["shared", "p-b-x1"], [])


def test_generated_claim_is_owned_by_the_pod():
    tmpl = {"metadata": {"name": "t", "labels": {"hami.io/dra": "true"}}, "spec": {"spec": {"devices": {}}}}
    c = generated_claim(POD, {"name": "b"}, tmpl)
    assert c["metadata"]["generateName"] == "p-b-" and c["metadata"]["namespace"] == "ns"
    assert c["metadata"]["annotations"][POD_CLAIM_ANNOTATION] == "b"
    assert c["spec"] == {"devices": {}} and owned_by(c, "u1") and not owned_by(c, "u2")


def test_release_drops_the_reservation_and_deallocates_when_none_is_left():
    claim = {"status": {"allocation": {"devices": {}}, "reservedFor": [
        {"resource": "pods", "name": "p", "uid": "u1"}, {"resource": "pods", "name": "q", "uid": "u2"}]}}
    after = release(claim, "u1")
    assert after == {"allocation": {"devices": {}}, "reservedFor": [{"resource": "pods", "name": "q", "uid": "u2"}]}
    assert release({"status": after}, "u2") == {}
    assert release(claim, "u3") is None
