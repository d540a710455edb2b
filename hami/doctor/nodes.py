"""`hami doctor nodes [--json]`: the node-annotation check of the runbook, as one table.

    hami doctor nodes [--kubeconfig FILE] [--node-lock-timeout 5m] [--hami-namespace NS] [--json]

For every node: its GPU mode (`hami.io/gpu-mode`: device-plugin or dra; a node both serve is a
problem), the `hami.io/node-nvidia-register` state, whether HAMi-core is installed on the
host and which version (`hami.io/hami-core`, published by the node agent; `-` when it does not say),
the `hami.io/node-handshake` value and
age, the `hami.io/mutex.lock` holder and age, and the number of schedulable devices; below the
table, each other vendor the node registers (Ascend, Cambricon, Hygon, ...): its registration
and its own handshake key. Exit code 1 if
any GPU node is unhealthy (register missing or invalid, handshake stale, lock older than the
lock timeout, unhealthy GPUs, HAMi-core missing), else 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from hami.doctor import gather
from hami.doctor.tree import NodeHealth, node_health, render_nodes


def configure(parser: argparse.ArgumentParser) -> None:
    """The options are the flag table's (hami.config.flagtable, command "doctor nodes")."""
    from hami.cli.flags import add_command_flags

    add_command_flags(parser, "doctor nodes")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("nodes", help="GPU node health table (register, handshake, lock)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(p)
    p.set_defaults(doctor_main=main)
    return p


async def check(client, args: argparse.Namespace, now: float | None = None) -> list[NodeHealth]:
    now = time.time() if now is None else now
    inst = await gather.installation(client, args)
    facts = await gather.list_nodes(client, inst.nvidia.resource_count_name)
    timeout = gather.lock_timeout(args)
    return [node_health(n, now, timeout, inst.vendors) for n in sorted(facts, key=lambda n: n.name)]


async def main(args: argparse.Namespace) -> int:
    client = await gather.client_from_args(args)
    try:
        rows = await check(client, args)
    finally:
        await client.close()
    if args.json:
        sys.stdout.write(orjson.dumps([r.as_dict() for r in rows], option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_nodes(rows))
    return 1 if any(not r.healthy for r in rows) else 0
