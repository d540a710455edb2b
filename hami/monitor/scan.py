"""Find HAMi-core cache files under --cache-dir and read them (spec node.md §3.1).

Layout on disk: `<cache-dir>/<podUID>_<container>/<something>.cache`. The dir name is split at the
first `_` (container names may contain `_`). In a dir, entries whose name contains `libvgpu.so` or
ends with `.cache` are counted; more than two is HAMi's "cache num not matched" error; the first
`*.cache` (by name) is the region.

Files are read with `os.pread` on a fresh descriptor per scrape: only the header, the live process
slots and the tail are read (a few KiB of the 2 MB), and a file that shrinks under us gives short
reads (reason `shrunk`) instead of the SIGBUS an mmap would raise.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hami.monitor.shm import Region, ShmError, parse


@dataclass(frozen=True, slots=True)
class ContainerDir:
    name: str  # dir name, `<podUID>_<container>`
    path: str
    pod_uid: str
    container: str
    mtime: float


def split_dir_name(name: str) -> tuple[str, str] | None:
    """`<podUID>_<container>` split at the first `_`; None when either side is empty."""
    uid, sep, ctr = name.partition("_")
    if not sep or not uid or not ctr:
        return None
    return uid, ctr


def list_container_dirs(cache_dir: str) -> tuple[list[ContainerDir], list[str]]:
    """Sub-directories of `cache_dir` that name a container; also the names that were skipped."""
    out: list[ContainerDir] = []
    skipped: list[str] = []
    try:
        it = os.scandir(cache_dir)
    except OSError:  # missing or unreadable: nothing to report (the role warns at start)
        return out, skipped
    with it:
        for entry in it:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            parts = split_dir_name(entry.name)
            if parts is None:
                skipped.append(entry.name)
                continue
            out.append(ContainerDir(entry.name, entry.path, parts[0], parts[1], st.st_mtime))
    out.sort(key=lambda d: d.name)
    return out, skipped


def find_cache_file(dir_path: str) -> str | None:
    """The region file of a container dir; None when there is none yet; ShmError(cache_count)."""
    try:
        names = sorted(os.listdir(dir_path))
    except OSError as exc:
        raise ShmError("io", dir_path, exc.strerror or str(exc)) from None
    counted = [n for n in names if "libvgpu.so" in n or n.endswith(".cache")]
    if len(counted) > 2:
        raise ShmError("cache_count", dir_path, f"{len(counted)} cache/libvgpu entries, expected at most 2")
    for n in counted:
        if n.endswith(".cache"):
            return os.path.join(dir_path, n)
    return None


def read_region_file(path: str, *, torn_attempts: int = 3, torn_pause: float = 0.001) -> Region:
    """Parse the region at `path` through pread; any OSError becomes ShmError(io).

    A slot still being written after the parser's re-reads (ShmError torn) is tried again up to
    `torn_attempts` times, `torn_pause` seconds apart, giving the writer a chance to finish.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ShmError("io", path, exc.strerror or str(exc)) from None
    try:
        for attempt in range(torn_attempts):
            try:
                size = os.fstat(fd).st_size
                return parse(lambda off, n: os.pread(fd, n, off), size)
            except ShmError as exc:
                if exc.reason != "torn" or attempt == torn_attempts - 1:
                    raise
                time.sleep(torn_pause)
        raise AssertionError("unreachable")
    except OSError as exc:
        raise ShmError("io", path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def reap_candidates(dirs: Iterable[ContainerDir], known_uids: set[str], now: float, grace: float) -> list[ContainerDir]:
    """Dirs of pods that do not exist whose mtime is older than the grace period (never a known pod's)."""
    return [d for d in dirs if d.pod_uid not in known_uids and d.mtime + grace <= now]


def remove_dir(path: str) -> bool:
    try:
        shutil.rmtree(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Loaded:
    """A container dir matched to its pod, with its parsed region."""

    dir: ContainerDir
    path: str  # the cache file
    region: Region
    pod: dict


def pods_by_uid(pods: Iterable[dict]) -> dict[str, dict]:
    out = {}
    for p in pods:
        uid = (p.get("metadata") or {}).get("uid")
        if uid:
            out[uid] = p
    return out


def spec_container_names(pod: dict) -> set[str]:
    return {c.get("name") for c in ((pod.get("spec") or {}).get("containers") or ())}


def load_containers(
    dirs: Iterable[ContainerDir],
    by_uid: dict[str, dict],
    on_error: Callable[[str, ShmError], None],
    *,
    spec_containers_only: bool = True,
) -> list[Loaded]:
    """Read the region of every dir whose pod exists; errors go to `on_error(path, exc)`, never raise.

    With `spec_containers_only` (the metrics view, like HAMi) a dir is reported only when its
    container is one of `pod.spec.containers` (init containers are not matched).
    """
    out = []
    for d in dirs:
        pod = by_uid.get(d.pod_uid)
        if pod is None:
            continue
        if spec_containers_only and d.container not in spec_container_names(pod):
            continue
        path = None
        try:
            path = find_cache_file(d.path)
            if path is None:
                continue  # HAMi-core has not created the region yet
            region = read_region_file(path)
        except ShmError as exc:
            on_error(path or d.path, exc)
            continue
        out.append(Loaded(d, path, region, pod))
    return out
