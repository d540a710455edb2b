"""`hami`: run roles (`hami --role scheduler`) or a tool subcommand (`hami doctor ...`).

    hami --role scheduler|node-agent|monitor|sim|all[,...] [flags]
    hami --role all --embedded            everything on an embedded API server, no cluster needed
    hami --role X [flags] --check-config  parse and check everything a start reads, print it, exit
    hami doctor pod NAMESPACE/NAME        why is this pod Pending?
    hami doctor nodes                     GPU node health table
    hami tune                             tuning recommendations from pods and metrics
    hami cache dump FILE [--json]         print a HAMi-core shared region
    hami whatif --snapshot FILE [--scenario PLAN]   replay a snapshot under changed settings

Subcommands sit beside `--role`: the first word picks a subcommand, anything else is a role run.
Subcommand modules are imported only when used.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence

from hami import __version__
from hami.cli.flags import add_role_flags

# subcommand -> (module, help). Each module has `configure(parser)` and `main(args) -> int`
# (a coroutine function or a plain function).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("hami.doctor.cli", "diagnose Pending pods and GPU nodes (the debugging runbook, automated)"),
    "tune": ("hami.doctor.tune", "tuning recommendations from the cluster's pods and the monitor's metrics"),
    "cache": ("hami.monitor.dump_cli", "read HAMi-core shared-region cache files"),
    "whatif": ("hami.whatif.cli", "capacity planning: replay a cluster snapshot through the scheduler's code"),
}


def role_parser(help_roles: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The role-run parser; `help_roles` limits the flags to those roles' and the common ones (what
    `hami --role R --help` prints; a run always parses every flag)."""
    from hami.app import ROLES

    parser = argparse.ArgumentParser(
        prog="hami",
        usage="hami --role ROLE[,ROLE...] [flags]  |  hami {doctor,tune,cache,whatif} ...",
        description="GPU sharing control plane for Kubernetes, wire-compatible with HAMi v2.10.",
        epilog="subcommands:\n"
        + "\n".join(f"  hami {name:<8} {text}" for name, (_, text) in SUBCOMMANDS.items())
        + "\n\nroles: " + ", ".join(ROLES) + ", all (= scheduler,node-agent,monitor)"
        + "\nexamples:\n  hami --role all --embedded\n"
        "  hami --role scheduler --http_bind 127.0.0.1:8443 --webhook-bind-address 0.0.0.0:443 "
        "--cert_file tls.crt --key_file tls.key -v=4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_role_flags(parser, help_roles)
    return parser


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """`hami NAME`'s parser: its module's `configure` adds the flag table's rows for it (hami.cli.flags)."""
    module_name, help_text = SUBCOMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"hami {name}", description=help_text)
    importlib.import_module(module_name).configure(parser)
    return parser


def _run_subcommand(name: str, argv: Sequence[str]) -> int:
    args = subcommand_parser(name).parse_args(list(argv))
    module = importlib.import_module(SUBCOMMANDS[name][0])
    from hami.obs.log import configure_logging

    configure_logging(getattr(args, "v", 0) or 0, getattr(args, "log_format", "text") or "text")
    result = module.main(args)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    return int(result or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        try:
            return _run_subcommand(argv[0], argv[1:])
        except KeyboardInterrupt:
            return 130

    if "-h" in argv or "--help" in argv:
        from hami.cli.rolehelp import help_roles

        role_parser(help_roles(argv)).parse_args(["--help"])
    parser = role_parser()
    args = parser.parse_args(argv)
    check_only = getattr(args, "check_config", False)
    flags = {k: v for k, v in vars(args).items() if k not in ("role", "check_config")}
    warnings: list[str] = []
    from hami.cli.aliases import take_aliases

    flags["nvidia_overrides"] = take_aliases(flags, warnings.append)

    from hami.config import ConfigError, build_config

    roles = _roles_to_run(getattr(args, "role", None), flags, parser)
    if roles is None:
        return 2
    keep_state = bool(flags.pop("sim_keep_state", False))
    own_state = _embedded_state_dir(flags, check_only)  # removed when the run stops unless kept
    if flags.get("embedded") and not check_only:
        from hami.sim.instance import move_busy_defaults

        warnings.extend(move_busy_defaults(flags))  # a second instance beside the first: free ports, said
    try:
        config = build_config({**flags, "roles": roles}, warn=warnings.append)
        if check_only:
            from hami.cli.check import check, render

            check(config)
    except ConfigError as exc:
        print(f"hami: error: {exc}", file=sys.stderr)
        return 2
    if check_only:
        for message in dict.fromkeys(warnings):
            print(f"hami: warning: {message}", file=sys.stderr)
        sys.stdout.write(render(config))
        return 0
    return _run(config, roles, warnings, own_state if not keep_state else "")


def _roles_to_run(role_spec: str | None, flags: dict, parser: argparse.ArgumentParser) -> tuple[str, ...] | None:
    """The roles `--role` names, with the embedded cluster's own (sim, ui); None after printing why not."""
    from hami.app import expand_roles

    if role_spec is None:
        if not flags.get("embedded"):
            parser.print_usage(sys.stderr)
            print("hami: error: --role is required (or a subcommand: " + ", ".join(SUBCOMMANDS) + ")",
                  file=sys.stderr)
            return None
        role_spec = "all"
    try:
        roles = expand_roles(role_spec)
    except ValueError as exc:
        print(f"hami: error: {exc}", file=sys.stderr)
        return None
    if flags.get("embedded") and "sim" not in roles:
        # The embedded cluster runs its own node agents (one per simulated node) and plays kubelet.
        roles = ("sim",) + tuple(r for r in roles if r != "node-agent")
    if flags.get("embedded") and "all" in {r.strip() for r in role_spec.split(",")} and "ui" not in roles:
        roles += ("ui",)  # the whole system on one machine includes its web page (on 127.0.0.1:8090)
    return roles


def _embedded_state_dir(flags: dict, check_only: bool) -> str:
    """With --embedded and no --sim-state-dir: a new temp folder for this run (its path, to remove at the
    end); a check writes nothing and names the folder a start would create. "" otherwise."""
    if not flags.get("embedded") or flags.get("sim_state_dir"):
        return ""
    import tempfile

    if check_only:
        flags["sim_state_dir"] = os.path.join(tempfile.gettempdir(), "hami-embedded-XXXXXXXX")
        return ""
    flags["sim_state_dir"] = tempfile.mkdtemp(prefix="hami-embedded-")
    return flags["sim_state_dir"]


def _run(config, roles: tuple[str, ...], warnings: list[str], remove_after: str) -> int:
    """Logging set up, the configuration's warnings logged once each, the roles run until stopped;
    `remove_after`: the temp state folder to remove when they stop ("" = none)."""
    from hami.app import run_roles
    from hami.obs.log import configure_logging, get_logger

    shared: dict = {}
    if config.sim.embedded:
        # Keep recent lines so `kubectl logs -n kube-system -l app=hami-scheduler` works on the embedded cluster.
        from hami.obs.log import LogRing

        shared["log_ring"] = LogRing(sys.stderr)
    configure_logging(config.log.verbosity, config.log.format, shared.get("log_ring"))
    log = get_logger("hami.cli")
    for message in dict.fromkeys(warnings):
        log.warning("Configuration warning", detail=message)
    log.info("Starting hami", version=__version__, roles=",".join(roles), verbosity=config.log.verbosity)
    try:
        return asyncio.run(run_roles(config, roles, shared=shared))
    except KeyboardInterrupt:
        return 130
    finally:
        if remove_after:
            import shutil

            shutil.rmtree(remove_after, ignore_errors=True)
            print(f"hami: removed the embedded cluster's state folder {remove_after} (--sim-keep-state keeps it)",
                  file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
