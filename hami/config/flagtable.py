"""Every flag of `hami`, declared once: its spellings, type, where it lands in the settings, who reads it, help.

The CLI's parser (hami.cli.flags), `--help` and `--role R --help` (hami.cli.rolehelp), build_config's flag
step (hami.config.build), HAMi's legacy aliases (hami.cli.aliases) and the options of the tool subcommands
(`hami doctor`, `tune`, `whatif`, `cache`, `kubectl hami`: COMMANDS) are all generated from FLAGS; no
module outside hami.cli.flags declares an argparse option (tests/foundation/test_cli_subcommand_flags.py).

A row: `Flag(names, kind, to, help)`.
- names: the spellings as HAMi writes them, space separated; `_` and `-` variants are accepted too, and the
  argparse dest is the last name without dashes.
- kind: str | int (>= 0) | float (> 0) | float0 (>= 0) | bool (Go's ParseBool) | duration (Go's syntax, 1m30s,
  or bare seconds) | list (repeatable) | selector (k=v[,k=v]) | goint, number (any value: the alias's config
  key checks it) | refused (HAMi's flag with no equivalent; help says what to set instead) | switch (present
  or not) | version.
- to: the settings fields it sets, `group.field`, space separated ("" = read by name where noted); for an
  alias, `nvidia.<key>` of the device config.
- roles: who reads it, for the help groups; by default the roles of its `to` groups, () = every role.
- weak: sets its fields only where no other flag did (HAMi's one flag beside role-specific ones).
- commands: the tool subcommands (COMMANDS) whose parser takes the row too, next to the roles that read it:
  the API connection flags are the roles' rows. A subcommand's own option (`option(...)`) sets no settings
  field: its value is the subcommand's argument, with `default` when not given; its kinds are str, goint,
  number, switch, off (store_false), list and arg (a positional; optional when it has a default).
  A spelling may be a role flag and a subcommand option with another meaning (`--scheduler-name`: the name
  the webhook sets; to `hami doctor`, the scheduler to look at): two rows, never in one parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami.config.settings import parse_duration, parse_label_selector

# settings group -> the role that reads it; kube, log, debug and listen are every role's
GROUP_ROLES = {"scheduler": "scheduler", "agent": "node-agent", "monitor": "monitor", "ui": "ui", "sim": "sim"}
ROLE_ORDER = ("scheduler", "node-agent", "monitor", "ui", "dra", "sim")
# The agent settings `--role dra` reads (hami.dra.role.run): its own dra_* fields and cdi_root, and these
# of the node agent's. The device and node configs reach it too (settings_for_node).
DRA_AGENT_FIELDS = frozenset({"node_name", "gpu_backend", "fake_gpus", "hook_path", "health_bind_address",
                              "node_config_file", "cdi_root"})
ALIAS_DEST_PREFIX = "hami_alias:"
# The tool subcommands whose options are rows here, by their words (`hami doctor pod`, `kubectl hami top`).
COMMANDS = ("doctor pod", "doctor nodes", "tune", "whatif", "cache dump", "kubectl hami", "kubectl hami top")
API_COMMANDS = ("doctor pod", "doctor nodes", "tune", "whatif")  # the ones that talk to the API server
DOCTOR = ("doctor pod", "doctor nodes")


@dataclass(frozen=True, slots=True)
class Flag:
    names: str
    kind: str
    to: str
    help: str
    roles: tuple[str, ...] | None = None
    weak: bool = False
    alias: bool = False  # HAMi's deprecated spelling of a device config key (`to` = nvidia.<key>)
    commands: tuple[str, ...] = ()  # the subcommands (COMMANDS) that take this row too
    option: bool = False  # a subcommand's own option: no settings field, a default of its own
    default: Any = None  # an option's value when not given (a role flag's lives in hami.config.settings)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    dest_name: str = ""  # an option's argparse dest when not its last spelling's

    @property
    def positional(self) -> bool:
        return self.kind == "arg"

    @property
    def spellings(self) -> tuple[str, ...]:
        return tuple(self.names.split())

    @property
    def dest(self) -> str:
        if self.dest_name:
            return self.dest_name
        if self.alias:
            return ALIAS_DEST_PREFIX + self.nvidia_key
        if self.kind == "refused":
            return self.spellings[0]
        return self.spellings[-1].lstrip("-").replace("-", "_")

    @property
    def targets(self) -> tuple[tuple[str, str], ...]:
        return tuple(tuple(t.split(".", 1)) for t in self.to.split())  # type: ignore[misc]

    @property
    def nvidia_key(self) -> str:
        return self.to.removeprefix("nvidia.")

    def reader_roles(self) -> tuple[str, ...]:
        """The roles that read this flag, in ROLE_ORDER; () = every role (API client, logs, debug)."""
        if self.roles is not None:
            return self.roles
        if self.alias:
            return ("scheduler", "node-agent")
        roles = set()
        for group, field in self.targets:
            if group == "agent" and (field.startswith("dra_") or field == "cdi_root"):
                roles.add("dra")  # the DRA plugin's own flags: not the device plugin's
                continue
            if group in GROUP_ROLES:
                roles.add(GROUP_ROLES[group])
            if group == "agent" and field in DRA_AGENT_FIELDS:
                roles.add("dra")
        return tuple(r for r in ROLE_ORDER if r in roles)

    def convert(self, value):
        """A value given as text (the command line, or a caller's dict) as the settings field wants it."""
        if not isinstance(value, str):
            return value
        if self.kind == "duration":
            return parse_duration(value, key=self.spellings[-1], source="command line")
        if self.kind == "selector":
            return parse_label_selector(value)
        return value


def alias(flag: str, key: str, kind: str) -> Flag:
    """HAMi's flag that sets the device config key `key` (hami.cli.aliases)."""
    return Flag(flag, kind, f"nvidia.{key}", f"= nvidia.{key}", alias=True)


def refused(flag: str, instead: str) -> Flag:
    """HAMi's flag with no equivalent here: the parse stops naming what to set instead."""
    return Flag(flag, "refused", "", instead, roles=("scheduler", "node-agent"))


def option(names: str, kind: str, help: str, commands: tuple[str, ...], default: Any = None, *,  # noqa: A002
           choices: tuple[str, ...] | None = None, metavar: str | None = None, dest: str = "") -> Flag:
    """A tool subcommand's own option (or positional argument, kind "arg"): no settings field behind it."""
    return Flag(names, kind, "", help, roles=(), commands=commands, option=True, default=default, choices=choices,
                metavar=metavar, dest_name=dest)


FLAGS: tuple[Flag, ...] = (
    # the process: read by the CLI itself (hami.cli.main), not by a settings group
    Flag("--version", "version", "", "print hami's version and exit", roles=()),
    Flag("--role", "str", "", "roles to run, comma separated (the roles are listed below), or all", roles=()),
    Flag("--check-config", "switch", "",
         "parse flags, environment and config files as a start would, print the resolved configuration and exit "
         "(0 valid, 2 naming the bad flag or file); opens no socket and makes no API call", roles=()),
    # process
    Flag("--kubeconfig", "str", "kube.kubeconfig", "kubeconfig file (else $KUBECONFIG, else in-cluster)",
         commands=API_COMMANDS),
    Flag("--kube-qps", "float", "kube.qps",
         "critical-lane API requests per second: what a pending pod waits on (default per role: scheduler 150, "
         "node-agent 50, monitor 20; docs/kube-client.md)", commands=API_COMMANDS),
    Flag("--kube-burst", "int", "kube.burst",
         "critical-lane API request burst (default per role: scheduler 1000, node-agent 100, monitor 40)",
         commands=API_COMMANDS),
    Flag("--kube-background-qps", "float", "kube.background_qps",
         "background-lane API requests per second: events, handshakes, registrations, leases, re-lists "
         "(default per role: scheduler 50, node-agent 10, monitor 20)", commands=API_COMMANDS),
    Flag("--kube-background-burst", "int", "kube.background_burst",
         "background-lane API request burst (default per role: scheduler 100, node-agent 20, monitor 40)",
         commands=API_COMMANDS),
    Flag("--kube-timeout", "duration", "kube.timeout",
         "deadline of one API request except watches, e.g. 30s; 0 = none (default 10s)", commands=API_COMMANDS),
    Flag("-v --v", "int", "log.verbosity",
         "log verbosity: 0 errors and key events, 2 scores, 4 filter decisions, 5 trace", commands=API_COMMANDS),
    Flag("--log-format", "str", "log.format", "text (klog style) or json", commands=API_COMMANDS),
    Flag("--debug", "bool", "log.debug", "debug mode; implies -v=4"),
    Flag("--profiling", "bool", "debug.profiling",
         "serve /debug/pprof on the loopback debug listener (off by default; reach it with kubectl "
         "port-forward)"),
    Flag("--debug-bind-address", "str", "debug.debug_bind_address",
         "loopback listener for /debug/pprof with --profiling (default 127.0.0.1:6060; loopback only)"),
    Flag("--aiomonitor", "bool", "debug.aiomonitor", "start aiomonitor on 127.0.0.1"),
    Flag("--aiomonitor-port", "int", "debug.aiomonitor_port", "aiomonitor telnet port (default 20101)"),
    Flag("--aiomonitor-console-port", "int", "debug.aiomonitor_console_port",
         "aiomonitor console port (default 20103)"),
    Flag("--aiomonitor-webui-port", "int", "debug.aiomonitor_webui_port", "aiomonitor web UI port (default 20102)"),
    Flag("--device-config-file", "str", "", "HAMi device config YAML (the nvidia: section)",
         roles=("scheduler", "node-agent", "dra")),  # read by build_config's step 2, then the webhook, fit and split
    # HAMi's one metrics flag feeds whichever roles run; the role-specific flags below win over it.
    Flag("--metrics-bind-address", "str", "scheduler.metrics_bind_address monitor.metrics_bind_address",
         "metrics listener (scheduler default :9395, monitor default :9394)", weak=True),
    Flag("--legacy-metrics", "bool", "scheduler.legacy_metrics monitor.legacy_metrics",
         "also export HAMi's legacy metric names"),
    # scheduler
    Flag("--http_bind", "str", "scheduler.http_bind",
         "extender listener for /filter and /bind (default 127.0.0.1:8080; loopback unless --client-ca-file)"),
    Flag("--cert_file", "str", "scheduler.cert_file", "TLS certificate for the extender and webhook"),
    Flag("--key_file", "str", "scheduler.key_file", "TLS key for the extender and webhook"),
    Flag("--client-ca-file", "str", "scheduler.client_ca_file",
         "CA of the client certificates the extender requires (mTLS); allows a non-loopback --http_bind"),
    Flag("--webhook-bind-address", "str", "scheduler.webhook_bind_address",
         "own TLS listener for /webhook, e.g. 0.0.0.0:443 (default: /webhook on the extender listener)"),
    Flag("--scheduler-name", "str", "scheduler.scheduler_name",
         "schedulerName the webhook sets (default hami-scheduler)"),
    Flag("--scheduler-metrics-bind-address", "str", "scheduler.metrics_bind_address",
         "scheduler metrics listener when several roles share a process"),
    Flag("--node-scheduler-policy", "str", "scheduler.node_scheduler_policy", "binpack or spread (default binpack)"),
    Flag("--gpu-scheduler-policy", "str", "scheduler.gpu_scheduler_policy",
         "binpack, spread, numa, mutex, topology-aware or a comma chain (default spread)"),
    Flag("--node-label-selector", "selector", "scheduler.node_label_selector",
         "only nodes with these labels, k=v[,k=v]"),
    Flag("--node-lock-timeout", "duration", "scheduler.node_lock_timeout", "node lock expiry (default 5m)"),
    Flag("--node-lock-retry-timeout", "duration", "scheduler.node_lock_retry_timeout",
         "how long pod-group members retry lock contention (default 28s)"),
    Flag("--api-probe-after", "duration", "scheduler.api_probe_after",
         "ask the API server (GET /version) after this long without a word from it (default 10s)"),
    Flag("--api-unready-after", "duration", "scheduler.api_unready_after",
         "/readyz turns 503 once the API server has failed to answer this long (default 5s)"),
    Flag("--missed-webhook-grace", "duration", "scheduler.missed_webhook_grace",
         "a GPU pod created while the webhook was down is recreated (or warned about) after this (default 30s)"),
    Flag("--recreate-missed-pods", "bool", "scheduler.recreate_missed_pods",
         "delete GPU pods the webhook missed so their controller recreates them (default true; false: Events "
         "only)"),
    Flag("--node-lock-orphan-timeout", "duration", "scheduler.node_lock_orphan_timeout",
         "take over a lock whose holder was never bound after this (default 45s: the 30s extender timeout + "
         "margin)"),
    Flag("--dra", "bool", "scheduler.dra",
         "DRA mode: the webhook turns GPU resources into ResourceClaims; --embedded runs DRA nodes "
         "(docs/dra.md)"),
    Flag("--dra-default-mode", "str", "scheduler.dra_default_mode",
         "with --dra: the GPU mode of pods whose namespace names none, dra or device-plugin (default dra); a "
         "namespace's hami.io/gpu-mode label and, where it allows, a pod's annotation choose otherwise"),
    Flag("--force-overwrite-default-scheduler", "bool", "scheduler.force_overwrite_default_scheduler",
         "the webhook also takes pods asking for default-scheduler (default true)"),
    Flag("--extender-prioritize", "bool", "scheduler.extender_prioritize",
         "kube-scheduler calls /prioritize: /filter returns every fitting node (default: HAMi's one best node)"),
    Flag("--extender-fast-http", "bool", "scheduler.extender_fast_http",
         "answer plain POSTs to the extender verbs without aiohttp's request layer; the rest stays aiohttp's "
         "(default true)"),
    Flag("--trusted-placement-writers", "str", "scheduler.trusted_placement_writers",
         "comma list of usernames (system:serviceaccount:<ns>:<name>) that may write pod placement annotations "
         "(default hami's and HAMi v2.10's scheduler and device-plugin accounts in kube-system and "
         "hami-system)"),
    Flag("--allow-tenant-disable-control", "bool", "scheduler.allow_tenant_disable_control",
         "the webhook admits GPU pods that set CUDA_DISABLE_CONTROL (default false; nodes must allow it too)"),
    Flag("--metrics-device-uuids", "bool", "scheduler.metrics_device_uuids",
         "label the scheduler's per-device metrics with GPU UUIDs (default false: node and index only)"),
    Flag("--burst-spread", "float0", "scheduler.burst_spread",
         "how widely a burst may leave the node policy's best node: nodes for this many times the critical "
         "lane's sustained bind rate x the node lock's hold (default 2; 0 = never, each pod queues for its "
         "best node)"),
    Flag("--requeue-wakes-per-second", "float", "scheduler.requeue_wakes_per_second",
         "at most this many wakes per second of parked pending pods when GPUs free up (default 20)"),
    Flag("--gpu-preemption", "bool", "scheduler.gpu_preemption",
         "the leader evicts lower-priority pods (Eviction API) for a pending pod short only of GPU shares "
         "(default off)"),
    Flag("--gpu-preemption-hold-timeout", "duration", "scheduler.gpu_preemption_hold_timeout",
         "how long the shares freed by a GPU preemption stay held for its preemptor (default 2m)"),
    Flag("--leader-elect", "bool", "scheduler.leader_elect",
         "leader election on a Lease; only the leader writes handshakes"),
    Flag("--leader-elect-resource-name", "str", "scheduler.leader_elect_resource_name", "Lease name"),
    Flag("--leader-elect-resource-namespace", "str", "scheduler.leader_elect_resource_namespace", "Lease namespace"),
    # node agent
    Flag("--node-name", "str", "agent.node_name monitor.node_name", "this node's name (else $NODE_NAME)"),
    Flag("--kubelet-socket-dir", "str", "agent.kubelet_socket_dir", "device-plugin socket dir"),
    Flag("--hook-path", "str", "agent.hook_path", "host dir holding vgpu/libvgpu.so (default /usr/local)"),
    Flag("--node-config-file", "str", "agent.node_config_file", "per-node config.json (nodeconfig list)"),
    Flag("--gpu-backend", "str", "agent.gpu_backend monitor.gpu_backend", "nvml or fake"),
    Flag("--fake-gpus", "str", "agent.fake_gpus monitor.fake_gpus sim.fake_gpus",
         "YAML file of fake GPUs (with --gpu-backend fake)"),
    Flag("--register-interval", "duration", "agent.register_interval", "registration check period (default 30s)"),
    Flag("--health-bind-address", "str", "agent.health_bind_address",
         "node agent /healthz and /readyz listener for kubelet's probes, e.g. :9396 (default off)"),
    Flag("--vgpu-lib", "str", "agent.vgpu_lib",
         "HAMi-core libvgpu.so to install under <hook-path>/vgpu at start (else $HAMI_VGPU_LIB; the image sets "
         "it)"),
    Flag("--vgpu-lib-version", "str", "agent.vgpu_lib_version",
         "version of --vgpu-lib, recorded on the host and the Node (else $HAMI_VGPU_LIB_VERSION)"),
    Flag("--device-list-strategy", "str", "agent.device_list_strategy",
         "how Allocate names GPUs: envvar, cdi-annotations, cdi-cri, or a comma list (default envvar)"),
    Flag("--device-id-strategy", "str", "agent.device_id_strategy", "CDI device names by uuid or index (default uuid)"),
    Flag("--report-node-capacity", "bool", "agent.report_node_capacity",
         "put the healthy GPUs' nvidia.com/gpumem and gpucores in the Node's capacity and allocatable, so "
         "Cluster Autoscaler can see them (else $REPORT_NODE_CAPACITY; default off, and off removes them; "
         "docs/autoscaling.md)"),
    # dra (kubelet DRA plugin)
    Flag("--plugin-dir", "str", "agent.dra_plugin_dir",
         "--role dra: dir of the DRA socket dra.sock and the checkpoint (default "
         "/var/lib/kubelet/plugins/<driver>)"),
    Flag("--plugin-registration-dir", "str", "agent.dra_registration_dir",
         "--role dra: kubelet's plugin registration dir (default /var/lib/kubelet/plugins_registry)"),
    Flag("--cdi-root", "str", "agent.cdi_root", "--role dra: where the per-claim CDI specs go (default /var/run/cdi)"),
    Flag("--dra-withdraw-unhealthy", "bool", "agent.dra_withdraw_unhealthy",
         "--role dra: leave an unhealthy GPU out of the slice instead of tainting it (clusters before 1.36)"),
    Flag("--dra-mig-partitions", "bool", "agent.dra_mig_partitions",
         "--role dra: publish MIG partitions of MIG-capable GPUs, created at prepare (default true; needs the "
         "MIG config capability: a privileged container); false: whole GPUs, shares and static MIG only"),
    # monitor
    Flag("--cache-dir", "str", "monitor.cache_dir", "HAMi-core cache dirs (default /usr/local/vgpu/containers)"),
    Flag("--cache-grace", "duration", "monitor.cache_grace", "keep dirs of unknown pods this long (default 5m)"),
    Flag("--proc-root", "str", "monitor.proc_root", "proc filesystem root for host-PID repair (default /proc)"),
    Flag("--monitor-metrics-bind-address", "str", "monitor.metrics_bind_address",
         "monitor metrics listener when several roles share a process"),
    Flag("--feedback", "bool", "monitor.feedback", "run HAMi's priority feedback loop (default true)"),
    # ui
    Flag("--ui-bind-address", "str", "ui.bind_address",
         "web UI listener (default 127.0.0.1:8080; 127.0.0.1:8090 with --embedded; reach it with kubectl "
         "port-forward)"),
    Flag("--ui-readonly-token-file", "str", "ui.readonly_token_file",
         "file holding a token every UI request must carry (Authorization: Bearer, or ?token= once)"),
    Flag("--ui-readonly-token", "str", "ui.readonly_token",
         "the same token given inline (visible in ps: prefer --ui-readonly-token-file)"),
    Flag("--prometheus-url", "str", "ui.prometheus_url", "Prometheus the UI reads used-memory figures from"),
    Flag("--ui-metrics-urls", "str", "ui.metrics_urls",
         "comma list of monitor /metrics URLs the UI scrapes when no --prometheus-url is given"),
    Flag("--ui-whatif-interval", "duration", "ui.whatif_interval", "at most one on-demand what-if per interval (30s)"),
    Flag("--ui-allow-anonymous", "bool", "ui.allow_anonymous",
         "without a token, answer every peer (default false: loopback only, e.g. kubectl port-forward)"),
    Flag("--ui-allowed-hosts", "str", "ui.allowed_hosts",
         "comma list of Host header names the UI answers besides loopback and its bound address (* any)"),
    # embedded cluster
    Flag("--embedded", "bool", "sim.embedded", "run everything on an embedded Kubernetes API server"),
    # every HTTP listener (hami.httpguard)
    Flag("--http-header-timeout", "duration", "listen.header_timeout",
         "a request's headers must arrive within this of the connection or its first byte (default 10s)"),
    Flag("--http-body-timeout", "duration", "listen.body_timeout",
         "a request's body must arrive within this of its headers, else 408 (default 30s)"),
    Flag("--http-max-connections", "int", "listen.max_connections",
         "open connections per listener from untrusted sources; more are closed on accept (default 256)"),
    Flag("--http-max-trusted-connections", "int", "listen.trusted_connections",
         "the trusted sources' own open connections per listener (loopback, --http-trusted-sources, an mTLS "
         "client); past both caps accept pauses and the kernel queues the rest (default 2048)"),
    Flag("--http-trusted-sources", "str", "listen.trusted_sources",
         "comma list of CIDRs whose connections count as trusted (default loopback: 127.0.0.0/8,::1/128; list "
         "it too when kube-scheduler also calls over loopback)"),
    Flag("--http-idle-timeout", "duration", "listen.idle_timeout", "keep-alive between requests (default 30s)"),
    Flag("--ports-file", "str", "listen.ports_file",
         "once every listener is bound, write a JSON object listener name -> host:port here (atomically); "
         "with port 0 in the bind flags the kernel picks each port"),
    Flag("--sim-listen", "str", "sim.listen", "embedded API server listener (default 127.0.0.1:6443)"),
    Flag("--sim-listen-insecure", "bool", "sim.listen_insecure",
         "serve the embedded API server (no authentication) on a non-loopback --sim-listen anyway"),
    Flag("--sim-kubeconfig", "str", "sim.kubeconfig", "where the embedded API server writes its kubeconfig"),
    Flag("--sim-nodes", "int", "sim.nodes", "simulated GPU nodes (default 4)"),
    Flag("--sim-dra-nodes", "int", "sim.dra_nodes",
         "with --dra: how many of the simulated nodes (the last ones) run the DRA plugin, the others the device "
         "plugin (a cluster mid-migration; default all)"),
    Flag("--sim-gpus", "str", "sim.gpus", "GPUs per node, e.g. \"2xNVIDIA A100-SXM4-40GB:40960\""),
    Flag("--sim-state-dir", "str", "sim.state_dir",
         "sockets, cache dirs and kubeconfig of the embedded cluster (default: a new temp folder, removed on "
         "exit)"),
    Flag("--sim-keep-state", "bool", "", "keep the temp state folder when the embedded cluster stops",
         roles=("sim",)),  # read by the CLI, which owns the temp folder
    Flag("--sim-hostpid-bug", "bool", "sim.hostpid_bug", "simulated containers record the container PID as host PID"),
    Flag("--sim-watch-window", "int", "sim.watch_window", "watch events retained by the embedded server"),
    Flag("--sim-read-latency", "duration", "sim.read_latency",
         "latency the embedded server adds to every read, e.g. 1ms"),
    Flag("--sim-write-latency", "duration", "sim.write_latency",
         "latency the embedded server adds to every write, e.g. 5ms (an etcd-backed write)"),
    Flag("--sim-max-inflight", "int", "sim.max_inflight",
         "concurrent requests the embedded server serves; more get 429 + Retry-After, as APF (default 0 = no "
         "limit)"),
    Flag("--sim-pod-stop-seconds", "duration", "sim.pod_stop_seconds",
         "how long a simulated pod takes to stop after SIGTERM, at most its grace period (default 5s)"),
    Flag("--sim-node-group", "list", "sim.node_groups",
         "a node group a Cluster Autoscaler stand-in grows and shrinks, NAME:MIN:MAX:GPUS with GPUS as in "
         "--sim-gpus, e.g. \"pool:0:2:1xNVIDIA A100-SXM4-40GB:40960\" (repeatable)"),
    Flag("--sim-scale-down-unneeded", "duration", "sim.scale_down_unneeded",
         "how long a node group's node stays empty before the stand-in removes it (default 30s)"),
    Flag("--sim-percentage-of-nodes-to-score", "int", "sim.percentage_of_nodes_to_score",
         "the embedded kube-scheduler's percentageOfNodesToScore, 0-100 (default 100, the chart's: every node "
         "reaches the extender; 0: kube-scheduler's adaptive sampling on 100 nodes or more)"),
    Flag("--demo-workload", "bool", "sim.demo_workload", "submit a stream of sample GPU pods"),

    # `hami doctor pod|nodes`: what the doctor must know about the scheduler it looks at
    option("pod", "arg", "the pod to diagnose (NAME alone: namespace default)", ("doctor pod",),
           metavar="NAMESPACE/NAME"),
    option("--scheduler-name", "str",
           "the HAMi scheduler's name, its --scheduler-name (schedulerName of its pods, component of its events)",
           (*DOCTOR, "whatif"), "hami-scheduler"),
    option("--scheduler-url", "str", "base URL of the scheduler's HTTP server; its /healthz tells if it runs",
           DOCTOR, ""),
    option("--hami-namespace", "str",
           "namespace HAMi is installed in (the Helm release namespace); default: the namespace of the chart's "
           "device ConfigMap (label app.kubernetes.io/component=hami-scheduler)", DOCTOR, ""),
    option("--scheduler-namespace", "str",
           "namespace of the scheduler's leader Lease (default: the HAMi namespace)", DOCTOR, ""),
    option("--lease-name", "str", "name of the leader Lease", DOCTOR, "hami-scheduler"),
    option("--node-lock-timeout", "str", "nodeLockExpire, e.g. 5m (default 5m)", DOCTOR, "5m"),
    option("--json", "switch", "print JSON instead of text", (*DOCTOR, "tune"), False),
    option("--no-whatif", "off", "skip the whatif probe (one snapshot of nodes, pods and quotas)", ("doctor pod",),
           True, dest="whatif"),
    # `hami tune`
    option("--metrics-url", "list", "a monitor's /metrics URL (repeatable: one per node)", ("tune",), ()),
    option("--prometheus-url", "str", "Prometheus base URL (instead of --metrics-url)", ("tune",), ""),
    option("--window", "str", "Prometheus range for max_over_time (default 7d)", ("tune",), "7d"),
    option("--samples", "goint", "scrapes per --metrics-url (peak over them)", ("tune",), 1),
    option("--interval", "number", "seconds between scrapes (default 10)", ("tune",), 10.0),
    option("--device-memory-scaling", "number", "the current deviceMemoryScaling", ("tune",), 1.0),
    option("--device-split-count", "goint", "the current deviceSplitCount", ("tune",), 10),
    option("--whatif-scenario", "str",
           "also write the recommendation as a `hami whatif --scenario` file, to try it first", ("tune",), "",
           metavar="FILE"),
    # `hami whatif`
    option("command", "arg", "run (default): replay scenarios; snapshot: save the live cluster to -o FILE",
           ("whatif",), "run", choices=("run", "snapshot")),
    option("--snapshot", "str", "read this snapshot instead of the live cluster", ("whatif",), "",
           dest="snapshot_file"),
    option("-o --output", "str", "snapshot: the file to write", ("whatif",), ""),
    option("--scenario", "str", "scenario YAML (workloads, changes, scenarios)", ("whatif",), ""),
    option("--format", "str", "output format", ("whatif",), "text", choices=("text", "json")),
    option("--html", "str", "also write a self-contained HTML report with plots here", ("whatif",), ""),
    option("--suggest", "switch",
           "search split count, memory scaling and policies for the change that places most pods", ("whatif",),
           False),
    option("--scale-up", "switch",
           "how many nodes of which node group would place the pending pods (Cluster Autoscaler's count with the "
           "in-tree filters, and HAMi's)", ("whatif",), False),
    option("--node-scheduler-policy", "str", "the scheduler's --node-scheduler-policy (default binpack)",
           ("doctor pod", "whatif"), "binpack", choices=("binpack", "spread")),
    option("--gpu-scheduler-policy", "str", "the scheduler's --gpu-scheduler-policy (default spread)",
           ("doctor pod", "whatif"), "spread"),
    option("--timing", "switch",
           "also schedule each scenario through the embedded cluster and kube-scheduler loop, timed (time to "
           "bind the batch, pods/s, queue waits)", ("whatif",), False),
    option("--timing-limit", "number", "--timing: stop a scenario's run after this many seconds (default 120)",
           ("whatif",), 120.0),
    option("--timing-creators", "goint",
           "--timing: pods created at once (1, the default, keeps the arrival order exact; more makes a burst)",
           ("whatif",), 1),
    option("--allocate-delay", "number",
           "--timing: seconds the node side takes per bound pod before releasing the node lock", ("whatif",), 0.0),
    # `hami cache dump`
    option("file", "arg", "a HAMi-core cache file (.../containers/<uid>_<ctr>/*.cache)", ("cache dump",),
           metavar="FILE"),
    option("--json", "switch", "print JSON (schema: docs/cache-dump.md)", ("cache dump",), False),
    # `kubectl hami`: the cluster as kubectl picks it, accepted before and after the subcommand
    option("--kubeconfig", "str", "kubeconfig file (else $KUBECONFIG, else ~/.kube/config)", ("kubectl hami",)),
    option("--context", "str", "kubeconfig context (else its current-context)", ("kubectl hami",)),
    option("-n --namespace", "str", "namespace (else the context's, else default)", ("kubectl hami",)),
    option("what", "arg", "what to list: gpus, nodes or pods", ("kubectl hami top",),
           choices=("gpus", "nodes", "pods")),
    option("-A --all-namespaces", "switch", "top pods: every namespace", ("kubectl hami top",), False),
    option("-o --output", "str", "table (default), json or yaml", ("kubectl hami top",), "table",
           choices=("table", "json", "yaml")),
    option("--metrics-url", "list",
           "a monitor's (or Prometheus-federated) /metrics for the used figures; repeatable", ("kubectl hami top",)),

    # HAMi's scheduler flags from before the device config file existed
    alias("--default-mem", "defaultMemory", "goint"),
    alias("--default-cores", "defaultCores", "goint"),
    alias("--default-gpu", "defaultGPUNum", "goint"),
    alias("--resource-name", "resourceCountName", "str"),
    alias("--resource-mem", "resourceMemoryName", "str"),
    alias("--resource-mem-percentage", "resourceMemoryPercentageName", "str"),
    alias("--resource-cores", "resourceCoreName", "str"),
    alias("--resource-priority", "resourcePriorityName", "str"),
    # HAMi's device plugin flags (cmd/device-plugin/nvidia/vgpucfg.go)
    alias("--device-split-count", "deviceSplitCount", "goint"),
    alias("--device-memory-scaling", "deviceMemoryScaling", "number"),
    alias("--device-cores-scaling", "deviceCoreScaling", "number"),
    alias("--disable-core-limit", "disableCoreLimit", "bool"),
    # HAMi's device plugin flags with no global equivalent
    refused("--mig-strategy", "migstrategy per node in the node config (--node-config-file; the chart's "
                              "devicePlugin.nodeConfiguration)"),
    refused("--config-file", "the device config (--device-config-file) and the node config (--node-config-file)"),
    refused("--kubelet-socket", "--kubelet-socket-dir (the directory of kubelet.sock)"),
    refused("--device-discovery-strategy", "nothing: hami discovers GPUs through NVML (--gpu-backend nvml)"),
    refused("--pass-device-specs", "--device-list-strategy (envvar, cdi-annotations, cdi-cri)"),
    refused("--cdi-annotation-prefix", "--device-list-strategy cdi-annotations (the prefix is NVIDIA's cdi.k8s.io/)"),
)

ROLE_FLAGS: tuple[Flag, ...] = tuple(f for f in FLAGS if not f.alias and f.kind != "refused" and not f.option)
ALIAS_FLAGS: tuple[Flag, ...] = tuple(f for f in FLAGS if f.alias)
REFUSED_FLAGS: tuple[Flag, ...] = tuple(f for f in FLAGS if f.kind == "refused")
BY_DEST: dict[str, Flag] = {f.dest: f for f in ROLE_FLAGS}


def command_flags(command: str) -> tuple[Flag, ...]:
    """The rows subcommand `command` (one of COMMANDS) takes, in table order."""
    if command not in COMMANDS:
        raise KeyError(command)
    return tuple(f for f in FLAGS if command in f.commands)


def flag_named(group: str, field: str) -> str:
    """The flag that sets settings field `group.field` (its main spelling), for messages about its value."""
    for f in ROLE_FLAGS:
        if (group, field) in f.targets and not f.weak:
            return f.spellings[-1]
    raise KeyError(f"{group}.{field}")


def flag_label(group: str, field: str) -> str:
    """The flag that sets `group.field`, with `(or X)` for a flag that sets it too unless that one is given."""
    weak = [f.spellings[-1] for f in ROLE_FLAGS if f.weak and (group, field) in f.targets]
    return flag_named(group, field) + "".join(f" (or {w})" for w in weak)
