"""The settings types: one frozen dataclass per group, their defaults, and Go durations.

Defaults live here and nowhere else; `hami.config.build` fills the groups from files, environment and flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hami.config.vendortable import default_vendor_table
from hami.device.model import NodeDeviceConfig, NvidiaConfig
from hami.device.vendors import VendorTable
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
    ports_file: str = ""  # --ports-file: where the bound listeners' addresses are written (hami.listeners)


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
    # --dra-default-mode: with --dra, the mode of a GPU pod whose namespace names none (hami.dra.podmode)
    dra_default_mode: str = "dra"
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
    # Who may write pod placement annotations (request.userInfo.username, exact):
    # hami.scheduler.admission.placementguard.
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
    dra_nodes: int = -1  # with --dra: how many nodes (the last ones) run the DRA plugin; -1 = all
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
    # The embedded kube-scheduler's percentageOfNodesToScore (the chart's value, 100: every node reaches the
    # extender; 0: kube-scheduler's adaptive sampling on 100 nodes or more; hami.kubesched.nodestoscore).
    percentage_of_nodes_to_score: int = 100


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
    allow_anonymous: bool = False  # without a token, answer peers other than loopback too (hami.ui.gate)
    allowed_hosts: str = ""  # comma list of Host names the UI answers besides loopback and its address; * any


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


# settings group -> its type, each the Config field of the same name
GROUP_TYPES: dict[str, type] = {
    "kube": KubeSettings, "log": LogSettings, "debug": DebugSettings, "listen": ListenSettings,
    "scheduler": SchedulerSettings, "agent": AgentSettings, "monitor": MonitorSettings, "sim": SimSettings,
    "ui": UiSettings,
}


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


def parse_label_selector(text: str, source: str = "--node-label-selector") -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ConfigError("node-label-selector", source, text, "k=v[,k2=v2]")
        pairs.append((k.strip(), v.strip()))
    return tuple(pairs)
