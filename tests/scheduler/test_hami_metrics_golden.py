"""The scheduler's HAMi-named metrics, pinned to what HAMi v2.10.0 prints for a fixed cluster.

Golden: tests/scheduler/data/hami_v210_scheduler_metrics.prom, derived from HAMi v2.10.0 (tag commit
4707fb02) cmd/scheduler/metrics.go, ClusterManagerCollector.Collect:
  - lines 107-146: the non-legacy families and their label names; 160-199: the legacy ones
    (`devicetype` on every legacy device family but `nodeGPUMemoryPercentage`, lines 163-193);
  - lines 250, 259, 272, 275: `device_cores` / `devicecores` is `Device.Totalcore`, the card's TOTAL
    cores (raw compute units on AMD), never the allocation;
  - lines 204, 247, 256, 58-63: AMD core limit 100 and allocation a ceiling percentage, legacy raw (271, 274);
  - lines 263, 276: the memory ratio is left out for a card with no memory;
  - lines 205-241: MIG info only for a `mig` card's RuntimeReady allocations (scheduler.go:731: MIG
    UUID and both instance ids set); legacy `nodeGPUMigInstance{migname="<profile>-<gi>"}`;
  - lines 304-316: quota usage for every tracked entry (`limit="0"` without a limit), the limit
    series only when a limit is set (pkg/device/quota.go LimitSet);
  - lines 364-391: container families skip an empty UUID; the legacy ones take the same values
    under the legacy label names; AMD's container ratio normalised, legacy raw;
  - line 409: `zone="vGPU"` on all of them (NewClusterManager's wrapped registerer).

Covers: with --legacy-metrics every family of the golden has the same name, HELP, type, label
names and values in our exposition (the one addition, `device_type` on the two container
families, is checked against the card's registered type and then set aside); without
it the legacy names are absent and the others unchanged; the shipped Grafana dashboard's
selectors and legends on these families only name labels the families carry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hami.device.model import DeviceUsage, device_type_label
from hami.scheduler.metrics import MigInstance, PodAlloc, QuotaUse, SchedulerMetrics, Snapshot

GOLDEN = Path(__file__).parent / "data" / "hami_v210_scheduler_metrics.prom"
DASHBOARD = Path(__file__).parents[2] / "deploy" / "helm" / "hami" / "files" / "grafana-dashboard.json"
NV = "NVIDIA-NVIDIA A100-SXM4-40GB"
AMD = "AMD Instinct MI300X VF"
LEGACY = {"GPUDeviceMemoryLimit", "GPUDeviceCoreLimit", "GPUDeviceMemoryAllocated", "GPUDeviceSharedNum",
          "GPUDeviceCoreAllocated", "nodeGPUOverview", "nodeGPUMemoryPercentage", "nodeGPUMigInstance",
          "vGPUMemoryAllocated", "vGPUCoreAllocated", "QuotaUsed"}
CONTAINER = ("hami_vgpu_memory_allocated_bytes", "hami_vgpu_core_allocated_ratio")

SNAPSHOT = Snapshot(
    devices=(
        ("node-a", DeviceUsage("GPU-0", 0, 10, 40960, 100, NV, mode="hami-core", used=2, usedmem=6144,
                               usedcores=50)),
        ("node-a", DeviceUsage("GPU-1", 1, 10, 40960, 100, NV, mode="mig", used=1, usedmem=5120)),
        ("node-b", DeviceUsage("AMD-0", 0, 4, 196608, 304, AMD, mode="hami-core", used=1, usedmem=49152,
                               usedcores=76, vendor="AMD")),
        ("node-b", DeviceUsage("MLU-0", 1, 1, 0, 100, "MLU", vendor="MLU")),  # registered no memory
    ),
    pods=(
        PodAlloc("default", "node-a", "train", 0, "GPU-0", 4096, 30, NV),
        PodAlloc("default", "node-a", "train", 1, "GPU-0", 2048, 20, NV),
        PodAlloc("default", "node-a", "mig", 0, "GPU-1", 5120, 0, NV),
        PodAlloc("team", "node-b", "amd", 0, "AMD-0", 49152, 76, AMD),
        PodAlloc("team", "node-b", "ghost", 0, "", 1024, 10, NV),  # no UUID: left out
    ),
    quotas=(QuotaUse("default", "nvidia.com/gpucores", 50, 0), QuotaUse("default", "nvidia.com/gpumem", 11264, 20000)),
    migs=(
        MigInstance("node-a", "GPU-1", 1, "MIG-aaa", "3g.20gb", "2", "0", 4, 4),
        MigInstance("node-a", "GPU-1", 1, "", "1g.5gb", "", "", 0, 1),  # not created yet: left out
    ),
)


def _families(text: str) -> dict[str, tuple[str, str, set]]:
    """name -> (type, HELP, {(sample name, sorted labels, value)})."""
    return {f.name: (f.type, f.documentation, {(s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples})
            for f in text_string_to_metric_families(text)}


def _ours(legacy: bool) -> dict[str, tuple[str, str, set]]:
    # HAMi labels by UUID: hami does too with --metrics-device-uuids (off by default).
    metrics = SchedulerMetrics(lambda: SNAPSHOT, lambda: {}, legacy=legacy, device_uuids=True)
    return _families(metrics.exposition().decode())


def _without_device_type(family: tuple[str, str, set]) -> tuple[str, str, set]:
    kind, doc, samples = family
    # device_type and container (the container's name beside HAMi's container_index) are ours
    return kind, doc, {(n, tuple(kv for kv in labels if kv[0] not in ("device_type", "container")), v)
                       for n, labels, v in samples}


def _card_name_once(family: tuple[str, str, set]) -> tuple[str, str, set]:
    """HAMi's family with `device_type` as hami prints it: the card's name once (HAMi #2990 doubles it)."""
    kind, doc, samples = family
    return kind, doc, {(n, tuple((k, device_type_label(v) if k == "device_type" else v) for k, v in labels), v)
                       for n, labels, v in samples}


def test_exposition_matches_hami_v210_with_legacy_metrics():
    golden = {name: (family if name in LEGACY else _card_name_once(family))
              for name, family in _families(GOLDEN.read_text()).items()}
    ours = _ours(legacy=True)
    assert set(golden) <= set(ours), set(golden) - set(ours)
    card_type = {d.id: device_type_label(d.type) for _, d in SNAPSHOT.devices}
    for name in CONTAINER:
        for _, labels, _ in ours[name][2]:
            labels = dict(labels)
            assert labels["device_type"] == card_type[labels["device_uuid"]], (name, labels)
        ours[name] = _without_device_type(ours[name])
    for name, family in golden.items():
        assert ours[name] == family, (name, ours[name][2] ^ family[2])


def test_device_type_is_the_cards_name_once_and_the_legacy_families_keep_hamis():
    ours = _ours(legacy=True)
    current = {dict(labels)["device_type"] for name, fam in ours.items() if name.startswith("hami_")
               for _, labels, _ in fam[2] if "device_type" in dict(labels)}
    assert "NVIDIA A100-SXM4-40GB" in current and not any(t.startswith("NVIDIA-NVIDIA") for t in current)
    assert {dict(labels)["devicetype"] for _, labels, _ in ours["GPUDeviceSharedNum"][2]} >= {NV}  # HAMi's, as is
    assert device_type_label("NVIDIA-Tesla T4") == "NVIDIA-Tesla T4" and device_type_label("MLU") == "MLU"


def test_device_cores_is_the_cards_total_not_its_allocation():
    ours = _ours(legacy=True)
    for name, label in (("hami_gpu_memory_allocated_bytes", "device_cores"), ("hami_node_gpu_overview", "device_cores"),
                        ("GPUDeviceMemoryAllocated", "devicecores"), ("nodeGPUOverview", "devicecores")):
        cores = {dict(labels).get("device_uuid", dict(labels).get("deviceuuid")): dict(labels)[label]
                 for _, labels, _ in ours[name][2]}
        assert cores == {"GPU-0": "100", "GPU-1": "100", "AMD-0": "304", "MLU-0": "100"}, name


def test_without_legacy_metrics_only_the_current_names():
    golden = _families(GOLDEN.read_text())
    ours = _ours(legacy=False)
    assert not LEGACY & set(ours)
    assert LEGACY <= set(golden)  # the golden really covers every legacy family
    for name in set(golden) - LEGACY:
        want = _card_name_once(golden[name])
        got = _without_device_type(ours[name]) if name in CONTAINER else ours[name]
        assert got == (_without_device_type(want) if name in CONTAINER else want), name


_SELECTOR = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_NAME = re.compile(r"\b[A-Za-z_:][A-Za-z0-9_:]*\b")


def _panels(node):
    if isinstance(node, dict):
        if "targets" in node:
            yield node
        for value in node.values():
            yield from _panels(value)
    elif isinstance(node, list):
        for value in node:
            yield from _panels(value)


def test_shipped_dashboard_uses_only_labels_the_scheduler_families_carry():
    labels_of: dict[str, set[str]] = {}
    for name, (_, _, samples) in _ours(legacy=True).items():
        for _, labels, _ in samples:
            labels_of.setdefault(name, set()).update(k for k, _ in labels)
    scheduler = set(_families(GOLDEN.read_text()))
    checked = 0
    for panel in _panels(json.loads(DASHBOARD.read_text())):
        for target in panel["targets"]:
            expr = target.get("expr", "")
            names = {w for w in _NAME.findall(expr) if w.startswith(("hami_", "kube_")) or w in LEGACY}
            used = names & scheduler
            if not used:
                continue
            for name, matchers in _SELECTOR.findall(expr):
                if name in scheduler:
                    assert set(_MATCHER.findall(matchers)) <= labels_of[name], (expr, name)
                    checked += 1
            if names == used:  # only scheduler families: its groupings and legend name their labels
                known = set.union(*(labels_of[n] for n in used))
                for group in _GROUPING.findall(expr):
                    assert {g.strip() for g in group.split(",") if g.strip()} <= known, expr
                assert set(_LEGEND.findall(target.get("legendFormat", ""))) <= known, (expr, target)
    assert checked >= 3  # the dashboard does read the scheduler's families
