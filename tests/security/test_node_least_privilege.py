"""Least privilege on the node, on the rendered chart (default, prod and dev values):
- the monitor runs in its own DaemonSet under its own ServiceAccount, bound only to a read-only
  ClusterRole (pods list/watch); the node agent's account is not the monitor's;
- the monitor has no SYS_ADMIN (all capabilities dropped but DAC_OVERRIDE), no privilege escalation,
  a read-only root filesystem and the RuntimeDefault seccomp profile; the node agent is not
  privileged, drops every capability, has a read-only root filesystem and RuntimeDefault seccomp,
  and does not share the host's PID namespace;
- no pod mounts the host's /tmp: only /tmp/vgpulock (agent) and /tmp/hami (agent, monitor); the agent
  keeps /tmp/vgpulock at 1777 (tenants' uids create locks, none removes another's);
- a NetworkPolicy selects every pod the chart runs and admits exactly the ports its containers serve;
- the monitor's Service is ClusterIP by default;
- the ValidatingAdmissionPolicy that keeps the node agent's writes to its own node and `hami.io/` keys,
  evaluated with cel-python (the embedded API server does not run admission policies) on updates
  the agent makes (allowed) and on every kind it must not (refused with the policy's message)."""

from __future__ import annotations

import copy
import os
import stat
from types import SimpleNamespace

import celpy
import pytest
from celpy import celtypes

from tests.deploy.chart import find, objects, one, rendered

WHICH = ["default", "prod", "dev"]
NS = "hami-system"
AGENT_SA = f"system:serviceaccount:{NS}:hami-device-plugin"


def pod_specs(docs):
    for kind in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        for d in find(docs, kind):
            yield d, d["spec"]["template"]


def containers(docs, name: str) -> dict:
    ds = one(docs, "DaemonSet", name)
    return {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}


@pytest.mark.parametrize("which", WHICH)
def test_monitor_has_its_own_read_only_service_account(which):
    docs = rendered(which)
    monitor = one(docs, "DaemonSet", "hami-device-plugin-monitor")["spec"]["template"]["spec"]
    agent = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    assert monitor["serviceAccountName"] == "hami-device-plugin-monitor" != agent["serviceAccountName"]
    bound = [b for b in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding")
             if any(s["name"] == "hami-device-plugin-monitor" for s in b["subjects"])]
    assert [b["roleRef"]["name"] for b in bound] == ["hami-device-plugin-monitor"]
    role = one(docs, "ClusterRole", "hami-device-plugin-monitor")
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in role["rules"])


@pytest.mark.parametrize("which", WHICH)
def test_monitor_and_agent_run_with_the_least_they_need(which):
    docs = rendered(which)
    monitor = containers(docs, "hami-device-plugin-monitor")["vgpu-monitor"]["securityContext"]
    agent = containers(docs, "hami-device-plugin")["device-plugin"]["securityContext"]
    assert monitor["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}
    assert agent["capabilities"] == {"drop": ["ALL"]} and agent["privileged"] is False
    for sc in (monitor, agent):
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]["hostPID"] is False


@pytest.mark.parametrize("which", WHICH)
def test_no_pod_mounts_the_hosts_tmp(which):
    docs = rendered(which)
    paths = {v["hostPath"]["path"] for _, t in pod_specs(docs) for v in t["spec"].get("volumes") or []
             if "hostPath" in v}
    tmp = {p for p in paths if p == "/tmp" or p.startswith("/tmp/")}
    assert tmp == {"/tmp/vgpulock", "/tmp/hami"}


def test_the_agent_keeps_the_lock_dir_sticky(tmp_path):
    from hami.agent.deviceplugin import VGPU_LOCK_DIR_MODE, PodAllocator

    lock, cache = tmp_path / "vgpulock", tmp_path / "c1"
    PodAllocator.prepare_dirs(SimpleNamespace(vgpu_lock_dir=str(lock)), [SimpleNamespace(cache_dir=str(cache))])
    assert VGPU_LOCK_DIR_MODE == 0o1777
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o1777


@pytest.mark.parametrize("which", [*WHICH, "ui+dra"])
def test_a_network_policy_admits_only_the_ports_each_pod_serves(which):
    docs = objects({"ui": {"enabled": True}, "dra": {"enabled": True}}) if which == "ui+dra" else rendered(which)
    policies = find(docs, "NetworkPolicy")
    for workload, template in pod_specs(docs):
        if workload["kind"] == "Job":
            continue  # certgen hook Jobs serve nothing
        labels = template["metadata"]["labels"]
        selecting = [p for p in policies
                     if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
        assert len(selecting) == 1, workload["metadata"]["name"]
        policy = selecting[0]["spec"]
        assert policy["policyTypes"] == ["Ingress"]
        admitted = {port["port"] for rule in policy.get("ingress") or [] for port in rule["ports"]}
        served = {p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports") or []}
        assert admitted == served, workload["metadata"]["name"]


def test_monitor_service_is_cluster_ip_and_network_policies_can_be_narrowed():
    assert one(rendered("default"), "Service", "hami-device-plugin-monitor")["spec"]["type"] == "ClusterIP"
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    docs = objects({"networkPolicy": {"metricsFrom": [peer]}})
    monitor = one(docs, "NetworkPolicy", "hami-device-plugin-monitor")["spec"]["ingress"]
    assert monitor == [{"ports": [{"port": 9394, "protocol": "TCP"}], "from": [peer]}]
    assert not find(objects({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


# ---------------------------------------------------------------- the node agent's admission policy

class Policy:
    """The rendered ValidatingAdmissionPolicy, evaluated as kube-apiserver does (matchConditions, then
    variables in order, then each validation; a false one denies with its message)."""

    def __init__(self, doc: dict):
        self.env = celpy.Environment()
        self.spec = doc["spec"]

    def _eval(self, expr: str, act: dict):
        return self.env.program(self.env.compile(expr)).evaluate(act)

    def __call__(self, request: dict, obj: dict, old: dict) -> str | None:
        """None when allowed (or not matched), else the denial message."""
        act = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj),
               "oldObject": celpy.json_to_cel(old)}
        rules = self.spec["matchConstraints"]["resourceRules"]
        # "nodes" matches the Node itself, "nodes/status" its status subresource (as the API server matches)
        target = request["resource"]["resource"] + ("/" + request["subResource"] if request.get("subResource") else "")
        if not any(request["operation"] in r["operations"] and target in r["resources"] for r in rules):
            return None
        if not all(bool(self._eval(m["expression"], act)) for m in self.spec["matchConditions"]):
            return None
        variables: dict = {}
        for v in self.spec["variables"]:
            act["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(v["name"])] = self._eval(v["expression"], act)
        act["variables"] = celtypes.MapType(variables)
        for rule in self.spec["validations"]:
            if not bool(self._eval(rule["expression"], act)):
                if "messageExpression" in rule:
                    return str(self._eval(rule["messageExpression"], act))
                return rule["message"]
        return None


@pytest.fixture(scope="module")
def policy() -> Policy:
    docs = rendered("default")
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "hami-device-plugin-node-agent-writes")
    assert binding["spec"]["validationActions"] == ["Deny"]
    doc = one(docs, "ValidatingAdmissionPolicy", binding["spec"]["policyName"])
    assert doc["spec"]["failurePolicy"] == "Fail"
    return Policy(doc)


def user(name: str = AGENT_SA, node: str | None = "gpu-1") -> dict:
    extra = {"authentication.kubernetes.io/node-name": [node]} if node else {}
    return {"username": name, "groups": ["system:serviceaccounts"], "extra": extra}


def req(resource: str, who: dict | None = None) -> dict:
    return {"operation": "UPDATE", "resource": {"group": "", "version": "v1", "resource": resource},
            "userInfo": who or user()}


NODE = {"metadata": {"name": "gpu-1", "labels": {"gpu": "on"}, "annotations": {"hami.io/node-handshake": "x",
                                                                            "team": "ml"}},
        "spec": {"podCIDR": "10.0.0.0/24"}}
POD = {"metadata": {"name": "p", "namespace": "t", "annotations": {"hami.io/bind-phase": "allocating"},
                    "labels": {"app": "a"}},
       "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]}}


def changed(obj: dict, **edits) -> dict:
    out = copy.deepcopy(obj)
    for path, value in edits.items():
        *parents, last = path.split("__")
        target = out
        for p in parents:
            target = target.setdefault(p, {})
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return out


def with_annotation(obj: dict, key: str, value: str | None) -> dict:
    out = copy.deepcopy(obj)
    annos = out["metadata"].setdefault("annotations", {})
    if value is None:
        annos.pop(key, None)
    else:
        annos[key] = value
    return out


def with_label(obj: dict, key: str, value: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("labels", {})[key] = value
    return out


def test_agent_writes_to_its_own_node_and_pods_hami_keys_are_allowed(policy):
    assert policy(req("nodes"), with_annotation(NODE, "hami.io/node-nvidia-register", "[]"), NODE) is None
    assert policy(req("nodes"), with_annotation(NODE, "hami.io/mutex.lock", None), NODE) is None
    assert policy(req("nodes"), with_label(NODE, "hami.io/gpu-mode", "device-plugin"), NODE) is None
    assert policy(req("pods"), with_annotation(POD, "hami.io/bind-phase", "success"), POD) is None


@pytest.mark.parametrize("case,resource,new,old,message", [
    ("another node", "nodes", with_annotation(changed(NODE, metadata__name="gpu-2"), "hami.io/x", "1"),
     changed(NODE, metadata__name="gpu-2"), "may write only its own Node and the pods bound to it, not nodes on gpu-2"),
    ("a pod on another node", "pods", with_annotation(changed(POD, spec__nodeName="gpu-2"), "hami.io/x", "1"),
     changed(POD, spec__nodeName="gpu-2"), "not pods on gpu-2"),
    ("an unbound pod", "pods", with_annotation(changed(POD, spec__nodeName=None), "hami.io/x", "1"),
     changed(POD, spec__nodeName=None), "not pods on "),
    ("a foreign annotation", "nodes", with_annotation(NODE, "team", "other"), NODE, "only hami.io/ annotations"),
    ("a removed foreign annotation", "nodes", with_annotation(NODE, "team", None), NODE, "only hami.io/ annotations"),
    ("a foreign label", "nodes", with_label(NODE, "gpu", "off"), NODE, "only hami.io/ labels"),
    ("a pod label", "pods", with_label(POD, "app", "b"), POD, "only hami.io/ labels"),
    ("a node spec", "nodes", changed(NODE, spec__unschedulable=True), NODE, "may not change a spec"),
    ("a pod spec", "pods", changed(POD, spec__containers=[{"name": "c", "image": "evil"}]), POD,
     "may not change a spec"),
])
def test_agent_writes_beyond_its_node_and_keys_are_refused(policy, case, resource, new, old, message):
    got = policy(req(resource), new, old)
    assert got is not None and message in got, (case, got)


def test_status_writes_are_limited_to_the_agents_own_node(policy):
    """--report-node-capacity patches nodes/status: the same own-node rule holds there."""
    status = {**req("nodes"), "subResource": "status"}
    reported = changed(NODE, status__capacity={"nvidia.com/gpumem": "81920"})
    assert policy(status, reported, NODE) is None
    other = changed(NODE, metadata__name="gpu-2")
    got = policy(status, changed(other, status__capacity={"nvidia.com/gpumem": "1"}), other)
    assert got is not None and "not nodes on gpu-2" in got


def test_status_writes_change_only_the_reported_capacity(policy):
    """Through nodes/status the agent may add, change or remove nvidia.com/gpumem and gpucores in
    capacity and allocatable, and nothing else there."""
    status = {**req("nodes"), "subResource": "status"}
    old = changed(NODE, status__capacity={"cpu": "64", "nvidia.com/gpu": "20"},
                  status__allocatable={"cpu": "64", "nvidia.com/gpu": "20"})
    ours = changed(old, status__capacity={"cpu": "64", "nvidia.com/gpu": "20", "nvidia.com/gpumem": "81920",
                                          "nvidia.com/gpucores": "200"},
                   status__allocatable={"cpu": "64", "nvidia.com/gpu": "20", "nvidia.com/gpumem": "81920"})
    assert policy(status, ours, old) is None
    assert policy(status, old, ours) is None  # removing them again
    for bad in (changed(ours, status__capacity={"cpu": "640", "nvidia.com/gpu": "20", "nvidia.com/gpumem": "81920"}),
                changed(ours, status__allocatable={"nvidia.com/gpumem": "81920"}),
                changed(old, status__capacity={"cpu": "64", "nvidia.com/gpu": "20", "example.com/fpga": "1"})):
        got = policy(status, bad, old if bad["status"]["capacity"].get("nvidia.com/gpumem") is None else ours)
        assert got == ("the node agent may change only nvidia.com/gpumem and nvidia.com/gpucores in its Node's "
                       "capacity and allocatable"), got
    # a write of the Node itself is not a status write: the status rule does not apply to it
    assert policy(req("nodes"), with_annotation(old, "hami.io/x", "1"), old) is None


def test_a_token_without_a_node_is_refused_and_other_users_are_not_matched(policy):
    new = with_annotation(NODE, "hami.io/x", "1")
    assert "names no node" in policy(req("nodes", user(node=None)), new, NODE)
    assert policy(req("nodes", user(name="system:serviceaccount:kube-system:other")),
                  with_annotation(NODE, "team", "x"), NODE) is None  # not the agent: RBAC's business
    assert policy({**req("nodes"), "operation": "CREATE"}, new, NODE) is None


def test_policy_is_off_below_kubernetes_1_30_or_when_disabled():
    assert not find(objects({"devicePlugin": {"nodePolicy": {"enabled": False}}}), "ValidatingAdmissionPolicy",
                    "hami-device-plugin-node-agent-writes")
