"""The argparse side of the flag table (hami.config.flagtable): `_` and `-` spellings are both accepted.

Flags are registered with `default=SUPPRESS`, so the parsed namespace holds only the flags the user
actually set; defaults live in `hami.config.settings` and nowhere else.
"""

from __future__ import annotations

import argparse
from typing import Any

from hami.config.flagtable import ROLE_FLAGS, Flag
from hami.config.settings import ConfigError, parse_duration


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


def _duration(text: str) -> float:
    """Go's duration syntax (1m30s, 250ms) or bare seconds, parsed while the command line is."""
    try:
        return parse_duration(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 30s, 5m or 1h30m)") from None


def _any_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None


def _any_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


_KIND_TYPES: dict[str, Any] = {"str": str, "selector": str, "int": _nonneg_int, "float": _positive_float,
                               "float0": _nonneg_float, "duration": _duration, "goint": _any_int,
                               "number": _any_float}


def spellings(names: tuple[str, ...]) -> list[str]:
    """Each name as written, with `-` and `_` variants after the leading dashes."""
    out: list[str] = []
    for n in names:
        for variant in (n, n.replace("_", "-"), n[:2] + n[2:].replace("-", "_")):
            if variant not in out:
                out.append(variant)
    return out


def add_flag(group: Any, flag: Flag, dest: str | None = None, help_text: str | None = None) -> None:
    """One row of the flag table as an argparse option; absent unless the user sets it."""
    opts = spellings(flag.spellings)
    dest = dest or flag.dest
    help_text = flag.help if help_text is None else help_text
    if flag.kind == "version":
        from hami import __version__

        group.add_argument(*opts, action="version", version=f"hami {__version__}", help=help_text)
    elif flag.kind == "switch":
        group.add_argument(*opts, dest=dest, action="store_true", default=argparse.SUPPRESS, help=help_text)
    elif flag.kind == "list":
        group.add_argument(*opts, dest=dest, action="append", type=str, default=argparse.SUPPRESS, help=help_text)
    elif flag.kind == "bool":
        group.add_argument(*opts, dest=dest, nargs="?", const=True, type=parse_bool,
                           default=argparse.SUPPRESS, metavar="BOOL", help=help_text)
    else:
        metavar = {"goint": "INT", "number": "FLOAT", "str": "STR"}[flag.kind] if flag.alias else None
        group.add_argument(*opts, dest=dest, type=_KIND_TYPES[flag.kind], default=argparse.SUPPRESS,
                           metavar=metavar, help=help_text)


def add_role_flags(parser: argparse.ArgumentParser, roles: tuple[str, ...] | None = None) -> None:
    """Every flag, in one help group per set of roles that reads it (hami.cli.rolehelp); with `roles`,
    only those roles' flags and the common ones (what `hami --role R --help` shows). HAMi's alias
    flags come last."""
    from hami.cli.aliases import add_alias_flags
    from hami.cli.rolehelp import group_title, shown

    groups: dict[tuple[str, ...], argparse._ArgumentGroup] = {}
    for flag in ROLE_FLAGS:
        dest_roles = flag.reader_roles()
        if not shown(dest_roles, roles):
            continue
        if dest_roles not in groups:
            groups[dest_roles] = parser.add_argument_group(group_title(dest_roles))
        add_flag(groups[dest_roles], flag)
    if roles is None or {"scheduler", "node-agent"} & set(roles):
        add_alias_flags(parser)


KUBE_FLAGS = ("kubeconfig", "kube_qps", "kube_burst", "kube_background_qps", "kube_background_burst",
              "kube_timeout", "v", "log_format")


def add_kube_flags(parser: argparse.ArgumentParser) -> None:
    """The connection flags subcommands need (doctor, tune)."""
    for flag in ROLE_FLAGS:
        if flag.dest in KUBE_FLAGS:
            add_flag(parser, flag)
