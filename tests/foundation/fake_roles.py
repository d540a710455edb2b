"""Roles used by the runner tests: one that serves until stopped, one that fails, one that ignores stop."""

import asyncio
import sys


async def serving(ctx):
    ctx.ready.set()
    print(f"serving {ctx.name} ready", flush=True)
    await ctx.stop.wait()
    print("serving drained", flush=True)


async def failing(ctx):
    await asyncio.sleep(0.05)
    raise RuntimeError("GPU backend exploded")


async def stubborn(ctx):
    print("stubborn ready", flush=True)
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print("stubborn cancelled", flush=True)
            raise


def main_with(roles_table: dict, argv: list[str]) -> int:
    from hami import app
    from hami.cli import main as cli

    app.ROLES.clear()
    app.ROLES.update(roles_table)
    return cli.main(argv)


if __name__ == "__main__":
    import json

    table = json.loads(sys.argv[1])
    sys.exit(main_with(table, sys.argv[2:]))
