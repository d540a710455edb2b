"""`hami tune`: the subcommand module the CLI loads (`configure` + `main`); see hami.doctor.tune."""

from hami.doctor.tune import configure, main

__all__ = ["configure", "main"]
