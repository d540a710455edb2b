"""HAMi's pkg/monitor/nvidia/cudevshr_test.go ported onto hami.monitor.scan / shm: Test_loadCache
(missing dir, more than two cache entries, empty dir, no cache file yet, too small, magic mismatch,
unknown version, a v1 and an exact-size v0 file, unreadable file) and Test_ContainerLister_Update
(missing container path, stray files skipped, a recent dir of an unknown pod kept, an old one
reaped, a dir with a bad or no cache file skipped, a new container found with its pod UID and
container name). HAMi accepts a 64-byte v1 header as a v1 region; we need the whole layout (a
short file would be read past its end), so the v1 case here uses a full-size file."""

from __future__ import annotations

import os
import struct

import pytest

from hami.monitor import shm
from hami.monitor.scan import (
    find_cache_file,
    list_container_dirs,
    load_containers,
    pods_by_uid,
    read_region_file,
    reap_candidates,
)
from hami.monitor.shm import ShmError
from hami.monitor.shmwrite import Dev, build_region

from ._fixtures import U0


def header(size: int, magic: int, major: int, minor: int) -> bytes:
    return struct.pack("<iii", magic, major, minor) + bytes(size - 12)


def write(d, name, content: bytes) -> str:
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name)
    with open(p, "wb") as fh:
        fh.write(content)
    return p


def load(d) -> shm.Region | None:
    """HAMi loadCache: the container dir's region, None when there is no cache file yet."""
    path = find_cache_file(str(d))
    return None if path is None else read_region_file(path)


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"a.cache": b"x", "b.cache": b"x", "c.cache": b"x"}, "cache_count"),
        ({"x.cache": b"tiny"}, "too_small"),
        ({"x.cache": header(64, 0, 1, 0)}, "bad_magic"),
        ({"x.cache": header(shm.V1.file_size, shm.MAGIC, 99, 0)}, "unknown_version"),
    ],
    ids=["Test_loadCache-too-many-files", "Test_loadCache-cache-file-too-small",
         "Test_loadCache-magic-flag-mismatch", "Test_loadCache-unknown-version"],
)
def test_load_cache_errors(tmp_path, files, reason):
    for name, content in files.items():
        write(tmp_path, name, content)
    with pytest.raises(ShmError) as err:
        load(tmp_path)
    assert err.value.reason == reason


def test_load_cache_directory_missing(tmp_path):
    with pytest.raises(ShmError) as err:
        load(tmp_path / "missing")
    assert err.value.reason == "io"


@pytest.mark.parametrize("files", [{}, {"libvgpu.so": b"x", "notes.txt": b"x"}],
                         ids=["Test_loadCache-empty-directory", "Test_loadCache-no-matching-cache-file"])
def test_load_cache_nothing_yet(tmp_path, files):
    for name, content in files.items():
        write(tmp_path, name, content)
    assert load(tmp_path) is None


@pytest.mark.parametrize(
    ("image", "layout"),
    [(bytes(build_region([Dev(U0)], [], "1.2")), "v1.2"),
     (header(shm.V0.file_size, shm.MAGIC, 0, 0), "v0")],
    ids=["Test_loadCache-v1-cache-file", "Test_loadCache-v0-cache-file-exact-legacy-size"],
)
def test_load_cache_reads_v1_and_v0(tmp_path, image, layout):
    assert shm.V0.file_size == 1_197_897
    write(tmp_path, "x.cache", image)
    assert load(tmp_path).layout == layout


def test_load_cache_open_file_fails(tmp_path):
    """Test_loadCache "open file fails" (HAMi chmods 0000; tests run as root here, so a dangling link)."""
    os.symlink(tmp_path / "gone", tmp_path / "x.cache")
    with pytest.raises(ShmError) as err:
        load(tmp_path)
    assert err.value.reason == "io"


def pod(uid, containers=("ctr",)):
    return {"metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": c} for c in containers]}}


def test_update_container_path_missing_lists_nothing(tmp_path):
    assert list_container_dirs(str(tmp_path / "missing")) == ([], [])


def test_update_skips_non_directory_entries(tmp_path):
    write(tmp_path, "stray-file", b"x")
    assert list_container_dirs(str(tmp_path)) == ([], [])


@pytest.mark.parametrize(("age", "reaped"), [(0, False), (2 * 60, True)],
                         ids=["Test_ContainerLister_Update-recent-stale-dir-kept",
                              "Test_ContainerLister_Update-old-stale-dir-removed"])
def test_update_stale_dirs(tmp_path, age, reaped):
    os.mkdir(tmp_path / "missing-pod-uid_ctr")
    (d,), _ = list_container_dirs(str(tmp_path))
    got = reap_candidates([d], known_uids=set(), now=d.mtime + age, grace=60)
    assert [c.name for c in got] == (["missing-pod-uid_ctr"] if reaped else [])
    assert reap_candidates([d], known_uids={"missing-pod-uid"}, now=d.mtime + age, grace=60) == []


def test_update_bad_cache_and_no_cuinit_are_skipped_and_new_container_added(tmp_path):
    """Test_ContainerLister_Update: loadCache error skipped, no cuInit yet skipped, new container added."""
    for n in ("a.cache", "b.cache", "c.cache"):
        write(tmp_path / "uid2_ctr", n, b"x")
    os.mkdir(tmp_path / "uid3_ctr")
    write(tmp_path / "uid4_mycontainer", "x.cache", bytes(build_region([Dev(U0)], [], "1.2")))
    dirs, _ = list_container_dirs(str(tmp_path))
    errors = []
    loaded = load_containers(dirs, pods_by_uid([pod("uid2"), pod("uid3"), pod("uid4", ("mycontainer",))]),
                             lambda path, exc: errors.append((os.path.basename(path), exc.reason)))
    assert [(x.dir.pod_uid, x.dir.container) for x in loaded] == [("uid4", "mycontainer")]
    assert errors == [("uid2_ctr", "cache_count")]
