"""Memos of what /filter derives from a pod's spec alone (pure, no I/O).

A burst is mostly pods of one template: a Job's or a Deployment's pods carry the same containers'
resources and the same annotations, and /filter parsed both again for each pod (8 us of requests
and 8 us of fit options in a 78 us decision, as profiled). Here each is worked out once per
distinct input and looked up after that:

- `RequestMemo(compute)`: `compute(pod)` (HAMi's Resourcereqs over the vendor table) keyed by the
  exact JSON bytes of every container's `resources`, init containers first. Those bytes are all the
  requests depend on (hami.device.request reads nothing else of a container), so two pods with
  equal bytes get equal requests. A pod whose requests cannot be read (ValueError) is not kept: it
  raises each time, as before.
- `ShapeMemo`: any value under a key the caller builds from everything the value depends on
  (extender: the requests, init container count, annotations' bytes, namespace and policies, and
  only while no quota limits the namespace, since quota usage changes with every placement).

Both hold at most `size` entries and start over when full: a tenant creating pods of ever new
shapes costs each of them the parse it cost before, and no memory beyond the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import orjson

from hami.device.request import pod_containers

MEMO_SIZE = 512


class ShapeMemo:
    __slots__ = ("_items", "size", "hits", "misses")

    def __init__(self, size: int = MEMO_SIZE):
        self._items: dict[Hashable, Any] = {}
        self.size = size
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        value = self._items.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[key] = value

    def __len__(self) -> int:
        return len(self._items)


def resources_key(pod: dict) -> bytes | None:
    """The bytes every container's `resources` encode to, init containers first; None when they
    cannot be encoded (nested deeper than orjson writes: a hostile body, worked out unmemoized)."""
    try:
        return orjson.dumps([c.get("resources") for c in pod_containers(pod)])
    except orjson.JSONEncodeError:
        return None


class RequestMemo:
    """`compute(pod)` memoized by `resources_key(pod)` (module docstring)."""

    __slots__ = ("compute", "memo")

    def __init__(self, compute: Callable[[dict], tuple], size: int = MEMO_SIZE):
        self.compute = compute
        self.memo = ShapeMemo(size)

    def __call__(self, pod: dict) -> tuple:
        key = resources_key(pod)
        if key is None:
            return self.compute(pod)
        out = self.memo.get(key)
        if out is None:
            out = self.compute(pod)
            self.memo.put(key, out)
        return out
