"""`kubectl hami` (console script `kubectl-hami`; kubectl runs it for `kubectl hami ...`).

    kubectl hami top gpus    [-o table|json|yaml] [--metrics-url URL ...]   per GPU: slices / split count,
                                                                             memory and cores allocated vs used
    kubectl hami top nodes   [...]                                          the same summed per node
    kubectl hami top pods    [-n NS | -A] [...]                             each GPU pod's share and its use
    kubectl hami doctor pod NS/NAME | doctor nodes [...]                    hami doctor
    kubectl hami whatif [...]                                               hami whatif

Cluster, context and namespace as kubectl picks them: --kubeconfig, else $KUBECONFIG, else ~/.kube/config;
--context, else the current context; -n, else the context's namespace (`top pods -A`: every namespace).
Allocation comes from the API (what the scheduler wrote); use from the monitors' /metrics given with
--metrics-url (repeatable, or $HAMI_METRICS_URLS, comma separated); without one the used columns show "-".
Exit codes: 0; 1 a request or a metrics source failed; 2 bad flags or kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import sys
from collections.abc import Sequence

import yaml

from hami.cli.flags import add_command_flags
from hami.kubectlhami import top
from hami.kubectlhami.kubeconfig import KubeconfigError, Target, resolve

PASS_THROUGH = ("doctor", "whatif")


def build_parser() -> argparse.ArgumentParser:
    """The options are the flag table's (hami.config.flagtable, commands "kubectl hami" and "kubectl hami top");
    the kubectl-style ones are accepted before and after the subcommand (`top pods -A`)."""
    p = argparse.ArgumentParser(prog="kubectl hami", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_command_flags(p, "kubectl hami")
    sub = p.add_subparsers(dest="command", required=True, metavar="{top,doctor,whatif}")
    t = sub.add_parser("top", help="GPU allocation and use per GPU, node or pod")
    add_command_flags(t, "kubectl hami top")
    add_command_flags(t, "kubectl hami", suppress=True)
    for name in PASS_THROUGH:
        sub.add_parser(name, help=f"hami {name} on this context (its own flags: kubectl hami {name} --help)",
                       add_help=False)
    return p


def metrics_urls(flag: list[str] | None) -> list[str]:
    if flag:
        return flag
    return [u.strip() for u in os.environ.get("HAMI_METRICS_URLS", "").split(",") if u.strip()]


async def _fetch(target: Target, urls: list[str]) -> tuple[list[dict], list[dict], top.Measured, list[str]]:
    import aiohttp

    from hami.config import KubeSettings
    from hami.kube.client import KubeClient

    client = await KubeClient.from_settings(KubeSettings(kubeconfig=target.kubeconfig, qps=50, burst=100))
    try:
        nodes = (await client.list_nodes())["items"]
        pods = (await client.list_pods())["items"]  # every namespace: a GPU's slices whoever holds them
    finally:
        await client.close()
    measured, errors = top.Measured(), []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for url in urls:
            try:
                async with http.get(url) as resp:
                    if resp.status != 200:
                        raise top.MetricsError(f"{url}: HTTP {resp.status}")
                    measured.add(await resp.text(), url)
            except (aiohttp.ClientError, TimeoutError, top.MetricsError) as exc:
                errors.append(str(exc) or f"{url}: {type(exc).__name__}")
    return nodes, pods, measured, errors


def run_top(args: argparse.Namespace, target: Target) -> int:
    from hami.kube.client import ApiError
    from hami.ui.view import cluster_view

    try:
        nodes, pods, measured, errors = asyncio.run(_fetch(target, metrics_urls(args.metrics_url)))
    except (ApiError, OSError) as exc:
        print(f"kubectl hami: {target.context or 'cluster'}: {exc}", file=sys.stderr)
        return 1
    view = cluster_view(nodes, pods)
    if args.what == "gpus":
        rows = top.gpu_rows(view, measured)
    elif args.what == "nodes":
        rows = top.node_rows(view, measured)
    else:
        rows = top.pod_rows(view, measured, None if args.all_namespaces else target.namespace)
    if args.output == "json":
        print(json.dumps({"kind": f"hami.{args.what}", "items": rows}, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump({"kind": f"hami.{args.what}", "items": rows}, sort_keys=False), end="")
    else:
        print(top.table(args.what, rows, with_namespace=args.all_namespaces))
    for err in errors:
        print(f"kubectl hami: metrics: {err}", file=sys.stderr)
    return 1 if errors else 0


def run_pass_through(command: str, rest: list[str], target: Target) -> int:
    from hami.cli.main import main as hami_main

    if command == "doctor" and ("-o" in rest or "--output" in rest):
        i = rest.index("-o") if "-o" in rest else rest.index("--output")
        fmt = rest[i + 1] if i + 1 < len(rest) else ""
        if fmt != "json":
            print(f"kubectl hami doctor: -o {fmt or '?'}: only json (or the text default)", file=sys.stderr)
            return 2
        rest = [*rest[:i], "--json", *rest[i + 2:]]
    return hami_main([command, *rest, "--kubeconfig", target.kubeconfig])


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command not in PASS_THROUGH and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in PASS_THROUGH:
        rest = argv[argv.index(args.command) + 1:]
        picked = argparse.ArgumentParser(add_help=False)
        add_command_flags(picked, "kubectl hami")
        flags, rest = picked.parse_known_args(rest)
        for key in ("kubeconfig", "context", "namespace"):
            if getattr(flags, key) is None:
                setattr(flags, key, getattr(args, key))
        args = argparse.Namespace(**{**vars(args), **vars(flags)})
    try:
        target = resolve(args.kubeconfig, args.context, args.namespace)
    except KubeconfigError as exc:
        print(f"kubectl hami: {exc}", file=sys.stderr)
        return 2
    if target.temporary:
        atexit.register(_remove, target.kubeconfig)
    if args.command == "top":
        return run_top(args, target)
    return run_pass_through(args.command, rest, target)


if __name__ == "__main__":
    sys.exit(main())
