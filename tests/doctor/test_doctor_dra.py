"""hami.doctor.dra: why a pod with DRA claims is Pending (pure).

Covers each leaf: the templated claim not yet made, a claim that does not exist, no node
publishing devices, claims that would fit now, and claims no node can allocate, with the
selector or capacity named per device (a type annotation's selector, a full GPU).
"""

from __future__ import annotations

from hami.doctor.dra import diagnose_dra_pod
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
