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
        bus_id: "0000:3b:00.0"                           # default: derived from the index
        compute_capability: "8.0"                        # versions a DRA slice publishes (default:
        driver_version: "580.65.06"                      # unknown, left out)
        cuda_driver_version: "13.0"
        nvlinks: {1: 4}                                  # direct NVLinks: peer index -> count
        nvswitch_links: 18                               # NVLinks to NVSwitches (all pairs meet)
        telemetry:                                       # health counters; a key left out is
          temperature_c: 45                              # "not supported" on this GPU
          power_w: 250.5
          power_limit_w: 400
          sm_clock_mhz: 1410
          mem_clock_mhz: 1593
          ecc_corrected: 0
          ecc_uncorrected: 0
          pcie_replays: 0
          throttle_reasons: [sw_power_cap]               # names from hami.gpu.health
          xids: {79: 1}                                  # XID code -> events seen
        mig:                                             # MIG-capable card (geometry by model)
          enabled: false                                 # MIG mode at start
          instances: [{profile: 1g.10gb, start: 0}]      # instances present at start (static MIG)

    topology:                                            # PCIe common ancestor per GPU pair
      default: system                                    # internal|single|multiple|hostbridge|node|system
      pairs: [{gpus: [0, 1], level: single}]

One file can serve several nodes of an embedded cluster: `nodes: {node-a: {gpus: [...]}, ...}`;
the backend then reads the entry of its own node name (its `topology:` too). A file edit that does
not parse keeps the last good list (and `last_error` says why); the very first read raises
`GpuBackendError`.

MIG state is the card's, not the file's: it is read from `mig:` the first time a GPU is seen and
then changed only through the MigControl calls (create, destroy, mode), as on real hardware; a
restarted agent that reuses the backend finds the instances it left.
"""

from __future__ import annotations

import os
import uuid as uuid_mod
from dataclasses import dataclass, field
from typing import Any

from hami.gpu.backend import GpuBackendError, GpuInfo
from hami.gpu.facts import GpuFacts
from hami.gpu.health import THROTTLE_BITS, GpuHealth
from hami.gpu.mig import MigError, MigInstance, MigProfileInfo, geometries, geometry_for_model, overlaps
from hami.gpu.topology import LEVELS, PairLink

DEFAULT_MODEL = "NVIDIA Fake GPU"


@dataclass(frozen=True, slots=True)
class FakeProcess:
    pid: int
    sm_util: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class FakeMig:
    enabled: bool = False
    instances: tuple[tuple[str, int], ...] = ()  # (profile, start) present at start


@dataclass(frozen=True, slots=True)
class FakeGpu:
    info: GpuInfo
    processes: tuple[FakeProcess, ...] = ()
    bus_id: str = ""
    nvlinks: tuple[tuple[int, int], ...] = ()  # (peer index, count)
    nvswitch_links: int = 0
    telemetry: GpuHealth | None = None
    mig: FakeMig | None = None  # None: not MIG-capable
    versions: tuple[str, str, str] = ("", "", "")  # compute capability, driver, CUDA driver ("": unknown)


_TELEMETRY_INT = ("temperature_c", "sm_clock_mhz", "mem_clock_mhz", "ecc_corrected", "ecc_uncorrected",
                  "pcie_replays")
_TELEMETRY_FLOAT = ("power_w", "power_limit_w")


def _telemetry(raw: Any, uuid: str, key: str, source: str) -> GpuHealth:
    if not isinstance(raw, dict):
        raise GpuBackendError(f"fake GPU file {source}: {key}: got {raw!r}, expected a mapping")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        k = f"{key}.{name}"
        if name in _TELEMETRY_INT:
            values[name] = _int(value, k, source)
        elif name in _TELEMETRY_FLOAT:
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise GpuBackendError(f"fake GPU file {source}: {k}: got {value!r}, expected a number >= 0")
            values[name] = float(value)
        elif name == "throttle_reasons":
            if not isinstance(value, list) or any(v not in THROTTLE_BITS for v in value):
                raise GpuBackendError(
                    f"fake GPU file {source}: {k}: got {value!r}, expected a list of {sorted(THROTTLE_BITS)}")
            mask = 0
            for v in value:
                mask |= THROTTLE_BITS[v]
            values[name] = mask
        elif name == "xids":
            if not isinstance(value, dict):
                raise GpuBackendError(f"fake GPU file {source}: {k}: got {value!r}, expected code -> count")
            values["xid_counts"] = {
                _int(c, f"{k} key", source): _int(n, f"{k}.{c}", source) for c, n in value.items()}
        else:
            raise GpuBackendError(f"fake GPU file {source}: {k}: unknown telemetry field")
    return GpuHealth(uuid=uuid, **values)


def _fake_mig(raw: Any, model: str, key: str, source: str) -> FakeMig:
    geometry = geometry_for_model(model)
    if geometry is None:
        raise GpuBackendError(
            f"fake GPU file {source}: {key}: model {model!r} has no MIG geometry "
            f"(known: {sorted(geometries())})")
    if not isinstance(raw, dict):
        raise GpuBackendError(f"fake GPU file {source}: {key}: got {raw!r}, expected a mapping")
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise GpuBackendError(f"fake GPU file {source}: {key}.enabled: got {enabled!r}, expected a boolean")
    names = {p.name for p in geometries()[geometry]}
    out = []
    for j, inst in enumerate(raw.get("instances") or []):
        ik = f"{key}.instances[{j}]"
        if not isinstance(inst, dict) or inst.get("profile") not in names:
            raise GpuBackendError(f"fake GPU file {source}: {ik}: got {inst!r}, expected {{profile: one of "
                                  f"{sorted(names)}, start: N}}")
        out.append((inst["profile"], _int(inst.get("start", 0), f"{ik}.start", source)))
    if out and not enabled:
        raise GpuBackendError(f"fake GPU file {source}: {key}.instances: MIG instances need enabled: true")
    return FakeMig(enabled, tuple(out))


def parse_topology(doc: Any, source: str = "<fake>", node_name: str = "") -> tuple[int | None, dict]:
    """`topology:` of the file (or of this node's entry): (default level, {(i, j): level})."""
    section = doc.get("topology") if isinstance(doc, dict) else None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if node_name and isinstance(nodes, dict) and isinstance(nodes.get(node_name), dict):
        section = nodes[node_name].get("topology", section)
    if section is None:
        return None, {}
    if not isinstance(section, dict):
        raise GpuBackendError(f"fake GPU file {source}: topology: got {section!r}, expected a mapping")

    def level(value: Any, key: str) -> int:
        if value not in LEVELS:
            raise GpuBackendError(f"fake GPU file {source}: {key}: got {value!r}, expected one of {list(LEVELS)}")
        return LEVELS[value]

    default = level(section.get("default", "system"), "topology.default")
    pairs: dict[tuple[int, int], int] = {}
    for i, p in enumerate(section.get("pairs") or []):
        key = f"topology.pairs[{i}]"
        gpus = p.get("gpus") if isinstance(p, dict) else None
        if not isinstance(gpus, list) or len(gpus) != 2:
            raise GpuBackendError(f"fake GPU file {source}: {key}.gpus: got {gpus!r}, expected [index, index]")
        a, b = (_int(g, f"{key}.gpus", source) for g in gpus)
        pairs[(a, b)] = pairs[(b, a)] = level(p.get("level"), f"{key}.level")
    return default, pairs


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
        nvlinks = item.get("nvlinks") or {}
        if not isinstance(nvlinks, dict):
            raise GpuBackendError(f"fake GPU file {source}: {key}.nvlinks: got {nvlinks!r}, expected index -> count")
        links = tuple((_int(p, f"{key}.nvlinks key", source), _int(n, f"{key}.nvlinks.{p}", source))
                      for p, n in nvlinks.items())
        bus_id = item.get("bus_id", f"0000:{0x10 + info.index:02x}:00.0")
        if not isinstance(bus_id, str):
            raise GpuBackendError(f"fake GPU file {source}: {key}.bus_id: got {bus_id!r}, expected a string")
        telemetry = item.get("telemetry")
        versions = []
        for name in ("compute_capability", "driver_version", "cuda_driver_version"):
            v = item.get(name, "")
            if not isinstance(v, str):
                raise GpuBackendError(f"fake GPU file {source}: {key}.{name}: got {v!r}, expected a string")
            versions.append(v)
        out.append(FakeGpu(
            info, tuple(processes), bus_id=bus_id, nvlinks=links,
            nvswitch_links=_int(item.get("nvswitch_links", 0), f"{key}.nvswitch_links", source),
            telemetry=None if telemetry is None else _telemetry(telemetry, uuid, f"{key}.telemetry", source),
            mig=None if "mig" not in item else _fake_mig(item["mig"] or {}, model, f"{key}.mig", source),
            versions=(versions[0], versions[1], versions[2]),
        ))
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
        self._topology: tuple[int | None, dict] = (None, {})
        self._mig: dict[str, _MigCard] = {}
        self._mig_serial = 0
        self._mig_busy: set[tuple[str, int]] = set()
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
            topology = parse_topology(doc, self.path, self.node_name)
        except (OSError, yaml.YAMLError, GpuBackendError, RecursionError) as exc:  # Recursion: deep nesting
            if first:
                if isinstance(exc, GpuBackendError):
                    raise
                raise GpuBackendError(f"fake GPU file {self.path}: {str(exc).splitlines()[0]}") from None
            self.last_error = str(exc)
            return
        self._stamp = stamp
        self._gpus = gpus
        self._topology = topology
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

    # ------------------------------------------------------------------ topology and health

    def links(self) -> dict[tuple[str, str], PairLink]:
        """PairLink for every ordered pair: the file's PCIe levels and NVLinks (direct, else switch)."""
        self._load()
        default, levels = self._topology
        out = {}
        for a in self._gpus:
            direct_a = dict(a.nvlinks)
            for b in self._gpus:
                if a is b:
                    continue
                n = direct_a.get(b.info.index, dict(b.nvlinks).get(a.info.index, 0))
                if not n and a.nvswitch_links and b.nvswitch_links:
                    n = min(a.nvswitch_links, b.nvswitch_links)
                out[(a.info.uuid, b.info.uuid)] = PairLink(levels.get((a.info.index, b.info.index), default), n)
        return out

    def facts(self) -> dict[str, GpuFacts]:
        """The file's `compute_capability`, `driver_version`, `cuda_driver_version` and `bus_id`."""
        self._load()
        return {g.info.uuid: GpuFacts(g.info.uuid, *g.versions, bus_id=g.bus_id) for g in self._gpus}

    def health(self) -> list[GpuHealth]:
        self._load()
        return [g.telemetry or GpuHealth(uuid=g.info.uuid) for g in self._gpus]

    # ------------------------------------------------------------------ MIG (MigControl)

    def _gpu(self, uuid: str) -> FakeGpu:
        self._load()
        for g in self._gpus:
            if g.info.uuid == uuid:
                return g
        raise MigError(f"fake: no GPU {uuid}")

    def _card(self, uuid: str) -> _MigCard:
        g = self._gpu(uuid)
        if g.mig is None:
            raise MigError(f"fake: GPU {uuid} ({g.info.name}) is not MIG-capable")
        card = self._mig.get(uuid)
        if card is None:
            card = self._mig[uuid] = _MigCard(enabled=g.mig.enabled)
            for profile, start in g.mig.instances:
                self._create(uuid, card, profile, start)
        return card

    def mig_capable(self, uuid: str) -> bool:
        return self._gpu(uuid).mig is not None

    def mig_enabled(self, uuid: str) -> bool:
        return self.mig_capable(uuid) and self._card(uuid).enabled

    def set_mig_mode(self, uuid: str, enabled: bool) -> None:
        card = self._card(uuid)
        if not enabled and card.instances:
            raise MigError(f"fake: GPU {uuid}: cannot disable MIG mode with {len(card.instances)} instance(s) live")
        card.enabled = enabled

    def mig_profiles(self, uuid: str) -> tuple[MigProfileInfo, ...]:
        g = self._gpu(uuid)
        if g.mig is None:
            return ()
        return geometries()[geometry_for_model(g.info.name) or ""]

    def mig_instances(self, uuid: str) -> tuple[MigInstance, ...]:
        if not self.mig_capable(uuid):
            return ()
        return tuple(sorted(self._card(uuid).instances.values(), key=lambda m: m.gpu_instance_id))

    def create_mig(self, uuid: str, profile: str, start: int) -> MigInstance:
        return self._create(uuid, self._card(uuid), profile, start)

    def _create(self, uuid: str, card: _MigCard, profile: str, start: int) -> MigInstance:
        if not card.enabled:
            raise MigError(f"fake: GPU {uuid}: MIG mode is disabled")
        prof = next((p for p in self.mig_profiles(uuid) if p.name == profile), None)
        if prof is None:
            raise MigError(f"fake: GPU {uuid}: unknown MIG profile {profile!r}")
        placement = next((pl for pl in prof.placements if pl[0] == start), None)
        if placement is None:
            raise MigError(f"fake: GPU {uuid}: profile {profile} cannot start at slice {start} "
                           f"(possible: {[p[0] for p in prof.placements]})")
        busy = [m for m in card.instances.values() if overlaps(m.placement, placement)]
        if busy:
            raise MigError(f"fake: GPU {uuid}: placement {placement} of {profile} overlaps instance "
                           f"{busy[0].profile}@{busy[0].start} (insufficient resources)")
        gi = next(i for i in range(1, 64) if i not in card.instances)
        self._mig_serial += 1
        mig_uuid = "MIG-" + str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, f"{uuid}/{gi}/{self._mig_serial}"))
        inst = MigInstance(uuid, gi, 0, profile, placement[0], placement[1], mig_uuid)
        card.instances[gi] = inst
        return inst

    def mig_busy(self, uuid: str, gpu_instance_id: int) -> bool:
        """Processes run on the instance (tests set it with `set_mig_busy`, as a process would)."""
        return (uuid, gpu_instance_id) in self._mig_busy

    def set_mig_busy(self, uuid: str, gpu_instance_id: int, busy: bool) -> None:
        (self._mig_busy.add if busy else self._mig_busy.discard)((uuid, gpu_instance_id))

    def destroy_mig(self, uuid: str, gpu_instance_id: int) -> None:
        card = self._card(uuid)
        if card.instances.pop(gpu_instance_id, None) is None:
            raise MigError(f"fake: GPU {uuid}: no GPU instance {gpu_instance_id} (not found)")


@dataclass(slots=True)
class _MigCard:
    enabled: bool = False
    instances: dict[int, MigInstance] = field(default_factory=dict)
