"""One frozen, grouped settings object, built once by `build_config`.

Order of precedence (lowest first): defaults, the device config file, the per-node config file,
environment, then the flags the user actually set. Nothing else reads flags or environment.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami.device.model import (
    FilterDevices,
    MigProfileAllow,
    NodeDeviceConfig,
    NvidiaConfig,
)
from hami.device.vendors import VendorError, VendorTable, apply_device_config, parse_vendor_table
from hami.netaddr import is_loopback, split_host_port
from hami.principals import DEFAULT_TRUSTED_WRITERS


class ConfigError(ValueError):
    """A configuration value is wrong: names the key, the source, the value and what was expected."""

    def __init__(self, key: str, source: str, value: Any, expected: str):
        self.key, self.source, self.value, self.expected = key, source, value, expected
        super().__init__(f"{source}: {key}: got {value!r}, expected {expected}")


@dataclass(frozen=True, slots=True)
class KubeSettings:
    kubeconfig: str | None = None  # --kubeconfig, else $KUBECONFIG, else in-cluster
    # Rate lanes (hami.kube.lanes, docs/kube-client.md): None = the role's default budget.
    qps: float | None = None  # critical lane (--kube-qps); <= 0 = unlimited
    burst: int | None = None  # critical lane (--kube-burst)
    background_qps: float | None = None  # --kube-background-qps
    background_burst: int | None = None  # --kube-background-burst
    timeout: float | None = None  # deadline of one non-watch request; None = 10 s, 0 = none
    pod_namespace: str = "default"  # $POD_NAMESPACE: where leases and our own objects live
    pod_name: str = ""  # $POD_NAME


@dataclass(frozen=True, slots=True)
class LogSettings:
    verbosity: int = 0
    format: str = "text"  # text | json
    debug: bool = False


DEFAULT_DEBUG_BIND = "127.0.0.1:6060"


@dataclass(frozen=True, slots=True)
class DebugSettings:
    profiling: bool = False
    debug_bind_address: str = ""  # loopback listener for /debug/pprof; "" with profiling = DEFAULT_DEBUG_BIND
    aiomonitor: bool = False
    aiomonitor_port: int = 20101
    aiomonitor_console_port: int = 20103
    aiomonitor_webui_port: int = 20102


@dataclass(frozen=True, slots=True)
class ListenSettings:
    """What every HTTP listener of the process allows a connection (hami.httpguard)."""
    header_timeout: float = 10.0  # accept (or a request's first byte) -> end of its headers
    body_timeout: float = 30.0  # end of headers -> whole body (a 64 MiB /filter body on loopback: < 1 s)
    max_connections: int = 256  # open untrusted connections per listener; more are closed on accept
    idle_timeout: float = 30.0  # keep-alive between requests
    # The trusted class's own budget (loopback, trusted_sources, an mTLS-verified client: kube-scheduler,
    # which dials a connection per bind in flight); at max_connections + this, accept pauses and the
    # kernel's queue holds the rest (hami.httpaccept).
    trusted_connections: int = 2048
    trusted_sources: tuple[str, ...] = ("127.0.0.0/8", "::1/128")  # CIDRs of trusted clients: loopback


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    http_bind: str = "127.0.0.1:8080"  # /filter and /bind: loopback, or any address with client_ca_file
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""  # mTLS: only clients with a certificate from this CA reach the extender
    webhook_bind_address: str = ""  # own TLS listener for /webhook; "" = /webhook on the extender listener
    scheduler_name: str = "hami-scheduler"
    metrics_bind_address: str = ":9395"
    node_scheduler_policy: str = "binpack"
    gpu_scheduler_policy: str = "spread"
    # How widely a burst may spread past the node policy's best node (placement/contention.py): at
    # most this many times the critical lane's sustained bind rate x the node lock's hold, in nodes;
    # 0 = never, each pod waits for its best node's lock. Lower packs tighter, higher binds faster.
    burst_spread: float = 2.0
    node_label_selector: tuple[tuple[str, str], ...] = ()
    node_lock_timeout: float = 300.0
    node_lock_retry_timeout: float = 28.0
    # A lock whose holder was never bound (no bind-phase, or allocating without nodeName) and is older than
    # the longest /bind (kube-scheduler's 30 s extender timeout plus margin) belongs to a dead binder.
    node_lock_orphan_timeout: float = 45.0
    # Readiness under a frozen API server (hami.kube.liveness): probe after this long without a word from it,
    # unready once it has failed this long.
    api_probe_after: float = 10.0
    api_unready_after: float = 5.0
    # Pods created while the webhook was down (hami.scheduler.admission.missed): how long one waits before it is
    # recreated through its controller (or a Warning Event, for a bare pod); deletion can be turned off.
    missed_webhook_grace: float = 30.0
    recreate_missed_pods: bool = True
    force_overwrite_default_scheduler: bool = True
    dra: bool = False  # --dra: the webhook turns GPU resources into DRA claims; the embedded cluster runs DRA
    leader_elect: bool = False
    leader_elect_resource_name: str = "hami-scheduler"
    leader_elect_resource_namespace: str = ""
    legacy_metrics: bool = False
    max_request_bytes: int = 64 * 1024 * 1024  # a 5,000-node full-Nodes body is ~10 MiB
    sync_timeout: float = 25.0  # how long /filter waits for the first sync
    # kube-scheduler calls /prioritize: /filter answers every fitting node, not only HAMi's best.
    extender_prioritize: bool = False
    # plain POSTs to /filter and /bind answered without aiohttp's per-request layer (hami.httphead)
    extender_fast_http: bool = True
    requeue_wakes_per_second: float = 20.0  # background wakes of parked pods when GPUs free up
    # Who may write pod placement annotations (request.userInfo.username, exact): hami.scheduler.admission.placementguard.
    trusted_placement_writers: tuple[str, ...] = DEFAULT_TRUSTED_WRITERS
    # Tenants may set CUDA_DISABLE_CONTROL in GPU pods (the webhook refuses it otherwise).
    allow_tenant_disable_control: bool = False
    # Device UUIDs as metric labels on the scheduler's /metrics (a Service anyone may read): opt-in.
    metrics_device_uuids: bool = False
    # The leader evicts lower-priority pods for a pending pod short only of GPU shares (docs/kube-scheduler.md).
    gpu_preemption: bool = False
    gpu_preemption_hold_timeout: float = 120.0  # how long freed shares stay held for the preemptor


@dataclass(frozen=True, slots=True)
class AgentSettings:
    node_name: str = ""
    kubelet_socket_dir: str = "/var/lib/kubelet/device-plugins"
    hook_path: str = "/usr/local"
    node_config_file: str = ""
    gpu_backend: str = "nvml"  # nvml | fake
    fake_gpus: str = ""
    register_interval: float = 30.0
    vgpu_lib: str = ""  # HAMi-core libvgpu.so to install under <hook_path>/vgpu at start; "" = none
    vgpu_lib_version: str = ""  # its version, recorded on the host and the Node; "" = from the file
    device_list_strategy: tuple[str, ...] = ("envvar",)  # envvar, cdi-annotations, cdi-cri
    device_id_strategy: str = "uuid"  # CDI names: nvidia.com/gpu=<uuid> or =<index>
    health_bind_address: str = ""  # /healthz and /readyz for kubelet's probes; "" = off (the chart sets it)
    # HAMi #2839: the healthy GPUs' gpumem/gpucores in the Node's capacity and allocatable (docs/autoscaling.md)
    report_node_capacity: bool = False
    # --role dra (hami.dra.role); "" = the kubelet's defaults (hami.dra.plugin)
    dra_plugin_dir: str = ""  # /var/lib/kubelet/plugins/hami-core-gpu.project-hami.io
    dra_registration_dir: str = ""  # /var/lib/kubelet/plugins_registry
    cdi_root: str = ""  # /var/run/cdi
    dra_withdraw_unhealthy: bool = False  # withdraw an unhealthy GPU instead of a device taint (before 1.36)
    # publish MIG partitions of MIG-capable GPUs (made at prepare: needs the GPU's MIG config capability)
    dra_mig_partitions: bool = True


DEVICE_LIST_STRATEGIES = ("envvar", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    node_name: str = ""
    cache_dir: str = "/usr/local/vgpu/containers"
    cache_grace: float = 300.0
    proc_root: str = "/proc"
    metrics_bind_address: str = ":9394"
    feedback: bool = True
    legacy_metrics: bool = False
    gpu_backend: str = "nvml"
    fake_gpus: str = ""


@dataclass(frozen=True, slots=True)
class SimSettings:
    listen: str = "127.0.0.1:6443"
    kubeconfig: str = ""  # where `--role sim` writes its kubeconfig; "" = <state dir>/kubeconfig
    embedded: bool = False
    nodes: int = 4
    gpus: str = "2xNVIDIA A100-SXM4-40GB:40960"
    fake_gpus: str = ""
    state_dir: str = ""  # sockets, cache dirs, kubeconfig of the embedded cluster; "" = a temp dir
    demo_workload: bool = False
    hostpid_bug: bool = False
    watch_window: int = 10000  # events retained for watch resume; older RVs get 410 Gone
    # A realistic API server (docs/kube-client.md): added latency and an APF-like in-flight limit.
    read_latency: float = 0.0  # seconds added to every read
    write_latency: float = 0.0  # seconds added to every write
    max_inflight: int = 0  # concurrent non-watch requests; more get 429 + Retry-After (0 = no limit)
    listen_insecure: bool = False  # operator's opt-in to serve the unauthenticated API beyond loopback
    # How long a simulated pod's containers take to stop after SIGTERM (never past its grace period).
    pod_stop_seconds: float = 5.0
    # Node groups a Cluster Autoscaler stand-in grows and shrinks (hami.sim.autoscaler): NAME:MIN:MAX:GPUS each.
    node_groups: tuple[str, ...] = ()
    scale_down_unneeded: float = 30.0  # how long a group's node stays empty before it is removed


@dataclass(frozen=True, slots=True)
class UiSettings:
    """`--role ui` (docs/ui.md): a read-only web page over what hami knows of the cluster."""

    bind_address: str = "127.0.0.1:8080"  # loopback: in a cluster reach it with kubectl port-forward
    readonly_token: str = ""  # when set, every page wants `Authorization: Bearer <token>` (or ?token= once)
    readonly_token_file: str = ""  # the same, read from a file (a mounted Secret; never on the command line)
    prometheus_url: str = ""  # used-memory figures from Prometheus instead of scraping the monitors
    metrics_urls: str = ""  # comma list of monitor /metrics URLs to scrape when no Prometheus is given
    whatif_interval: float = 30.0  # at most one on-demand what-if run per this many seconds
    whatif_timeout: float = 20.0  # a what-if run that takes longer is abandoned


@dataclass(frozen=True, slots=True)
class Config:
    roles: tuple[str, ...] = ()
    kube: KubeSettings = field(default_factory=KubeSettings)
    log: LogSettings = field(default_factory=LogSettings)
    debug: DebugSettings = field(default_factory=DebugSettings)
    listen: ListenSettings = field(default_factory=ListenSettings)
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    node_configs: tuple[NodeDeviceConfig, ...] = ()
    device_config_file: str = ""
    # Every vendor the scheduler and webhook handle (config/vendors.yaml + the device config).
    vendors: VendorTable = field(default_factory=lambda: default_vendor_table())
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    sim: SimSettings = field(default_factory=SimSettings)
    ui: UiSettings = field(default_factory=UiSettings)


# --------------------------------------------------------------------------- durations

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, *, key: str = "duration", source: str = "flag") -> float:
    """Parse a Go duration (`5m`, `1h30m`, `250ms`) or bare seconds (`30`) into seconds."""
    s = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ConfigError(key, source, text, "a duration such as 30s, 5m or 1h30m")
    return total


# --------------------------------------------------------------------------- device config file

# yaml key of the `nvidia:` section -> (NvidiaConfig field, expected python type)
_NVIDIA_KEYS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "resourceCountName": ("resource_count_name", str),
    "resourceMemoryName": ("resource_memory_name", str),
    "resourceMemoryPercentageName": ("resource_memory_percentage_name", str),
    "resourceCoreName": ("resource_core_name", str),
    "resourcePriorityName": ("resource_priority_name", str),
    "overwriteEnv": ("overwrite_env", bool),
    "defaultMemory": ("default_memory", int),
    "defaultCores": ("default_cores", int),
    "defaultGPUNum": ("default_gpu_num", int),
    "preConfiguredDeviceMemory": ("pre_configured_device_memory", int),
    "memoryFactor": ("memory_factor", int),
    "deviceSplitCount": ("device_split_count", int),
    "deviceMemoryScaling": ("device_memory_scaling", (int, float)),
    "deviceCoreScaling": ("device_core_scaling", (int, float)),
    "enableNumaTopology": ("enable_numa_topology", bool),
    "gpuCorePolicy": ("gpu_core_policy", str),
    "libCudaLogLevel": ("lib_cuda_log_level", (str, int)),
    "runtimeClassName": ("runtime_class_name", str),
    "disableCoreLimit": ("disable_core_limit", bool),
    "migProfileAllowlist": ("mig_profile_allowlist", list),
}
# Keys HAMi's chart writes that hami accepts but does not use.
_NVIDIA_IGNORED = {"migStrategy", "migstrategy"}
_MIG_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb")
_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", list: "a list"}


def _expected(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return "a number" if float in t else " or ".join(_TYPE_NAMES.get(x, x.__name__) for x in t)
    return _TYPE_NAMES.get(t, t.__name__)


def _check_type(key: str, value: Any, want: type | tuple[type, ...], source: str) -> None:
    types = want if isinstance(want, tuple) else (want,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ConfigError(key, source, value, _expected(want))


def parse_device_config(doc: Any, source: str, warn) -> NvidiaConfig:
    """Build NvidiaConfig from the parsed YAML of HAMi's device config; `warn(msg)` for unknown keys."""
    if doc is None:
        return NvidiaConfig()
    if not isinstance(doc, Mapping):
        raise ConfigError("(top level)", source, type(doc).__name__, "a mapping with an `nvidia:` section")
    section = doc.get("nvidia")
    if section is None:
        return NvidiaConfig()
    if not isinstance(section, Mapping):
        raise ConfigError("nvidia", source, section, "a mapping")
    values: dict[str, Any] = {}
    legacy_geometries: tuple[MigProfileAllow, ...] = ()
    for key, value in section.items():
        if key in _NVIDIA_IGNORED:
            continue
        if key == "knownMigGeometries":
            legacy_geometries = _parse_known_geometries(value, source)
            continue
        if key not in _NVIDIA_KEYS:
            warn(f"unknown key nvidia.{key} in {source}: ignored")
            continue
        attr, want = _NVIDIA_KEYS[key]
        if value is None:
            continue
        _check_type(f"nvidia.{key}", value, want, source)
        if attr == "mig_profile_allowlist":
            value = _parse_allowlist(value, source)
        elif attr == "lib_cuda_log_level":
            value = str(value)
        elif isinstance(want, tuple) and float in want:
            value = float(value)
        values[attr] = value
    if legacy_geometries and "mig_profile_allowlist" not in values:
        # HAMi <= v2.8 named the allowed MIG shapes per model; their profile names are the allowlist.
        values["mig_profile_allowlist"] = legacy_geometries
    cfg = NvidiaConfig(**values)
    _validate_nvidia(cfg, source)
    return cfg


def _parse_known_geometries(items: Any, source: str) -> tuple[MigProfileAllow, ...]:
    """Legacy `knownMigGeometries: [{models, allowedGeometries: [[{name, core, memory, count}]]}]`
    -> one allowlist entry per item (the profile names of all its geometries)."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError("nvidia.knownMigGeometries", source, items, "a list")
    out = []
    for i, item in enumerate(items):
        key = f"nvidia.knownMigGeometries[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(key, source, item, "a mapping")
        models = item.get("models") or []
        if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
            raise ConfigError(f"{key}.models", source, models, "a non-empty list of strings")
        geometries = item.get("allowedGeometries") or []
        if not isinstance(geometries, list) or not geometries:
            raise ConfigError(f"{key}.allowedGeometries", source, geometries, "a non-empty list of geometries")
        names: list[str] = []
        for j, geometry in enumerate(geometries):
            if not isinstance(geometry, list):
                raise ConfigError(f"{key}.allowedGeometries[{j}]", source, geometry, "a list of {name, memory, count}")
            for k, shape in enumerate(geometry):
                name = shape.get("name") if isinstance(shape, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"{key}.allowedGeometries[{j}][{k}].name", source, name, "a MIG profile name")
                if name not in names:
                    names.append(name)
        out.append(MigProfileAllow(tuple(models), tuple(names)))
    return tuple(out)


def _parse_allowlist(items: list, source: str) -> tuple[MigProfileAllow, ...]:
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ConfigError(f"nvidia.migProfileAllowlist[{i}]", source, item, "a mapping")
        models = item.get("models") or []
        profiles = item.get("profiles") or []
        for k, v in (("models", models), ("profiles", profiles)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"nvidia.migProfileAllowlist[{i}].{k}", source, v, "a list of strings")
        if not models or not profiles:  # HAMi ValidateMigProfileAllowlist
            raise ConfigError(f"nvidia.migProfileAllowlist[{i}]", source, item, "both models and profiles")
        for p in profiles:
            if not _MIG_PROFILE.fullmatch(p):
                raise ConfigError(f"nvidia.migProfileAllowlist[{i}].profiles", source, p,
                                  "MIG profile names shaped <N>g.<M>gb, e.g. 1g.10gb")
        out.append(MigProfileAllow(tuple(models), tuple(profiles)))
    return tuple(out)


def _validate_nvidia(cfg: NvidiaConfig, source: str) -> None:
    checks = [
        ("nvidia.deviceSplitCount", cfg.device_split_count, cfg.device_split_count >= 1, "an integer >= 1"),
        ("nvidia.memoryFactor", cfg.memory_factor, cfg.memory_factor >= 1, "an integer >= 1"),
        ("nvidia.defaultGPUNum", cfg.default_gpu_num, cfg.default_gpu_num >= 0, "an integer >= 0"),
        ("nvidia.defaultMemory", cfg.default_memory, cfg.default_memory >= 0, "an integer >= 0"),
        ("nvidia.defaultCores", cfg.default_cores, 0 <= cfg.default_cores <= 100, "an integer 0..100"),
        ("nvidia.deviceMemoryScaling", cfg.device_memory_scaling, cfg.device_memory_scaling > 0, "a number > 0"),
        ("nvidia.deviceCoreScaling", cfg.device_core_scaling, cfg.device_core_scaling > 0, "a number > 0"),
        (
            "nvidia.gpuCorePolicy",
            cfg.gpu_core_policy,
            cfg.gpu_core_policy in ("", "default", "force", "disable"),
            "one of default, force, disable",
        ),
    ]
    for key, value, ok, expected in checks:
        if not ok:
            raise ConfigError(key, source, value, expected)


# --------------------------------------------------------------------------- per-node config.json

_NODE_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "a string"),
    "operatingmode": (str, "one of hami-core, mig, mps"),
    "devicememoryscaling": ((int, float), "a number > 0"),
    "devicecorescaling": ((int, float), "a number > 0"),
    "devicesplitcount": (int, "an integer >= 1"),
    "preconfigureddevicememory": (int, "an integer >= 0"),
    "libcudaloglevel": ((str, int), "a string"),
    "enablenumatopology": (bool, "a boolean"),
    "migstrategy": (str, "one of none, single, mixed"),
    "filterdevices": (dict, "a mapping with uuid and index lists"),
    "enablegetpreferredallocation": (bool, "a boolean"),
    "allowdisablecontrol": (bool, "a boolean"),
}


def parse_node_configs(doc: Any, source: str, warn) -> tuple[NodeDeviceConfig, ...]:
    """Parse HAMi's per-node `config.json` (`{"nodeconfig": [...]}`)."""
    if doc is None:
        return ()
    if not isinstance(doc, Mapping):
        raise ConfigError("(top level)", source, type(doc).__name__, 'an object with a "nodeconfig" list')
    for key in doc:
        if key != "nodeconfig":
            warn(f"unknown key {key} in {source}: ignored")
    entries = doc.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError("nodeconfig", source, entries, "a list")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"nodeconfig[{i}]", source, entry, "an object")
        values: dict[str, Any] = {}
        for key, value in entry.items():
            lkey = key.lower()
            if lkey not in _NODE_KEYS:
                warn(f"unknown key nodeconfig[{i}].{key} in {source}: ignored")
                continue
            if value is None:
                continue
            want, expected = _NODE_KEYS[lkey]
            types = want if isinstance(want, tuple) else (want,)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            if lkey == "filterdevices":
                value = _parse_filter(value, f"nodeconfig[{i}].{key}", source)
            elif lkey == "libcudaloglevel":
                value = str(value)
            elif lkey in ("devicememoryscaling", "devicecorescaling"):
                value = float(value)
                if value <= 0:
                    raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "devicesplitcount" and value < 1:
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "operatingmode" and value not in ("", "hami-core", "mig", "mps"):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            elif lkey == "migstrategy" and value not in ("", "none", "single", "mixed"):
                raise ConfigError(f"nodeconfig[{i}].{key}", source, value, expected)
            values[lkey] = value
        if not values.get("name"):
            raise ConfigError(f"nodeconfig[{i}].name", source, values.get("name"), "a non-empty node name or glob")
        out.append(NodeDeviceConfig(**values))
    return tuple(out)


def _parse_filter(value: Mapping, key: str, source: str) -> FilterDevices:
    uuids = value.get("uuid") or []
    idx = value.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{key}.uuid", source, uuids, "a list of strings")
    if not isinstance(idx, list) or not all(isinstance(u, int) and not isinstance(u, bool) for u in idx):
        raise ConfigError(f"{key}.index", source, idx, "a list of integers")
    return FilterDevices(tuple(uuids), tuple(idx))


# --------------------------------------------------------------------------- building

def _load_file(path: str) -> Any:
    import orjson
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError("(file)", path, path, f"a readable file ({exc.strerror})") from None
    try:
        if path.endswith(".json"):
            return orjson.loads(raw) if raw.strip() else None
        return yaml.safe_load(raw)
    except (yaml.YAMLError, orjson.JSONDecodeError) as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError("(syntax)", path, str(exc).splitlines()[0][:200], f"valid YAML/JSON{where}") from None
    except RecursionError:  # PyYAML's parser recurses per nesting level
        raise ConfigError("(syntax)", path, "nested too deeply", "valid YAML/JSON") from None


# Flag destination (argparse dest) -> (group, field). Only flags the user set arrive here.
FLAG_TARGETS: dict[str, tuple[str, str]] = {
    "ui_bind_address": ("ui", "bind_address"),
    "ui_readonly_token": ("ui", "readonly_token"),
    "ui_readonly_token_file": ("ui", "readonly_token_file"),
    "prometheus_url": ("ui", "prometheus_url"),
    "ui_metrics_urls": ("ui", "metrics_urls"),
    "ui_whatif_interval": ("ui", "whatif_interval"),
    "kubeconfig": ("kube", "kubeconfig"),
    "kube_qps": ("kube", "qps"),
    "kube_burst": ("kube", "burst"),
    "kube_background_qps": ("kube", "background_qps"),
    "kube_background_burst": ("kube", "background_burst"),
    "kube_timeout": ("kube", "timeout"),
    "v": ("log", "verbosity"),
    "log_format": ("log", "format"),
    "debug": ("log", "debug"),
    "profiling": ("debug", "profiling"),
    "debug_bind_address": ("debug", "debug_bind_address"),
    "aiomonitor": ("debug", "aiomonitor"),
    "aiomonitor_port": ("debug", "aiomonitor_port"),
    "aiomonitor_console_port": ("debug", "aiomonitor_console_port"),
    "aiomonitor_webui_port": ("debug", "aiomonitor_webui_port"),
    "http_bind": ("scheduler", "http_bind"),
    "cert_file": ("scheduler", "cert_file"),
    "key_file": ("scheduler", "key_file"),
    "client_ca_file": ("scheduler", "client_ca_file"),
    "webhook_bind_address": ("scheduler", "webhook_bind_address"),
    "scheduler_name": ("scheduler", "scheduler_name"),
    "scheduler_metrics_bind_address": ("scheduler", "metrics_bind_address"),
    "node_scheduler_policy": ("scheduler", "node_scheduler_policy"),
    "gpu_scheduler_policy": ("scheduler", "gpu_scheduler_policy"),
    "node_label_selector": ("scheduler", "node_label_selector"),
    "node_lock_timeout": ("scheduler", "node_lock_timeout"),
    "node_lock_retry_timeout": ("scheduler", "node_lock_retry_timeout"),
    "node_lock_orphan_timeout": ("scheduler", "node_lock_orphan_timeout"),
    "api_probe_after": ("scheduler", "api_probe_after"),
    "api_unready_after": ("scheduler", "api_unready_after"),
    "missed_webhook_grace": ("scheduler", "missed_webhook_grace"),
    "recreate_missed_pods": ("scheduler", "recreate_missed_pods"),
    "force_overwrite_default_scheduler": ("scheduler", "force_overwrite_default_scheduler"),
    "dra": ("scheduler", "dra"),
    "leader_elect": ("scheduler", "leader_elect"),
    "extender_prioritize": ("scheduler", "extender_prioritize"),
    "extender_fast_http": ("scheduler", "extender_fast_http"),
    "requeue_wakes_per_second": ("scheduler", "requeue_wakes_per_second"),
    "burst_spread": ("scheduler", "burst_spread"),
    "trusted_placement_writers": ("scheduler", "trusted_placement_writers"),
    "allow_tenant_disable_control": ("scheduler", "allow_tenant_disable_control"),
    "metrics_device_uuids": ("scheduler", "metrics_device_uuids"),
    "gpu_preemption": ("scheduler", "gpu_preemption"),
    "gpu_preemption_hold_timeout": ("scheduler", "gpu_preemption_hold_timeout"),
    "leader_elect_resource_name": ("scheduler", "leader_elect_resource_name"),
    "leader_elect_resource_namespace": ("scheduler", "leader_elect_resource_namespace"),
    "kubelet_socket_dir": ("agent", "kubelet_socket_dir"),
    "hook_path": ("agent", "hook_path"),
    "node_config_file": ("agent", "node_config_file"),
    "register_interval": ("agent", "register_interval"),
    "health_bind_address": ("agent", "health_bind_address"),
    "vgpu_lib": ("agent", "vgpu_lib"),
    "vgpu_lib_version": ("agent", "vgpu_lib_version"),
    "device_list_strategy": ("agent", "device_list_strategy"),
    "device_id_strategy": ("agent", "device_id_strategy"),
    "report_node_capacity": ("agent", "report_node_capacity"),
    "plugin_dir": ("agent", "dra_plugin_dir"),
    "plugin_registration_dir": ("agent", "dra_registration_dir"),
    "cdi_root": ("agent", "cdi_root"),
    "dra_withdraw_unhealthy": ("agent", "dra_withdraw_unhealthy"),
    "dra_mig_partitions": ("agent", "dra_mig_partitions"),
    "cache_dir": ("monitor", "cache_dir"),
    "cache_grace": ("monitor", "cache_grace"),
    "proc_root": ("monitor", "proc_root"),
    "monitor_metrics_bind_address": ("monitor", "metrics_bind_address"),
    "feedback": ("monitor", "feedback"),
    "sim_listen": ("sim", "listen"),
    "sim_kubeconfig": ("sim", "kubeconfig"),
    "embedded": ("sim", "embedded"),
    "sim_nodes": ("sim", "nodes"),
    "sim_gpus": ("sim", "gpus"),
    "sim_state_dir": ("sim", "state_dir"),
    "demo_workload": ("sim", "demo_workload"),
    "sim_hostpid_bug": ("sim", "hostpid_bug"),
    "sim_watch_window": ("sim", "watch_window"),
    "sim_read_latency": ("sim", "read_latency"),
    "sim_write_latency": ("sim", "write_latency"),
    "sim_max_inflight": ("sim", "max_inflight"),
    "sim_listen_insecure": ("sim", "listen_insecure"),
    "http_header_timeout": ("listen", "header_timeout"),
    "http_body_timeout": ("listen", "body_timeout"),
    "http_max_connections": ("listen", "max_connections"),
    "http_max_trusted_connections": ("listen", "trusted_connections"),
    "http_trusted_sources": ("listen", "trusted_sources"),
    "http_idle_timeout": ("listen", "idle_timeout"),
    "sim_pod_stop_seconds": ("sim", "pod_stop_seconds"),
    "sim_node_group": ("sim", "node_groups"),
    "sim_scale_down_unneeded": ("sim", "scale_down_unneeded"),
}
# Flags that feed more than one group.
SHARED_FLAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "node_name": (("agent", "node_name"), ("monitor", "node_name")),
    "gpu_backend": (("agent", "gpu_backend"), ("monitor", "gpu_backend")),
    "fake_gpus": (("agent", "fake_gpus"), ("monitor", "fake_gpus"), ("sim", "fake_gpus")),
    "legacy_metrics": (("scheduler", "legacy_metrics"), ("monitor", "legacy_metrics")),
}
_DURATION_FLAGS = {"kube_timeout", "sim_read_latency", "sim_write_latency", "node_lock_timeout", "node_lock_retry_timeout", "node_lock_orphan_timeout", "api_probe_after", "api_unready_after", "missed_webhook_grace", "http_header_timeout", "http_body_timeout", "http_idle_timeout", "cache_grace", "register_interval", "ui_whatif_interval"}
_DURATION_FLAGS |= {"gpu_preemption_hold_timeout", "sim_pod_stop_seconds", "sim_scale_down_unneeded"}  # GPU preemption, its simulated kubelet


# Go's strconv.ParseBool spellings (HAMi reads its environment with it).
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "true", "TRUE", "True"), True),
             **dict.fromkeys(("0", "f", "F", "false", "FALSE", "False"), False)}


def parse_label_selector(text: str, source: str = "--node-label-selector") -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ConfigError("node-label-selector", source, text, "k=v[,k2=v2]")
        pairs.append((k.strip(), v.strip()))
    return tuple(pairs)


def _check_trusted_sources(listen: dict[str, Any]) -> None:
    """--http-trusted-sources: a comma list of CIDRs, each checked here so a typo stops the start."""
    import ipaddress

    sources = listen.get("trusted_sources")
    if isinstance(sources, str):
        sources = tuple(s.strip() for s in sources.split(",") if s.strip())
        listen["trusted_sources"] = sources
    for text in sources or ():
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ConfigError("--http-trusted-sources", "command line", text, "CIDR networks, e.g. 10.0.0.0/8") from None


def embedded_paths(state_dir: str) -> dict[str, str]:
    """Where the embedded cluster keeps its files; shared by the sim role and the roles it hosts."""
    return {
        "kubeconfig": os.path.join(state_dir, "kubeconfig"),
        # hami's own roles authenticate as their service accounts, not as the people's kubeconfig above
        "scheduler_kubeconfig": os.path.join(state_dir, "scheduler.kubeconfig"),
        "node_kubeconfig": os.path.join(state_dir, "node.kubeconfig"),
        "hook_path": os.path.join(state_dir, "usr-local"),
        "cache_dir": os.path.join(state_dir, "usr-local", "vgpu", "containers"),
        "all_gpus": os.path.join(state_dir, "gpus-all.yaml"),
        "nodes_dir": os.path.join(state_dir, "nodes"),
    }


# Listener flags checked at startup, so a typo exits 2 naming the flag instead of failing in a role.
_LISTENERS = (
    ("scheduler", "http_bind", "--http_bind"),
    ("scheduler", "webhook_bind_address", "--webhook-bind-address"),
    ("agent", "health_bind_address", "--health-bind-address"),
    ("scheduler", "metrics_bind_address", "--scheduler-metrics-bind-address (or --metrics-bind-address)"),
    ("monitor", "metrics_bind_address", "--monitor-metrics-bind-address (or --metrics-bind-address)"),
    ("debug", "debug_bind_address", "--debug-bind-address"),
    ("sim", "listen", "--sim-listen"),
    ("ui", "bind_address", "--ui-bind-address"),
)


def _check_listeners(groups: dict[str, dict[str, Any]]) -> None:
    for group, attr, flag in _LISTENERS:
        value = groups[group].get(attr)
        if not value:
            continue  # the default, or "" (listener off)
        try:
            split_host_port(value, flag=flag, default_host="")
        except ValueError:
            raise ConfigError(flag, "command line", value, "HOST:PORT with a port in 0..65535, e.g. 127.0.0.1:8080") \
                from None


def check_sim_listen(sim: SimSettings) -> None:
    """The embedded API server has no authentication: beyond loopback only when the operator says so."""
    if not sim.listen or sim.listen_insecure:
        return
    host, _ = split_host_port(sim.listen, flag="--sim-listen", default_host="127.0.0.1")
    if not is_loopback(host):
        raise ConfigError("--sim-listen", "command line", sim.listen,
                          "a loopback address such as 127.0.0.1:6443 (the embedded API server authenticates "
                          "no one), or --sim-listen-insecure to serve it beyond loopback anyway")


def check_listener_trust(sc: SchedulerSettings, debug: DebugSettings) -> None:
    """Refuse listener layouts that let other pods bind pods or profile the process.

    /bind can bind any pod to any node with the scheduler's RBAC, so the extender listens on
    loopback (kube-scheduler as a sidecar) unless client certificates are required (mTLS). The
    webhook, reachable through the Service, is TLS only; profiling only ever on loopback.
    """
    tls = bool(sc.cert_file and sc.key_file)
    if sc.client_ca_file and not tls:
        raise ConfigError("--client-ca-file", "command line", sc.client_ca_file,
                          "--cert_file and --key_file as well (mTLS needs a server certificate)")
    host, _ = split_host_port(sc.http_bind, flag="--http_bind", default_host="")
    if not is_loopback(host) and not sc.client_ca_file:
        raise ConfigError("--http_bind", "command line", sc.http_bind,
                          "a loopback address such as 127.0.0.1:8443 (kube-scheduler in the same pod), or "
                          "--client-ca-file with --cert_file/--key_file so only kube-scheduler's certificate "
                          "may call /filter and /bind")
    if sc.webhook_bind_address:
        host, _ = split_host_port(sc.webhook_bind_address, flag="--webhook-bind-address", default_host="")
        if not is_loopback(host) and not tls:
            raise ConfigError("--webhook-bind-address", "command line", sc.webhook_bind_address,
                              "--cert_file and --key_file: the webhook is served over TLS only")
    if debug.debug_bind_address:
        host, _ = split_host_port(debug.debug_bind_address, flag="--debug-bind-address", default_host="127.0.0.1")
        if not is_loopback(host):
            raise ConfigError("--debug-bind-address", "command line", debug.debug_bind_address,
                              "a loopback address such as 127.0.0.1:6060 (profiling is never served off the pod; "
                              "use kubectl port-forward)")


def parse_device_list_strategy(value: str | tuple[str, ...], source: str) -> tuple[str, ...]:
    """`envvar`, `cdi-cri`, or a comma list of them (NVIDIA's device plugin takes a list too)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
    bad = [i for i in out if i not in DEVICE_LIST_STRATEGIES]
    if bad or not out:
        raise ConfigError("--device-list-strategy", source, value,
                          "one or more of " + ", ".join(DEVICE_LIST_STRATEGIES) + " (comma separated)")
    return out


def _check_device_lists(agent: dict[str, Any], source: str) -> None:
    if "device_list_strategy" in agent:
        agent["device_list_strategy"] = parse_device_list_strategy(agent["device_list_strategy"], source)
    if agent.get("device_id_strategy", "uuid") not in DEVICE_ID_STRATEGIES:
        raise ConfigError("--device-id-strategy", "command line", agent["device_id_strategy"],
                          " or ".join(DEVICE_ID_STRATEGIES))


def _embedded_defaults(groups: dict[str, dict[str, Any]], flags: Mapping[str, Any]) -> None:
    """`--embedded`: point every role at the embedded cluster's files unless the user said otherwise."""
    state = groups["sim"].get("state_dir") or ""
    if not state:
        raise ConfigError("--sim-state-dir", "command line", state, "a directory for the embedded cluster")
    paths = embedded_paths(state)
    groups["sim"].setdefault("kubeconfig", paths["kubeconfig"])
    # never a real cluster's KUBECONFIG; the scheduler's identity, not the demo user's (docs/security.md)
    groups["kube"]["kubeconfig"] = paths["scheduler_kubeconfig"]
    groups["monitor"].setdefault("cache_dir", paths["cache_dir"])
    # A laptop demo has no reason to listen beyond loopback (the embedded API server has no auth).
    groups["scheduler"].setdefault("metrics_bind_address", "127.0.0.1:9395")
    groups["monitor"].setdefault("metrics_bind_address", "127.0.0.1:9394")
    # The extender holds 127.0.0.1:8080 here; the UI scrapes the embedded monitor.
    groups["ui"].setdefault("bind_address", "127.0.0.1:8090")
    groups["ui"].setdefault("metrics_urls", "http://" + groups["monitor"]["metrics_bind_address"] + "/metrics")
    if "gpu_backend" not in flags:
        groups["monitor"]["gpu_backend"] = groups["agent"]["gpu_backend"] = "fake"
    if "fake_gpus" not in flags:
        groups["monitor"]["fake_gpus"] = paths["all_gpus"]
    groups["monitor"].setdefault("node_name", "")
    groups["agent"].setdefault("hook_path", paths["hook_path"])
    if groups["sim"].get("hostpid_bug"):
        # Simulated containers live in a fake /proc tree so the monitor's host-PID repair has work.
        groups["monitor"].setdefault("proc_root", os.path.join(state, "proc"))


def build_config(
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    warn=None,
) -> Config:
    """The one place a Config is made: defaults, files, environment, then the flags the user set.

    `flags` maps argparse dests to values, holding only flags that were given on the command line.
    `warn(message)` receives one message per unknown key in a config file.
    """
    env = os.environ if env is None else env
    warn = warn or (lambda msg: None)
    groups: dict[str, dict[str, Any]] = {
        g: {} for g in ("kube", "log", "debug", "listen", "scheduler", "agent", "monitor", "sim", "ui")
    }
    top: dict[str, Any] = {}

    # 2. the device config file (flag, then env as HAMi's chart mounts it)
    device_file = flags.get("device_config_file") or env.get("HAMI_DEVICE_CONFIG_FILE", "")
    nvidia = NvidiaConfig()
    vendors = default_vendor_table()
    doc: Any = _load_file(device_file) if device_file else None
    if device_file:
        try:
            vendors = apply_device_config(vendors, doc, device_file)
        except VendorError as exc:
            raise ConfigError("vendors", device_file, str(exc), "a valid vendor entry") from None
    # HAMi's alias flags (hami.cli.aliases): {nvidia key: (flag, value)}, each checked on its own, then
    # laid over the file's nvidia: section (a flag wins over a file).
    aliases: Mapping[str, tuple[str, Any]] = flags.get("nvidia_overrides") or {}
    for key, (flag, value) in aliases.items():
        parse_device_config({"nvidia": {key: value}}, flag, warn)
    if aliases:
        section = doc.get("nvidia") if isinstance(doc, Mapping) else None
        doc = {**(doc if isinstance(doc, Mapping) else {}),
               "nvidia": {**(section if isinstance(section, Mapping) else {}),
                          **{key: value for key, (_, value) in aliases.items()}}}
    if doc is not None:
        nvidia = parse_device_config(doc, device_file or "command line", warn)
    vendors = vendors_with_nvidia(vendors, nvidia)
    top["device_config_file"] = device_file
    node_file = flags.get("node_config_file") or ""
    node_configs: tuple[NodeDeviceConfig, ...] = ()
    if node_file:
        node_configs = parse_node_configs(_load_file(node_file), node_file, warn)

    # 3. environment
    if env.get("KUBECONFIG"):
        groups["kube"]["kubeconfig"] = env["KUBECONFIG"].split(os.pathsep)[0]
    if env.get("POD_NAMESPACE"):
        groups["kube"]["pod_namespace"] = env["POD_NAMESPACE"]
        groups["scheduler"]["leader_elect_resource_namespace"] = env["POD_NAMESPACE"]
    if env.get("POD_NAME"):
        groups["kube"]["pod_name"] = env["POD_NAME"]
    if env.get("NODE_NAME"):
        groups["agent"]["node_name"] = groups["monitor"]["node_name"] = env["NODE_NAME"]
    if env.get("HAMI_NODELOCK_EXPIRE"):
        groups["scheduler"]["node_lock_timeout"] = parse_duration(
            env["HAMI_NODELOCK_EXPIRE"], key="HAMI_NODELOCK_EXPIRE", source="environment"
        )
    if env.get("HAMI_RESYNC_INTERVAL"):  # HAMi's monitor env for how long unknown pods' dirs are kept
        groups["monitor"]["cache_grace"] = parse_duration(
            env["HAMI_RESYNC_INTERVAL"], key="HAMI_RESYNC_INTERVAL", source="environment"
        )
    if env.get("HOOK_PATH"):
        groups["agent"]["hook_path"] = env["HOOK_PATH"]
    if env.get("HAMI_VGPU_LIB"):  # the image sets these to the libvgpu.so it ships
        groups["agent"]["vgpu_lib"] = env["HAMI_VGPU_LIB"]
    if env.get("HAMI_VGPU_LIB_VERSION"):
        groups["agent"]["vgpu_lib_version"] = env["HAMI_VGPU_LIB_VERSION"]
    if env.get("REPORT_NODE_CAPACITY"):  # HAMi #2839's variable
        text = env["REPORT_NODE_CAPACITY"].strip()
        if text not in _GO_BOOLS:
            raise ConfigError("REPORT_NODE_CAPACITY", "environment", text, "true or false")
        groups["agent"]["report_node_capacity"] = _GO_BOOLS[text]
    if env.get("DEVICE_LIST_STRATEGY"):  # NVIDIA's device plugin reads the same variable
        groups["agent"]["device_list_strategy"] = env["DEVICE_LIST_STRATEGY"]

    # 4. flags the user set
    for dest, value in flags.items():
        if dest in _DURATION_FLAGS and isinstance(value, str):
            value = parse_duration(value, key="--" + dest.replace("_", "-"), source="command line")
        if dest == "node_label_selector" and isinstance(value, str):
            value = parse_label_selector(value)
        if dest == "metrics_bind_address":
            # One flag, HAMi's name, feeds whichever roles run; role-specific flags override it.
            for group in ("scheduler", "monitor"):
                groups[group].setdefault("metrics_bind_address", value)
            continue
        if dest in SHARED_FLAGS:
            for group, attr in SHARED_FLAGS[dest]:
                groups[group][attr] = value
        elif dest in FLAG_TARGETS:
            group, attr = FLAG_TARGETS[dest]
            groups[group][attr] = value
    for dest in ("scheduler_metrics_bind_address", "monitor_metrics_bind_address"):
        if dest in flags:
            group, attr = FLAG_TARGETS[dest]
            groups[group][attr] = flags[dest]
    if groups["sim"].get("embedded"):
        _embedded_defaults(groups, flags)
    if groups["log"].get("debug"):
        groups["log"]["verbosity"] = max(4, groups["log"].get("verbosity", 0))
    if groups["scheduler"].get("node_scheduler_policy", "binpack") not in ("binpack", "spread"):
        raise ConfigError(
            "--node-scheduler-policy", "command line", groups["scheduler"]["node_scheduler_policy"],
            "binpack or spread",
        )
    spread = groups["scheduler"].get("burst_spread", 2.0)
    if not (isinstance(spread, (int, float)) and 0 <= spread < float("inf")):
        raise ConfigError("--burst-spread", "command line", spread, "a number >= 0")
    if "log" in groups and groups["log"].get("format", "text") not in ("text", "json"):
        raise ConfigError("--log-format", "command line", groups["log"]["format"], "text or json")
    _check_listeners(groups)
    if "node_groups" in groups["sim"]:
        groups["sim"]["node_groups"] = tuple(groups["sim"]["node_groups"])
    _check_trusted_sources(groups["listen"])
    writers = groups["scheduler"].get("trusted_placement_writers")
    if isinstance(writers, str):  # a comma list on the command line
        groups["scheduler"]["trusted_placement_writers"] = tuple(w.strip() for w in writers.split(",") if w.strip())
    config_scheduler = SchedulerSettings(**groups["scheduler"])
    check_listener_trust(config_scheduler, DebugSettings(**groups["debug"]))
    check_sim_listen(SimSettings(**groups["sim"]))
    _check_device_lists(groups["agent"], "DEVICE_LIST_STRATEGY" if "device_list_strategy" not in flags
                        else "command line")

    return Config(
        roles=tuple(flags.get("roles", ())),
        kube=KubeSettings(**groups["kube"]),
        log=LogSettings(**groups["log"]),
        debug=DebugSettings(**groups["debug"]),
        listen=ListenSettings(**groups["listen"]),
        nvidia=nvidia,
        node_configs=node_configs,
        device_config_file=top["device_config_file"],
        vendors=vendors,
        scheduler=config_scheduler,
        agent=AgentSettings(**{**groups["agent"], "node_config_file": node_file}),
        monitor=MonitorSettings(**groups["monitor"]),
        sim=SimSettings(**groups["sim"]),
        ui=UiSettings(**groups["ui"]),
    )


def replace(cfg: Any, **changes: Any) -> Any:
    """dataclasses.replace, re-exported for roles that derive per-node configs (embedded cluster)."""
    return dataclasses.replace(cfg, **changes)


# --------------------------------------------------------------------------- vendor table

@functools.lru_cache(maxsize=1)
def default_vendor_table() -> VendorTable:
    """config/vendors.yaml as shipped inside the package (hami/device/vendors.yaml), read once."""
    from importlib.resources import files

    import yaml

    src = files("hami.device").joinpath("vendors.yaml")
    return parse_vendor_table(yaml.safe_load(src.read_text()), "hami/device/vendors.yaml")


def vendors_with_nvidia(table: VendorTable, nvidia: NvidiaConfig) -> VendorTable:
    """The NVIDIA row takes its resource names from the `nvidia:` section, as HAMi's does."""
    for v in table.vendors:
        if v.hook == "nvidia":
            table = table.with_vendor(dataclasses.replace(
                v, count_resource=nvidia.resource_count_name, memory_resource=nvidia.resource_memory_name,
                percentage_resource=nvidia.resource_memory_percentage_name,
                core_resource=nvidia.resource_core_name))
    return table
