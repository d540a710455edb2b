"""The argparse side of the flag table (hami.config.flagtable): `_` and `-` spellings are both accepted.

Role flags are registered with `default=SUPPRESS`, so the parsed namespace holds only the flags the user
actually set; their defaults live in `hami.config.settings` and nowhere else. A tool subcommand's own
options (`option` rows) carry their defaults in the table. This module is the only one that declares an
argparse option (`add_flag`); the role parser, HAMi's aliases and every subcommand's parser call it.
"""

from __future__ import annotations

import argparse
from typing import Any

from hami.config.flagtable import REFUSED_FLAGS, ROLE_FLAGS, Flag, command_flags
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


REFUSED: dict[str, str] = {f.spellings[0]: f.help for f in REFUSED_FLAGS}  # flag -> what to set instead


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is HAMi's flag and has no equivalent here: set {REFUSED[self.dest]} instead")


def add_flag(group: Any, flag: Flag, *, suppress: bool = False) -> None:
    """One row of the flag table as an argparse option. A role flag is absent unless the user sets it;
    a subcommand's option has its row's default, or is absent too with `suppress` (a flag accepted
    again after a subcommand must not overwrite the value given before it)."""
    if flag.positional:
        optional = {"nargs": "?", "default": flag.default} if flag.default is not None else {}
        group.add_argument(flag.names, metavar=flag.metavar, choices=flag.choices, help=flag.help, **optional)
        return
    opts = spellings(flag.spellings)
    dest, help_text = flag.dest, flag.help
    default = flag.default if flag.option and not suppress else argparse.SUPPRESS
    if isinstance(default, tuple):
        default = list(default)  # argparse appends to it: each parser gets a list of its own
    if flag.kind == "version":
        from hami import __version__

        group.add_argument(*opts, action="version", version=f"hami {__version__}", help=help_text)
    elif flag.kind == "refused":
        group.add_argument(flag.spellings[0], dest=dest, nargs="?", action=_Refuse, default=argparse.SUPPRESS,
                           metavar="VALUE", help=f"refused: set {help_text}")
    elif flag.kind in ("switch", "off"):
        action = "store_true" if flag.kind == "switch" else "store_false"
        group.add_argument(*opts, dest=dest, action=action, default=default, help=help_text)
    elif flag.kind == "list":
        group.add_argument(*opts, dest=dest, action="append", type=str, default=default, help=help_text)
    elif flag.kind == "bool":
        group.add_argument(*opts, dest=dest, nargs="?", const=True, type=parse_bool,
                           default=default, metavar="BOOL", help=help_text)
    else:
        metavar = {"goint": "INT", "number": "FLOAT", "str": "STR"}[flag.kind] if flag.alias else flag.metavar
        group.add_argument(*opts, dest=dest, type=_KIND_TYPES[flag.kind], default=default, choices=flag.choices,
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


def add_command_flags(parser: Any, command: str, *, suppress: bool = False) -> None:
    """Every row subcommand `command` takes (hami.config.flagtable.COMMANDS), in table order: the role
    flags it shares (the API connection) and its own options."""
    for flag in command_flags(command):
        add_flag(parser, flag, suppress=suppress)

