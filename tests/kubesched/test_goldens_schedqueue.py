"""Kubernetes' own scheduling-queue backoff cases, ported as data (tests/data/kubesched/schedqueue.yaml),
against hami.kubesched.schedqueue: the backoff duration per attempt (with upstream's overflow
guards), the backoff flow of a pod failing again and again, and which backoffQ pods a flush moves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched import schedqueue as sq

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "schedqueue.yaml").read_text())
NOW = 1000.0


def _pod(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": {}}


@pytest.mark.parametrize("case", DATA["calculate"], ids=[c["name"] for c in DATA["calculate"]])
def test_calculate_backoff_duration(case):
    q = sq.SchedulingQueue(sq.QueueTimings(initial_backoff=case["initial"], max_backoff=case["max"]))
    assert q.backoff_duration(case["attempts"]) == case["want"]


def test_backoff_flow():
    q = sq.SchedulingQueue()
    q.add("ns/test-pod", _pod("test-pod"), NOW)
    now = NOW
    for i, want in enumerate(DATA["backoff_flow"]["want"]):
        qp = q.pop(now)
        assert qp is not None and qp.attempts == i + 1
        assert q.add_unschedulable(qp, {"NodeResourcesFit"}, now) == sq.UNSCHEDULABLE
        q.move_all((sq.NODE, sq.ADD), now)  # an event moves it: still backing off, so backoffQ
        assert q.location(qp.key) == sq.BACKOFF
        assert q.backoff_expiry(qp) - qp.timestamp == want
        now += 0.001
        q.flush_backoff(now)
        assert q.location(qp.key) == sq.BACKOFF, "moved out by an early flush"
        now += want
        q.flush_backoff(now)
        assert q.location(qp.key) == sq.ACTIVE, "still in backoffQ after its backoff"


@pytest.mark.parametrize("case", DATA["pop_completed"]["cases"], ids=[c["name"]
                                                                      for c in DATA["pop_completed"]["cases"]])
def test_pop_each_backoff_completed(case):
    q = sq.SchedulingQueue()
    pods = DATA["pop_completed"]["pods"]
    for name in case["backoff"]:
        key = f"ns/{name}"
        q.add(key, _pod(name), NOW - 10)
        qp = q.pop(NOW - 10)
        failed = NOW + pods[name]["failed"]
        if pods[name]["error"]:
            assert q.add_error(qp, failed) == sq.BACKOFF
        else:
            q.move_request_cycle = qp.cycle  # a move request during its cycle: AddUnschedulable sends it to backoffQ
            assert q.add_unschedulable(qp, {"plugin"}, failed) == sq.BACKOFF
    moved = q.flush_backoff(NOW)
    assert moved == len(case["want"])
    assert sorted(k.split("/")[1] for k, w in q.where.items() if w == sq.ACTIVE) == sorted(case["want"])
    assert q.count(sq.BACKOFF) == len(case["backoff"]) - len(case["want"])
