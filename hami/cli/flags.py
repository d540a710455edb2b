"""Every flag of `hami`, with HAMi's spellings; `_` and `-` spellings are both accepted.

Flags are registered with `default=SUPPRESS`, so the parsed namespace holds only the flags the user
actually set; defaults live in `hami.config` and nowhere else.
"""

from __future__ import annotations

import argparse
from typing import Any


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool spellings, as HAMi's flags accept them."""
    t = str(text).strip()
    if t in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if t in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (use true or false)")


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not 0 <= v < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {v}")
    return v


# (names, dest, kind, help). kind: str | int | float (> 0) | float0 (>= 0) | bool | duration
FLAGS: list[tuple[tuple[str, ...], str, str, str]] = [
    # process
    (("--kubeconfig",), "kubeconfig", "str", "kubeconfig file (else $KUBECONFIG, else in-cluster)"),
    (("--kube-qps",), "kube_qps", "float",
     "critical-lane API requests per second: what a pending pod waits on (default per role: "
     "scheduler 150, node-agent 50, monitor 20; docs/kube-client.md)"),
    (("--kube-burst",), "kube_burst", "int", "critical-lane API request burst (default per role: 300, 100, 40)"),
    (("--kube-background-qps",), "kube_background_qps", "float",
     "background-lane API requests per second: events, handshakes, registrations, leases, re-lists "
     "(default per role: scheduler 50, node-agent 10, monitor 20)"),
    (("--kube-background-burst",), "kube_background_burst", "int",
     "background-lane API request burst (default per role: 100, 20, 40)"),
    (("--kube-timeout",), "kube_timeout", "duration",
     "deadline of one API request except watches, e.g. 30s; 0 = none (default 10s)"),
    (("-v", "--v"), "v", "int", "log verbosity: 0 errors and key events, 2 scores, 4 filter decisions, 5 trace"),
    (("--log-format",), "log_format", "str", "text (klog style) or json"),
    (("--debug",), "debug", "bool", "debug mode; implies -v=4"),
    (("--profiling",), "profiling", "bool",
     "serve /debug/pprof on the loopback debug listener (off by default; reach it with kubectl port-forward)"),
    (("--debug-bind-address",), "debug_bind_address", "str",
     "loopback listener for /debug/pprof with --profiling (default 127.0.0.1:6060; loopback only)"),
    (("--aiomonitor",), "aiomonitor", "bool", "start aiomonitor on 127.0.0.1"),
    (("--aiomonitor-port",), "aiomonitor_port", "int", "aiomonitor telnet port (default 20101)"),
    (("--aiomonitor-console-port",), "aiomonitor_console_port", "int", "aiomonitor console port (default 20103)"),
    (("--aiomonitor-webui-port",), "aiomonitor_webui_port", "int", "aiomonitor web UI port (default 20102)"),
    (("--device-config-file",), "device_config_file", "str", "HAMi device config YAML (the nvidia: section)"),
    (("--metrics-bind-address",), "metrics_bind_address", "str",
     "metrics listener (scheduler default :9395, monitor default :9394)"),
    (("--legacy-metrics",), "legacy_metrics", "bool", "also export HAMi's legacy metric names"),
    # scheduler
    (("--http_bind",), "http_bind", "str",
     "extender listener for /filter and /bind (default 127.0.0.1:8080; loopback unless --client-ca-file)"),
    (("--cert_file",), "cert_file", "str", "TLS certificate for the extender and webhook"),
    (("--key_file",), "key_file", "str", "TLS key for the extender and webhook"),
    (("--client-ca-file",), "client_ca_file", "str",
     "CA of the client certificates the extender requires (mTLS); allows a non-loopback --http_bind"),
    (("--webhook-bind-address",), "webhook_bind_address", "str",
     "own TLS listener for /webhook, e.g. 0.0.0.0:443 (default: /webhook on the extender listener)"),
    (("--scheduler-name",), "scheduler_name", "str", "schedulerName the webhook sets (default hami-scheduler)"),
    (("--scheduler-metrics-bind-address",), "scheduler_metrics_bind_address", "str",
     "scheduler metrics listener when several roles share a process"),
    (("--node-scheduler-policy",), "node_scheduler_policy", "str", "binpack or spread (default binpack)"),
    (("--gpu-scheduler-policy",), "gpu_scheduler_policy", "str",
     "binpack, spread, numa, mutex, topology-aware or a comma chain (default spread)"),
    (("--node-label-selector",), "node_label_selector", "str", "only nodes with these labels, k=v[,k=v]"),
    (("--node-lock-timeout",), "node_lock_timeout", "duration", "node lock expiry (default 5m)"),
    (("--node-lock-retry-timeout",), "node_lock_retry_timeout", "duration",
     "how long pod-group members retry lock contention (default 28s)"),
    (("--api-probe-after",), "api_probe_after", "duration",
     "ask the API server (GET /version) after this long without a word from it (default 10s)"),
    (("--api-unready-after",), "api_unready_after", "duration",
     "/readyz turns 503 once the API server has failed to answer this long (default 5s)"),
    (("--missed-webhook-grace",), "missed_webhook_grace", "duration",
     "a GPU pod created while the webhook was down is recreated (or warned about) after this (default 30s)"),
    (("--recreate-missed-pods",), "recreate_missed_pods", "bool",
     "delete GPU pods the webhook missed so their controller recreates them (default true; false: Events only)"),
    (("--node-lock-orphan-timeout",), "node_lock_orphan_timeout", "duration",
     "take over a lock whose holder was never bound after this (default 45s: the 30s extender timeout + margin)"),
    (("--dra",), "dra", "bool",
     "DRA mode: the webhook turns GPU resources into ResourceClaims; --embedded runs DRA nodes (docs/dra.md)"),
    (("--force-overwrite-default-scheduler",), "force_overwrite_default_scheduler", "bool",
     "the webhook also takes pods asking for default-scheduler (default true)"),
    (("--extender-prioritize",), "extender_prioritize", "bool",
     "kube-scheduler calls /prioritize: /filter returns every fitting node (default: HAMi's one best node)"),
    (("--extender-fast-http",), "extender_fast_http", "bool",
     "answer plain POSTs to the extender verbs without aiohttp's request layer; the rest stays aiohttp's "
     "(default true)"),
    (("--trusted-placement-writers",), "trusted_placement_writers", "str",
     "comma list of usernames (system:serviceaccount:<ns>:<name>) that may write pod placement annotations "
     "(default hami's and HAMi v2.10's scheduler and device-plugin accounts in kube-system and hami-system)"),
    (("--allow-tenant-disable-control",), "allow_tenant_disable_control", "bool",
     "the webhook admits GPU pods that set CUDA_DISABLE_CONTROL (default false; nodes must allow it too)"),
    (("--metrics-device-uuids",), "metrics_device_uuids", "bool",
     "label the scheduler's per-device metrics with GPU UUIDs (default false: node and index only)"),
    (("--burst-spread",), "burst_spread", "float0",
     "how widely a burst may leave the node policy's best node: nodes for this many times the critical lane's "
     "sustained bind rate x the node lock's hold (default 2; 0 = never, each pod queues for its best node)"),
    (("--requeue-wakes-per-second",), "requeue_wakes_per_second", "float",
     "at most this many wakes per second of parked pending pods when GPUs free up (default 20)"),
    (("--gpu-preemption",), "gpu_preemption", "bool",
     "the leader evicts lower-priority pods (Eviction API) for a pending pod short only of GPU shares (default off)"),
    (("--gpu-preemption-hold-timeout",), "gpu_preemption_hold_timeout", "duration",
     "how long the shares freed by a GPU preemption stay held for its preemptor (default 2m)"),
    (("--leader-elect",), "leader_elect", "bool", "leader election on a Lease; only the leader writes handshakes"),
    (("--leader-elect-resource-name",), "leader_elect_resource_name", "str", "Lease name"),
    (("--leader-elect-resource-namespace",), "leader_elect_resource_namespace", "str", "Lease namespace"),
    # node agent
    (("--node-name",), "node_name", "str", "this node's name (else $NODE_NAME)"),
    (("--kubelet-socket-dir",), "kubelet_socket_dir", "str", "device-plugin socket dir"),
    (("--hook-path",), "hook_path", "str", "host dir holding vgpu/libvgpu.so (default /usr/local)"),
    (("--node-config-file",), "node_config_file", "str", "per-node config.json (nodeconfig list)"),
    (("--gpu-backend",), "gpu_backend", "str", "nvml or fake"),
    (("--fake-gpus",), "fake_gpus", "str", "YAML file of fake GPUs (with --gpu-backend fake)"),
    (("--register-interval",), "register_interval", "duration", "registration check period (default 30s)"),
    (("--health-bind-address",), "health_bind_address", "str",
     "node agent /healthz and /readyz listener for kubelet's probes, e.g. :9396 (default off)"),
    (("--vgpu-lib",), "vgpu_lib", "str",
     "HAMi-core libvgpu.so to install under <hook-path>/vgpu at start (else $HAMI_VGPU_LIB; the image sets it)"),
    (("--vgpu-lib-version",), "vgpu_lib_version", "str",
     "version of --vgpu-lib, recorded on the host and the Node (else $HAMI_VGPU_LIB_VERSION)"),
    (("--device-list-strategy",), "device_list_strategy", "str",
     "how Allocate names GPUs: envvar, cdi-annotations, cdi-cri, or a comma list (default envvar)"),
    (("--device-id-strategy",), "device_id_strategy", "str", "CDI device names by uuid or index (default uuid)"),
    (("--report-node-capacity",), "report_node_capacity", "bool",
     "put the healthy GPUs' nvidia.com/gpumem and gpucores in the Node's capacity and allocatable, so Cluster "
     "Autoscaler can see them (else $REPORT_NODE_CAPACITY; default off, and off removes them; docs/autoscaling.md)"),
    # dra (kubelet DRA plugin)
    (("--plugin-dir",), "plugin_dir", "str",
     "--role dra: dir of the DRA socket dra.sock and the checkpoint (default /var/lib/kubelet/plugins/<driver>)"),
    (("--plugin-registration-dir",), "plugin_registration_dir", "str",
     "--role dra: kubelet's plugin registration dir (default /var/lib/kubelet/plugins_registry)"),
    (("--cdi-root",), "cdi_root", "str", "--role dra: where the per-claim CDI specs go (default /var/run/cdi)"),
    (("--dra-withdraw-unhealthy",), "dra_withdraw_unhealthy", "bool",
     "--role dra: leave an unhealthy GPU out of the slice instead of tainting it (clusters before 1.36)"),
    (("--dra-mig-partitions",), "dra_mig_partitions", "bool",
     "--role dra: publish MIG partitions of MIG-capable GPUs, created at prepare (default true; needs the "
     "MIG config capability: a privileged container); false: whole GPUs, shares and static MIG only"),
    # monitor
    (("--cache-dir",), "cache_dir", "str", "HAMi-core cache dirs (default /usr/local/vgpu/containers)"),
    (("--cache-grace",), "cache_grace", "duration", "keep dirs of unknown pods this long (default 5m)"),
    (("--proc-root",), "proc_root", "str", "proc filesystem root for host-PID repair (default /proc)"),
    (("--monitor-metrics-bind-address",), "monitor_metrics_bind_address", "str",
     "monitor metrics listener when several roles share a process"),
    (("--feedback",), "feedback", "bool", "run HAMi's priority feedback loop (default true)"),
    # ui
    (("--ui-bind-address",), "ui_bind_address", "str",
     "web UI listener (default 127.0.0.1:8080; 127.0.0.1:8090 with --embedded; reach it with kubectl port-forward)"),
    (("--ui-readonly-token-file",), "ui_readonly_token_file", "str",
     "file holding a token every UI request must carry (Authorization: Bearer, or ?token= once)"),
    (("--ui-readonly-token",), "ui_readonly_token", "str",
     "the same token given inline (visible in ps: prefer --ui-readonly-token-file)"),
    (("--prometheus-url",), "prometheus_url", "str", "Prometheus the UI reads used-memory figures from"),
    (("--ui-metrics-urls",), "ui_metrics_urls", "str",
     "comma list of monitor /metrics URLs the UI scrapes when no --prometheus-url is given"),
    (("--ui-whatif-interval",), "ui_whatif_interval", "duration", "at most one on-demand what-if per interval (30s)"),
    # embedded cluster
    (("--embedded",), "embedded", "bool", "run everything on an embedded Kubernetes API server"),
    # every HTTP listener (hami.httpguard)
    (("--http-header-timeout",), "http_header_timeout", "duration",
     "a request's headers must arrive within this of the connection or its first byte (default 10s)"),
    (("--http-body-timeout",), "http_body_timeout", "duration",
     "a request's body must arrive within this of its headers, else 408 (default 30s)"),
    (("--http-max-connections",), "http_max_connections", "int",
     "open connections per listener from untrusted sources; more are closed on accept (default 256)"),
    (("--http-max-trusted-connections",), "http_max_trusted_connections", "int",
     "the trusted sources' own open connections per listener (loopback, --http-trusted-sources, an mTLS "
     "client); past both caps accept pauses and the kernel queues the rest (default 2048)"),
    (("--http-trusted-sources",), "http_trusted_sources", "str",
     "comma list of CIDRs whose connections count as trusted (default loopback: 127.0.0.0/8,::1/128; "
     "list it too when kube-scheduler also calls over loopback)"),
    (("--http-idle-timeout",), "http_idle_timeout", "duration", "keep-alive between requests (default 30s)"),
    (("--sim-listen",), "sim_listen", "str", "embedded API server listener (default 127.0.0.1:6443)"),
    (("--sim-listen-insecure",), "sim_listen_insecure", "bool",
     "serve the embedded API server (no authentication) on a non-loopback --sim-listen anyway"),
    (("--sim-kubeconfig",), "sim_kubeconfig", "str", "where the embedded API server writes its kubeconfig"),
    (("--sim-nodes",), "sim_nodes", "int", "simulated GPU nodes (default 4)"),
    (("--sim-gpus",), "sim_gpus", "str", 'GPUs per node, e.g. "2xNVIDIA A100-SXM4-40GB:40960"'),
    (("--sim-state-dir",), "sim_state_dir", "str",
     "sockets, cache dirs and kubeconfig of the embedded cluster (default: a new temp folder, removed on exit)"),
    (("--sim-keep-state",), "sim_keep_state", "bool", "keep the temp state folder when the embedded cluster stops"),
    (("--sim-hostpid-bug",), "sim_hostpid_bug", "bool", "simulated containers record the container PID as host PID"),
    (("--sim-watch-window",), "sim_watch_window", "int", "watch events retained by the embedded server"),
    (("--sim-read-latency",), "sim_read_latency", "duration", "latency the embedded server adds to every read, e.g. 1ms"),
    (("--sim-write-latency",), "sim_write_latency", "duration",
     "latency the embedded server adds to every write, e.g. 5ms (an etcd-backed write)"),
    (("--sim-max-inflight",), "sim_max_inflight", "int",
     "concurrent requests the embedded server serves; more get 429 + Retry-After, as APF (default 0 = no limit)"),
    (("--sim-pod-stop-seconds",), "sim_pod_stop_seconds", "duration",
     "how long a simulated pod takes to stop after SIGTERM, at most its grace period (default 5s)"),
    (("--sim-node-group",), "sim_node_group", "list",
     'a node group a Cluster Autoscaler stand-in grows and shrinks, NAME:MIN:MAX:GPUS with GPUS as in --sim-gpus, '
     'e.g. "pool:0:2:1xNVIDIA A100-SXM4-40GB:40960" (repeatable)'),
    (("--sim-scale-down-unneeded",), "sim_scale_down_unneeded", "duration",
     "how long a node group's node stays empty before the stand-in removes it (default 30s)"),
    (("--demo-workload",), "demo_workload", "bool", "submit a stream of sample GPU pods"),
]

_KIND_TYPES: dict[str, Any] = {"str": str, "int": _nonneg_int, "float": _positive_float, "float0": _nonneg_float,
                               "duration": str}


def _spellings(names: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for n in names:
        for variant in (n, n.replace("_", "-"), n[:2] + n[2:].replace("-", "_")):
            if variant not in out:
                out.append(variant)
    return out


def add_role_flags(parser: argparse.ArgumentParser, roles: tuple[str, ...] | None = None) -> None:
    """Every flag, in one help group per set of roles that reads it (hami.cli.rolehelp); with `roles`,
    only those roles' flags and the common ones (what `hami --role R --help` shows). HAMi's alias
    flags come last."""
    from hami.cli.aliases import add_alias_flags
    from hami.cli.rolehelp import group_title, roles_of, shown

    groups: dict[tuple[str, ...], argparse._ArgumentGroup] = {}
    for names, dest, kind, help_text in FLAGS:
        dest_roles = roles_of(dest)
        if not shown(dest_roles, roles):
            continue
        if dest_roles not in groups:
            groups[dest_roles] = parser.add_argument_group(group_title(dest_roles))
        group = groups[dest_roles]
        opts = _spellings(names)
        if kind == "list":
            group.add_argument(*opts, dest=dest, action="append", type=str, default=argparse.SUPPRESS,
                               help=help_text)
        elif kind == "bool":
            group.add_argument(*opts, dest=dest, nargs="?", const=True, type=parse_bool,
                               default=argparse.SUPPRESS, metavar="BOOL", help=help_text)
        else:
            group.add_argument(*opts, dest=dest, type=_KIND_TYPES[kind], default=argparse.SUPPRESS,
                               help=help_text)
    if roles is None or {"scheduler", "node-agent"} & set(roles):
        add_alias_flags(parser, parse_bool)


def add_kube_flags(parser: argparse.ArgumentParser) -> None:
    """The connection flags subcommands need (doctor, tune)."""
    for names, dest, kind, help_text in FLAGS:
        if dest in ("kubeconfig", "kube_qps", "kube_burst", "kube_background_qps", "kube_background_burst",
                    "kube_timeout", "v", "log_format"):
            parser.add_argument(*_spellings(names), dest=dest, type=_KIND_TYPES[kind],
                                default=argparse.SUPPRESS, help=help_text)
