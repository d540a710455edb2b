"""Who last held each node's lock, from the node watch: when /bind's re-check may trust the pod cache.

/bind writes a pod's placement only in its Binding (bind.py), so under the node lock the binder
cannot wait for a write of its own to come back on the pod watch. What it must know before the
re-check is that the pod cache holds every placement committed on the node before its lock:
each of those was bound while its binder held the lock, and the lock was released after the
binding (by the device plugin at Allocate, or by a failed bind that wrote nothing). So it is
enough that the cache shows the last holder's pod placed on the node (the watch delivers in
resourceVersion order: everything before that binding is there too), or that the pod watch has
passed the resourceVersion at which the lock was released.

`LockHistory.on_node` is a node informer handler; `basis(node)` answers (last holder "ns/name" or
"", the resourceVersion after which the cache may be trusted). Nodes never seen locked since the
watch started answer the resourceVersion at which they were first seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami.device import codec

LOCK_KEY = codec.NODE_LOCK_ANNOTATION


@dataclass(frozen=True, slots=True)
class Basis:
    holder: str  # "ns/name" of the pod that held the lock last ("" = none seen, or a legacy lock)
    rv: str  # the node's resourceVersion once that lock was gone (or when the node was first seen)


def _lock_holder(node: dict | None) -> str | None:
    """"ns/name" of the lock's owner, "" for a lock without one (legacy, unreadable), None if unlocked."""
    value = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(LOCK_KEY)
    if not value:
        return None
    try:
        lock = codec.decode_node_lock(value)
    except codec.CodecError:
        return ""
    return "" if lock.legacy else f"{lock.namespace}/{lock.name}"


class LockHistory:
    def __init__(self) -> None:
        self._basis: dict[str, Basis] = {}

    def on_node(self, etype: str, old: dict | None, new: dict | None) -> None:
        meta = (new or old or {}).get("metadata") or {}
        name = meta.get("name", "")
        if new is None or etype == "DELETED":
            self._basis.pop(name, None)
            return
        rv = (new.get("metadata") or {}).get("resourceVersion", "")
        before = _lock_holder(old) if old is not None else None
        now = _lock_holder(new)
        if name not in self._basis:
            self._basis[name] = Basis("", rv)
        if before is not None and before != now:
            self._basis[name] = Basis(before, rv)  # that holder's lock went away at this version

    def basis(self, node: str) -> Basis | None:
        return self._basis.get(node)
