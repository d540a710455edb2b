"""A node lock our binder is still writing counts as ours, not another scheduler's.

The node watch can deliver the lock before the lock write's own answer returns. Read as another
scheduler's lock, it would make a single replica unpack its burst for OTHERS_SEEN_S
(contention.WIDE: every node with work of ours counts as contended).
"""

from __future__ import annotations

import asyncio

import orjson

from hami.config import Config
from hami.kube.events import EventRecorder
from hami.scheduler.cache.state import ClusterState
from hami.scheduler.extender.server import Extender
from hami.scheduler.placement import contention
from hami.scheduler.placer import Placer
from hami.scheduler.role import make_requests_fn
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now


def _width_after_filter(writing: str | None) -> int:
    """The burst's width at a /filter while the watch shows a lock on n1 for pod default/p0,
    whose lock write our binder has sent (`writing`) and not yet seen answered."""
    config = Config()
    state = ClusterState(None, config.nvidia)
    placer = Placer(config, state, requests_fn=make_requests_fn(config))
    ext = Extender(config, state, placer, None, EventRecorder(None, "hami-scheduler"))
    for name in ("n0", "n1"):
        state.refresh_node(node_obj(name, 2, handshake=requesting_now()))
    placer.bind_started("n1")  # our bind of default/p0 is in flight: a burst is pending
    if writing is not None:
        placer.lock_writing("n1", writing)
    state.locked.add("n1")
    state.lock_holders["n1"] = ("default", "p0")
    pod = pod_obj("p1", mem=1000)
    pod["metadata"]["uid"] = "uid-p1"
    answer = asyncio.run(ext.filter(orjson.dumps({"Pod": pod, "NodeNames": ["n0", "n1"]})))
    assert answer["Error"] == "", answer
    return placer.contention.width


def test_a_lock_being_written_by_our_binder_is_ours():
    assert _width_after_filter("default/p0") < contention.WIDE


def test_a_lock_nobody_here_writes_is_another_schedulers():
    assert _width_after_filter(None) == contention.WIDE
    assert _width_after_filter("default/other") == contention.WIDE


def test_a_taken_lock_stays_ours_after_the_write_answered():
    config = Config()
    state = ClusterState(None, config.nvidia)
    placer = Placer(config, state, requests_fn=make_requests_fn(config))
    placer.lock_writing("n1", "default/p0")
    placer.lock_taken("n1", "default/p0")
    placer.lock_writing("n2", "default/p9")
    placer.lock_writing("n2", None)  # gave up: a lock for p9 on n2 would not be ours
    state.locked.update({"n1", "n2"})
    state.lock_holders.update({"n1": ("default", "p0"), "n2": ("default", "p9")})
    assert placer.own_lock("n1") and not placer.own_lock("n2")
