"""`hami cache ...` subcommands (wired by hami.cli.main): `hami cache dump FILE [--json]`."""

from __future__ import annotations

import argparse
import sys

from hami.monitor import dump


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cache_command", metavar="COMMAND", required=True)
    p = sub.add_parser("dump", help="print a HAMi-core shared region (layout, devices, processes)",
                       description="print a HAMi-core shared region (layout, devices, processes)")
    dump.configure(p)


def main(args: argparse.Namespace) -> int:
    if args.cache_command == "dump":
        return dump.dump(args.file, args.json, sys.stdout, sys.stderr)
    return 2
