"""Fake GPUs from a YAML file, re-read whenever the file changes (checked on every call).

Format (docs/architecture.md, "Fake GPU file"):

    gpus:
      - uuid: GPU-0d4c6a5e-0000-4000-8000-000000000001   # required
        model: NVIDIA A100-SXM4-80GB                     # default "NVIDIA Fake GPU"
        memory_mib: 81920                                # required
        numa: 0                                          # default 0
        healthy: true                                    # default true
        index: 0                                         # default: position in the list
        memory_used_mib: 0                               # default 0
        utilization: 0                                   # percent, default 0
        processes:                                       # default []: per-process samples
          - {pid: 1234, sm_util: 40, memory_mib: 1000}

One file can serve several nodes of an embedded cluster: `nodes: {node-a: {gpus: [...]}, ...}`;
the backend then reads the entry of its own node name. A file edit that does not parse keeps the
last good list (and `last_error` says why); the very first read raises `GpuBackendError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hami.gpu.backend import GpuBackendError, GpuInfo

DEFAULT_MODEL = "NVIDIA Fake GPU"


@dataclass(frozen=True, slots=True)
class FakeProcess:
    pid: int
    sm_util: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class FakeGpu:
    info: GpuInfo
    processes: tuple[FakeProcess, ...] = ()


def _int(value: Any, field: str, source: str, *, minimum: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GpuBackendError(f"fake GPU file {source}: {field}: got {value!r}, expected an integer")
    if minimum is not None and value < minimum:
        raise GpuBackendError(f"fake GPU file {source}: {field}: got {value!r}, expected an integer >= {minimum}")
    return value


def _gpu_list(doc: Any, source: str, node_name: str) -> tuple[list[Any], str]:
    if not isinstance(doc, dict):
        raise GpuBackendError(f"fake GPU file {source}: (top level): expected a mapping with `gpus:` or `nodes:`")
    if "nodes" in doc and node_name:
        nodes = doc["nodes"]
        if not isinstance(nodes, dict):
            raise GpuBackendError(f"fake GPU file {source}: nodes: expected a mapping node name -> gpus")
        entry = nodes.get(node_name)
        if entry is None:
            if "gpus" in doc:
                return doc["gpus"], "gpus"
            return [], f"nodes.{node_name}"
        if isinstance(entry, dict):
            return entry.get("gpus") or [], f"nodes.{node_name}.gpus"
        return entry, f"nodes.{node_name}"
    gpus = doc.get("gpus")
    if gpus is None and not node_name and isinstance(doc.get("nodes"), dict):
        # No node given (the embedded cluster's monitor): every node's GPUs, in file order.
        merged: list[Any] = []
        for entry in doc["nodes"].values():
            items = entry.get("gpus") if isinstance(entry, dict) else entry
            if isinstance(items, list):
                merged.extend(items)
        return merged, "nodes.*.gpus"
    return ([] if gpus is None else gpus), "gpus"


def parse_fake_gpus(doc: Any, source: str = "<fake>", node_name: str = "") -> list[FakeGpu]:
    """Validate a parsed fake GPU document; raise GpuBackendError naming the field on bad input."""
    items, where = _gpu_list(doc, source, node_name)
    if not isinstance(items, list):
        raise GpuBackendError(f"fake GPU file {source}: {where}: got {items!r}, expected a list")
    out: list[FakeGpu] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        key = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise GpuBackendError(f"fake GPU file {source}: {key}: got {item!r}, expected a mapping")
        uuid = item.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            raise GpuBackendError(f"fake GPU file {source}: {key}.uuid: got {uuid!r}, expected a non-empty string")
        if uuid in seen:
            raise GpuBackendError(f"fake GPU file {source}: {key}.uuid: duplicate {uuid!r}")
        seen.add(uuid)
        model = item.get("model", DEFAULT_MODEL)
        if not isinstance(model, str) or not model:
            raise GpuBackendError(f"fake GPU file {source}: {key}.model: got {model!r}, expected a string")
        if "memory_mib" not in item:
            raise GpuBackendError(f"fake GPU file {source}: {key}.memory_mib: missing (required)")
        memory = _int(item["memory_mib"], f"{key}.memory_mib", source)
        healthy = item.get("healthy", True)
        if not isinstance(healthy, bool):
            raise GpuBackendError(f"fake GPU file {source}: {key}.healthy: got {healthy!r}, expected a boolean")
        procs = item.get("processes") or []
        if not isinstance(procs, list):
            raise GpuBackendError(f"fake GPU file {source}: {key}.processes: got {procs!r}, expected a list")
        processes = []
        for j, p in enumerate(procs):
            pkey = f"{key}.processes[{j}]"
            if not isinstance(p, dict):
                raise GpuBackendError(f"fake GPU file {source}: {pkey}: got {p!r}, expected a mapping")
            processes.append(
                FakeProcess(
                    pid=_int(p.get("pid"), f"{pkey}.pid", source, minimum=1),
                    sm_util=_int(p.get("sm_util", 0), f"{pkey}.sm_util", source),
                    memory_mib=_int(p.get("memory_mib", 0), f"{pkey}.memory_mib", source),
                )
            )
        used = item.get("memory_used_mib")
        if used is None:
            used = sum(p.memory_mib for p in processes)
        info = GpuInfo(
            uuid=uuid,
            index=_int(item.get("index", i), f"{key}.index", source),
            name=model,
            memory_total_mib=memory,
            memory_used_mib=_int(used, f"{key}.memory_used_mib", source),
            numa=_int(item.get("numa", 0), f"{key}.numa", source),
            healthy=healthy,
            utilization=_int(item.get("utilization", 0), f"{key}.utilization", source),
            memory_utilization=_int(item.get("memory_utilization", 0), f"{key}.memory_utilization", source),
            minor=_int(item.get("minor", item.get("index", i)), f"{key}.minor", source),
        )
        out.append(FakeGpu(info, tuple(processes)))
    out.sort(key=lambda g: g.info.index)
    return out


class FakeBackend:
    """GPUs described by a YAML file; edits are picked up on the next call."""

    name = "fake"

    def __init__(self, path: str, node_name: str = ""):
        self.path = path
        self.node_name = node_name
        self.last_error: str = ""
        self._stamp: tuple[int, int, int] | None = None
        self._gpus: list[FakeGpu] = []
        self._load(first=True)

    def _load(self, first: bool = False) -> None:
        import yaml

        try:
            st = os.stat(self.path)
        except OSError as exc:
            if first:
                raise GpuBackendError(f"fake GPU file {self.path}: cannot read ({exc.strerror})") from None
            self.last_error = f"cannot read ({exc.strerror})"
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            with open(self.path, "rb") as fh:
                doc = yaml.safe_load(fh.read())
            gpus = parse_fake_gpus(doc, self.path, self.node_name)
        except (OSError, yaml.YAMLError, GpuBackendError, RecursionError) as exc:  # Recursion: deep nesting
            if first:
                if isinstance(exc, GpuBackendError):
                    raise
                raise GpuBackendError(f"fake GPU file {self.path}: {str(exc).splitlines()[0]}") from None
            self.last_error = str(exc)
            return
        self._stamp = stamp
        self._gpus = gpus
        self.last_error = ""

    def list_gpus(self) -> list[GpuInfo]:
        self._load()
        return [g.info for g in self._gpus]

    def process_utilization(self, uuid: str) -> dict[int, int]:
        self._load()
        for g in self._gpus:
            if g.info.uuid == uuid:
                return {p.pid: p.sm_util for p in g.processes}
        return {}

    def process_memory(self, uuid: str) -> dict[int, int]:
        """host PID -> used MiB on GPU `uuid` (fake only; NVML has the same via running processes)."""
        self._load()
        for g in self._gpus:
            if g.info.uuid == uuid:
                return {p.pid: p.memory_mib for p in g.processes}
        return {}

    def close(self) -> None:
        pass
