"""The webhook's tenant-safety rules on AdmissionReviews (hami.scheduler.admission.webhook):
- only hami writes placements: every placement or bind annotation (NVIDIA's and the vendors' keys)
  set by an untrusted principal is refused naming the key, on CREATE and on UPDATE, whatever the
  pod's schedulerName; removing one is allowed; hami's own service accounts and HAMi v2.10's chart
  accounts (a HAMi scheduler replica, a HAMi device plugin) may write them; an UPDATE is never mutated;
- quantities the device annotations cannot carry (int32 counts and cores, memory past 2^31 MiB,
  fractions, negatives, text that is no quantity) are refused naming the resource and the limit,
  never read as "no GPU" -- Hypothesis over quantity strings;
- CUDA_DISABLE_CONTROL in a GPU pod is refused unless the operator allows it;
- the JSON patch is built from what mutation touched: applied to the original it gives exactly the
  mutated pod (Hypothesis over pods), and the original is never modified."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.request import container_request
from hami.principals import DEFAULT_TRUSTED_WRITERS
from hami.scheduler.admission import placementguard
from hami.scheduler.admission.patchbuild import build_patch, mutation_copy
from hami.scheduler.admission.webhook import WebhookSettings, mutate, mutate_pod

S = WebhookSettings(vendors=default_vendor_table())
TENANT = {"username": "alice", "groups": ["system:authenticated"]}
HAMI_SCHEDULER = {"username": "system:serviceaccount:kube-system:hami-scheduler"}
FORGED = {
    codec.BIND_PHASE_ANNOTATION: "allocating", codec.VGPU_NODE_ANNOTATION: "gpu-node-2",
    codec.TO_ALLOCATE_ANNOTATION: "GPU-0,NVIDIA,40960,100:;",
}


def gpu_pod(annotations=None, scheduler="my-scheduler", node="gpu-node-2", **limits):
    spec = {"schedulerName": scheduler, "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", **limits}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "t", "annotations": dict(annotations or {})}, "spec": spec}


def review(obj, user=TENANT, op="CREATE", old=None, sub=None):
    req = {"uid": "u1", "operation": op, "namespace": "t", "object": obj, "userInfo": user}
    if sub:
        req.update(subResource=sub, kind={"group": "", "version": "v1", "kind": "Binding"})
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def answer(obj, **kw):
    return mutate(review(obj, **kw), S)["response"]


def test_forged_placement_from_a_tenant_is_refused_naming_the_key_whatever_the_scheduler():
    for scheduler in ("my-scheduler", "hami-scheduler", "default-scheduler"):
        r = answer(gpu_pod(FORGED, scheduler=scheduler))
        assert r["allowed"] is False
        assert r["status"]["code"] == 403
        assert "hami.io/bind-phase" in r["status"]["message"] and "alice" in r["status"]["message"]


@pytest.mark.parametrize("key", sorted(placementguard.placement_keys(S.vendors)))
def test_every_placement_key_alone_is_refused(key):
    r = answer(gpu_pod({key: "x"}, node=""))
    assert r["allowed"] is False and key in r["status"]["message"]


def test_vendor_keys_are_placement_keys():
    keys = placementguard.placement_keys(S.vendors)
    assert {"hami.io/vgpu-devices-allocated", "hami.io/mutex.lock"} & keys == {"hami.io/vgpu-devices-allocated"}
    assert any(k.startswith("hami.io/") and k.endswith("-devices-allocated") and "vgpu" not in k for k in keys)
    assert "metax-tech.com/gpu-devices-allocated" in keys and "aws.amazon.com/predicate-node" in keys


def test_squatting_pod_without_gpu_request_is_refused_too():
    squat = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s", "namespace": "t", "annotations": {
        codec.VGPU_NODE_ANNOTATION: "gpu-node-3", codec.ALLOCATED_ANNOTATION: "GPU-a,NVIDIA,40960,100:;"}},
        "spec": {"containers": [{"name": "c"}]}}
    r = answer(squat)
    assert r["allowed"] is False and codec.ALLOCATED_ANNOTATION in r["status"]["message"]


@pytest.mark.parametrize("user", [HAMI_SCHEDULER] + [{"username": u} for u in DEFAULT_TRUSTED_WRITERS])
def test_hami_and_hami_v2_10_chart_accounts_may_write_placements(user):
    obj = gpu_pod(FORGED, scheduler="hami-scheduler", node="")
    old = copy.deepcopy(obj)
    old["metadata"]["annotations"] = {}
    r = answer(obj, user=user, op="UPDATE", old=old)
    assert r["allowed"] is True and "patch" not in r


def test_update_setting_changing_or_removing_a_key_is_refused():
    old = gpu_pod(FORGED, scheduler="hami-scheduler")
    changed = copy.deepcopy(old)
    changed["metadata"]["annotations"][codec.BIND_PHASE_ANNOTATION] = "success"
    r = answer(changed, op="UPDATE", old=old)
    assert r["allowed"] is False and codec.BIND_PHASE_ANNOTATION in r["status"]["message"]
    assert "may not change it" in r["status"]["message"]
    removed = copy.deepcopy(old)
    del removed["metadata"]["annotations"][codec.BIND_PHASE_ANNOTATION]
    r = answer(removed, op="UPDATE", old=old)
    assert r["allowed"] is False and codec.BIND_PHASE_ANNOTATION in r["status"]["message"]
    assert "may not remove it" in r["status"]["message"]
    removed["metadata"].pop("annotations")  # every key at once
    r = answer(removed, op="UPDATE", old=old)
    assert r["allowed"] is False and codec.VGPU_NODE_ANNOTATION in r["status"]["message"]
    assert answer(removed, op="UPDATE", old=old, user=HAMI_SCHEDULER)["allowed"] is True  # hami rolls back
    untouched = copy.deepcopy(old)
    untouched["metadata"]["labels"] = {"app": "x"}
    assert answer(untouched, op="UPDATE", old=old)["allowed"] is True


def binding(annotations=None):
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "t", **(
        {"annotations": annotations} if annotations is not None else {})}, "target": {"kind": "Node", "name": "n1"}}


def test_a_binding_carrying_a_placement_key_is_refused_a_plain_one_passes_unchanged():
    r = answer(binding(FORGED), sub="binding")
    assert r["allowed"] is False and r["status"]["code"] == 403
    assert codec.BIND_PHASE_ANNOTATION in r["status"]["message"] and "through a Binding" in r["status"]["message"]
    for plain in (binding(), binding({"note": "x"})):
        r = answer(plain, sub="binding")
        assert r["allowed"] is True and "patch" not in r  # a Binding is judged, never mutated
    r = answer(binding(FORGED), sub="binding", user=HAMI_SCHEDULER)
    assert r["allowed"] is True and "patch" not in r


def test_a_similar_name_in_another_namespace_is_not_trusted():
    r = answer(gpu_pod(FORGED), user={"username": "system:serviceaccount:tenant:hami-scheduler"})
    assert r["allowed"] is False


def test_unauthenticated_review_without_user_info_is_refused():
    r = mutate({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", "object": gpu_pod(FORGED)}}, S)
    assert r["response"]["allowed"] is False
    assert "unauthenticated" in r["response"]["status"]["message"]


def test_trusted_writers_come_from_the_config():
    custom = WebhookSettings(trusted_writers=("system:serviceaccount:gpu:my-hami-scheduler",))
    r = mutate(review(gpu_pod(FORGED), user={"username": "system:serviceaccount:gpu:my-hami-scheduler"}), custom)
    assert r["response"]["allowed"] is True
    r = mutate(review(gpu_pod(FORGED), user=HAMI_SCHEDULER), custom)
    assert r["response"]["allowed"] is False


# --------------------------------------------------------------------------- quantities

MAX_INT32 = 2**31 - 1


@pytest.mark.parametrize(("resource", "value", "problem"), [
    ("nvidia.com/gpumem", "2147483648", "over the limit of 2147483647"),
    ("nvidia.com/gpumem", "99999999999999999999", "over the limit"),
    ("nvidia.com/gpucores", "4294967196", "over the limit of 2147483647"),
    ("nvidia.com/gpumem", "1.5", "not a whole number"),
    ("nvidia.com/gpucores", "500m", "not a whole number"),
    ("nvidia.com/gpumem", "-1", "negative"),
    ("nvidia.com/gpumem", "lots", "not a Kubernetes quantity"),
    ("nvidia.com/gpu", "3000000000", "over the limit"),
])
def test_quantities_beyond_the_codec_are_refused_naming_the_resource_and_limit(resource, value, problem):
    p = gpu_pod(scheduler="hami-scheduler", node="")
    p["spec"]["containers"][0]["resources"]["limits"][resource] = value
    d = mutate_pod(p, S)
    assert d.allowed is False
    assert resource in d.message and problem in d.message and repr(value) in d.message


def _fits(text: str, most: int) -> bool:
    from hami.device.request import parse_quantity

    try:
        v = parse_quantity(text)
    except codec.CodecError:
        return False
    return v.denominator == 1 and 0 <= v <= most


quantity = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.builds(lambda n, s: f"{n}{s}", st.integers(min_value=0, max_value=2**40),
              st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "E", "P"])),
    st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 2**33), st.integers(0, 999)),
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(resource=st.sampled_from(["nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"]), value=quantity)
def test_any_quantity_is_either_refused_or_carried_exactly(resource, value):
    p = gpu_pod(scheduler="hami-scheduler", node="")
    limits = p["spec"]["containers"][0]["resources"]["limits"]
    limits[resource] = value
    if resource == "nvidia.com/gpu":
        limits["nvidia.com/gpumem"] = "1000"
    d = mutate_pod(p, S)
    if not _fits(value, MAX_INT32):
        assert d.allowed is False and resource in d.message and str(MAX_INT32) in d.message
        return
    if not d.allowed:  # within the codec, refused for another reason (never silently "no GPU")
        return
    req = container_request(d.pod["spec"]["containers"][0], S.nvidia)
    count = int(limits["nvidia.com/gpu"]) if resource != "nvidia.com/gpu" else None
    if count == 0 or (resource == "nvidia.com/gpu" and req is None):
        return  # zero devices asked: no GPU, honestly
    assert req is not None, f"{resource}={value!r} admitted but read as no GPU"
    if resource == "nvidia.com/gpumem":
        assert req.memreq >= 0
    if resource == "nvidia.com/gpucores":
        assert req.coresreq >= 0


# --------------------------------------------------------------------------- CUDA_DISABLE_CONTROL

def test_disable_control_in_a_tenant_gpu_pod_is_refused_unless_the_operator_allows_it():
    p = gpu_pod(scheduler="hami-scheduler", node="")
    p["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    d = mutate_pod(p, S)
    assert d.allowed is False and "CUDA_DISABLE_CONTROL" in d.message and "container c" in d.message
    assert mutate_pod(p, WebhookSettings(allow_disable_control=True)).allowed is True
    no_gpu = {"metadata": {"name": "x"}, "spec": {"containers": [
        {"name": "c", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]}]}}
    assert mutate_pod(no_gpu, S).allowed is True


# --------------------------------------------------------------------------- the patch

env_item = st.fixed_dictionaries({"name": st.sampled_from(["A", "B", "NVIDIA_VISIBLE_DEVICES"]),
                                  "value": st.text(max_size=3)})
container = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c"])},
    optional={
        "env": st.lists(env_item, max_size=3),
        "resources": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
            "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "cpu",
                                                      "nvidia.com/gpumem-percentage", "nvidia.com/priority"]),
                                      st.sampled_from(["1", "2", "100", "50"]), max_size=3),
            "requests": st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu"]), st.just("1"), max_size=2)})),
        "command": st.lists(st.text(max_size=4), max_size=3),
    })
pods = st.builds(
    lambda ctrs, init, annos, sched, rc: {"metadata": {"name": "p", "annotations": annos},
                                          "spec": {"containers": ctrs, "initContainers": init,
                                                   **({"schedulerName": sched} if sched else {}),
                                                   **({"runtimeClassName": rc} if rc else {})}},
    st.lists(container, min_size=1, max_size=3), st.lists(container, max_size=2),
    st.dictionaries(st.sampled_from(["a/b", "x~y", "plain"]), st.text(max_size=3), max_size=2),
    st.sampled_from(["", "hami-scheduler", "default-scheduler"]), st.sampled_from(["", "nvidia"]))


@settings(max_examples=200, deadline=None)
@given(pod=pods, overwrite=st.booleans())
def test_built_patch_applied_to_the_original_gives_the_mutated_pod(pod, overwrite):
    from dataclasses import replace

    cfg = WebhookSettings(nvidia=replace(S.nvidia, overwrite_env=overwrite, runtime_class_name="nvidia"))
    before = copy.deepcopy(pod)
    out = mutate(review(pod, user=HAMI_SCHEDULER), cfg)["response"]
    assert pod == before  # the original is never modified
    if not out["allowed"]:
        return
    ops = json.loads(base64.b64decode(out["patch"])) if "patch" in out else []
    expected = mutate_pod(pod, cfg).pod
    assert jsonpatch.apply_patch(before, ops) == expected


def test_mutation_copy_shares_what_mutation_never_writes():
    big = {"metadata": {"name": "p", "annotations": {"k": "v" * 1000}},
           "spec": {"volumes": [{"name": "v"}], "containers": [{"name": "c", "command": ["x"] * 1000}]}}
    cp = mutation_copy(big)
    assert cp["spec"]["volumes"] is big["spec"]["volumes"]
    assert cp["spec"]["containers"][0]["command"] is big["spec"]["containers"][0]["command"]
    assert cp["spec"]["containers"][0] is not big["spec"]["containers"][0]
    cp["spec"]["containers"][0].setdefault("env", []).append({"name": "X", "value": "1"})
    assert build_patch(big, cp) == [{"op": "add", "path": "/spec/containers/0/env",
                                     "value": [{"name": "X", "value": "1"}]}]
    assert "env" not in big["spec"]["containers"][0]


def test_node_config_allow_disable_control_is_the_operators_opt_in():
    from hami.config import parse_node_configs
    from hami.device.model import NvidiaConfig
    from hami.device.nodeconfig import settings_for_node

    entries = parse_node_configs({"nodeconfig": [{"name": "lab-*", "allowDisableControl": True}]}, "config.json",
                                 lambda _msg: None)
    assert settings_for_node(NvidiaConfig(), entries, "lab-1").allow_disable_control is True
    assert settings_for_node(NvidiaConfig(), entries, "prod-1").allow_disable_control is False
