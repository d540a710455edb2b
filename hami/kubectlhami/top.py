"""`kubectl hami top {nodes,gpus,pods}` rows, from the API's objects and the monitors' metrics. Pure.

Allocation comes from the nodes' register annotations (each GPU's split count, memory and cores) and the
placed pods' device annotations (hami.ui.view.cluster_view, the UI's join); use from the monitors'
`hami_vgpu_memory_used_bytes` and `hami_vgpu_core_used_percent` per (namespace, pod, device UUID).
A figure nobody reported is None (shown "-"), never 0. Names and labels are tenant input: kept as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from hami.ui.view import MIB, ClusterView

MEMORY_USED = "hami_vgpu_memory_used_bytes"
CORES_USED = "hami_vgpu_core_used_percent"


class MetricsError(ValueError):
    pass


@dataclass
class Measured:
    """What the monitors say each slice uses: (namespace, pod, device uuid) -> bytes / percent."""

    memory: dict[tuple[str, str, str], int] = field(default_factory=dict)
    cores: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def add(self, text: str, source: str) -> None:
        try:
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    if s.name not in (MEMORY_USED, CORES_USED):
                        continue
                    key = (s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("device_uuid", ""))
                    if s.name == MEMORY_USED:
                        self.memory[key] = self.memory.get(key, 0) + int(s.value)
                    else:
                        self.cores[key] = self.cores.get(key, 0.0) + float(s.value)
        except (ValueError, TypeError, IndexError) as exc:
            raise MetricsError(f"{source}: not a Prometheus text exposition: {exc}") from None


def _sum(values: Iterable[float | int | None]) -> float | int | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def gpu_rows(view: ClusterView, measured: Measured) -> list[dict]:
    rows = []
    for card in view.cards:
        keys = [(s.namespace, s.pod, card.uuid) for s in card.slices]
        used = _sum(measured.memory.get(k) for k in dict.fromkeys(keys))
        cores = _sum(measured.cores.get(k) for k in dict.fromkeys(keys))
        rows.append({
            "node": card.node, "index": card.index, "uuid": card.uuid, "model": card.model,
            "healthy": card.healthy,
            "slices": len(card.slices), "split": card.slots,
            "memory_mib": card.mem, "memory_allocated_mib": card.mem_allocated,
            "memory_used_mib": None if used is None else int(used) // MIB,
            "cores": card.cores, "cores_allocated": card.cores_allocated,
            "cores_used": None if cores is None else round(float(cores), 1),
        })
    return rows


def node_rows(view: ClusterView, measured: Measured) -> list[dict]:
    by_node: dict[str, list[dict]] = {}
    for row in gpu_rows(view, measured):
        by_node.setdefault(row["node"], []).append(row)
    out = []
    for node in view.nodes:
        gpus = by_node.get(node.name, [])
        out.append({
            "node": node.name, "healthy": node.health.healthy, "problems": list(node.health.problems),
            "gpus": len(gpus), "slices": sum(g["slices"] for g in gpus), "split": sum(g["split"] for g in gpus),
            "memory_mib": sum(g["memory_mib"] for g in gpus),
            "memory_allocated_mib": sum(g["memory_allocated_mib"] for g in gpus),
            "memory_used_mib": _sum(g["memory_used_mib"] for g in gpus),
            "cores": sum(g["cores"] for g in gpus), "cores_allocated": sum(g["cores_allocated"] for g in gpus),
            "cores_used": _sum(g["cores_used"] for g in gpus),
        })
    return out


def pod_rows(view: ClusterView, measured: Measured, namespace: str | None) -> list[dict]:
    """One row per (pod, GPU) share; `namespace` None = every namespace (-A)."""
    rows = []
    for card in view.cards:
        seen: dict[tuple[str, str], dict] = {}
        for s in card.slices:
            if namespace is not None and s.namespace != namespace:
                continue
            key = (s.namespace, s.pod)
            row = seen.get(key)
            if row is None:
                used = measured.memory.get((s.namespace, s.pod, card.uuid))
                cores = measured.cores.get((s.namespace, s.pod, card.uuid))
                row = seen[key] = {
                    "namespace": s.namespace, "pod": s.pod, "node": card.node, "gpu": card.index,
                    "uuid": card.uuid, "memory_allocated_mib": 0, "cores_allocated": 0,
                    "memory_used_mib": None if used is None else used // MIB,
                    "cores_used": None if cores is None else round(cores, 1),
                }
                rows.append(row)
            row["memory_allocated_mib"] += s.mem
            row["cores_allocated"] += s.cores
    return sorted(rows, key=lambda r: (r["namespace"], r["pod"], r["node"], r["gpu"]))


# ------------------------------------------------------------------ tables

def _fig(v) -> str:
    return "-" if v is None else str(v)


def _pct(part, whole) -> str:
    return "-" if part is None or not whole else f"{100 * part / whole:.0f}%"


TABLES: dict[str, tuple[tuple[str, ...], object]] = {
    "gpus": (("NODE", "GPU", "MODEL", "SLICES", "MEMORY(ALLOC/USED/TOTAL MiB)", "ALLOC%", "CORES(ALLOC/USED %)",
              "HEALTH"),
             lambda r: (r["node"], str(r["index"]), r["model"], f"{r['slices']}/{r['split']}",
                        f"{r['memory_allocated_mib']}/{_fig(r['memory_used_mib'])}/{r['memory_mib']}",
                        _pct(r["memory_allocated_mib"], r["memory_mib"]),
                        f"{r['cores_allocated']}/{_fig(r['cores_used'])}",
                        "ok" if r["healthy"] else "unhealthy")),
    "nodes": (("NODE", "GPUS", "SLICES", "MEMORY(ALLOC/USED/TOTAL MiB)", "ALLOC%", "CORES(ALLOC/USED/TOTAL %)",
               "HEALTH"),
              lambda r: (r["node"], str(r["gpus"]), f"{r['slices']}/{r['split']}",
                         f"{r['memory_allocated_mib']}/{_fig(r['memory_used_mib'])}/{r['memory_mib']}",
                         _pct(r["memory_allocated_mib"], r["memory_mib"]),
                         f"{r['cores_allocated']}/{_fig(r['cores_used'])}/{r['cores']}",
                         "ok" if r["healthy"] else "; ".join(r["problems"]) or "unhealthy")),
    "pods": (("NAMESPACE", "POD", "NODE", "GPU", "MEMORY(ALLOC/USED MiB)", "CORES(ALLOC/USED %)"),
             lambda r: (r["namespace"], r["pod"], r["node"], str(r["gpu"]),
                        f"{r['memory_allocated_mib']}/{_fig(r['memory_used_mib'])}",
                        f"{r['cores_allocated']}/{_fig(r['cores_used'])}")),
}


def table(kind: str, rows: list[Mapping], with_namespace: bool = True) -> str:
    """kubectl's layout: upper-case headers, columns padded to the widest cell, three spaces apart."""
    headers, cells = TABLES[kind]
    body = [cells(r) for r in rows]  # type: ignore[operator]
    if kind == "pods" and not with_namespace:
        headers, body = headers[1:], [b[1:] for b in body]
    if not body:
        return "No GPU pods found." if kind == "pods" else f"No GPU {kind} found."
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in (headers, *body)]
    return "\n".join(lines)
