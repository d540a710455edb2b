"""Which role reads each flag, for `hami --role R --help` (that role's flags plus the common ones) and
`hami --help` (every flag, grouped by role).

A flag's role comes from the settings group `hami.config` writes it to (FLAG_TARGETS, SHARED_FLAGS),
so a new flag lands in the right help group without a second table; the few flags that feed several
roles through their own code path are listed here.
"""

from __future__ import annotations

from hami.config import FLAG_TARGETS, SHARED_FLAGS

ROLE_ORDER = ("scheduler", "node-agent", "monitor", "ui", "sim")
_GROUP_ROLE = {"scheduler": "scheduler", "agent": "node-agent", "monitor": "monitor", "ui": "ui", "sim": "sim"}
# Read outside FLAG_TARGETS: the device config (scheduler's webhook/fit, node agent's split and
# scaling) and HAMi's one metrics flag (whichever of scheduler and monitor runs).
_SPECIAL: dict[str, tuple[str, ...]] = {
    "device_config_file": ("scheduler", "node-agent"),
    "metrics_bind_address": ("scheduler", "monitor"),
}


def roles_of(dest: str) -> tuple[str, ...]:
    """The roles that read flag `dest`, in ROLE_ORDER; () = common to every role (API client, logs, debug)."""
    if dest in _SPECIAL:
        return _SPECIAL[dest]
    groups = [g for g, _ in SHARED_FLAGS.get(dest, ())] or ([FLAG_TARGETS[dest][0]] if dest in FLAG_TARGETS else [])
    if not groups and dest.startswith("sim_"):  # the embedded cluster's flags, read by name
        groups = ["sim"]
    roles = {_GROUP_ROLE[g] for g in groups if g in _GROUP_ROLE}
    return tuple(r for r in ROLE_ORDER if r in roles)


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
