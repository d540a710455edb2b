"""The chart's placement controls, rendered with Helm's engine:
- a ValidatingAdmissionPolicy + Binding (own template) denies pod CREATE/UPDATE (pods/status too) that
  sets, changes or removes a placement key, and a Binding (pods/binding) carrying one, unless the
  author is this release's scheduler or device-plugin account; its key list
  (files/placement-keys.json) is exactly what the webhook guards (placementguard with the shipped
  vendor table); its CEL, evaluated with cel-python on AdmissionRequests, denies a tenant's forged
  pod, changed or removed key and annotated Binding, allows unrelated edits, a plain Binding and
  hami's own accounts (matchConditions);
- the webhook sees UPDATE and pods/binding too and no longer honours a pod's own `hami.io/webhook:
  ignore` label; its matchConditions send it only a Binding with annotations from someone not hami;
- networkPolicy.webhookFrom narrows who may reach the webhook port (empty: any source);
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
    return [a for c in dep["spec"]["template"]["spec"]["containers"] for a in (c.get("command") or []) + (c.get("args")
                                                                                                          or [])]


def _evaluate(expression: str, activation: dict):
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate({k: json_to_cel(v) for k, v in activation.items()})


def _admit(policy: dict, user: str, obj: dict, old: dict | None, sub: str = "") -> tuple[bool, str]:
    """(allowed, message) as the API server evaluates the policy for one request."""
    spec = policy["spec"]
    request = {"userInfo": {"username": user}, "operation": "UPDATE" if old is not None else "CREATE",
               "subResource": sub}
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
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert set(rule["resources"]) == {"pods", "pods/status", "pods/binding"}
    forged = pod({"hami.io/bind-phase": "allocating", "hami.io/vgpu-node": "gpu-node-2"})
    ok, msg = _admit(policy, "alice", forged, None)
    assert not ok and "hami.io/bind-phase" in msg and "alice" in msg
    assert _admit(policy, SCHED_SA, forged, None)[0] and _admit(policy, NODE_SA, forged, None)[0]
    assert _admit(policy, "alice", pod({"app": "x"}), None)[0]
    changed = pod({"hami.io/bind-phase": "success", "hami.io/vgpu-node": "gpu-node-2"})
    assert not _admit(policy, "alice", changed, forged)[0]
    ok, msg = _admit(policy, "alice", pod({"hami.io/vgpu-node": "gpu-node-2"}), forged)  # a removal
    assert not ok and "hami.io/bind-phase" in msg and "remove" in msg
    assert not _admit(policy, "alice", pod(), forged)[0]  # every key stripped at once
    assert not _admit(policy, "alice", pod(), forged, sub="status")[0]  # through pods/status
    assert _admit(policy, SCHED_SA, pod(), forged)[0]  # hami rolls a placement back
    assert _admit(policy, "alice", pod({**forged["metadata"]["annotations"], "note": "x"}), forged)[0]
    assert not _admit(policy, "alice", pod({"metax-tech.com/gpu-devices-allocated": "x"}), None)[0]


def binding(annotations=None):
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {
        "name": "p", "namespace": "t", **({"annotations": annotations} if annotations else {})},
        "target": {"kind": "Node", "name": "n1"}}


def test_placement_policy_refuses_a_binding_that_carries_a_placement():
    (policy,) = [p for p in _find(objects(), "ValidatingAdmissionPolicy") if p["metadata"]["name"] == POLICY]
    ok, msg = _admit(policy, "alice", binding({"hami.io/vgpu-node": "n1", "note": "x"}), None, sub="binding")
    assert not ok and "hami.io/vgpu-node" in msg and "alice" in msg
    assert _admit(policy, "alice", binding(), None, sub="binding")[0]
    assert _admit(policy, "alice", binding({"note": "x"}), None, sub="binding")[0]
    assert _admit(policy, SCHED_SA, binding({"hami.io/vgpu-node": "n1"}), None, sub="binding")[0]


def test_the_policy_guards_exactly_the_webhooks_keys():
    keys = json.loads((CHART / "files" / "placement-keys.json").read_text())
    assert keys == sorted(placement_keys(default_vendor_table())), (
        "the vendor table changed: rewrite deploy/helm/hami/files/placement-keys.json as "
        "json.dumps(sorted(placement_keys(default_vendor_table())), indent=1)")


def test_webhook_sees_updates_and_ignores_a_pods_own_opt_out_label():
    objs = objects()
    (hook,) = _find(objs, "MutatingWebhookConfiguration")[0]["webhooks"]
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"] and hook["rules"][0]["resources"] == ["pods"]
    assert hook["rules"][1]["operations"] == ["CREATE"] and hook["rules"][1]["resources"] == ["pods/binding"]
    exprs = (hook.get("objectSelector") or {}).get("matchExpressions") or []
    assert not any(e.get("key") == "hami.io/webhook" for e in exprs)
    ns_exprs = hook["namespaceSelector"]["matchExpressions"]
    assert any(e["key"] == "hami.io/webhook" for e in ns_exprs)  # the operator's namespace opt-out stays
    conds = hook["matchConditions"]  # hami's own UPDATEs and Bindings skip the round trip; every CREATE is mutated

    def called(op, user, sub="", obj=None):
        act = {"request": {"operation": op, "subResource": sub, "userInfo": {"username": user}},
               "object": obj or pod()}
        return all(bool(_evaluate(c["expression"], act)) for c in conds)

    assert called("CREATE", SCHED_SA) and called("UPDATE", "alice") and not called("UPDATE", SCHED_SA)
    assert called("CREATE", "alice", "binding", binding({"note": "x"}))
    assert not called("CREATE", "alice", "binding", binding())  # a plain Binding: nodeName only
    assert not called("CREATE", SCHED_SA, "binding", binding({"hami.io/vgpu-node": "n1"}))


def test_network_policy_narrows_the_webhook_port_to_webhook_from():
    def webhook_rule(values=None):
        (pol,) = [p for p in _find(objects(values), "NetworkPolicy") if p["metadata"]["name"] == "hami-scheduler"]
        return pol["spec"]["ingress"][0]

    assert "from" not in webhook_rule()  # default: any source (the API server is not a pod)
    peers = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert webhook_rule({"networkPolicy": {"webhookFrom": peers}})["from"] == peers


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
