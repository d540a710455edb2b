"""Host-PID repair: find the real host PID of a process slot whose `hostpid` is wrong (spec §4.7).

On drivers that translate NVML's running-process list into the caller's PID namespace, HAMi-core
stores the container PID as the host PID (`hostpid == pid`), or nothing (`hostpid == 0`); NVML's
per-process utilization samples carry host PIDs, so nothing matches and utilization reads 0.

With the monitor running with `hostPID: true`, `--proc-root` (default `/proc`) shows every process
of the node. The host PID of slot `pid` of container C of pod P is the process whose `NSpid:` line
in `/proc/<hostpid>/status` ends with `pid` (its PID in the innermost namespace) and whose
`/proc/<hostpid>/cgroup` names P's UID (`pod<uid>` in cgroupfs, `pod<uid with _>` in systemd
slices) and, when the pod status gives it, C's container ID. Exactly one such process, or no repair.

Everything reads under an injectable root, so tests point it at a fake tree (`write_fake_proc`).
Parsing functions are pure; `ProcReader` and `HostPidResolver` do the reading.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcEntry:
    hostpid: int
    nspid: tuple[int, ...]  # outermost (host) first, innermost last
    cgroup: str


@dataclass(frozen=True, slots=True)
class Want:
    """One slot to resolve: container `container` of pod `pod_uid`, PID `pid` inside it."""

    pod_uid: str
    container: str
    pid: int
    container_id: str | None = None


def needs_repair(pid: int, hostpid: int) -> bool:
    return pid > 0 and (hostpid == 0 or hostpid == pid)


def parse_nspid(status_text: str) -> tuple[int, ...]:
    """The `NSpid:` line of /proc/<pid>/status; () when absent or malformed."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(x) for x in line[6:].split())
            except ValueError:
                return ()
    return ()


def container_id_of(pod: dict, container: str) -> str | None:
    """The runtime ID (`containerd://<id>` -> `<id>`) of `container` from the pod status, if known."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            if cs.get("name") == container and cs.get("containerID"):
                cid = str(cs["containerID"])
                return cid.split("://", 1)[-1] or None
    return None


def cgroup_matches(cgroup_text: str, pod_uid: str, container_id: str | None) -> bool:
    """Does a /proc/<pid>/cgroup text place the process in this pod (and container, when known)?"""
    forms = {f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}"}
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        if any(f in path for f in forms) and (not container_id or container_id in path):
            return True
    return False


def cgroup_line(pod_uid: str, container_id: str, qos: str = "besteffort") -> str:
    """A cgroup v2 systemd-driver line as the kubelet with containerd creates it."""
    return (f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{pod_uid.replace('-', '_')}.slice/"
            f"cri-containerd-{container_id}.scope\n")


def write_fake_proc(root: str, hostpid: int, nspid: Iterable[int], cgroup: str, name: str = "python3") -> None:
    """Create `<root>/<hostpid>/{status,cgroup}` the way Linux shows them (tests, simulated nodes)."""
    d = os.path.join(root, str(hostpid))
    os.makedirs(d, exist_ok=True)
    ns = "\t".join(str(x) for x in nspid)
    with open(os.path.join(d, "status"), "w") as fh:
        fh.write(f"Name:\t{name}\nState:\tS (sleeping)\nTgid:\t{hostpid}\nPid:\t{hostpid}\n"
                 f"PPid:\t1\nNSpid:\t{ns}\nNStgid:\t{ns}\n")
    with open(os.path.join(d, "cgroup"), "w") as fh:
        fh.write(cgroup)


class ProcReader:
    """Reads process entries under a proc root."""

    def __init__(self, root: str = "/proc"):
        self.root = root

    def _read(self, pid: int, name: str) -> str | None:
        try:
            with open(os.path.join(self.root, str(pid), name), "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return None

    def entry(self, pid: int) -> ProcEntry | None:
        status = self._read(pid, "status")
        if status is None:
            return None
        nspid = parse_nspid(status)
        if not nspid:
            return None
        cgroup = self._read(pid, "cgroup")
        if cgroup is None:
            return None
        return ProcEntry(pid, nspid, cgroup)

    def pids(self) -> list[int]:
        try:
            return [int(n) for n in os.listdir(self.root) if n.isdigit()]
        except OSError:
            return []

    def entries_ending_in(self, inner: set[int]) -> dict[int, list[ProcEntry]]:
        """One pass over the tree: innermost PID -> entries, for the PIDs asked about only."""
        out: dict[int, list[ProcEntry]] = {}
        for pid in self.pids():
            status = self._read(pid, "status")
            if status is None:
                continue
            nspid = parse_nspid(status)
            if not nspid or nspid[-1] not in inner:
                continue
            cgroup = self._read(pid, "cgroup")
            if cgroup is None:
                continue
            out.setdefault(nspid[-1], []).append(ProcEntry(pid, nspid, cgroup))
        return out


def pick(entries: Iterable[ProcEntry], want: Want) -> int | None:
    """The single entry that belongs to the wanted container; None when none or ambiguous."""
    found = [e.hostpid for e in entries if e.nspid[-1] == want.pid
             and cgroup_matches(e.cgroup, want.pod_uid, want.container_id)]
    return found[0] if len(found) == 1 else None


class HostPidResolver:
    """Resolves wanted slots to host PIDs, re-checking cached answers cheaply on every call.

    A cached answer is kept while `/proc/<hostpid>` still ends in the slot PID inside the same pod;
    the whole tree is walked only when some slot has no valid answer, and a slot that found no
    answer is not looked for again before `retry_after` seconds.
    """

    def __init__(self, proc_root: str = "/proc", *, retry_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.reader = ProcReader(proc_root)
        self.retry_after = retry_after
        self.clock = clock
        self._cache: dict[tuple[str, str, int], int] = {}
        self._failed: dict[tuple[str, str, int], float] = {}
        self.tree_walks = 0

    def resolve(self, wants: Iterable[Want]) -> dict[Want, int]:
        wants = list(dict.fromkeys(wants))
        out: dict[Want, int] = {}
        missing: list[Want] = []
        now = self.clock()
        for w in wants:
            key = (w.pod_uid, w.container, w.pid)
            failed_at = self._failed.get(key)
            if failed_at is not None and now - failed_at < self.retry_after:
                continue
            cached = self._cache.get(key)
            if cached is not None:
                e = self.reader.entry(cached)
                if e is not None and pick([e], w) == cached:
                    out[w] = cached
                    continue
                del self._cache[key]
            missing.append(w)
        if missing:
            self.tree_walks += 1
            index = self.reader.entries_ending_in({w.pid for w in missing})
            for w in missing:
                hp = pick(index.get(w.pid, ()), w)
                key = (w.pod_uid, w.container, w.pid)
                if hp is not None:
                    out[w] = hp
                    self._cache[key] = hp
                    self._failed.pop(key, None)
                else:
                    self._failed[key] = now
        live = {(w.pod_uid, w.container, w.pid) for w in wants}
        for store in (self._cache, self._failed):
            for key in [k for k in store if k not in live]:
                del store[key]
        return out
