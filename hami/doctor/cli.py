"""`hami doctor {pod,nodes}`: the subcommand module the CLI loads (`configure` + `main`).

    hami doctor pod NAMESPACE/NAME [--json]    walk the Pending-pod decision tree
    hami doctor nodes [--json]                 GPU node health table; exit 1 if a GPU node is unhealthy
"""

from __future__ import annotations

import argparse

from hami.doctor import nodes, pod


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="doctor_command", required=True, metavar="{pod,nodes}")
    pod.add_parser(sub)
    nodes.add_parser(sub)


async def main(args: argparse.Namespace) -> int:
    return await args.doctor_main(args)
