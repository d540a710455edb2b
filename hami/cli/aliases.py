"""HAMi's historical flags: accepted as deprecated aliases of the config key they set, or refused
naming the key to use. Their rows are in the flag table (hami.config.flagtable: `alias`, `refused`).

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

from hami.cli.flags import REFUSED, add_flag
from hami.config.flagtable import ALIAS_DEST_PREFIX, ALIAS_FLAGS, REFUSED_FLAGS

__all__ = ["ALIASES", "REFUSED", "add_alias_flags", "take_aliases"]

# flag -> (the nvidia: key it sets, its kind in the flag table)
ALIASES: dict[str, tuple[str, str]] = {f.spellings[0]: (f.nvidia_key, f.kind) for f in ALIAS_FLAGS}


def add_alias_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "HAMi's flags (deprecated aliases: each sets the device config key named, which hami reads from "
        "--device-config-file)")
    for flag in (*ALIAS_FLAGS, *REFUSED_FLAGS):
        add_flag(group, flag)


def take_aliases(flags: dict[str, Any], warn: Callable[[str], None]) -> dict[str, tuple[str, Any]]:
    """Pop the alias flags out of `flags`; return {nvidia key: (flag, value)} (build_config's
    `nvidia_overrides`), warning once per alias used."""
    flag_of = {key: flag for flag, (key, _) in ALIASES.items()}
    overrides: dict[str, tuple[str, Any]] = {}
    for dest in [d for d in flags if d.startswith(ALIAS_DEST_PREFIX)]:
        key = dest.removeprefix(ALIAS_DEST_PREFIX)
        overrides[key] = (flag_of[key], flags.pop(dest))
        warn(f"{flag_of[key]} is HAMi's deprecated flag: it sets nvidia.{key} of the device config; "
             f"set nvidia.{key} in --device-config-file (the chart's device ConfigMap) instead")
    return overrides
