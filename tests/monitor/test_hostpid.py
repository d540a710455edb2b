"""Host-PID repair over a generated fake /proc tree: NSpid parsing, cgroup matching (cgroupfs and
systemd forms, container ID), single-candidate rule, cached answers re-validated, and the retry
back-off for slots that cannot be resolved."""

from __future__ import annotations

from hami.monitor.hostpid import (
    HostPidResolver,
    Want,
    cgroup_line,
    cgroup_matches,
    container_id_of,
    needs_repair,
    parse_nspid,
    write_fake_proc,
)

UID = "0a1b2c3d-1111-4000-8000-000000000001"
OTHER = "0a1b2c3d-2222-4000-8000-000000000002"


def test_nspid_line_is_parsed_outermost_first():
    assert parse_nspid("Name:\tx\nNSpid:\t4021\t12\nNStgid:\t4021\t12\n") == (4021, 12)
    assert parse_nspid("Name:\tx\n") == ()
    assert parse_nspid("NSpid:\tabc\n") == ()


def test_needs_repair_when_hostpid_is_zero_or_equals_pid():
    assert needs_repair(12, 0) and needs_repair(12, 12)
    assert not needs_repair(12, 4021) and not needs_repair(0, 0)


def test_cgroup_matching_knows_cgroupfs_and_systemd_forms():
    v1 = f"12:memory:/kubepods/besteffort/pod{UID}/abc123\n11:cpu:/kubepods/besteffort/pod{UID}/abc123\n"
    assert cgroup_matches(v1, UID, "abc123") and cgroup_matches(v1, UID, None)
    assert not cgroup_matches(v1, UID, "def456") and not cgroup_matches(v1, OTHER, None)
    assert cgroup_matches(cgroup_line(UID, "abc123"), UID, "abc123")
    assert "pod0a1b2c3d_1111_4000" in cgroup_line(UID, "abc123")


def test_container_id_comes_from_pod_status():
    p = {"status": {"containerStatuses": [{"name": "main", "containerID": "containerd://abc"}]}}
    assert container_id_of(p, "main") == "abc" and container_id_of(p, "side") is None


def test_resolves_the_process_of_the_right_container(tmp_path):
    root = str(tmp_path)
    write_fake_proc(root, 4021, [4021, 12], cgroup_line(UID, "abc"))
    write_fake_proc(root, 5000, [5000, 12], cgroup_line(OTHER, "zzz"))  # same ns pid, other pod
    write_fake_proc(root, 12, [12], "0::/system.slice/sshd.service\n")  # host pid 12 itself
    r = HostPidResolver(root)
    w = Want(UID, "main", 12, "abc")
    assert r.resolve([w]) == {w: 4021}
    assert r.resolve([Want(OTHER, "main", 12, None)]) == {Want(OTHER, "main", 12, None): 5000}


def test_ambiguous_or_missing_candidates_are_not_repaired(tmp_path):
    root = str(tmp_path)
    write_fake_proc(root, 4021, [4021, 12], cgroup_line(UID, "abc"))
    write_fake_proc(root, 4022, [4022, 12], cgroup_line(UID, "def"))  # two containers of one pod
    r = HostPidResolver(root)
    assert r.resolve([Want(UID, "main", 12, None)]) == {}  # container id unknown -> ambiguous
    fresh = HostPidResolver(root)  # (the first resolver now backs off that slot)
    assert fresh.resolve([Want(UID, "main", 12, "def")]) == {Want(UID, "main", 12, "def"): 4022}
    assert fresh.resolve([Want(UID, "main", 99, "abc")]) == {}


def test_cached_answers_are_revalidated_and_failed_lookups_back_off(tmp_path):
    root = str(tmp_path)
    clock = {"t": 0.0}
    r = HostPidResolver(root, retry_after=30.0, clock=lambda: clock["t"])
    w = Want(UID, "main", 12, "abc")
    assert r.resolve([w]) == {} and r.tree_walks == 1
    write_fake_proc(root, 4021, [4021, 12], cgroup_line(UID, "abc"))
    clock["t"] = 10.0
    assert r.resolve([w]) == {} and r.tree_walks == 1  # backing off: no walk
    clock["t"] = 31.0
    assert r.resolve([w]) == {w: 4021} and r.tree_walks == 2
    assert r.resolve([w]) == {w: 4021} and r.tree_walks == 2  # cached, checked with one read
    write_fake_proc(root, 4021, [4021, 77], cgroup_line(UID, "abc"))  # pid reused by another process
    assert r.resolve([w]) == {} and r.tree_walks == 3


from hypothesis import assume, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_pids = st.lists(st.integers(1, 2**22), min_size=1, max_size=5)


@given(pids=_pids, name=st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=20))
def test_nspid_parse_round_trips_what_linux_prints(pids, name):
    text = f"Name:\t{name}\nPid:\t{pids[0]}\nNSpid:\t" + "\t".join(map(str, pids)) + "\nNStgid:\t1\n"
    assert parse_nspid(text) == tuple(pids)


@given(garbage=st.text(max_size=300))
def test_nspid_parse_never_raises(garbage):
    out = parse_nspid(garbage)
    assert isinstance(out, tuple) and all(isinstance(x, int) for x in out)


@given(uid=st.uuids().map(str), cid=st.text("0123456789abcdef", min_size=12, max_size=64),
       other=st.uuids().map(str))
def test_cgroup_line_matches_its_own_pod_and_container_only(uid, cid, other):
    line = cgroup_line(uid, cid)
    assert cgroup_matches(line, uid, cid) and cgroup_matches(line, uid, None)
    assume(other != uid)
    assert not cgroup_matches(line, other, None)
