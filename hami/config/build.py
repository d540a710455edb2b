"""Building the one Config: defaults, files, environment, then the flags the user set (see build_config)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from hami.config.devicefile import load_file, parse_device_config, parse_node_configs
from hami.config.flagtable import BY_DEST
from hami.config.settings import (
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    GROUP_TYPES,
    Config,
    ConfigError,
    DebugSettings,
    SchedulerSettings,
    SimSettings,
    parse_duration,
)
from hami.config.trust import check_listener_trust, check_listeners, check_sim_listen, check_trusted_sources
from hami.config.vendortable import default_vendor_table, vendors_with_nvidia
from hami.device.model import NodeDeviceConfig, NvidiaConfig
from hami.device.vendors import VendorError, VendorTable, apply_device_config

# Go's strconv.ParseBool spellings (HAMi reads its environment with it).
_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "true", "TRUE", "True"), True),
             **dict.fromkeys(("0", "f", "F", "false", "FALSE", "False"), False)}


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
    """The one place a Config is made. Precedence, lowest first, each step overriding the ones before:

    1. the defaults of the settings types (hami.config.settings);
    2. the device config file (--device-config-file, else $HAMI_DEVICE_CONFIG_FILE), with HAMi's alias
       flags (hami.cli.aliases) laid over its `nvidia:` section, and the per-node config file;
    3. the environment HAMi's chart and images set ($KUBECONFIG, $NODE_NAME, $HAMI_NODELOCK_EXPIRE, ...);
    4. the flags the user set (hami.config.flagtable), then the --embedded defaults for what is still unset;
    5. the checks across groups: policies, listeners and their trust, device list strategies.

    `flags` maps argparse dests to values, holding only flags that were given on the command line.
    `warn(message)` receives one message per unknown key in a config file.
    """
    env = os.environ if env is None else env
    warn = warn or (lambda msg: None)
    groups: dict[str, dict[str, Any]] = {g: {} for g in GROUP_TYPES}
    files = read_device_files(flags, env, warn)
    apply_environment(groups, env)
    apply_flags(groups, flags)
    config_scheduler = check_groups(groups, flags)
    groups["agent"]["node_config_file"] = files.node_file
    made = {g: kind(**groups[g]) for g, kind in GROUP_TYPES.items() if g != "scheduler"}
    return Config(roles=tuple(flags.get("roles", ())), nvidia=files.nvidia, node_configs=files.node_configs,
                  device_config_file=files.device_file, vendors=files.vendors, scheduler=config_scheduler, **made)


class DeviceFiles(NamedTuple):
    device_file: str
    nvidia: NvidiaConfig
    vendors: VendorTable
    node_file: str
    node_configs: tuple[NodeDeviceConfig, ...]


def read_device_files(flags: Mapping[str, Any], env: Mapping[str, str], warn) -> DeviceFiles:
    """Step 2: the device config file (flag, then env as HAMi's chart mounts it) and the per-node file."""
    device_file = flags.get("device_config_file") or env.get("HAMI_DEVICE_CONFIG_FILE", "")
    nvidia = NvidiaConfig()
    vendors = default_vendor_table()
    doc: Any = load_file(device_file) if device_file else None
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
    node_file = flags.get("node_config_file") or ""
    node_configs: tuple[NodeDeviceConfig, ...] = ()
    if node_file:
        node_configs = parse_node_configs(load_file(node_file), node_file, warn)
    return DeviceFiles(device_file, nvidia, vendors, node_file, node_configs)


def apply_environment(groups: dict[str, dict[str, Any]], env: Mapping[str, str]) -> None:
    """Step 3: the environment variables HAMi's chart and images set."""
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


def apply_flags(groups: dict[str, dict[str, Any]], flags: Mapping[str, Any]) -> None:
    """Step 4: the flags the user set, then the --embedded defaults for what is still unset."""
    for dest, value in flags.items():
        flag = BY_DEST.get(dest)
        if flag is None:
            continue  # read by name elsewhere (roles, nvidia_overrides) or by the CLI
        value = flag.convert(value)
        for group, attr in flag.targets:
            if flag.weak:
                groups[group].setdefault(attr, value)
            else:
                groups[group][attr] = value
    if groups["sim"].get("embedded"):
        _embedded_defaults(groups, flags)
    if groups["log"].get("debug"):
        groups["log"]["verbosity"] = max(4, groups["log"].get("verbosity", 0))


def check_groups(groups: dict[str, dict[str, Any]], flags: Mapping[str, Any]) -> SchedulerSettings:
    """Step 5: the checks that span groups; answers the scheduler settings the trust check judged."""
    if groups["scheduler"].get("node_scheduler_policy", "binpack") not in ("binpack", "spread"):
        raise ConfigError(
            "--node-scheduler-policy", "command line", groups["scheduler"]["node_scheduler_policy"],
            "binpack or spread",
        )
    if groups["scheduler"].get("dra_default_mode", "dra") not in ("dra", "device-plugin"):
        raise ConfigError("--dra-default-mode", "command line", groups["scheduler"]["dra_default_mode"],
                          "dra or device-plugin")
    spread = groups["scheduler"].get("burst_spread", 2.0)
    if not (isinstance(spread, (int, float)) and 0 <= spread < float("inf")):
        raise ConfigError("--burst-spread", "command line", spread, "a number >= 0")
    percentage = groups["sim"].get("percentage_of_nodes_to_score", 100)
    if isinstance(percentage, bool) or not isinstance(percentage, int) or not 0 <= percentage <= 100:
        raise ConfigError("--sim-percentage-of-nodes-to-score", "command line", percentage, "an integer 0-100")
    if "log" in groups and groups["log"].get("format", "text") not in ("text", "json"):
        raise ConfigError("--log-format", "command line", groups["log"]["format"], "text or json")
    check_listeners(groups)
    if "node_groups" in groups["sim"]:
        groups["sim"]["node_groups"] = tuple(groups["sim"]["node_groups"])
    check_trusted_sources(groups["listen"])
    writers = groups["scheduler"].get("trusted_placement_writers")
    if isinstance(writers, str):  # a comma list on the command line
        groups["scheduler"]["trusted_placement_writers"] = tuple(w.strip() for w in writers.split(",") if w.strip())
    config_scheduler = SchedulerSettings(**groups["scheduler"])
    check_listener_trust(config_scheduler, DebugSettings(**groups["debug"]))
    check_sim_listen(SimSettings(**groups["sim"]))
    _check_device_lists(groups["agent"], "DEVICE_LIST_STRATEGY" if "device_list_strategy" not in flags
                        else "command line")
    return config_scheduler


def replace(cfg: Any, **changes: Any) -> Any:
    """dataclasses.replace, re-exported for roles that derive per-node configs (embedded cluster)."""
    return dataclasses.replace(cfg, **changes)
