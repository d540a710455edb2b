"""The chart's placement controls (issue 27 §1, §6), rendered with Helm's engine:
- a ValidatingAdmissionPolicy + Binding (own template) denies pod CREATE/UPDATE that sets a placement
  key unless the author is this release's scheduler or device-plugin account; its key list
  (files/placement-keys.json) is exactly what the webhook guards (placementguard with the shipped
  vendor table); its CEL, evaluated with cel-python on AdmissionRequests, denies a tenant's forged
  pod and changed key, allows removal, unrelated edits and hami's own accounts (matchConditions);
- the webhook sees UPDATE too and no longer honours a pod's own `hami.io/webhook: ignore` label;
- the scheduler gets --trusted-placement-writers with the release's accounts (plus the extra ones a
  value names), and GPU UUIDs on /metrics only with scheduler.metricsDeviceUUIDs."""

from __future__ import annotations

import json

import celpy
from celpy import json_to_cel

from hami.config import default_vendor_table
from hami.scheduler.admission.placementguard import placement_keys
from tests.deploy.chart import CHART, NAMESPACE, objects

SCHED_SA = f"system:serviceaccount:{NAMESPACE}:hami-scheduler"
NODE_SA = f"system:serviceaccount:{NAMESPACE}:hami-device-plugin"
POLICY = "hami-scheduler-placement-writers"


def _find(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def _scheduler_args(objs):
    (dep,) = [o for o in _find(objs, "Deployment") if o["metadata"]["name"].endswith("scheduler")]
    return [a for c in dep["spec"]["template"]["spec"]["containers"] for a in (c.get("command") or []) + (c.get("args") or [])]


def _evaluate(expression: str, activation: dict):
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate({k: json_to_cel(v) for k, v in activation.items()})


def _admit(policy: dict, user: str, obj: dict, old: dict | None) -> tuple[bool, str]:
    """(allowed, message) as the API server evaluates the policy for one request."""
    spec = policy["spec"]
    request = {"userInfo": {"username": user}, "operation": "UPDATE" if old is not None else "CREATE"}
    for cond in spec["matchConditions"]:
        if not _evaluate(cond["expression"], {"request": request}):
            return True, ""  # not matched: the policy does not apply
    act = {"object": obj, "oldObject": old, "request": request}
    variables: dict = {}
    for var in spec["variables"]:
        variables[var["name"]] = _evaluate(var["expression"], {**act, "variables": variables})
    for v in spec["validations"]:
        if not _evaluate(v["expression"], {**act, "variables": variables}):
            return False, str(_evaluate(v["messageExpression"], {**act, "variables": variables}))
    return True, ""


def pod(annotations=None):
    return {"metadata": {"name": "p", "namespace": "t", **({"annotations": annotations} if annotations else {})},
            "spec": {"containers": [{"name": "c"}]}}


def test_placement_policy_denies_tenants_and_lets_hami_write():
    objs = objects()
    (policy,) = [p for p in _find(objs, "ValidatingAdmissionPolicy") if p["metadata"]["name"] == POLICY]
    (binding,) = [b for b in _find(objs, "ValidatingAdmissionPolicyBinding") if b["metadata"]["name"] == POLICY]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    forged = pod({"hami.io/bind-phase": "allocating", "hami.io/vgpu-node": "gpu-node-2"})
    ok, msg = _admit(policy, "alice", forged, None)
    assert not ok and "hami.io/bind-phase" in msg and "alice" in msg
    assert _admit(policy, SCHED_SA, forged, None)[0] and _admit(policy, NODE_SA, forged, None)[0]
    assert _admit(policy, "alice", pod({"app": "x"}), None)[0]
    changed = pod({"hami.io/bind-phase": "success", "hami.io/vgpu-node": "gpu-node-2"})
    assert not _admit(policy, "alice", changed, forged)[0]
    assert _admit(policy, "alice", pod({"hami.io/vgpu-node": "gpu-node-2"}), forged)[0]  # a removal
    assert _admit(policy, "alice", pod({**forged["metadata"]["annotations"], "note": "x"}), forged)[0]
    assert not _admit(policy, "alice", pod({"metax-tech.com/gpu-devices-allocated": "x"}), None)[0]


def test_the_policy_guards_exactly_the_webhooks_keys():
    keys = json.loads((CHART / "files" / "placement-keys.json").read_text())
    assert keys == sorted(placement_keys(default_vendor_table())), (
        "the vendor table changed: rewrite deploy/helm/hami/files/placement-keys.json as "
        "json.dumps(sorted(placement_keys(default_vendor_table())), indent=1)")


def test_webhook_sees_updates_and_ignores_a_pods_own_opt_out_label():
    objs = objects()
    (hook,) = _find(objs, "MutatingWebhookConfiguration")[0]["webhooks"]
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    exprs = (hook.get("objectSelector") or {}).get("matchExpressions") or []
    assert not any(e.get("key") == "hami.io/webhook" for e in exprs)
    ns_exprs = hook["namespaceSelector"]["matchExpressions"]
    assert any(e["key"] == "hami.io/webhook" for e in ns_exprs)  # the operator's namespace opt-out stays
    (cond,) = hook["matchConditions"]  # hami's own UPDATEs skip the round trip; every CREATE is mutated

    def called(op, user):
        return bool(_evaluate(cond["expression"], {"request": {"operation": op, "userInfo": {"username": user}}}))

    assert called("CREATE", SCHED_SA) and called("UPDATE", "alice") and not called("UPDATE", SCHED_SA)


def test_scheduler_flags_name_the_release_accounts_and_uuids_are_opt_in():
    args = _scheduler_args(objects())
    (writers,) = [a.split("=", 1)[1] for a in args if a.startswith("--trusted-placement-writers=")]
    assert writers.split(",") == [SCHED_SA, NODE_SA]
    assert not any(a.startswith("--metrics-device-uuids") for a in args)
    extra = "system:serviceaccount:kube-system:hami-scheduler"
    args = _scheduler_args(objects({"scheduler": {"metricsDeviceUUIDs": True,
                                                  "admissionWebhook": {"trustedPlacementWriters": [extra]}}}))
    assert "--metrics-device-uuids=true" in args
    assert f"--trusted-placement-writers={SCHED_SA},{NODE_SA},{extra}" in args
    assert not [p for p in _find(objects({"scheduler": {"admissionWebhook": {"placementPolicy": False}}}),
                                 "ValidatingAdmissionPolicy") if p["metadata"]["name"] == POLICY]
