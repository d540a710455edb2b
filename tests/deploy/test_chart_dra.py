"""The chart's DRA mode: `dra.enabled` installs HAMi's DeviceClass, the DaemonSet running
`hami --role dra`, its RBAC, and turns the webhook's --dra mode on.

Covers: the default render has no DRA object and no --dra; with dra.enabled the DeviceClass carries
HAMi-DRA's selector (and compiles in hami's CEL environment), the DaemonSet runs `--role dra` on the
nodes marked hami.io/gpu-mode=dra with kubelet's plugin and registration dirs and the CDI root mounted
and its args pass `hami --check-config`; the plugin's ClusterRole grants only its calls (node get/patch,
slices get/create/update, claims get), the webhook's only the creation of claim templates, bound to the
scheduler's ServiceAccount; the scheduler gets --dra; the vGPU monitor then also runs on the DRA nodes
(node affinity ORing both selectors, both modes' tolerations) and mounts <hook>/vgpu/claims, which the
default render neither mounts nor selects; with dra.enabled alone (devicePlugin.enabled=false) the
monitor, its Service, RBAC (resourceclaims list/watch) and NetworkPolicy stay, on the DRA nodes only.
"""

from __future__ import annotations

import subprocess
import sys

import yaml

from hami.config.build import build_config
from hami.config.vendortable import default_vendor_table
from hami.dra.claims import class_selector
from hami.kubesched import schedconfig
from hami.kubesched.cel import SelectorCompiler
from hami.sim.cluster import kube_scheduler_configuration

from .chart import find, objects, one, rendered

DRA = "hami-dra"


def _dra_objects(docs):
    return [d for d in docs if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == DRA]


def _scheduler_args(docs):
    dep = one(docs, "Deployment", "hami-scheduler")
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "hami-scheduler")["command"]


def _check_config(command: list[str], docs, tmp_path) -> subprocess.CompletedProcess:
    """`hami ... --check-config` with the rendered args, the two mounted config files written out from the
    ConfigMaps the chart renders (their in-container paths pointed at those copies)."""
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    pod = one([d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("-dra")],
              "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    device = tmp_path / "device-config.yaml"
    device.write_text(maps[volumes["device-config"]["configMap"]["name"]]["data"]["device-config.yaml"])
    node = tmp_path / "config.json"
    node.write_text(maps[volumes["node-config"]["configMap"]["name"]]["data"]["config.json"])
    args = [a.replace("=/device-config.yaml", f"={device}").replace("=/config/config.json", f"={node}")
            for a in command[1:]]
    return subprocess.run([sys.executable, "-m", "hami.cli.main", *args, "--node-name", "n1", "--check-config"],
                          capture_output=True, text=True, timeout=60)


def test_no_dra_unless_enabled():
    docs = rendered("default")
    assert _dra_objects(docs) == [] and "--dra" not in _scheduler_args(docs)


def test_dra_enabled_installs_class_plugin_rbac_and_webhook_mode(tmp_path):
    docs = objects({"dra": {"enabled": True}})
    dra = _dra_objects(docs)
    assert sorted(d["kind"] for d in dra) == ["ClusterRole", "ClusterRole", "ClusterRoleBinding",
                                              "ClusterRoleBinding", "DaemonSet", "DeviceClass", "NetworkPolicy",
                                              "ServiceAccount"]
    cls = one(dra, "DeviceClass")
    expr = cls["spec"]["selectors"][0]["cel"]["expression"]
    assert " ".join(expr.split()) == class_selector()
    SelectorCompiler().check(expr)
    pod = one(dra, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"hami.io/gpu-mode": "dra"}
    args = pod["containers"][0]["command"]
    assert args[:3] == ["hami", "--role", "dra"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins/hami-core-gpu.project-hami.io", "/var/lib/kubelet/plugins_registry",
            "/var/run/cdi"} <= mounts
    res = _check_config(args, docs, tmp_path)
    assert res.returncode == 0, res.stderr
    rules = {d["metadata"]["labels"]["hami.io/rbac-role"]: {(r["apiGroups"][0], res_, v) for r in d["rules"]
                                                            for res_ in r["resources"] for v in r["verbs"]}
             for d in find(dra, "ClusterRole")}
    assert rules["dra-plugin"] == {("", "nodes", "get"), ("", "nodes", "patch"),
                                   ("resource.k8s.io", "resourceslices", "list"),
                                   ("resource.k8s.io", "resourceslices", "create"),
                                   ("resource.k8s.io", "resourceslices", "update"),
                                   ("resource.k8s.io", "resourceslices", "delete"),
                                   ("resource.k8s.io", "resourceclaims", "get")}
    assert rules["dra-webhook"] == {("resource.k8s.io", "resourceclaimtemplates", "create")}
    binding = one(dra, "ClusterRoleBinding", "hami-dra-webhook")
    assert binding["subjects"][0]["name"] == "hami-scheduler"
    assert "--dra" in _scheduler_args(docs)


def _monitor(docs):
    return one(docs, "DaemonSet", "hami-device-plugin-monitor")["spec"]["template"]["spec"]


def test_monitor_reaches_dra_nodes_and_their_claim_dirs_only_in_dra_mode():
    plain = _monitor(rendered("default"))
    assert plain["nodeSelector"] == {"gpu": "on"} and "affinity" not in plain
    assert not any(v["name"] == "claims" for v in plain["volumes"])

    pod = _monitor(objects({"dra": {"enabled": True, "tolerations": [{"key": "dra", "operator": "Exists"}]}}))
    assert "nodeSelector" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["on"]}]},
                     {"matchExpressions": [{"key": "hami.io/gpu-mode", "operator": "In", "values": ["dra"]}]}]
    assert {"key": "dra", "operator": "Exists"} in pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == "claims"]
    assert vol["hostPath"]["path"] == "/usr/local/vgpu/claims"
    (ctr,) = pod["containers"]
    assert {"name": "claims", "mountPath": "/usr/local/vgpu/claims"} in ctr["volumeMounts"]


def test_dra_only_install_keeps_the_monitor_on_the_dra_nodes():
    docs = objects({"dra": {"enabled": True}, "devicePlugin": {"enabled": False}, "networkPolicy": {"enabled": True}})
    assert find(docs, "DaemonSet", "hami-device-plugin") == []  # the device plugin is off
    pod = _monitor(docs)
    assert pod["nodeSelector"] == {"hami.io/gpu-mode": "dra"} and "affinity" not in pod
    assert any(v["name"] == "claims" for v in pod["volumes"])
    one(docs, "Service", "hami-device-plugin-monitor")
    one(docs, "NetworkPolicy", "hami-device-plugin-monitor")
    role = one(docs, "ClusterRole", "hami-device-plugin-monitor")
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list", "watch"]} \
        in role["rules"]
    assert find(docs, "ClusterRole", "hami-device-plugin-node-agent") == []


def _plugin(values=None):
    docs = objects({"dra": {"enabled": True, **(values or {})}})
    return one(_dra_objects(docs), "DaemonSet")["spec"]["template"]["spec"]


def test_the_dra_plugin_mounts_the_agents_host_paths_and_creates_the_lock_dir():
    """Issue 39 §9: /tmp/vgpulock (DirectoryOrCreate) as the node agent mounts it, /tmp a memory emptyDir,
    never the host's /tmp."""
    pod = _plugin()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/tmp/vgpulock"]]["hostPath"] == {"path": "/tmp/vgpulock", "type": "DirectoryOrCreate"}
    assert volumes[mounts["/tmp"]]["emptyDir"]["medium"] == "Memory"
    host_tmp = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v
                and (v["hostPath"]["path"] == "/tmp" or v["hostPath"]["path"].startswith("/tmp/"))}
    assert host_tmp == {"/tmp/vgpulock"}


def test_the_dra_plugin_is_privileged_only_for_mig_partitions(tmp_path):
    ctr = _plugin()["containers"][0]
    sc = ctr["securityContext"]
    assert sc["privileged"] is True and sc["readOnlyRootFilesystem"] is True  # MIG instances at prepare
    assert "--dra-mig-partitions=false" not in ctr["command"]
    ctr = _plugin({"migPartitions": False})["containers"][0]
    sc = ctr["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"} and sc["runAsUser"] == 0
    assert "--dra-mig-partitions=false" in ctr["command"]
    res = _check_config(ctr["command"], objects({"dra": {"enabled": True, "migPartitions": False}}), tmp_path)
    assert res.returncode == 0, res.stderr


def test_the_dra_plugin_reads_the_device_and_node_configs_the_chart_renders():
    """Split count, scaling and filters reach DRA nodes too: the DaemonSet passes both config files and
    mounts the ConfigMaps that hold them, which the chart renders (with the device plugin off as well)."""
    for values in ({"dra": {"enabled": True}}, {"dra": {"enabled": True}, "devicePlugin": {"enabled": False}},
                   {"dra": {"enabled": True}, "devicePlugin": {"nodeConfiguration": {
                       "config": '{"nodeconfig": [{"name": "n1", "devicesplitcount": 4}]}'}}}):
        docs = objects(values)
        pod = one(_dra_objects(docs), "DaemonSet")["spec"]["template"]["spec"]
        (ctr,) = pod["containers"]
        assert "--device-config-file=/device-config.yaml" in ctr["command"], values
        assert "--node-config-file=/config/config.json" in ctr["command"], values
        mounts = {m["name"]: m for m in ctr["volumeMounts"]}
        assert mounts["device-config"]["mountPath"] == "/device-config.yaml"
        assert mounts["device-config"]["subPath"] == "device-config.yaml"
        assert mounts["node-config"]["mountPath"] == "/config"
        volumes = {v["name"]: v for v in pod["volumes"]}
        maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        node_cm = maps[volumes["node-config"]["configMap"]["name"]]
        device_cm = maps[volumes["device-config"]["configMap"]["name"]]
        assert "config.json" in node_cm["data"] and "device-config.yaml" in device_cm["data"]
        wanted = ((values.get("devicePlugin") or {}).get("nodeConfiguration") or {}).get("config")
        if wanted:
            assert '"devicesplitcount": 4' in node_cm["data"]["config.json"]


# --------------------------------------------------------------------------- kube-scheduler's extender entry

HAMI_RESOURCES = frozenset({"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                            "nvidia.com/gpucores", "nvidia.com/priority",
                            *(n for v in default_vendor_table().others for n in v.resource_names)})
CLAIM_POD = {"spec": {"schedulerName": "hami-scheduler", "resourceClaims": [
    {"name": "cuda-nvidia", "resourceClaimTemplateName": "hami-gpu-0123456789abcdef"}],
    "containers": [{"name": "cuda", "resources": {"claims": [{"name": "cuda-nvidia"}],
                                                  "limits": {"cpu": "1"}}}]}}
GPU_POD = {"spec": {"schedulerName": "hami-scheduler", "initContainers": [
    {"name": "warm", "resources": {"requests": {"nvidia.com/gpumem": "1000"}}}],
    "containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}}}]}}


def _hami_profile(docs):
    conf = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-config")["data"]["config.yaml"])
    return schedconfig.profile(conf, "hami-scheduler")


def test_device_plugin_mode_calls_the_extender_only_for_pods_asking_hamis_resources():
    """kube-scheduler's reading of the default render (HTTPExtender.IsInterested, buildExtenders): the
    extender manages HAMi's resources, so a claim pod would never reach it; NodeResourcesFit ignores them."""
    prof = _hami_profile(rendered("default"))
    (ext,) = prof.extenders
    assert ext.managed == HAMI_RESOURCES and ext.ignored_by_scheduler == HAMI_RESOURCES
    assert ext.interested(GPU_POD)  # an init container's request is enough
    assert not ext.interested(CLAIM_POD)
    assert prof.fit_ignored == HAMI_RESOURCES


def test_dra_mode_calls_the_extender_for_every_pod_and_fit_still_ignores_hamis_resources():
    """With dra.enabled the entry has no managedResources (every pod of hami's profile, claim pods
    included, reaches the extender: filter, bind, preempt) and the profile's own NodeResourcesFit args
    ignore HAMi's resources, so a device-plugin pod of a mixed cluster still fits; the embedded cluster
    builds the same entry (hami.sim.cluster.kube_scheduler_configuration) and its loop reads it."""
    prof = _hami_profile(objects({"dra": {"enabled": True}}))
    (ext,) = prof.extenders
    assert ext.managed == frozenset() and ext.interested(CLAIM_POD) and ext.interested(GPU_POD)
    assert (ext.filter_verb, ext.bind_verb, ext.preempt_verb) == ("filter", "bind", "preempt")
    assert prof.fit_ignored == HAMI_RESOURCES and prof.fit_ignored_groups == frozenset()
    embedded = schedconfig.profile(kube_scheduler_configuration(build_config(
        {"roles": ("scheduler",), "dra": True}, env={})), "hami-scheduler")
    (own,) = embedded.extenders
    assert (own.managed, own.filter_verb, own.bind_verb, own.preempt_verb, own.prioritize_verb) == (
        ext.managed, ext.filter_verb, ext.bind_verb, ext.preempt_verb, ext.prioritize_verb)
    assert embedded.fit_ignored == prof.fit_ignored
    # custom resource names follow into the ignored list
    custom = _hami_profile(objects({"dra": {"enabled": True}, "resourceName": "example.com/vgpu"}))
    assert "example.com/vgpu" in custom.fit_ignored and "nvidia.com/gpu" not in custom.fit_ignored
