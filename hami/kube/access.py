"""Can this identity make the writes its role needs? Asked with SelfSubjectAccessReviews.

A replica whose RBAC lacks `create pods/binding` (or `patch pods`, `patch nodes`) filters happily and
then fails every /bind; readiness should say so before kube-scheduler sends it pods. `AccessProbe`
posts one SelfSubjectAccessReview per need (authorization.k8s.io/v1, which every authenticated
identity may create through the default `system:basic-user` ClusterRole), on the background lane,
and `reasons()` gives one readiness line per denied need.

When it reviews (idle is idle: no review on a timer while everything is allowed):
- at start;
- when the API server says RBAC or the credentials may have changed: any request of this client
  answered 401 or 403 (a RoleBinding removed shows as a /bind write refused), at most once per
  `min_gap` seconds however many requests fail;
- while a need is denied, every `denied_recheck` seconds (the replica is unready, so no write
  comes to show that a RoleBinding was added);
- otherwise after `max_age` seconds at the latest: a safety net for a permission withdrawn while
  no write was attempted (the next write would show it anyway).

An API server that does not serve the review (404) or forbids it (403) leaves the answer unknown:
that is logged once and not held against readiness, since the real writes will say more. Other
failures are retried (0.2 s doubling to 5 s); until a first answer `reasons()` says the check is
pending, so a replica is never ready on a guess.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import background
from hami.kube.readsize import SMALL_ANSWER
from hami.obs.log import get_logger

log = get_logger(__name__)

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Need:
    verb: str
    resource: str
    subresource: str = ""
    group: str = ""
    why: str = ""  # what fails without it

    @property
    def text(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {res}" + (f".{self.group}" if self.group else "")

    def review(self) -> dict:
        attrs = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.subresource:
            attrs["subresource"] = self.subresource
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}


SCHEDULER_NEEDS = (
    Need("create", "pods", "binding", why="/bind cannot bind pods"),
    Need("patch", "pods", why="/bind cannot write device placements"),
    Need("patch", "nodes", why="node locks and handshakes cannot be written"),
)


SSAR_RESOURCE = "selfsubjectaccessreviews"
REFUSED = frozenset({"401", "403"})  # answers that say RBAC or the credentials may have changed


class AccessProbe:
    def __init__(self, client: KubeClient, needs: tuple[Need, ...] = SCHEDULER_NEEDS, *,
                 max_age: float = 600.0, denied_recheck: float = 60.0, min_gap: float = 30.0,
                 retry_initial: float = 0.2, retry_max: float = 5.0):
        self.client = client
        self.needs = needs
        self.max_age = max_age
        self.denied_recheck = denied_recheck
        self.min_gap = min_gap
        self.retry_initial, self.retry_max = retry_initial, retry_max
        self.denied: dict[Need, str] = {}  # need -> the server's reason (may be empty)
        self.answered = asyncio.Event()
        self.refused = asyncio.Event()  # a request was answered 401/403 since the last review
        self.unknown = ""  # why the server cannot tell (no reviews served, reviews forbidden)
        self.last_error = ""
        self.checks = 0
        self.asleep_for = 0.0  # how long run()'s current wait lasts at most, unless a request is refused
        previous = client.on_request

        def observe(verb: str, resource: str, code: str, seconds: float) -> None:
            if previous is not None:
                previous(verb, resource, code, seconds)
            if code in REFUSED and resource != SSAR_RESOURCE:
                self.refused.set()

        client.on_request = observe

    def reasons(self) -> list[str]:
        """Readiness lines: one per denied need; one while no answer has come yet."""
        if not self.answered.is_set():
            return ["write permissions not verified yet" + (f": {self.last_error}" if self.last_error else "")]
        out = []
        for need, reason in self.denied.items():
            out.append(f"RBAC denies {need.text}: {need.why}" + (f" ({reason})" if reason else ""))
        return out

    async def check_once(self) -> None:
        """One review per need; raises ApiError/OSError-like failures for the caller to retry."""
        denied: dict[Need, str] = {}
        for need in self.needs:
            try:
                with background():
                    out = await self.client.request("create", SSAR_RESOURCE, "POST", SSAR_PATH,
                                                     body=need.review(), content_type="application/json",
                                                     read_size=SMALL_ANSWER)
            except ApiError as exc:
                if exc.code in (403, 404):
                    if not self.unknown:
                        log.warning("Cannot review write permissions; readiness does not check them",
                                    status=exc.code, error=str(exc))
                    self.unknown = f"HTTP {exc.code}: {exc}"
                    self.denied = {}
                    self.answered.set()
                    return
                raise
            status = (out or {}).get("status") or {}
            if status.get("allowed") is not True:
                denied[need] = str(status.get("reason") or "")
        self.checks += 1
        if denied != self.denied:
            for need in denied:
                log.warning("Write permission denied", need=need.text, consequence=need.why, reason=denied[need])
            if self.denied and not denied:
                log.info("Write permissions granted again")
        self.denied = denied
        self.unknown = ""
        self.last_error = ""
        self.answered.set()

    async def wait_answered(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self.answered.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def next_review_in(self) -> float:
        """Seconds until the next review with nothing refused: sooner while a need is denied."""
        return self.denied_recheck if self.denied else self.max_age

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        delay = self.retry_initial
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self.refused.clear()  # what failed before this review is what it answers
                reviewed_at = loop.time()
                try:
                    await self.check_once()
                    wait, delay = self.next_review_in(), self.retry_initial
                except (ApiError, OSError, TimeoutError, RuntimeError) as exc:
                    self.last_error = str(exc) or repr(exc)
                    log.v(2).info("Write permission review failed; retrying", error=self.last_error, retry_in=delay)
                    await self.pause(stopped, delay)
                    delay = min(delay * 2, self.retry_max)
                    continue
                self.asleep_for = wait
                refused = asyncio.ensure_future(self.refused.wait())
                await asyncio.wait([stopped, refused], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                refused.cancel()
                if self.refused.is_set() and not stop.is_set():
                    log.v(2).info("A request was refused (401/403); reviewing write permissions again")
                    # at most one review per min_gap, however many requests are refused
                    await self.pause(stopped, reviewed_at + self.min_gap - loop.time())
        finally:
            stopped.cancel()

    @staticmethod
    async def pause(stopped: asyncio.Future, seconds: float) -> None:
        if seconds > 0:
            await asyncio.wait([stopped], timeout=seconds)
