"""GPU health metrics (temperature, power, clocks, ECC, XIDs, throttling, PCIe replays), one
sample per GPU per scrape from the backend's `health()` (hami.gpu.health).

Names follow DCGM-exporter's fields in Prometheus base units (docs/monitor.md has the mapping).
A value the GPU does not report (None) is left out for that GPU, never exported as 0; a GPU that
disappears from the backend disappears from the metrics on the next scrape. Pure: samples in,
metric families out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hami.device.model import device_type_label
from hami.gpu.health import GpuHealth, throttle_flags

LABELS = ["node", "device_index", "device_uuid", "device_type"]

# name -> (kind, help, GpuHealth field, scale)
GAUGES = {
    "hami_gpu_temperature_celsius": ("GPU temperature (DCGM_FI_DEV_GPU_TEMP)", "temperature_c", 1),
    "hami_gpu_power_usage_watts": ("GPU power draw (DCGM_FI_DEV_POWER_USAGE)", "power_w", 1),
    "hami_gpu_power_limit_watts": ("Enforced GPU power limit (DCGM_FI_DEV_ENFORCED_POWER_LIMIT)", "power_limit_w", 1),
    "hami_gpu_sm_clock_hertz": ("SM clock (DCGM_FI_DEV_SM_CLOCK, in Hz)", "sm_clock_mhz", 1_000_000),
    "hami_gpu_memory_clock_hertz": ("Memory clock (DCGM_FI_DEV_MEM_CLOCK, in Hz)", "mem_clock_mhz", 1_000_000),
}
COUNTERS = {
    "hami_gpu_ecc_corrected_errors": (
        "Corrected (single-bit) ECC errors since the driver loaded (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)", "ecc_corrected"),
    "hami_gpu_ecc_uncorrected_errors": (
        "Uncorrected (double-bit) ECC errors since the driver loaded (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
        "ecc_uncorrected"),
    "hami_gpu_pcie_replay_errors": ("PCIe replay counter (DCGM_FI_DEV_PCIE_REPLAY_COUNTER)", "pcie_replays"),
}
XID = "hami_gpu_xid_errors"
THROTTLE = "hami_gpu_clock_throttle_reason"


def health_families(samples: Iterable[tuple[str, GpuHealth, Sequence[str]]]) -> list[Metric]:
    """Families for (node, sample, [device_index, device_type]) triples; every family is present
    (HELP/TYPE) even without samples."""
    gauges = {n: GaugeMetricFamily(n, doc, labels=LABELS) for n, (doc, _, _) in GAUGES.items()}
    counters = {n: CounterMetricFamily(n, doc, labels=LABELS) for n, (doc, _) in COUNTERS.items()}
    xid = CounterMetricFamily(XID, "XID events seen by the GPU backend since it started, by XID code "
                                   "(DCGM_FI_DEV_XID_ERRORS)", labels=[*LABELS, "xid"])
    throttle = GaugeMetricFamily(THROTTLE, "1 when the clocks are held down for this reason "
                                           "(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, one series per bit)",
                                 labels=[*LABELS, "reason"])
    for node, h, (index, dtype) in samples:
        labels = [node, index, h.uuid, dtype]
        for name, (_, field, scale) in GAUGES.items():
            value = getattr(h, field)
            if value is not None:
                gauges[name].add_metric(labels, value * scale)
        for name, (_, field) in COUNTERS.items():
            value = getattr(h, field)
            if value is not None:
                counters[name].add_metric(labels, value)
        for code, n in sorted(h.xid_counts.items()):
            xid.add_metric([*labels, str(code)], n)
        if h.throttle_reasons is not None:
            for reason, on in throttle_flags(h.throttle_reasons).items():
                throttle.add_metric([*labels, reason], on)
    return [*gauges.values(), *counters.values(), xid, throttle]


def gpu_labels(gpus: Iterable) -> Mapping[str, tuple[str, str]]:
    """uuid -> (device_index, device_type) from the backend's GpuInfo list."""
    return {g.uuid: (str(g.index), device_type_label("NVIDIA-" + g.name)) for g in gpus}
