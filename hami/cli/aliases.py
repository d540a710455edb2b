"""HAMi's historical flags: accepted as deprecated aliases of the config key they set, or refused
naming the key to use.

HAMi's scheduler once took the NVIDIA defaults and resource names as flags (`--default-mem`,
`--resource-name`, ...), and its device plugin still takes the split and scaling flags
(`--device-split-count`, ...). hami reads all of these from the device config's `nvidia:` section
(`--device-config-file`, the chart's device ConfigMap), so an alias is parsed as that key: the value is
checked by the same parser, wins over the file (a flag wins over a file, as everywhere), and the start
(or `--check-config`) says once which key to use instead. Flags with no global equivalent here stop
the parse with a message naming what to set instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

# flag -> (the nvidia: key it sets, argparse type name). The dest is "hami_alias:<key>".
ALIASES: dict[str, tuple[str, str]] = {
    # HAMi's scheduler (before the device config file existed)
    "--default-mem": ("defaultMemory", "int"),
    "--default-cores": ("defaultCores", "int"),
    "--default-gpu": ("defaultGPUNum", "int"),
    "--resource-name": ("resourceCountName", "str"),
    "--resource-mem": ("resourceMemoryName", "str"),
    "--resource-mem-percentage": ("resourceMemoryPercentageName", "str"),
    "--resource-cores": ("resourceCoreName", "str"),
    "--resource-priority": ("resourcePriorityName", "str"),
    # HAMi's device plugin (cmd/device-plugin/nvidia/vgpucfg.go)
    "--device-split-count": ("deviceSplitCount", "int"),
    "--device-memory-scaling": ("deviceMemoryScaling", "float"),
    "--device-cores-scaling": ("deviceCoreScaling", "float"),
    "--disable-core-limit": ("disableCoreLimit", "bool"),
}

# HAMi device-plugin flags with no global equivalent: flag -> what to set instead.
REFUSED: dict[str, str] = {
    "--mig-strategy": "migstrategy per node in the node config (--node-config-file; the chart's "
                      "devicePlugin.nodeConfiguration)",
    "--config-file": "the device config (--device-config-file) and the node config (--node-config-file)",
    "--kubelet-socket": "--kubelet-socket-dir (the directory of kubelet.sock)",
    "--device-discovery-strategy": "nothing: hami discovers GPUs through NVML (--gpu-backend nvml)",
    "--pass-device-specs": "--device-list-strategy (envvar, cdi-annotations, cdi-cri)",
    "--cdi-annotation-prefix": "--device-list-strategy cdi-annotations (the prefix is NVIDIA's cdi.k8s.io/)",
}

DEST_PREFIX = "hami_alias:"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is HAMi's flag and has no equivalent here: set {REFUSED[self.dest]} instead")


def add_alias_flags(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    group = parser.add_argument_group(
        "HAMi's flags (deprecated aliases: each sets the device config key named, which hami reads from "
        "--device-config-file)")
    types: dict[str, Any] = {"int": _int, "float": _float, "str": str}
    for flag, (key, kind) in ALIASES.items():
        names = [flag, "--" + flag[2:].replace("-", "_")]
        if kind == "bool":
            group.add_argument(*names, dest=DEST_PREFIX + key, nargs="?", const=True, type=parse_bool,
                               default=argparse.SUPPRESS, metavar="BOOL", help=f"= nvidia.{key}")
        else:
            group.add_argument(*names, dest=DEST_PREFIX + key, type=types[kind], default=argparse.SUPPRESS,
                               metavar=kind.upper(), help=f"= nvidia.{key}")
    for flag in REFUSED:
        group.add_argument(flag, dest=flag, nargs="?", action=_Refuse, default=argparse.SUPPRESS,
                           metavar="VALUE", help=f"refused: set {REFUSED[flag]}")


def take_aliases(flags: dict[str, Any], warn: Callable[[str], None]) -> dict[str, tuple[str, Any]]:
    """Pop the alias flags out of `flags`; return {nvidia key: (flag, value)} (build_config's
    `nvidia_overrides`), warning once per alias used."""
    flag_of = {key: flag for flag, (key, _) in ALIASES.items()}
    overrides: dict[str, tuple[str, Any]] = {}
    for dest in [d for d in flags if d.startswith(DEST_PREFIX)]:
        key = dest.removeprefix(DEST_PREFIX)
        overrides[key] = (flag_of[key], flags.pop(dest))
        warn(f"{flag_of[key]} is HAMi's deprecated flag: it sets nvidia.{key} of the device config; "
             f"set nvidia.{key} in --device-config-file (the chart's device ConfigMap) instead")
    return overrides
