"""--dra: a GPU pod's mode per namespace label and pod annotation (hami.scheduler.admission.gpumode),
and the webhook's use of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hami.scheduler.admission import gpumode
from hami.scheduler.admission.webhook import WebhookSettings, mutate_pod

DP, DRA = gpumode.DEVICE_PLUGIN, gpumode.DRA


def test_the_flag_is_the_default_and_the_namespace_label_overrides_it():
    assert gpumode.choose({}, None, "a", DRA) == (DRA, "the scheduler's default (--dra-default-mode=dra)", "")
    got = gpumode.choose({}, {gpumode.LABEL: DP}, "a", DRA)
    assert got.mode == DP and got.why == "namespace a has the label hami.io/gpu-mode=device-plugin"
    bad = gpumode.choose({}, {gpumode.LABEL: "gpu"}, "a", DP)
    assert bad.mode == DP and "'gpu' is not dra or device-plugin" in bad.why and not bad.refused


def test_a_pod_annotation_wins_only_where_the_namespace_lets_pods_choose():
    ns = {gpumode.LABEL: DRA}
    assert gpumode.choose({gpumode.LABEL: DP}, ns, "a", DRA).refused.startswith(
        "annotation hami.io/gpu-mode=device-plugin: namespace a does not let pods choose")
    same = gpumode.choose({gpumode.LABEL: DRA}, ns, "a", DP)
    assert same.mode == DRA and not same.refused
    free = gpumode.choose({gpumode.LABEL: DP}, {**ns, gpumode.CHOICE_LABEL: "true"}, "a", DRA)
    assert free.mode == DP and not free.refused and "lets pods choose" in free.why
    assert gpumode.choose({gpumode.LABEL: "mig"}, {**ns, gpumode.CHOICE_LABEL: "true"}, "a", DRA).refused == (
        "annotation hami.io/gpu-mode: 'mig' is not dra or device-plugin")


@given(st.dictionaries(st.sampled_from([gpumode.LABEL, "x"]), st.text(max_size=80)),
       st.dictionaries(st.sampled_from([gpumode.LABEL, gpumode.CHOICE_LABEL]), st.text(max_size=80)),
       st.sampled_from(gpumode.MODES))
def test_any_input_gives_a_known_mode_or_a_refusal_and_never_a_mode_the_namespace_forbids(annos, labels, default):
    got = gpumode.choose(annos, labels, "ns", default)
    assert got.mode in gpumode.MODES
    if not got.refused and labels.get(gpumode.CHOICE_LABEL) != "true":
        base = labels.get(gpumode.LABEL) if labels.get(gpumode.LABEL) in gpumode.MODES else default
        assert got.mode == base
    assert len(got.refused) < 600


def _pod(ns: str, annos: dict | None = None, gpu: bool = True) -> dict:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"} if gpu else {"cpu": "1"}
    return {"metadata": {"name": "p", "namespace": ns, "annotations": annos or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_the_webhook_gives_claims_or_hamis_resources_per_mode_and_records_why():
    settings = WebhookSettings(dra=True)
    labels = {"legacy": {gpumode.LABEL: DP}}
    d = mutate_pod(_pod("legacy"), settings, namespace_labels=labels.get)
    assert d.allowed and "resourceClaims" not in d.pod["spec"] and d.pod["spec"]["schedulerName"] == "hami-scheduler"
    assert d.pod["metadata"]["annotations"][gpumode.DECISION_ANNOTATION].startswith("device-plugin: namespace legacy")
    assert d.dra_amounts == (1, 0, 0)  # a device-plugin pod reserves its GPU count beside the claims
    d = mutate_pod(_pod("other"), settings, namespace_labels=labels.get)
    assert d.allowed and d.pod["spec"]["resourceClaims"] and d.dra_amounts == (1, 3000, 0)
    assert d.pod["metadata"]["annotations"][gpumode.DECISION_ANNOTATION].startswith("dra: the scheduler's default")
    d = mutate_pod(_pod("legacy", {gpumode.LABEL: DRA}), settings, namespace_labels=labels.get)
    assert not d.allowed and d.code == 403 and "does not let pods choose" in d.message
    # a pod without GPUs is not judged by its annotation
    d = mutate_pod(_pod("legacy", {gpumode.LABEL: DRA}, gpu=False), settings, namespace_labels=labels.get)
    assert d.allowed
    d = mutate_pod(_pod("x"), WebhookSettings(dra=True, dra_default_mode=DP))
    assert d.allowed and "resourceClaims" not in d.pod["spec"]


def test_only_the_webhook_writes_a_pods_quota_reservation_id():
    from hami.scheduler.admission.webhook import RESERVATION_ANNOTATION, mutate

    def review(op: str, annos: dict, old_annos: dict | None = None) -> dict:
        req = {"uid": "r", "operation": op, "namespace": "t", "userInfo": {"username": "alice"},
               "object": {"metadata": {"name": "p", "namespace": "t", "annotations": annos},
                          "spec": {"containers": [{"name": "c"}]}}}
        if old_annos is not None:
            req["oldObject"] = {"metadata": {"name": "p", "namespace": "t", "annotations": old_annos},
                                "spec": {"containers": [{"name": "c"}]}}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}

    settings = WebhookSettings(dra=True)
    forged = mutate(review("CREATE", {RESERVATION_ANNOTATION: "abc"}), settings)["response"]
    assert not forged["allowed"] and RESERVATION_ANNOTATION in forged["status"]["message"]
    changed = mutate(review("UPDATE", {RESERVATION_ANNOTATION: "x"}, {RESERVATION_ANNOTATION: "y"}), settings)
    assert not changed["response"]["allowed"]
    assert mutate(review("UPDATE", {}, {}), settings)["response"]["allowed"]
    # without --dra the key means nothing and is left alone
    assert mutate(review("CREATE", {RESERVATION_ANNOTATION: "abc"}), WebhookSettings())["response"]["allowed"]
