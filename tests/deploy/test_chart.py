"""The Helm chart deploy/helm/hami, rendered by Helm's own engine (helm-python-sdk, offline).

Covers: rendering with the defaults, the tuning guide's production values and the dev values; every
object valid against Kubernetes' OpenAPI schemas (kubernetes-validate, strict) and the Prometheus
Operator objects checked structurally; the KubeSchedulerConfiguration's extender (HAMi's registration);
the values keys HAMi users set reach the right flags, env and config files; the device and node config
files parse with hami.config; every `hami` container command parses with hami's own CLI; the DaemonSet's
host paths and environment (spec node.md §0).
"""

from __future__ import annotations

import json
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from hami.config import build_config, parse_device_config, parse_node_configs
from hami.config.vendortable import default_vendor_table
from tests.deploy.chart import CHART, NAMESPACE, ROOT, container, find, objects, one, rendered, with_pushed_image

K8S_VERSIONS = ("1.30", "1.33")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "Issuer", "Certificate"}


def _kube_scheduler_config(docs: list[dict]) -> dict:
    return yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-config")["data"]["config.yaml"])


def _args(c: dict) -> list[str]:
    return list(c.get("command", [])) + list(c.get("args", []))


def _env(c: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_every_object_validates_against_kubernetes_schemas(which):
    docs = rendered(which)
    core = [d for d in docs if d["kind"] not in CRD_KINDS]
    assert len(core) >= 15
    errors = []
    for version in K8S_VERSIONS:
        for d in core:
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                errors.append(f"{version} {d['kind']}/{d['metadata']['name']}: {exc.message}")
    assert not errors, "\n".join(errors)


def test_prod_renders_the_prometheus_operator_objects_with_required_fields():
    docs = rendered("prod")
    monitors = find(docs, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"hami-scheduler", "hami-device-plugin-monitor"}
    services = {s["metadata"]["name"]: s for s in find(docs, "Service")}
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1"
        sel = m["spec"]["selector"]["matchLabels"]
        # the selector picks exactly the Service with the same name, and its port exists there
        matching = [n for n, s in services.items() if sel.items() <= s["metadata"]["labels"].items()]
        assert matching == [m["metadata"]["name"]]
        ports = {p["name"] for p in services[matching[0]]["spec"]["ports"]}
        assert all(ep["port"] in ports for ep in m["spec"]["endpoints"])
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    for g in rule["spec"]["groups"]:
        assert g["name"] and g["rules"]
        for r in g["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"} and r["alert"] and r["expr"]


def test_defaults_leave_out_objects_that_need_operator_crds():
    kinds = {d["kind"] for d in rendered("default")}
    assert not kinds & CRD_KINDS
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration", "Job", "Service"} <= kinds
    assert "Secret" not in kinds  # the certgen Job makes the TLS Secret in the cluster


# --------------------------------------------------------------------------- scheduler


@pytest.mark.parametrize("which", ["default", "prod"])
def test_kube_scheduler_configuration_registers_the_extender_like_hami(which):
    cfg = _kube_scheduler_config(rendered(which))
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["hami-scheduler"]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:8443"  # the loopback extender listener
    assert (ext["filterVerb"], ext["bindVerb"]) == ("filter", "bind")
    assert ext["nodeCacheCapable"] is True and ext["weight"] == 1 and ext["httpTimeout"] == "30s"
    assert ext["enableHTTPS"] is True and ext["tlsConfig"]["insecure"] is False
    assert "prioritizeVerb" not in ext
    managed = {m["name"]: m["ignoredByScheduler"] for m in ext["managedResources"]}
    nvidia = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
              "nvidia.com/priority"]
    # every vendor row's resources too: kube-scheduler calls the extender only for pods asking one of them
    others = [n for v in default_vendor_table().others for n in v.resource_names]
    assert managed == dict.fromkeys([*nvidia, *others], True)
    assert {"huawei.com/Ascend910B3", "cambricon.com/mlu", "hygon.com/dcumem", "metax-tech.com/vcore"} <= set(managed)


def test_the_chart_vendor_file_is_generated_from_the_vendor_table():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-chart-vendors"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_extra_managed_resources_reach_the_extender_entry():
    ext = _kube_scheduler_config(objects({"scheduler": {"extraManagedResources": ["example.com/npu"]}}))["extenders"][0]
    assert {"name": "example.com/npu", "ignoredByScheduler": True} in ext["managedResources"]


def test_custom_resource_names_reach_managed_resources_and_device_config():
    docs = objects({"resourceName": "example.com/vgpu", "resourceMem": "example.com/vmem"})
    ext = _kube_scheduler_config(docs)["extenders"][0]
    names = {m["name"] for m in ext["managedResources"]}
    assert {"example.com/vgpu", "example.com/vmem"} <= names and "nvidia.com/gpu" not in names
    dev = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert dev["nvidia"]["resourceCountName"] == "example.com/vgpu"


def test_prod_values_reach_the_scheduler_flags_env_and_resources():
    docs = rendered("prod")
    dep = one(docs, "Deployment", "hami-scheduler")
    assert dep["spec"]["replicas"] == 2
    c = container(docs, "Deployment", "hami-scheduler")
    args = _args(c)
    assert args[:3] == ["hami", "--role", "scheduler"]
    for flag in ("--kube-qps=50", "--kube-burst=100", "--kube-timeout=30", "--leader-elect=true",
                 "--node-scheduler-policy=spread", "--gpu-scheduler-policy=spread",
                 "--leader-elect-resource-name=hami-scheduler", f"--leader-elect-resource-namespace={NAMESPACE}"):
        assert flag in args
    assert _env(c)["HAMI_NODELOCK_EXPIRE"] == "5m"
    assert c["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"},
                              "limits": {"cpu": "2000m", "memory": "2Gi"}}
    ks = container(docs, "Deployment", "kube-scheduler")
    assert ks["resources"]["limits"] == {"cpu": "1000m", "memory": "1Gi"}
    cfg = _kube_scheduler_config(docs)
    assert cfg["leaderElection"]["leaderElect"] is True
    # kube-scheduler and the hami scheduler elect on different Leases
    assert cfg["leaderElection"]["resourceName"] != "hami-scheduler"
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_default_scheduler_is_a_single_replica_without_leader_election():
    docs = rendered("default")
    assert one(docs, "Deployment", "hami-scheduler")["spec"]["replicas"] == 1
    args = _args(container(docs, "Deployment", "hami-scheduler"))
    assert "--leader-elect=false" in args
    # production defaults: no debug logging in any container of the default render
    for d in find(docs, "Deployment") + find(docs, "DaemonSet"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert not any(a in ("--debug", "-v=4", "--v=4") or a.startswith("--debug=") for a in _args(c)), c["name"]
    assert "--node-scheduler-policy=binpack" in args and "--gpu-scheduler-policy=spread" in args
    assert not find(docs, "PodDisruptionBudget")


def test_node_lock_expire_and_label_selector_values():
    docs = objects({"scheduler": {"nodeLockExpire": "8m", "nodeLabelSelector": {"gpu": "on", "pool": "a"}}})
    c = container(docs, "Deployment", "hami-scheduler")
    assert _env(c)["HAMI_NODELOCK_EXPIRE"] == "8m"
    assert "--node-label-selector=gpu=on,pool=a" in _args(c)


# --------------------------------------------------------------------------- config files


@pytest.mark.parametrize("which,policy,level,split,scaling", [
    ("default", "default", "1", 10, 1.0),
    ("prod", "force", "0", 10, 1.0),
    ("dev", "disable", "3", 20, 2.0),
])
def test_device_config_parses_with_hami_and_carries_the_values(which, policy, level, split, scaling):
    docs = rendered(which)
    text = one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    warnings: list[str] = []
    cfg = parse_device_config(yaml.safe_load(text), "device-config.yaml", warnings.append)
    assert warnings == []
    assert cfg.gpu_core_policy == policy
    assert cfg.lib_cuda_log_level == level
    assert cfg.device_split_count == split
    assert cfg.device_memory_scaling == scaling
    assert cfg.resource_count_name == "nvidia.com/gpu"


def test_device_config_content_override_is_used_verbatim():
    content = "nvidia:\n  deviceSplitCount: 7\n  defaultMemory: 2048\n"
    docs = objects({"device-config": {"content": content}})
    text = one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    assert yaml.safe_load(text) == yaml.safe_load(content)


def test_node_config_json_comes_from_values_and_parses_with_globs():
    docs = rendered("dev")
    text = one(docs, "ConfigMap", "hami-device-plugin")["data"]["config.json"]
    nodes = parse_node_configs(json.loads(text), "config.json", lambda m: pytest.fail(m))
    assert [(n.name, n.devicesplitcount) for n in nodes] == [("inference-pool-*", 20), ("training-pool-*", 5)]


def test_external_node_config_map_replaces_the_chart_one():
    docs = objects({"devicePlugin": {"nodeConfiguration": {"externalConfigName": "my-node-config"}}})
    assert not find(docs, "ConfigMap", "hami-device-plugin")
    vols = {v["name"]: v for v in one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]["volumes"]}
    assert vols["node-config"]["configMap"]["name"] == "my-node-config"


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_every_hami_command_parses_with_the_hami_cli_and_builds_a_config(which, tmp_path):
    from hami.cli.main import role_parser

    docs = rendered(which)
    files = {
        "/device-config.yaml": one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"],
    }
    node_cm = find(docs, "ConfigMap", "hami-device-plugin")
    files["/config/config.json"] = node_cm[0]["data"]["config.json"]
    seen = set()
    for kind in ("Deployment", "DaemonSet"):
        for d in find(docs, kind):
            for c in d["spec"]["template"]["spec"]["containers"]:
                argv = _args(c)
                if argv[0] != "hami":
                    continue
                for path, text in files.items():
                    local = tmp_path / path.strip("/").replace("/", "_")
                    local.write_text(text)
                    argv = [a.replace(f"={path}", f"={local}") for a in argv]
                args = role_parser().parse_args(argv[1:])
                flags = {k: v for k, v in vars(args).items() if k != "role"}
                cfg = build_config({**flags, "roles": (args.role,)}, env={"NODE_NAME": "n1"},
                                   warn=lambda m: pytest.fail(m))
                seen.add(args.role)
                if args.role == "scheduler":
                    assert cfg.scheduler.cert_file == "/tls/tls.crt" and cfg.scheduler.key_file == "/tls/tls.key"
                    # /filter and /bind on loopback for the kube-scheduler sidecar; the webhook alone
                    # behind the Service (build_config refuses any other layout without mTLS)
                    assert cfg.scheduler.http_bind == "127.0.0.1:8443"
                    assert cfg.scheduler.webhook_bind_address == "0.0.0.0:443"
                    assert cfg.scheduler.client_ca_file == "" and not cfg.debug.profiling
                if args.role == "monitor":
                    assert cfg.monitor.metrics_bind_address == ":9394"
                    assert cfg.monitor.cache_dir == "/usr/local/vgpu/containers"
                    assert cfg.monitor.cache_grace == 300.0
    assert seen == {"scheduler", "node-agent", "monitor"}


# --------------------------------------------------------------------------- node DaemonSet


def test_daemonsets_run_agent_and_monitor_with_hami_paths():
    docs = rendered("default")
    agent_spec = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    monitor_spec = one(docs, "DaemonSet", "hami-device-plugin-monitor")["spec"]["template"]["spec"]
    assert agent_spec["hostPID"] is False and monitor_spec["hostPID"] is True  # only the monitor maps host PIDs
    assert [c["name"] for c in agent_spec["containers"]] == ["device-plugin"]
    assert [c["name"] for c in monitor_spec["containers"]] == ["vgpu-monitor"]
    agent = container(docs, "DaemonSet", "device-plugin")
    monitor = container(docs, "DaemonSet", "vgpu-monitor")
    assert _args(agent)[:3] == ["hami", "--role", "node-agent"]
    assert _args(monitor)[:3] == ["hami", "--role", "monitor"]
    assert _env(agent)["HOOK_PATH"] == "/usr/local"
    assert _env(monitor)["HOOK_PATH"] == "/usr/local/vgpu"
    for c in (agent, monitor):
        assert _env(c)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    host = {v["name"]: v["hostPath"]["path"] for spec in (agent_spec, monitor_spec)
            for v in spec["volumes"] if "hostPath" in v}
    mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in (agent, monitor)}
    # host dirs appear at the same path inside, so paths handed to kubelet are host paths
    assert host["device-plugin"] == mounts["device-plugin"]["device-plugin"] == "/var/lib/kubelet/device-plugins"
    assert host["lib"] == mounts["device-plugin"]["lib"] == "/usr/local/vgpu"
    assert host["containers"] == mounts["vgpu-monitor"]["containers"] == "/usr/local/vgpu/containers"
    assert host["vgpulock"] == mounts["device-plugin"]["vgpulock"] == "/tmp/vgpulock"
    assert host["hami-tmp"] == mounts["device-plugin"]["hami-tmp"] == mounts["vgpu-monitor"]["hami-tmp"] == "/tmp/hami"
    assert mounts["device-plugin"]["node-config"] == "/config"
    assert "--node-config-file=/config/config.json" in _args(agent)
    assert monitor["ports"] == [{"name": "metrics", "containerPort": 9394, "protocol": "TCP"}]
    svc = one(docs, "Service", "hami-device-plugin-monitor")
    assert svc["spec"]["type"] == "ClusterIP" and "nodePort" not in svc["spec"]["ports"][0]
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "hami-vgpu-monitor"


def test_monitor_extra_args_and_core_scaling_values():
    docs = objects({"devicePlugin": {"deviceCoreScaling": 2, "monitor": {"extraArgs": ["-v=5"]}}})
    assert "-v=5" in _args(container(docs, "DaemonSet", "vgpu-monitor"))
    dev = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert dev["nvidia"]["deviceCoreScaling"] == 2


def test_chart_values_have_the_keys_hami_users_set():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    keys = [
        "scheduler.extender.extraArgs", "scheduler.kubeScheduler", "scheduler.leaderElect", "scheduler.replicas",
        "scheduler.nodeLockExpire", "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy",
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy", "scheduler.extender.resources",
        "devicePlugin.deviceSplitCount", "devicePlugin.deviceMemoryScaling", "devicePlugin.deviceCoreScaling",
        "devicePlugin.nodeConfiguration.config", "devicePlugin.monitor.extraArgs",
        "devices.nvidia.gpuCorePolicy", "devices.nvidia.libCudaLogLevel",
    ]
    for key in keys:
        node = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"values.yaml lacks {key}"
            node = node[part]
    # every key the production values set exists in values.yaml (no silently ignored settings)
    prod = yaml.safe_load((CHART / "ci" / "prod-values.yaml").read_text())

    def walk(sub, ref, path):
        for k, v in sub.items():
            assert k in ref, f"ci/prod-values.yaml sets unknown key {path}{k}"
            if isinstance(v, dict) and ref[k]:
                walk(v, ref[k], f"{path}{k}.")

    walk(prod, values, "")


# --------------------------------------------------------------------------- lint and values schema


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_helm_lint_strict_reports_no_warning(which):
    import helm_python as helm

    values = {} if which == "default" else yaml.safe_load((CHART / "ci" / f"{which}-values.yaml").read_text())
    report = helm.lint(str(CHART), with_pushed_image(values), strict=True, namespace=NAMESPACE,
                       kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("bad,where", [
    ({"devices": {"nvidia": {"gpuCorePolicy": "sometimes"}}}, "/devices/nvidia/gpuCorePolicy"),
    ({"devices": {"nvidia": {"libCudaLogLevel": 9}}}, "/devices/nvidia/libCudaLogLevel"),
    ({"devicePlugin": {"deviceSplitCount": 0}}, "/devicePlugin/deviceSplitCount"),
    ({"devicePlugin": {"deviceMemoryScaling": 0}}, "/devicePlugin/deviceMemoryScaling"),
    ({"scheduler": {"nodeLockExpire": "5 minutes"}}, "/scheduler/nodeLockExpire"),
    ({"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "random"}}},
     "/scheduler/defaultSchedulerPolicy/nodeSchedulerPolicy"),
])
def test_values_schema_rejects_wrong_settings_naming_the_key(bad, where):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError) as err:
        objects(bad)
    assert where in str(err.value)


def test_values_schema_accepts_a_hami_values_file_with_keys_hami_does_not_use():
    docs = objects({"devices": {"ascend": {"enabled": False}}, "mockDevicePlugin": {"enabled": False},
                    "devicePlugin": {"deviceMemoryScaling": 1.5}})
    dev = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert dev["nvidia"]["deviceMemoryScaling"] == 1.5


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_profiling_and_aiomonitor_are_off_in_every_container(which):
    docs = rendered(which)
    for kind in ("Deployment", "DaemonSet"):
        for d in find(docs, kind):
            for c in d["spec"]["template"]["spec"]["containers"]:
                for arg in _args(c):
                    assert not arg.startswith(("--profiling", "--aiomonitor", "--debug-bind-address")), (c["name"], arg)


def test_unprivileged_https_port_moves_the_webhook_listener_and_drops_the_sysctl():
    docs = objects({"scheduler": {"service": {"httpTargetPort": 9443}, "extender": {"port": 7443}}})
    assert _kube_scheduler_config(docs)["extenders"][0]["urlPrefix"] == "https://127.0.0.1:7443"
    args = _args(container(docs, "Deployment", "hami-scheduler"))
    assert "--webhook-bind-address=0.0.0.0:9443" in args and "--http_bind=127.0.0.1:7443" in args
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert "sysctls" not in pod["securityContext"] and pod["securityContext"]["runAsNonRoot"] is True
    default_pod = one(rendered("default"), "Deployment")["spec"]["template"]["spec"]
    assert default_pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]


def test_helm_template_script_prints_the_same_objects_and_names_bad_values():
    import subprocess
    import sys

    from tests.deploy.chart import PROD_VALUES, ROOT

    script = str(ROOT / "scripts" / "helm-template")
    res = subprocess.run([sys.executable, script, "-f", str(PROD_VALUES), "--set-string", "scheduler.nodeLockExpire=8m",
                          "--set-string", "image.registry=registry.example.com"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == \
        sorted((d["kind"], d["metadata"]["name"]) for d in rendered("prod"))
    c = next(c for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
             if c["name"] == "hami-scheduler")
    assert _env(c)["HAMI_NODELOCK_EXPIRE"] == "8m"
    bad = subprocess.run([sys.executable, script, "--set-string", "devices.nvidia.gpuCorePolicy=bad",
                          "--set-string", "image.registry=registry.example.com"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "/devices/nvidia/gpuCorePolicy" in bad.stderr


def test_runbook_names_resolve_in_the_rendered_chart():
    """The debugging runbook's commands: `kubectl get pods -n kube-system -l app=hami-scheduler`,
    `kubectl get configmap -n kube-system hami-scheduler-config`, `kubectl edit deployment hami-scheduler`."""
    docs = rendered("default")
    dep = one(docs, "Deployment", "hami-scheduler")
    assert dep["spec"]["template"]["metadata"]["labels"]["app"] == "hami-scheduler"
    cfg = one(docs, "ConfigMap", "hami-scheduler-config")
    assert "config.yaml" in cfg["data"]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert any((v.get("configMap") or {}).get("name") == "hami-scheduler-config" for v in volumes.values())


def test_topology_aware_policy_turns_on_the_agents_link_scores():
    """HAMi's chart: ENABLE_TOPOLOGY_SCORE=true on the device plugin iff the GPU policy is topology-aware."""
    def env(values):
        agent = container(objects(values), "DaemonSet", "device-plugin")
        return {e["name"]: e.get("value") for e in agent.get("env") or []}

    assert "ENABLE_TOPOLOGY_SCORE" not in env({})
    on = env({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "topology-aware"}}})
    assert on["ENABLE_TOPOLOGY_SCORE"] == "true"


def test_gpu_preemption_value_reaches_the_flags_and_its_rbac():
    """scheduler.gpuPreemption.enabled (off by default) turns on --gpu-preemption with its hold timeout,
    and only then grants patch pods/status (the only write it adds; reading PriorityClasses is granted
    always, see deploy/rbac-calls.yaml); the flags build a Config."""
    from hami.cli.main import role_parser

    def rules(docs) -> list[dict]:
        return [r for cr in find(docs, "ClusterRole") if "scheduler" in cr["metadata"]["name"]
                for r in cr.get("rules") or []]
    off = rendered("default")
    assert not any(a.startswith("--gpu-preemption") for a in _args(container(off, "Deployment", "hami-scheduler")))
    assert not any("pods/status" in r["resources"] and "patch" in r["verbs"] for r in rules(off))
    assert all(r["verbs"] == ["list", "watch"] for r in rules(off) if "priorityclasses" in r["resources"])
    docs = objects({"scheduler": {"gpuPreemption": {"enabled": True, "holdTimeout": "90s"}}})
    argv = _args(container(docs, "Deployment", "hami-scheduler"))
    assert "--gpu-preemption=true" in argv and "--gpu-preemption-hold-timeout=90s" in argv
    granted = {(res, verb) for r in rules(docs) for res in r["resources"] for verb in r["verbs"]}
    assert {("pods/status", "patch"), ("priorityclasses", "list"), ("priorityclasses", "watch"),
            ("pods/eviction", "create")} <= granted
    args = role_parser().parse_args(["--role", "scheduler", "--gpu-preemption=true",
                                      "--gpu-preemption-hold-timeout=90s"])
    cfg = build_config({**{k: v for k, v in vars(args).items() if k != "role"}, "roles": ("scheduler",)},
                       env={}, warn=lambda m: pytest.fail(m))
    assert cfg.scheduler.gpu_preemption is True and cfg.scheduler.gpu_preemption_hold_timeout == 90.0


def test_gpu_preemption_shortens_kube_schedulers_max_backoff_only_when_on():
    """With scheduler.gpuPreemption.enabled the sidecar's KubeSchedulerConfiguration sets
    podMaxBackoffSeconds (2, so a preemptor retries soon after its victims stop; empty keeps
    kube-scheduler's 10 s); off, the field is absent (upstream's default)."""
    def kube_config(docs) -> dict:
        cm = next(c for c in find(docs, "ConfigMap") if c["metadata"]["name"].endswith("scheduler-config"))
        return yaml.safe_load(cm["data"]["config.yaml"])
    assert "podMaxBackoffSeconds" not in kube_config(rendered("default"))
    assert kube_config(objects({"scheduler": {"gpuPreemption": {"enabled": True}}}))["podMaxBackoffSeconds"] == 2
    assert "podMaxBackoffSeconds" not in kube_config(
        objects({"scheduler": {"gpuPreemption": {"enabled": True, "podMaxBackoffSeconds": ""}}}))


def test_kube_scheduler_searches_every_node_by_default_and_the_value_when_set():
    """percentageOfNodesToScore is 100 in the default render (kube-scheduler hands every feasible node
    to hami's /filter, so the node policy ranks the whole cluster), as kube-scheduler reads it and as the
    embedded cluster's copy of this configuration has it; scheduler.kubeScheduler.percentageOfNodesToScore
    sets it (0: kube-scheduler's adaptive default, rendered as 0, not dropped)."""
    from hami.kubesched import schedconfig
    from hami.sim.cluster import kube_scheduler_configuration

    default = _kube_scheduler_config(rendered("default"))
    assert default["percentageOfNodesToScore"] == 100
    assert schedconfig.profile(default, "hami-scheduler").percentage_of_nodes_to_score == 100
    embedded = kube_scheduler_configuration(build_config({"roles": ("scheduler",)}, env={}))
    assert schedconfig.profile(embedded, "hami-scheduler").percentage_of_nodes_to_score == 100
    for value in (30, 0):
        conf = _kube_scheduler_config(objects({"scheduler": {"kubeScheduler": {"percentageOfNodesToScore": value}}}))
        assert conf["percentageOfNodesToScore"] == value
        assert schedconfig.profile(conf, "hami-scheduler").percentage_of_nodes_to_score == value


@pytest.mark.parametrize("value", [101, -1, "half", 12.5])
def test_percentage_of_nodes_to_score_outside_kube_schedulers_range_is_refused_by_name(value):
    import helm_python as helm

    with pytest.raises(helm.HelmError) as err:
        objects({"scheduler": {"kubeScheduler": {"percentageOfNodesToScore": value}}})
    assert "percentageOfNodesToScore" in str(err.value)


@pytest.mark.parametrize("value", [True, False])
def test_report_node_capacity_value_reaches_the_node_agent(value):
    """devicePlugin.reportNodeCapacity -> `--report-node-capacity`, which the agent's config reads (off
    must be said out loud too: the agent removes what an earlier run reported only when told it is off)."""
    from hami.cli.main import role_parser

    agent = container(objects({"devicePlugin": {"reportNodeCapacity": value}}), "DaemonSet", "device-plugin")
    argv = _args(agent)
    assert f"--report-node-capacity={str(value).lower()}" in argv
    args = role_parser().parse_args([a for a in argv[1:] if not a.startswith(("--device-config-file",
                                                                                "--node-config-file"))])
    cfg = build_config({k: v for k, v in vars(args).items() if k != "role"} | {"roles": (args.role,)},
                       env={"NODE_NAME": "n1"})
    assert cfg.agent.report_node_capacity is value
    assert "--report-node-capacity=false" in _args(container(objects(), "DaemonSet", "device-plugin"))


def test_report_node_capacity_must_be_a_boolean():
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="reportNodeCapacity"):
        objects({"devicePlugin": {"reportNodeCapacity": "yes"}})
