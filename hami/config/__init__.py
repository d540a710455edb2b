"""One frozen, grouped settings object, built once by `build_config`.

The package, by job:
- settings: the settings types and their defaults, Go durations;
- devicefile: HAMi's device config file and per-node config.json (parsing, validation, nearest-key hints);
- vendortable: the shipped vendor table and the NVIDIA row's resource names;
- flagtable: every flag, declared once (the CLI, help and config building are generated from it);
- build: the precedence chain (build_config's docstring numbers its steps);
- trust: which addresses each listener may take.

Nothing else reads flags or environment. The names below are the package's public face.
"""

from hami.config.build import (
    apply_environment,
    apply_flags,
    build_config,
    embedded_paths,
    parse_device_list_strategy,
    replace,
)
from hami.config.devicefile import load_file, nearest_key_hint, parse_device_config, parse_node_configs
from hami.config.flagtable import FLAGS, Flag, flag_named
from hami.config.settings import (
    DEFAULT_DEBUG_BIND,
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    AgentSettings,
    Config,
    ConfigError,
    DebugSettings,
    KubeSettings,
    ListenSettings,
    LogSettings,
    MonitorSettings,
    SchedulerSettings,
    SimSettings,
    UiSettings,
    parse_duration,
    parse_label_selector,
)
from hami.config.trust import check_listener_trust, check_sim_listen
from hami.config.vendortable import default_vendor_table, vendors_with_nvidia

__all__ = [
    "DEFAULT_DEBUG_BIND",
    "DEVICE_ID_STRATEGIES",
    "DEVICE_LIST_STRATEGIES",
    "FLAGS",
    "Flag",
    "AgentSettings",
    "Config",
    "ConfigError",
    "DebugSettings",
    "KubeSettings",
    "ListenSettings",
    "LogSettings",
    "MonitorSettings",
    "SchedulerSettings",
    "SimSettings",
    "UiSettings",
    "apply_environment",
    "apply_flags",
    "build_config",
    "check_listener_trust",
    "check_sim_listen",
    "default_vendor_table",
    "embedded_paths",
    "flag_named",
    "load_file",
    "nearest_key_hint",
    "parse_device_config",
    "parse_device_list_strategy",
    "parse_duration",
    "parse_label_selector",
    "parse_node_configs",
    "replace",
    "vendors_with_nvidia",
]
