"""The DRA plugin's record of prepared claims, kept on disk so a restart answers kubelet right.

`<plugin-dir>/checkpoint.json` maps claim UID -> {state, namespace, name, devices}. A prepare writes
the claim's CDI spec first and its `prepared` record second; unprepare removes the spec first and
the record second. Every write is atomic (hami.dra.cdi.write_atomic), so after a kill at any point
each file is the old or the new one, and `recover` on start makes the CDI directory agree with the
checkpoint (which it creates when absent, so a kill during the very first prepare is covered too):

* a spec of this driver that no record names (killed between the spec and the record), and every
  temporary (killed while writing the spec), is removed: kubelet's retry prepares the claim afresh
  and nothing leaks;
* a record not `prepared` (a kill while a MIG partition was being made for it) is dropped
  with its spec;
* a `prepared` record whose spec is gone (a reboot empties /var/run/cdi) is dropped: it holds no
  capacity until kubelet prepares it again;
* the records dropped here are kept in `dropped` (uid -> Entry) until the plugin has destroyed the
  MIG instances they name (hami.dra.plugin: a kill between creating a partition and recording
  the claim prepared leaves an instance only the `preparing` record knows);
* a checkpoint that does not parse is moved aside (`checkpoint.json.corrupt`) and no spec is
  removed at that start, since what they belong to is unknown; the same holds for specs found when
  there was no checkpoint at all (a wiped plugin dir). Such specs are removed at the next start
  unless a prepare recorded them by then.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from hami.dra import cdi
from hami.obs.log import get_logger

log = get_logger(__name__)

FILE = "checkpoint.json"
VERSION = 1
PREPARING, PREPARED = "preparing", "prepared"


@dataclass
class Entry:
    state: str
    namespace: str
    name: str
    devices: list[dict] = field(default_factory=list)  # {requests, pool, device, cdi, uuid, room, MIG instance}

    def as_dict(self) -> dict:
        return {"state": self.state, "namespace": self.namespace, "name": self.name, "devices": self.devices}


class Checkpoint:
    def __init__(self, plugin_dir: str, cdi_root: str, driver: str):
        self.path = os.path.join(plugin_dir, FILE)
        self.cdi_root = cdi_root
        self.driver = driver
        self.claims: dict[str, Entry] = {}
        self.dropped: dict[str, Entry] = {}

    def load(self) -> bool:
        """Read the file; False when it was absent or unreadable (then nothing is known)."""
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read())
            if not isinstance(data, Mapping) or data.get("version") != VERSION:
                version = data.get("version") if isinstance(data, Mapping) else data
                raise ValueError(f"unknown checkpoint version {version!r}")
            claims = data.get("claims") or {}
            self.claims = {uid: Entry(e["state"], e["namespace"], e["name"], list(e.get("devices") or []))
                           for uid, e in claims.items()}
            return True
        except FileNotFoundError:
            self.claims = {}
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path + ".corrupt"
            log.error("DRA checkpoint unreadable: moved aside, prepared claims forgotten",
                      path=self.path, moved_to=aside, error=str(exc)[:200])
            os.replace(self.path, aside)
            self.claims = {}
            return False

    def save(self) -> None:
        # No fsync: a killed plugin loses nothing the page cache holds. After a power loss kubelet
        # prepares every claim again, and `recover` drops records whose spec is gone, so an old or
        # unreadable checkpoint costs a re-prepare, never a wrong answer (an fsync here cost 1-20 ms).
        data = {"version": VERSION, "claims": {uid: e.as_dict() for uid, e in sorted(self.claims.items())}}
        cdi.write_atomic(self.path, json.dumps(data, separators=(",", ":")).encode())

    def put(self, uid: str, entry: Entry) -> None:
        self.claims[uid] = entry
        self.save()

    def drop(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self.save()

    def recover(self) -> list[str]:
        """Load, then clean the CDI directory as the module docstring says. Returns what was removed."""
        known = self.load()
        removed: list[str] = []
        files = cdi.claim_files(self.cdi_root, self.driver)
        specs = {uid for uid, name in files if not cdi.is_temporary(name)}
        for uid in [u for u, e in self.claims.items() if e.state != PREPARED or u not in specs]:
            # half-prepared, or prepared but its spec is gone (a reboot emptied /var/run/cdi): kubelet
            # prepares it again; until then it holds no capacity
            cdi.remove_spec(self.cdi_root, self.driver, uid)
            self.dropped[uid] = self.claims.pop(uid)
            removed.append(uid)
        for uid, name in files:
            if cdi.is_temporary(name) or (known and uid not in self.claims):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.cdi_root, name))
                    removed.append(name)
        if removed or not known:
            self.save()
        if removed:
            log.info("DRA checkpoint recovered: removed half-prepared claims and stray CDI files",
                     removed=",".join(removed)[:500])
        return removed
