"""hami.dra.claims and the webhook's --dra mode: HAMi's GPU resources as DRA claims.

Covers: a gpumem/gpucores pod becomes a ResourceClaimTemplate reference in HAMi-DRA's claim shape
(class hami-core-gpu.project-hami.io, request `gpu`, exactly.count, capacity memory in bytes and
cores, the type selector), the resources leave the container and it references the claim; the
UUID/type annotations become selectors that the allocator's CEL evaluates as HAMi matched them
(exact UUIDs, case-insensitive type substrings, nouse negated); same shape -> same template; a pod
without GPUs is left alone; bounds (count, MiB, cores, percentage, annotation lists) refused
naming the field; the AdmissionReview path (the patch carries the claims and their shapes in
hami.io/dra-claims, and creates nothing); a pod rebuilds only the templates its own spec references
(a tenant's edited shape or a foreign reference rebuilds nothing); hypothesis: any annotation text
yields a refusal or a selector that compiles and evaluates, any claim-shape text a refusal naming
the annotation or shapes within the bounds.
"""

from __future__ import annotations

import base64
import json

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.model import NvidiaConfig
from hami.dra.claims import (
    CLAIMS_ANNOTATION,
    ClaimError,
    annotation_selectors,
    claim_shapes,
    templates_of,
    translate_pod,
)
from hami.kubesched.cel import SelectorCompiler, device_activation
from hami.scheduler.admission.webhook import WebhookSettings, mutate, mutate_pod
from tests.dra._objects import DRIVER, MIB, gpu_device

CFG = NvidiaConfig()


def _pod(limits: dict, annotations: dict | None = None, name: str = "cuda") -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}},
            "spec": {"containers": [{"name": name, "image": "x", "resources": {"limits": limits}}]}}


def test_a_gpumem_pod_references_a_template_in_hami_dra_shape():
    t = translate_pod(_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30",
                            "cpu": "1"}), CFG)
    (tmpl,) = t.templates
    req = tmpl["spec"]["spec"]["devices"]["requests"][0]
    assert req["name"] == "gpu"
    assert req["exactly"]["deviceClassName"] == DRIVER and req["exactly"]["count"] == 1
    assert req["exactly"]["allocationMode"] == "ExactCount"
    assert req["exactly"]["capacity"] == {"requests": {"memory": str(4000 * MIB), "cores": "30"}}
    assert req["exactly"]["selectors"] == [{"cel": {"expression":
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "hami-gpu"'}}]
    ctr = t.pod["spec"]["containers"][0]
    assert ctr["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "cuda-nvidia"}]}
    assert t.pod["spec"]["resourceClaims"] == [{"name": "cuda-nvidia",
                                                "resourceClaimTemplateName": tmpl["metadata"]["name"]}]
    assert t.pod["metadata"]["labels"]["hami.io/dra"] == "true"
    again = translate_pod(_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}),
                          CFG)
    assert again.templates[0]["metadata"]["name"] == tmpl["metadata"]["name"]
    other = translate_pod(_pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4001"}), CFG)
    assert other.templates[0]["metadata"]["name"] != tmpl["metadata"]["name"]


def test_pods_without_gpus_and_whole_card_percentage():
    assert translate_pod(_pod({"cpu": "1"}), CFG) is None
    t = translate_pod(_pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"}), CFG)
    exactly = t.templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["count"] == 2 and "capacity" not in exactly  # the memory policy's default: the whole card


@pytest.mark.parametrize("limits,field", [
    ({"nvidia.com/gpu": "33"}, "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    ({"nvidia.com/gpu": "0"}, "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1e30"}, "spec.containers[0].resources.limits[nvidia.com/gpumem]"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}, "spec.containers[0].resources.limits[nvidia.com/gpucores]"),
    ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
     "spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]"),
])
def test_out_of_bounds_requests_are_refused_naming_the_field(limits, field):
    with pytest.raises(ClaimError) as err:
        translate_pod(_pod(limits), CFG)
    assert err.value.field == field


def _eval(selectors: list[str], dev: dict) -> bool:
    cel = SelectorCompiler()
    act = device_activation(DRIVER, dev, multi=True)
    return all(cel.matches(s, act) for s in selectors)


def test_annotations_select_as_hami_matched_them():
    a100 = gpu_device(0, model="NVIDIA A100-SXM4-40GB", uuid="GPU-aaa")
    t4 = gpu_device(1, model="Tesla T4", uuid="GPU-bbb")
    use_type = annotation_selectors(_pod({}, {"nvidia.com/use-gputype": "a100,H100"}))
    assert _eval(use_type, a100) and not _eval(use_type, t4)
    nouse_type = annotation_selectors(_pod({}, {"nvidia.com/nouse-gputype": "A100"}))
    assert not _eval(nouse_type, a100) and _eval(nouse_type, t4)
    use_uuid = annotation_selectors(_pod({}, {"nvidia.com/use-gpuuuid": "GPU-bbb, GPU-ccc"}))
    assert _eval(use_uuid, t4) and not _eval(use_uuid, a100)
    nouse_uuid = annotation_selectors(_pod({}, {"nvidia.com/nouse-gpuuuid": "GPU-bbb"}))
    assert _eval(nouse_uuid, a100) and not _eval(nouse_uuid, t4)
    with pytest.raises(ClaimError, match=r"metadata.annotations\[nvidia.com/use-gpuuuid\]: no usable value"):
        annotation_selectors(_pod({}, {"nvidia.com/use-gpuuuid": " , "}))
    with pytest.raises(ClaimError, match="at most 64"):
        annotation_selectors(_pod({}, {"nvidia.com/use-gpuuuid": ",".join(f"u{i}" for i in range(65))}))


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_any_annotation_text_is_refused_or_a_safe_selector(text):
    dev = gpu_device(0, uuid='GPU-"x\\')
    for key in ("nvidia.com/use-gpuuuid", "nvidia.com/nouse-gputype"):
        try:
            sels = annotation_selectors(_pod({}, {key: text}))
        except ClaimError as exc:
            assert exc.field == f"metadata.annotations[{key}]"
            continue
        assert isinstance(_eval(sels, dev), bool)


def test_the_admission_review_carries_the_claim_and_its_shape_and_makes_nothing():
    pod = _pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "namespace": "default", "object": pod}}
    out = mutate(review, WebhookSettings(dra=True))
    assert out["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(out["response"]["patch"])))
    # handed to hami's scheduler profile, whose extender ranks claim pods by GPU fill
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    # The pod in the API rebuilds exactly the template it references (hami.dra.templates makes it).
    (made,) = templates_of(patched).values()
    assert patched["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == made["metadata"]["name"]
    assert made == translate_pod(pod, NvidiaConfig()).templates[0]
    bad = {**review, "request": {**review["request"], "object": _pod({"nvidia.com/gpu": "99"})}}
    out = mutate(bad, WebhookSettings(dra=True))
    assert out["response"]["allowed"] is False and out["response"]["status"]["code"] == 400
    assert "nvidia.com/gpu" in out["response"]["status"]["message"]
    priv = _pod({"nvidia.com/gpu": "1"})
    priv["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    out = mutate({**review, "request": {**review["request"], "object": priv}}, WebhookSettings(dra=True))
    assert out["response"]["allowed"] is False and "privileged" in out["response"]["status"]["message"]


def test_a_claim_pod_goes_to_hamis_scheduler_unless_it_names_another_or_a_node():
    """The webhook hands a pod it turns into claims to hami's scheduler profile (the chart's extender
    entry there has no managedResources, so kube-scheduler calls the extender for it); a pod naming
    another scheduler is left as written, a pod with a node already assigned is refused."""
    for named in ("", "default-scheduler", "hami-scheduler"):
        pod = _pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})
        if named:
            pod["spec"]["schedulerName"] = named
        d = mutate_pod(pod, WebhookSettings(dra=True))
        assert d.allowed and d.pod["spec"]["schedulerName"] == "hami-scheduler", named
        assert d.pod["spec"]["resourceClaims"]
    foreign = _pod({"nvidia.com/gpu": "1"})
    foreign["spec"]["schedulerName"] = "volcano"
    d = mutate_pod(foreign, WebhookSettings(dra=True))
    assert d.allowed and (d.pod is None or "resourceClaims" not in d.pod["spec"])
    kept = _pod({"nvidia.com/gpu": "1"})
    kept["spec"]["schedulerName"] = "default-scheduler"
    d = mutate_pod(kept, WebhookSettings(dra=True, force_overwrite_default_scheduler=False))
    assert d.allowed and (d.pod is None or d.pod["spec"]["schedulerName"] == "default-scheduler")
    pinned = _pod({"nvidia.com/gpu": "1"})
    pinned["spec"]["nodeName"] = "n1"
    d = mutate_pod(pinned, WebhookSettings(dra=True))
    assert not d.allowed and d.message == "pod has node assigned"
    plain = _pod({"cpu": "1"})  # no GPU: no claim, its scheduler untouched
    d = mutate_pod(plain, WebhookSettings(dra=True))
    assert d.allowed and "schedulerName" not in (d.pod or plain)["spec"]


def test_a_pod_rebuilds_only_the_templates_its_spec_references_from_its_own_shapes():
    t = translate_pod(_pod({"nvidia.com/gpu": "2", "nvidia.com/gpucores": "30"}), NvidiaConfig())
    pod = t.pod
    assert set(templates_of(pod)) == {t.templates[0]["metadata"]["name"]}
    forged = json.loads(json.dumps(pod))  # a tenant's edit: a bigger shape than the reference's
    forged["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps({"cuda-nvidia": [32, None, 100]})
    assert templates_of(forged) == {}
    other = json.loads(json.dumps(pod))  # a reference to someone else's template is never made
    other["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "their-template"
    assert templates_of(other) == {}
    assert templates_of(_pod({})) == {}


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)).map(
        json.dumps)))
def test_any_claim_shape_text_is_refused_naming_the_annotation_or_bounded(text):
    pod = _pod({})
    pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: text}
    try:
        shapes = claim_shapes(pod)
    except ClaimError as exc:
        assert exc.field.startswith(f"metadata.annotations[{CLAIMS_ANNOTATION}]")
        return
    for count, memory, cores in shapes.values():
        assert 1 <= count <= 32 and (memory is None or 1 <= memory <= 1 << 24) and (cores is None or 0 <= cores <= 100)
