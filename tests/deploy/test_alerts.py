"""Alert rules and the Grafana dashboard of the chart, checked by Prometheus' own promtool.

Covers: the PrometheusRule's groups pass `promtool check rules`; `promtool test rules` unit tests
show the tuning guide's alerts fire on the series they describe and stay quiet otherwise
(HAMiGPUMemoryHigh over 90 % for 5 minutes, HAMiGPUPodPending only for GPU pods after 10 minutes),
and the GPU health alerts fire only on their GPU (HAMiGPUHot above 85 C for 5 minutes,
HAMiGPUUncorrectableECC on any uncorrectable error, HAMiGPUXidStorm at 5 XIDs in 10 minutes);
thresholds follow values; every PromQL expression of the dashboard parses (checked by promtool as
recording rules); the dashboard ConfigMap holds valid JSON. Fails when promtool is missing
(scripts/install-promtool provides it).
"""

from __future__ import annotations

import json
import re
import subprocess

import yaml

from tests.deploy.chart import objects, one, rendered
from tests.tools import promtool


def _rule_groups(docs) -> dict:
    return {"groups": one(docs, "PrometheusRule")["spec"]["groups"]}


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_prometheus_rules_pass_promtool_check(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_rule_groups(rendered("prod"))))
    res = _run("check", "rules", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 7 rules found" in res.stdout + res.stderr


def test_promtool_check_catches_a_broken_rule(tmp_path):
    groups = _rule_groups(rendered("prod"))
    broken = groups["groups"][0]["rules"][0]
    broken["expr"] = "hami_vgpu_memory_used_bytes / ("
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(groups))
    res = _run("check", "rules", str(path), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    # Failed for the broken expression, in the rule we broke: not for a missing file or any other reason.
    assert f'"{broken["alert"]}": could not parse expression' in out and "unclosed left parenthesis" in out, out


UNIT_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'hami_vgpu_memory_used_bytes{namespace="ml",pod="big",container="c",vdevice_index="0"}'
        values: '950x20'
      - series: 'hami_vgpu_memory_limit_bytes{namespace="ml",pod="big",container="c",vdevice_index="0"}'
        values: '1000x20'
      - series: 'hami_vgpu_memory_used_bytes{namespace="ml",pod="small",container="c",vdevice_index="0"}'
        values: '500x20'
      - series: 'hami_vgpu_memory_limit_bytes{namespace="ml",pod="small",container="c",vdevice_index="0"}'
        values: '1000x20'
    alert_rule_test:
      - eval_time: 3m
        alertname: HAMiGPUMemoryHigh
        exp_alerts: []
      - eval_time: 10m
        alertname: HAMiGPUMemoryHigh
        exp_alerts:
          - exp_labels: {severity: warning, namespace: ml, pod: big, container: c, vdevice_index: "0"}
            exp_annotations:
              summary: "GPU container memory use above 90% of its limit"
              description: "Pod ml/big container c uses 95% of its GPU memory limit."
  - interval: 1m
    input_series:
      - series: 'kube_pod_status_phase{namespace="ml",pod="gpu-job",phase="Pending"}'
        values: '1x20'
      - series: 'kube_pod_container_resource_requests{namespace="ml",pod="gpu-job",container="c",
          resource="nvidia_com_gpu"}'
        values: '1x20'
      - series: 'kube_pod_status_phase{namespace="ml",pod="cpu-job",phase="Pending"}'
        values: '1x20'
      - series: 'kube_pod_container_resource_requests{namespace="ml",pod="cpu-job",container="c",resource="cpu"}'
        values: '1x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: HAMiGPUPodPending
        exp_alerts: []
      - eval_time: 15m
        alertname: HAMiGPUPodPending
        exp_alerts:
          - exp_labels: {severity: warning, namespace: ml, pod: gpu-job, phase: Pending}
            exp_annotations:
              summary: "GPU pod pending for a long time"
              description: "Pod ml/gpu-job has waited for a GPU for more than 10m; see its FilteringFailed events or run
              hami doctor pod."
"""


def test_guide_alerts_fire_on_their_series_and_only_then(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_groups(rendered("prod"))))
    (tmp_path / "tests.yaml").write_text(UNIT_TESTS)
    res = _run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_alert_thresholds_follow_values(tmp_path):
    docs = objects({"prometheusRule": {"enabled": True, "memoryHighRatio": 0.8, "podPendingFor": "30m"}})
    rules = {r["alert"]: r for g in _rule_groups(docs)["groups"] for r in g["rules"]}
    assert rules["HAMiGPUMemoryHigh"]["expr"].strip().endswith("> 0.8")
    assert rules["HAMiGPUPodPending"]["for"] == "30m"
    # the guide's 90 % input fires at 0.8 too, 50 % does not
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_groups(docs)))
    tests = UNIT_TESTS.split("  - interval: 1m\n    input_series:\n      - series: 'kube_pod")[0]
    tests = tests.replace("above 90% of its limit", "above 80% of its limit")
    (tmp_path / "tests.yaml").write_text(tests)
    res = _run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dashboard_is_valid_json_and_every_query_parses(tmp_path):
    cm = one(rendered("default"), "ConfigMap", "hami-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["hami-gpu-sharing.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    used = " ".join(exprs)
    for metric in ("hami_vgpu_memory_used_bytes", "hami_vgpu_memory_limit_bytes", "hami_host_gpu_utilization_ratio",
                   "hami_node_gpu_memory_allocated_ratio", "hami_container_device_utilization_ratio"):
        assert metric in used
    # Grafana variables become a match-all regex for parsing
    rules = [{"record": f"dashboard:panel_{i}", "expr": re.sub(r"\$\{?\w+\}?", ".*", e)} for i, e in enumerate(exprs)]
    path = tmp_path / "dash.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = _run("check", "rules", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_hami_metric_in_dashboard_and_alerts_is_exported_by_hami():
    from tests.deploy.chart import ROOT

    source = "\n".join(p.read_text() for p in (ROOT / "hami").rglob("*.py"))
    cm = one(rendered("prod"), "ConfigMap", "hami-grafana-dashboard")
    text = cm["data"]["hami-gpu-sharing.json"] + json.dumps(_rule_groups(rendered("prod")))
    names = set(re.findall(r"\bhami_[a-z0-9_]+", text))
    assert len(names) >= 10
    for name in sorted(names):
        base = re.sub(r"_(total|bucket|sum|count)$", "", name)
        assert f'"{base}"' in source or f'"{name}"' in source, f"{name} is not a metric hami exports"


HEALTH_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'hami_gpu_temperature_celsius{node="n1",device_index="0",device_uuid="GPU-a",device_type="A100"}'
        values: '90x20'
      - series: 'hami_gpu_temperature_celsius{node="n1",device_index="1",device_uuid="GPU-b",device_type="A100"}'
        values: '70x20'
    alert_rule_test:
      - eval_time: 3m
        alertname: HAMiGPUHot
        exp_alerts: []
      - eval_time: 10m
        alertname: HAMiGPUHot
        exp_alerts:
          - exp_labels: {severity: warning, node: n1, device_index: "0", device_uuid: GPU-a, device_type: A100}
            exp_annotations:
              summary: "GPU temperature above 85 C"
              description: "GPU 0 (GPU-a) on n1 is at 90 C."
  - interval: 1m
    input_series:
      - series: 'hami_gpu_ecc_uncorrected_errors_total{node="n1",device_index="0",device_uuid="GPU-a",
          device_type="A100"}'
        values: '0 0 0 2 2 2'
      - series: 'hami_gpu_ecc_uncorrected_errors_total{node="n1",device_index="1",device_uuid="GPU-b",
          device_type="A100"}'
        values: '0x5'
    alert_rule_test:
      - eval_time: 1m
        alertname: HAMiGPUUncorrectableECC
        exp_alerts: []
      - eval_time: 4m
        alertname: HAMiGPUUncorrectableECC
        exp_alerts:
          - exp_labels: {severity: critical, node: n1, device_index: "0", device_uuid: GPU-a, device_type: A100}
            exp_annotations:
              summary: "GPU has uncorrectable ECC errors"
              description: "GPU 0 (GPU-a) on n1 reported 2 uncorrectable ECC errors since the driver loaded; drain the
              node and reset the GPU."
  - interval: 1m
    input_series:
      - series: 'hami_gpu_xid_errors_total{node="n1",device_index="0",device_uuid="GPU-a",device_type="A100",xid="79"}'
        values: '0 1 2 3 4 5 6 7 8 9 10'
      - series: 'hami_gpu_xid_errors_total{node="n1",device_index="0",device_uuid="GPU-a",device_type="A100",xid="48"}'
        values: '0x10'
      - series: 'hami_gpu_xid_errors_total{node="n1",device_index="1",device_uuid="GPU-b",device_type="A100",xid="13"}'
        values: '0 0 0 0 0 1 1 1 1 1 2'
    alert_rule_test:
      - eval_time: 2m
        alertname: HAMiGPUXidStorm
        exp_alerts: []
      - eval_time: 8m
        alertname: HAMiGPUXidStorm
        exp_alerts:
          - exp_labels: {severity: critical, node: n1, device_index: "0", device_uuid: GPU-a}
            exp_annotations:
              summary: "Many XID errors on one GPU"
              description: "GPU 0 (GPU-a) on n1 logged 8 XID events in 10m."
"""


def test_gpu_health_alerts_fire_on_hot_gpu_uncorrectable_ecc_and_xid_storm_only(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_groups(rendered("prod"))))
    (tmp_path / "tests.yaml").write_text(HEALTH_TESTS)
    res = _run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr

