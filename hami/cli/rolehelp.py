"""Help grouped by role, for `hami --role R --help` (that role's flags plus the common ones) and
`hami --help` (every flag, grouped by role). Which roles read a flag is its row's in the flag table
(hami.config.flagtable: the roles of the settings groups it sets, or the roles the row names).
"""

from __future__ import annotations

from hami.config.flagtable import BY_DEST, ROLE_ORDER


def roles_of(dest: str) -> tuple[str, ...]:
    """The roles that read flag `dest`, in ROLE_ORDER; () = common to every role (API client, logs, debug)."""
    return BY_DEST[dest].reader_roles()


def group_title(roles: tuple[str, ...]) -> str:
    if not roles:
        return "common flags (every role)"
    if roles == ("sim",):
        return "sim flags (the embedded cluster: --role sim, --embedded)"
    return (", ".join(roles[:-1]) + " and " + roles[-1] if len(roles) > 1 else roles[0]) + " flags"


def shown(dest_roles: tuple[str, ...], wanted: tuple[str, ...] | None) -> bool:
    """Whether a flag read by `dest_roles` belongs in the help of `wanted` roles (None = all)."""
    return wanted is None or not dest_roles or bool(set(dest_roles) & set(wanted))


def help_roles(argv: list[str]) -> tuple[str, ...] | None:
    """The roles `--role` names in an argv that asks for help; None = every role (no --role, or all)."""
    spec = None
    for i, arg in enumerate(argv):
        if arg == "--role" and i + 1 < len(argv):
            spec = argv[i + 1]
        elif arg.startswith("--role="):
            spec = arg.split("=", 1)[1]
    if not spec:
        return None
    roles = {r.strip() for r in spec.split(",") if r.strip()}
    if "all" in roles or not roles <= set(ROLE_ORDER):
        return None  # all, or a typo that the real parse names
    return tuple(r for r in ROLE_ORDER if r in roles)
