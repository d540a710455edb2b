"""HAMi's priority feedback loop: recent_kernel decay, pausing lower priorities on shared GPUs,
un-pausing, utilization_switch for crowded / lone tasks, and the writes applied to real region
files (only changed fields, nothing when disabled by the caller)."""

from __future__ import annotations

from hami.monitor.feedback import Container, Decision, apply, from_region, observe
from hami.monitor.scan import read_region_file
from hami.monitor.shmwrite import Dev, write_region

from ._fixtures import U0, U1


def c(key, uuids, priority, rk, switch=1):
    return Container(key, tuple(uuids), priority, rk, switch)


def test_lone_active_task_decays_and_may_use_the_whole_gpu():
    assert observe([c("a", [U0], 1, 2)]) == {"a": Decision(1, 0)}
    assert observe([c("a", [U0], 1, 1)]) == {"a": Decision(0, 0)}
    assert observe([c("a", [U0], 1, 0)]) == {"a": Decision(0, 0)}


def test_high_priority_activity_pauses_low_priority_on_the_same_gpu():
    got = observe([c("hi", [U0], 0, 2), c("lo", [U0], 1, 2), c("elsewhere", [U1], 1, 2)])
    assert got["hi"] == Decision(1, 0)
    assert got["lo"] == Decision(-1, 1)  # paused, and limited
    assert got["elsewhere"] == Decision(1, 0)


def test_pause_is_lifted_once_the_high_priority_task_is_idle():
    assert observe([c("hi", [U0], 0, 1), c("lo", [U0], 1, -1)]) == {
        "hi": Decision(0, 0), "lo": Decision(0, 0)}


def test_two_active_tasks_of_the_same_priority_both_get_the_sm_limit():
    got = observe([c("a", [U0], 1, 2), c("b", [U0, U1], 1, 2)])
    assert got == {"a": Decision(1, 1), "b": Decision(1, 1)}


def test_negative_priorities_are_not_counted():
    got = observe([c("weird", [U0], -1, 2), c("lo", [U0], 1, 2)])
    assert got["lo"] == Decision(1, 0)


def test_apply_writes_only_changed_fields(tmp_path):
    hi = str(tmp_path / "hi.cache")
    lo = str(tmp_path / "lo.cache")
    write_region(hi, [Dev(U0)], [], "1.2", priority=0, recent_kernel=2, utilization_switch=0)
    write_region(lo, [Dev(U0)], [], "0", priority=1, recent_kernel=2, utilization_switch=1)
    regions = [(hi, read_region_file(hi)), (lo, read_region_file(lo))]
    decisions = observe(from_region(p, r) for p, r in regions)
    assert apply(regions, decisions) == 2  # hi: recent_kernel 2->1; lo: recent_kernel 2->-1 (switch stays 1)
    assert (read_region_file(hi).recent_kernel, read_region_file(hi).utilization_switch) == (1, 0)
    assert (read_region_file(lo).recent_kernel, read_region_file(lo).utilization_switch) == (-1, 1)
    regions = [(hi, read_region_file(hi)), (lo, read_region_file(lo))]
    apply(regions, observe(from_region(p, r) for p, r in regions))
    # hi decayed to 0 (idle) -> lo is released
    assert read_region_file(hi).recent_kernel == 0 and read_region_file(lo).recent_kernel == 0


def test_blocking_considers_every_gpu_of_the_container_and_any_priority():
    # HAMi stops at the first UUID with activity; a high-priority task on the second GPU still blocks.
    got = observe([c("lo", [U0, U1], 2, 2), c("peer", [U0], 2, 2), c("hi", [U1], 0, 2)])
    assert got["lo"] == Decision(-1, 1)
    assert got["peer"] == Decision(1, 1)  # shares U0 with another priority-2 task
