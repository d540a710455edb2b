"""The monitors' figures the UI shows, from Prometheus text or a Prometheus query answer. Pure.

`parse_exposition(text)` reads a monitor's /metrics: per (namespace, pod, device UUID) the bytes a slice
uses (`hami_vgpu_memory_used_bytes`), per GPU UUID the temperature and power. `parse_query(doc)` reads
the same from Prometheus's `/api/v1/query` answer for `hami_vgpu_memory_used_bytes`. Malformed input
raises MetricsError naming the source; the UI then shows the cluster without the live figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

USED = "hami_vgpu_memory_used_bytes"
TEMPERATURE = "hami_gpu_temperature_celsius"
POWER = "hami_gpu_power_usage_watts"


class MetricsError(ValueError):
    pass


@dataclass
class Figures:
    usage: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (ns, pod, uuid) -> bytes used
    health: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # uuid -> (C, W)
    sources: list[str] = field(default_factory=list)  # where they came from, for the page's footer
    errors: list[str] = field(default_factory=list)

    def merge(self, other: Figures) -> None:
        for key, value in other.usage.items():
            self.usage[key] = self.usage.get(key, 0) + value
        for uuid, (t, p) in other.health.items():
            old_t, old_p = self.health.get(uuid, (None, None))
            self.health[uuid] = (t if t is not None else old_t, p if p is not None else old_p)
        self.sources += other.sources
        self.errors += other.errors


def parse_exposition(text: str, source: str) -> Figures:
    out = Figures(sources=[source])
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == USED:
                    key = (s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("device_uuid", ""))
                    out.usage[key] = out.usage.get(key, 0) + int(s.value)
                elif s.name in (TEMPERATURE, POWER):
                    uuid = s.labels.get("device_uuid", "")
                    t, p = out.health.get(uuid, (None, None))
                    out.health[uuid] = (float(s.value), p) if s.name == TEMPERATURE else (t, float(s.value))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"{source}: not a Prometheus text exposition: {exc}") from None
    return out


def parse_query(doc: object, source: str) -> Figures:
    """Prometheus's answer to `hami_vgpu_memory_used_bytes` (a vector)."""
    out = Figures(sources=[source])
    try:
        if not isinstance(doc, Mapping) or doc.get("status") != "success":
            raise MetricsError(f"{source}: the query did not succeed")
        for r in doc["data"]["result"]:
            m = r["metric"]
            key = (m.get("namespace", ""), m.get("pod", ""), m.get("device_uuid", ""))
            out.usage[key] = out.usage.get(key, 0) + int(float(r["value"][1]))
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise MetricsError(f"{source}: not a Prometheus vector answer: {exc}") from None
    return out
