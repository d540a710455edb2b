"""AMD's core metrics as HAMi v2.10.0 exposes them (cmd/scheduler/metrics.go normalizeAMDCoreMetrics,
#2527; ported from metrics_test.go TestAMDCoreAllocatedRatioNormalization), through the real
Prometheus exposition of our collector.

Covers: an AMD card stores compute units (32 of 64 for a 50 % request), so its node core limit
reads 100 and its node and container core allocation ratios 50; the legacy metrics keep the raw
CU count; other vendors' values are untouched; an AMD card without cores keeps its raw values.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from hami.device.model import DeviceUsage
from hami.scheduler.metrics import PodAlloc, Snapshot, UsageCollector, amd_core_ratio

AMD_CARD = DeviceUsage(id="AMD-1", index=0, count=1, totalmem=192000, totalcore=64, type="AMDGPU",
                       mode="hami-core", usedcores=32, usedmem=96000, vendor="AMD")
NV_CARD = DeviceUsage(id="GPU-1", index=0, count=10, totalmem=40960, totalcore=100, type="NVIDIA A100",
                      usedcores=30, usedmem=1000)
SNAP = Snapshot(devices=(("node-1", AMD_CARD), ("node-2", NV_CARD)),
                pods=(PodAlloc("default", "node-1", "amd-pod", 0, "AMD-1", 96000, 32, device_type="AMD"),
                      PodAlloc("default", "node-2", "nv-pod", 0, "GPU-1", 1000, 30)))


def _scrape(legacy: bool) -> dict[str, float]:
    reg = CollectorRegistry()
    reg.register(UsageCollector(lambda: SNAP, legacy=legacy, device_uuids=True))  # keyed by UUID below
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def _one(samples: dict[str, float], name: str, uuid: str) -> float:
    [value] = [v for k, v in samples.items() if k.startswith(name + "{") and f'"{uuid}"' in k]
    return value


def test_amd_core_ratios_are_percentages_and_legacy_keeps_compute_units():
    s = _scrape(legacy=True)
    assert _one(s, "hami_gpu_core_allocated_ratio", "AMD-1") == 50
    assert _one(s, "hami_gpu_core_limit_ratio", "AMD-1") == 100
    assert _one(s, "hami_vgpu_core_allocated_ratio", "AMD-1") == 50
    assert _one(s, "GPUDeviceCoreAllocated", "AMD-1") == 32
    assert _one(s, "GPUDeviceCoreLimit", "AMD-1") == 64
    assert _one(s, "vGPUCoreAllocated", "AMD-1") == 32
    # Other vendors as before.
    assert _one(s, "hami_gpu_core_allocated_ratio", "GPU-1") == 30
    assert _one(s, "hami_gpu_core_limit_ratio", "GPU-1") == 100
    assert _one(s, "hami_vgpu_core_allocated_ratio", "GPU-1") == 30


def test_normalisation_rule():
    assert amd_core_ratio("AMD Instinct MI300X VF", 304, 76) == (100.0, 25.0)
    assert amd_core_ratio("amd", 304, 100) == (100.0, 33.0)  # ceil(32.89...)
    assert amd_core_ratio("AMDGPU", 0, 5) == (0.0, 5.0)  # no cores: raw
    assert amd_core_ratio("NVIDIA A100", 100, 30) == (100.0, 30.0)
