"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

The holder renews `spec.renewTime` every `retry_period`; a candidate takes the lease over when
`renewTime + leaseDurationSeconds` has passed. Every write is a PUT carrying the resourceVersion
that was read, so two candidates can never both win. A leader that cannot renew within
`renew_deadline` steps down (`is_leader` false) and goes back to campaigning.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from hami.device.codec.timestamps import format_micro_time, kube_time
from hami.kube.client import ApiError, KubeClient
from hami.obs.log import get_logger

log = get_logger(__name__)


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Callable[[], float] = time.time,
                 on_change: Callable[[bool], None] | None = None):
        self.client = client
        self.namespace, self.name, self.identity = namespace or "default", name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.clock = clock
        self.on_change = on_change
        self.is_leader = False
        self.became_leader = asyncio.Event()
        self._last_renew = 0.0

    def _set(self, leader: bool) -> None:
        if leader != self.is_leader:
            self.is_leader = leader
            log.info("Leadership changed", lease=f"{self.namespace}/{self.name}", identity=self.identity,
                     leader=leader)
            if leader:
                self.became_leader.set()
            else:
                self.became_leader.clear()
            if self.on_change is not None:
                self.on_change(leader)

    async def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "renewTime": format_micro_time(now),
        }
        try:
            lease = await self.client.get_lease(self.namespace, self.name)
        except ApiError as exc:
            if not exc.not_found:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec, "acquireTime": format_micro_time(now), "leaseTransitions": 0}}
            try:
                await self.client.create_lease(self.namespace, body)
            except ApiError as exc2:
                if exc2.conflict or exc2.status == 409:
                    return False
                raise
            return True
        old = lease.get("spec") or {}
        holder = old.get("holderIdentity") or ""
        renewed = kube_time(old.get("renewTime")) or 0.0
        duration = float(old.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and renewed + duration > now:
            return False
        new_spec = dict(old)
        new_spec.update(spec)
        if holder != self.identity:
            new_spec["acquireTime"] = format_micro_time(now)
            new_spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + (1 if holder else 0)
        lease["spec"] = new_spec
        try:
            await self.client.replace_lease(self.namespace, self.name, lease)
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        return True

    async def release(self) -> None:
        if not self.is_leader:
            return
        try:
            lease = await self.client.get_lease(self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.client.replace_lease(self.namespace, self.name, lease)
        except ApiError:
            pass
        self._set(False)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                ok = await self.try_acquire_or_renew()
            except ApiError as exc:
                log.warning("Lease update failed", lease=f"{self.namespace}/{self.name}", error=str(exc))
                ok = False
            if ok:
                self._last_renew = loop.time()
                self._set(True)
            elif self.is_leader and loop.time() - self._last_renew > self.renew_deadline:
                self._set(False)
            elif not ok and self.is_leader:
                pass
            try:
                await asyncio.wait_for(stop.wait(), self.retry_period)
            except TimeoutError:
                pass
        await self.release()
