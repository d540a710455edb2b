"""/healthz and /readyz for every role's HTTP listeners.

/healthz answers 200 while the event loop runs (the process is alive). /readyz answers 200 only
when every check passes, else 503 with one line per reason, so a probe failure says why (caches
not synced, a watch broken past its bound, an index being rebuilt).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web

Check = Callable[[], Iterable[str]]


class Health:
    def __init__(self, role: str):
        self.role = role
        self.checks: list[Check] = []

    def add(self, check: Check) -> None:
        self.checks.append(check)

    def reasons(self) -> list[str]:
        out: list[str] = []
        for check in self.checks:
            out.extend(r for r in check() if r)
        return out

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        reasons = self.reasons()
        if reasons:
            text = f"{self.role} not ready:\n" + "".join(f"- {r}\n" for r in reasons)
            return web.Response(status=503, text=text)
        return web.Response(text="ok\n")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
