"""Is the API server answering? The scheduler's readiness under a frozen or failing API server.

The informers' own health only turns after a watch has been broken for a minute, and a frozen API
server (SIGSTOP, a partitioned etcd) breaks nothing quickly: its watches just go quiet, and every
/bind write hangs until the client's deadline. An audit saw /readyz stay 200 for about 297 s while
every /bind failed. Here:

- every answer from the API server (a request's response below 500 and not 429, a watch line or
  bookmark) marks it alive; a request that times out, cannot connect, or gets 5xx/429 marks it
  failing from then on, until the next answer;
- a critical write (the critical lane: /bind's pod patch, binding, node lock) that fails so marks
  it failing until a write succeeds again: reads answering while writes fail (etcd down behind a
  live API server) do not make the scheduler ready;
- when nothing has been heard for `probe_after` seconds (watches quiet, no requests), one cheap
  `GET /version` (`probe_timeout`) asks; while failing it asks every `tick` (a dry-run Event
  create when writes were failing), so recovery is seen within a tick of the API server answering;
- `reasons()` (a /readyz check) names the failure once it has lasted `unready_after` seconds.

Worst case to unready under a freeze: probe_after + tick + probe_timeout + unready_after
(10 + 1 + 5 + 5 = 21 s at the defaults); back to ready: at most a tick after the API answers.
Idle cost: a probe only when no watch line, bookmark or answer came for `probe_after` (kube-apiserver
bookmarks each watch about once a minute, and so does the embedded server): at most 6 GETs a minute
per scheduler, each answer read in `readsize.SMALL_ANSWER` pieces (not asyncio's 256 KiB read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import CRITICAL, lane_for
from hami.kube.readsize import SMALL_ANSWER
from hami.obs.log import get_logger

log = get_logger(__name__)


WRITES = frozenset({"create", "patch", "update", "delete"})


def is_failure(code: str) -> bool:
    """A request outcome that says the API server is not serving (client error codes: it is)."""
    if code == "error":  # timeout, refused, reset: no answer at all
        return True
    return code.isdigit() and (int(code) >= 500 or int(code) == 429)


class ApiLiveness:
    def __init__(self, client: KubeClient, *, probe_after: float = 10.0, probe_timeout: float = 5.0,
                 unready_after: float = 5.0, tick: float = 1.0,
                 heard: Callable[[], Iterable[float | None]] = tuple, namespace: str = "default"):
        self.client = client
        self.probe_after = probe_after
        self.probe_timeout = probe_timeout
        self.unready_after = unready_after
        self.tick = tick
        self.heard = heard  # loop times of the informers' last watch lines
        self.last_answer = asyncio.get_running_loop().time()
        self.failing_since: float | None = None
        self.writes_failing = False  # the failure was a critical write: only a write clears it
        self.namespace = namespace  # where the dry-run Event of a write probe would go
        self.last_error = ""
        self.probes = 0
        self.probe_failures = 0
        self.wakes = 0  # sleeps of run() (idle and answering: one per probe_after at most)
        self.asleep_for = 0.0  # seconds the current sleep of run() lasts at most
        previous = client.on_request

        def observe(verb: str, resource: str, code: str, seconds: float) -> None:
            if previous is not None:
                previous(verb, resource, code, seconds)
            critical_write = verb in WRITES and lane_for(verb, resource) == CRITICAL
            if is_failure(code):
                self.failed(f"{verb} {resource}: {'no answer' if code == 'error' else 'HTTP ' + code}",
                            write=critical_write)
            elif critical_write or not self.writes_failing:
                self.answered()

        client.on_request = observe

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def answered(self) -> None:
        if self.failing_since is not None:
            log.info("API server answering again", failed_for_s=round(self._now() - self.failing_since, 1))
        self.last_answer = self._now()
        self.failing_since = None
        self.writes_failing = False
        self.last_error = ""

    def failed(self, error: str, *, write: bool = False) -> None:
        if self.failing_since is None:
            self.failing_since = self._now()
            log.warning("API server not answering", error=error)
        self.writes_failing = self.writes_failing or write
        self.last_error = error

    def _last_heard(self) -> float:
        return max([self.last_answer, *(t for t in self.heard() if t is not None)])

    def reasons(self) -> list[str]:
        if self.failing_since is None:
            return []
        down = self._now() - self.failing_since
        if down < self.unready_after:
            return []
        what = "critical writes failing" if self.writes_failing else "API server not answering"
        return [f"{what} for {int(down)}s: {self.last_error}"]

    def _write_probe(self):
        event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "hami-liveness-"},
                 "involvedObject": {"kind": "Namespace", "name": self.namespace}, "reason": "Probe",
                 "message": "dry run: is the API server writing?", "type": "Normal"}
        return self.client.request("create", "events", "POST", f"/api/v1/namespaces/{self.namespace}/events",
                                   query=[("dryRun", "All")], body=event, content_type="application/json",
                                   read_size=SMALL_ANSWER)

    async def probe(self) -> None:
        self.probes += 1
        write = self.writes_failing
        what = "dry-run create events" if write else "GET /version"
        try:
            await asyncio.wait_for(self._write_probe() if write else
                                   self.client.request("get", "version", "GET", "/version",
                                                       read_size=SMALL_ANSWER), self.probe_timeout)
        except (TimeoutError, ApiError) as exc:
            self.probe_failures += 1
            if not isinstance(exc, ApiError) or exc.status in (0, 429) or exc.status >= 500:
                self.failed(f"{what}: {exc or 'no answer within ' + format(self.probe_timeout, 'g') + ' s'}",
                            write=write)
                return
        self.answered()  # answered (a refusal too: it serves)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.failing_since is not None or self._now() - self._last_heard() >= self.probe_after:
                probe, stopped = asyncio.create_task(self.probe()), asyncio.create_task(stop.wait())
                await asyncio.wait([probe, stopped], return_when=asyncio.FIRST_COMPLETED)
                for t in (probe, stopped):
                    t.cancel()
                await asyncio.gather(probe, stopped, return_exceptions=True)
            # While answering, asleep until the probe would be due (no wake a second while idle:
            # a watch line or an answer meanwhile only moves that later); while failing, every tick.
            wait = self.tick
            if self.failing_since is None:
                wait = max(self.tick, self.probe_after - (self._now() - self._last_heard()))
            self.wakes += 1
            self.asleep_for = wait
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                pass
