"""Lease leader election against the embedded API server: one of two candidates leads, the
other follows; a lease not renewed in time is taken over (fake clock) with leaseTransitions
incremented; release hands the lease back."""

from __future__ import annotations

import asyncio

from hami.kube.leader import LeaderElector
from tests.kube.helpers import Clock


async def test_only_one_candidate_acquires(client):
    clock = Clock(1_800_000_000.0)
    a = LeaderElector(client, "default", "hami", "a", clock=clock)
    b = LeaderElector(client, "default", "hami", "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()  # renew
    lease = await client.get_lease("default", "hami")
    assert lease["spec"]["holderIdentity"] == "a"


async def test_expired_lease_is_taken_over(client):
    clock = Clock(1_800_000_000.0)
    a = LeaderElector(client, "default", "hami", "a", clock=clock, lease_duration=15)
    b = LeaderElector(client, "default", "hami", "b", clock=clock, lease_duration=15)
    assert await a.try_acquire_or_renew()
    clock.now += 14
    assert not await b.try_acquire_or_renew()
    clock.now += 2
    assert await b.try_acquire_or_renew()
    lease = await client.get_lease("default", "hami")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


async def test_release_lets_the_other_candidate_in_at_once(client):
    clock = Clock(1_800_000_000.0)
    a = LeaderElector(client, "default", "hami", "a", clock=clock)
    b = LeaderElector(client, "default", "hami", "b", clock=clock)
    stop = asyncio.Event()
    running = asyncio.create_task(a.run(stop))
    await asyncio.wait_for(a.became_leader.wait(), 10)
    stop.set()
    await running  # the loop ends with release()
    assert not a.is_leader
    clock.now += 2
    assert await b.try_acquire_or_renew()
