"""Cache dir scanning: `<podUID>_<container>` split at the first `_`, HAMi's cache-file rules,
grace-period reap candidates (never a known pod's dir), and matching dirs to pods (spec
containers only, unknown pods not read, errors reported and skipped)."""

from __future__ import annotations

import os

import pytest

from hami.monitor.scan import (
    ContainerDir,
    find_cache_file,
    list_container_dirs,
    load_containers,
    pods_by_uid,
    reap_candidates,
    split_dir_name,
)
from hami.monitor.shm import ShmError
from hami.monitor.shmwrite import Dev, Proc

from ._fixtures import U0, cache_file, pod


@pytest.mark.parametrize(("name", "want"), [
    ("uid-1_main", ("uid-1", "main")),
    ("uid-1_my_side_car", ("uid-1", "my_side_car")),
    ("nounderscore", None),
    ("_main", None),
    ("uid-1_", None),
])
def test_dir_name_is_split_at_the_first_underscore(name, want):
    assert split_dir_name(name) == want


def test_listing_skips_files_and_reports_bad_names(tmp_path):
    (tmp_path / "u1_main").mkdir()
    (tmp_path / "u2_side_car").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "u3_file").write_text("not a dir")
    dirs, skipped = list_container_dirs(str(tmp_path))
    assert [(d.pod_uid, d.container) for d in dirs] == [("u1", "main"), ("u2", "side_car")]
    assert skipped == ["garbage"]
    assert list_container_dirs(str(tmp_path / "missing")) == ([], [])


def test_cache_file_rules(tmp_path):
    d = tmp_path / "u_c"
    d.mkdir()
    assert find_cache_file(str(d)) is None  # empty: not created yet
    (d / "libvgpu.so").write_text("")
    assert find_cache_file(str(d)) is None  # no *.cache yet
    (d / "b.cache").write_text("")
    assert find_cache_file(str(d)) == str(d / "b.cache")
    (d / "a.cache").write_text("")
    with pytest.raises(ShmError) as info:
        find_cache_file(str(d))
    assert info.value.reason == "cache_count"


def test_reap_candidates_are_unknown_and_older_than_grace():
    dirs = [ContainerDir("a_c", "/x/a_c", "a", "c", mtime=100.0), ContainerDir("b_c", "/x/b_c", "b", "c", 100.0),
            ContainerDir("c_c", "/x/c_c", "c", "c", mtime=390.0)]
    got = reap_candidates(dirs, known_uids={"a"}, now=400.0, grace=300.0)
    assert [d.name for d in got] == ["b_c"]  # a exists (never removed); c is inside its grace period


def test_load_containers_matches_pods_and_spec_containers(tmp_path):
    root = str(tmp_path)
    cache_file(root, "uid-a", "main", [Dev(U0)], [Proc(pid=1, used={0: 5})])
    cache_file(root, "uid-a", "init", [Dev(U0)], [Proc(pid=2)])
    cache_file(root, "uid-gone", "main", [Dev(U0)], [])
    bad = os.path.join(root, "uid-b_main")
    os.makedirs(bad)
    with open(os.path.join(bad, "x.cache"), "wb") as fh:
        fh.write(b"\0" * 64)
    pods = pods_by_uid([pod("uid-a", containers=("main",), init=("init",)), pod("uid-b", name="p2")])
    errors = []
    dirs, _ = list_container_dirs(root)
    loaded = load_containers(dirs, pods, lambda path, exc: errors.append((path, exc.reason)))
    assert [(x.dir.pod_uid, x.dir.container) for x in loaded] == [("uid-a", "main")]
    assert loaded[0].region.devices()[0].used == 5
    assert errors == [(os.path.join(bad, "x.cache"), "bad_magic")]
    every = load_containers(dirs, pods, lambda *a: None, spec_containers_only=False)
    assert sorted(x.dir.container for x in every) == ["init", "main"]


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(uid=st.text("abcdef0123456789-", min_size=1, max_size=36),
       ctr=st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=63))
def test_split_keeps_underscores_in_container_names(uid, ctr):
    assert split_dir_name(f"{uid}_{ctr}") == (uid, ctr)
