"""GPU health metrics of the monitor (docs/monitor.md, "GPU health"), over the real Prometheus
exposition of the collector with fake GPUs driven through the fake GPU file.

Covers: every metric of a fully reporting GPU with its value in base units (Hz, watts, celsius),
XID events per code, one throttle series per reason bit; fields a GPU does not report are absent
for that GPU (never 0) while the other GPU still has them; a GPU removed from the node disappears
from every health metric on the next scrape and a GPU added appears; a backend whose health read
fails costs only the health metrics (warned once), and a backend without telemetry yields none.
"""

from __future__ import annotations

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hami.gpu.fake import FakeBackend
from hami.monitor.metrics import MonitorCollector, render

U0 = "GPU-00000000-0000-4000-8000-000000000000"
U1 = "GPU-11111111-0000-4000-8000-000000000001"
FULL = {"temperature_c": 83, "power_w": 312.5, "power_limit_w": 400, "sm_clock_mhz": 1410, "mem_clock_mhz": 1593,
        "ecc_corrected": 12, "ecc_uncorrected": 2, "pcie_replays": 5,
        "throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"], "xids": {79: 3, 48: 1}}


def write(path, gpus):
    path.write_text(yaml.safe_dump({"gpus": gpus}) + "#" * len(gpus) + "\n")


def gpu(uuid, index, telemetry=None):
    g = {"uuid": uuid, "index": index, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960}
    if telemetry is not None:
        g["telemetry"] = telemetry
    return g


def scrape(tmp_path, backend, warn=None) -> dict[str, list]:
    reg = CollectorRegistry(auto_describe=False)
    col = MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="node-1", pods=lambda: [],
                           backend=backend, proc_root=str(tmp_path / "proc"), warn=warn)
    reg.register(col)
    text = render(reg.collect()).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def by_uuid(samples, uuid, **extra):
    return [s.value for s in samples if s.labels.get("device_uuid") == uuid
            and all(s.labels.get(k) == v for k, v in extra.items())]


def test_full_gpu_exports_every_health_metric_in_base_units(tmp_path):
    path = tmp_path / "gpus.yaml"
    write(path, [gpu(U0, 0, FULL)])
    m = scrape(tmp_path, FakeBackend(str(path)))
    s = m["hami_gpu_temperature_celsius"][0]
    assert s.value == 83 and s.labels == {"node": "node-1", "device_index": "0", "device_uuid": U0,
                                          "device_type": "NVIDIA A100-SXM4-40GB"}
    assert by_uuid(m["hami_gpu_power_usage_watts"], U0) == [312.5]
    assert by_uuid(m["hami_gpu_power_limit_watts"], U0) == [400]
    assert by_uuid(m["hami_gpu_sm_clock_hertz"], U0) == [1.41e9]
    assert by_uuid(m["hami_gpu_memory_clock_hertz"], U0) == [1.593e9]
    assert by_uuid(m["hami_gpu_ecc_corrected_errors"], U0) == [12]
    assert by_uuid(m["hami_gpu_ecc_uncorrected_errors"], U0) == [2]
    assert by_uuid(m["hami_gpu_pcie_replay_errors"], U0) == [5]
    assert by_uuid(m["hami_gpu_xid_errors"], U0, xid="79") == [3]
    assert by_uuid(m["hami_gpu_xid_errors"], U0, xid="48") == [1]
    throttle = {s.labels["reason"]: s.value for s in m["hami_gpu_clock_throttle_reason"]}
    assert throttle["sw_power_cap"] == 1 and throttle["hw_thermal_slowdown"] == 1 and throttle["gpu_idle"] == 0


def test_unsupported_fields_are_absent_not_zero(tmp_path):
    path = tmp_path / "gpus.yaml"
    write(path, [gpu(U0, 0, FULL), gpu(U1, 1, {"temperature_c": 40})])
    m = scrape(tmp_path, FakeBackend(str(path)))
    assert by_uuid(m["hami_gpu_temperature_celsius"], U1) == [40]
    for name in ("hami_gpu_power_usage_watts", "hami_gpu_power_limit_watts", "hami_gpu_sm_clock_hertz",
                 "hami_gpu_memory_clock_hertz", "hami_gpu_ecc_corrected_errors", "hami_gpu_ecc_uncorrected_errors",
                 "hami_gpu_pcie_replay_errors", "hami_gpu_xid_errors", "hami_gpu_clock_throttle_reason"):
        assert by_uuid(m[name], U1) == [], name
        assert by_uuid(m[name], U0), name


def test_health_metrics_appear_and_disappear_with_the_gpu(tmp_path):
    path = tmp_path / "gpus.yaml"
    write(path, [gpu(U0, 0, FULL)])
    backend = FakeBackend(str(path))
    assert by_uuid(scrape(tmp_path, backend)["hami_gpu_temperature_celsius"], U1) == []
    write(path, [gpu(U0, 0, FULL), gpu(U1, 1, FULL)])
    assert by_uuid(scrape(tmp_path, backend)["hami_gpu_temperature_celsius"], U1) == [83]
    write(path, [gpu(U1, 0, FULL)])
    m = scrape(tmp_path, backend)
    for name in ("hami_gpu_temperature_celsius", "hami_gpu_xid_errors", "hami_gpu_clock_throttle_reason"):
        assert by_uuid(m[name], U0) == [], name
        assert by_uuid(m[name], U1), name


def test_failing_health_read_costs_only_health_metrics(tmp_path):
    path = tmp_path / "gpus.yaml"
    write(path, [gpu(U0, 0, FULL)])

    class Broken(FakeBackend):
        def health(self):
            raise RuntimeError("nvml: GPU is lost")

    warnings = []
    m = scrape(tmp_path, Broken(str(path)), warn=lambda msg, **kw: warnings.append((msg, kw)))
    assert m["hami_gpu_temperature_celsius"] == [] and len(m["hami_host_gpu_utilization_ratio"]) == 1
    assert [w[0] for w in warnings] == ["GPU backend: reading GPU health failed"]


def test_gpu_without_telemetry_has_no_health_series(tmp_path):
    path = tmp_path / "gpus.yaml"
    write(path, [gpu(U0, 0)])
    m = scrape(tmp_path, FakeBackend(str(path)))
    assert all(m[name] == [] for name in m if name.startswith("hami_gpu_"))
