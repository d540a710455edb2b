"""Metrics that join (HAMi #2152, #2578, #2990, #1043), on both roles' real expositions:

- every per-device series (a family with `device_index` or a GPU's `device_uuid`, no pod) carries
  `node` and `device_index`; every per-container series (a family with `pod` and a device) carries
  `namespace`, `pod`, `container` and `node` (HAMi #2152);
- `device_type` is the card's name once (never `NVIDIA-NVIDIA ...`);
- `hami_gpu_share_info` maps (node, device_index) to the containers sharing the GPU;
- every series the shipped Grafana dashboard and PrometheusRule read is one we export (or DCGM
  exporter's, named as such), and every label they select, group or join on is one that series
  carries (or that the expression itself makes with label_replace).
"""

from __future__ import annotations

import json
import re

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hami.gpu.fake import FakeBackend
from hami.monitor.metrics import MonitorCollector, render
from hami.monitor.shmwrite import Dev, Proc
from hami.scheduler.metrics import SchedulerMetrics
from tests.deploy.chart import one, rendered
from tests.monitor._fixtures import U0, U1, cache_file, fake_gpus, pod
from tests.scheduler.test_hami_metrics_golden import SNAPSHOT

UID = "0a1b2c3d-1111-4000-8000-000000000001"
TELEMETRY = {"temperature_c": 83, "power_w": 312.5, "power_limit_w": 400, "sm_clock_mhz": 1410, "mem_clock_mhz": 1593,
             "ecc_corrected": 12, "ecc_uncorrected": 2, "pcie_replays": 5,
             "throttle_reasons": ["sw_power_cap"], "xids": {79: 3}}  # every health family has a sample
# Other exporters' series the dashboard reads, with the labels they carry: DCGM exporter's per-GPU gauges,
# kube-state-metrics' pod series.
EXTERNAL = re.compile(r"^(DCGM_FI_DEV_\w+|kube_pod_\w+)$")
EXTERNAL_LABELS = {"Hostname", "gpu", "modelName", "UUID", "device", "namespace", "pod", "phase", "resource"}


def monitor_exposition(tmp_path) -> str:
    gpus = fake_gpus(str(tmp_path / "gpus.yaml"), [
        {"uuid": U0, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "utilization": 30,
         "memory_utilization": 10, "telemetry": TELEMETRY},
        {"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "index": 1}])
    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0, limit=4 << 30, sm_limit=30)],
               [Proc(pid=10, hostpid=4010, used={0: 1 << 20}, sm_util={0: 20})], "1.2", last_kernel_time=1)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="node-1",
                                  pods=lambda: [pod(UID)], backend=FakeBackend(gpus),
                                  proc_root=str(tmp_path / "proc"), clock=lambda: 100))
    return render(reg.collect()).decode()


def scheduler_exposition() -> str:
    m = SchedulerMetrics(lambda: SNAPSHOT, lambda: {("get", "pods", "200"): 3},
                         lanes=lambda: {"critical": {"requests": 3.0}})
    m.filter_seconds.labels("ok").observe(0.01)  # histograms show samples once observed
    m.bind_seconds.labels("ok").observe(0.02)
    return m.exposition().decode()


def label_sets(text: str) -> dict[str, set[str]]:
    """family/sample name -> every label any of its samples carries."""
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(s.labels)
            out.setdefault(fam.name, set()).update(s.labels)
    return out


def samples(text: str):
    for fam in text_string_to_metric_families(text):
        yield from fam.samples


def test_per_device_and_per_container_series_carry_the_join_labels(tmp_path):
    texts = {"monitor": monitor_exposition(tmp_path), "scheduler": scheduler_exposition()}
    seen_device = seen_container = 0
    for role, text in texts.items():
        for name, labels in label_sets(text).items():
            if not name.startswith("hami_") or name.endswith("_created"):
                continue
            if "pod" in labels and labels & {"device_uuid", "device_index"}:
                assert {"namespace", "pod", "container", "node"} <= labels, (role, name, labels)
                seen_container += 1
            elif labels & {"device_index", "device_uuid"} and "mig_uuid" not in labels:
                assert {"node", "device_index"} <= labels, (role, name, labels)
                seen_device += 1
    assert seen_device >= 8 and seen_container >= 8  # both roles' families were looked at


def test_device_type_is_the_cards_name_once(tmp_path):
    types = {s.labels["device_type"] for text in (monitor_exposition(tmp_path), scheduler_exposition())
             for s in samples(text) if "device_type" in s.labels}
    assert "NVIDIA A100-SXM4-40GB" in types
    assert not [t for t in types if t.startswith("NVIDIA-NVIDIA")], types


def test_share_info_maps_a_gpu_by_node_and_index_to_the_containers_sharing_it():
    shares = {(s.labels["node"], s.labels["device_index"], s.labels["namespace"], s.labels["pod"],
               s.labels["container_index"]) for s in samples(scheduler_exposition()) if s.name == "hami_gpu_share_info"}
    # SNAPSHOT: train's two containers share GPU-0 (node-a, 0); mig holds GPU-1; amd holds node-b's 0;
    # the pod whose device has no UUID is left out, as in every per-container family.
    assert shares == {("node-a", "0", "default", "train", "0"), ("node-a", "0", "default", "train", "1"),
                      ("node-a", "1", "default", "mig", "0"), ("node-b", "0", "team", "amd", "0")}


# ------------------------------------------------------------------ the dashboard and the rules

_SELECTOR = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LABEL_REPLACE_DST = re.compile(r'label_replace\s*\(.*?,\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*,', re.S)
_NAME = re.compile(r"(?<![\w\"{$.])([A-Za-z_:][A-Za-z0-9_:]*)(?=\s*(?:\{|\[|\)|$|\s|,|/|\*|\+|-|>|<|=))")
_FUNCS_AND_WORDS = {"sum", "avg", "max", "min", "count", "rate", "irate", "increase", "by", "without", "on",
                    "ignoring", "group_left", "group_right", "and", "or", "unless", "label_replace", "topk",
                    "bottomk", "max_over_time", "min_over_time", "avg_over_time", "abs", "clamp_min", "clamp_max",
                    "histogram_quantile", "time", "vector", "scalar", "absent", "offset", "bool", "le",
                    "delta", "deriv", "changes", "resets", "round", "ceil", "floor", "sort", "sort_desc",
                    "count_over_time", "sum_over_time", "quantile_over_time", "group", "stddev", "count_values"}


def shipped_exprs() -> list[str]:
    dash = json.loads(one(rendered("prod"), "ConfigMap", "hami-grafana-dashboard")["data"]["hami-gpu-sharing.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    rules = one(rendered("prod"), "PrometheusRule")["spec"]["groups"]
    exprs += [r["expr"] for g in rules for r in g["rules"]]
    return [re.sub(r"\$\{?\w+\}?", "x", e) for e in exprs]  # Grafana variables: any value


def test_every_series_and_label_the_dashboard_and_rules_read_is_exported(tmp_path):
    labels_of = label_sets(monitor_exposition(tmp_path)) | label_sets(scheduler_exposition())
    checked = 0
    for expr in shipped_exprs():
        bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", _GROUPING.sub(" ", expr))  # names only
        names = {n for n in _NAME.findall(bare) if n not in _FUNCS_AND_WORDS and not n[0].isdigit()
                 and ("_" in n or n.isupper())}
        ours = {n for n in names if not EXTERNAL.match(n)}
        for n in ours:
            assert n in labels_of, f"{n} (in {expr!r}) is not a series hami exports"
        carried = set().union(*(labels_of.get(n, set()) for n in ours))
        if names - ours:
            carried |= EXTERNAL_LABELS
        carried |= set(_LABEL_REPLACE_DST.findall(expr)) | {"__name__"}
        for name, matchers in _SELECTOR.findall(expr):
            if name in labels_of:
                assert set(_MATCHER.findall(matchers)) <= labels_of[name], (expr, name, labels_of[name])
        for group in _GROUPING.findall(expr):
            wanted = {g.strip() for g in group.split(",") if g.strip()}
            assert wanted <= carried, (expr, wanted - carried)
        checked += 1
    assert checked >= 20


def _documented() -> str:
    """docs/monitor.md with `a_{b,c}_d` spelled out as `a_b_d a_c_d`."""
    from tests.deploy.chart import ROOT

    text = (ROOT / "docs" / "monitor.md").read_text()
    return re.sub(r"(\w*)\{(\w+(?:,\w+)+)\}(\w*)",
                  lambda m: " ".join(m.group(1) + p + m.group(3) for p in m.group(2).split(",")), text)


def test_every_metric_the_roles_export_is_in_docs_monitor_md(tmp_path):
    from tests.deploy.chart import ROOT

    names = {f.name for text in (monitor_exposition(tmp_path), scheduler_exposition())
             for f in text_string_to_metric_families(text)}
    # The scheduler role's counters that need a running role to show (named where the role builds them).
    for path in ("hami/scheduler/role.py", "hami/scheduler/preemption/controller.py"):
        names |= set(re.findall(r'"(hami_scheduler_[a-z_]+)":', (ROOT / path).read_text()))
    doc = _documented()
    missing = sorted(n for n in names if n.startswith("hami_") and not n.endswith("_created")
                     and not re.search(rf"\b{n}(_total)?\b", doc))
    assert len(names) >= 50 and not missing, f"exported, not in docs/monitor.md: {missing}"
