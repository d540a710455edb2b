"""Scheduling policies: node order, GPU order, pod overrides and scoring weights (pure).

HAMi sources: `pkg/scheduler/policy/node_policy.go`, `pkg/scheduler/policy/gpu_policy.go`,
`pkg/util/util.go` (PolicyContains, GetGPUSchedulerPolicyByPod),
`pkg/util/device_scoring_weights.go`. Spec: scheduler.md §6.

Public functions
----------------
- `node_policy_for(annotations, default)` / `gpu_policy_for(annotations, default)`: the pod's
  `hami.io/node-scheduler-policy` / `hami.io/gpu-scheduler-policy` override, else the flag value.
- `policy_contains(policy, name)`: HAMi's PolicyContains (comma list, members trimmed).
- `parse_scoring_weights(text)` -> ScoringWeights, raises PolicyError naming the field.
- `weights_for(annotations)`: the pod's `hami.io/device-scoring-weights` or the default weights.
- `f32(x)`: round a Python float to IEEE float32, as Go computes scores in float32.
- `device_sort_key(policy, numa_bind)`: a key function for Python's stable `list.sort` that
  reproduces Go's `sort.Sort(DeviceUsageList)`; items are `(score, device)` pairs where device
  has `.numa`, `.used` and `.index`. Go's sort is insertion sort (stable) up to 12 elements;
  for longer lists `sort_devices` runs a port of Go's pdqsort so ties land where Go puts them.
- `sort_devices(items, policy, numa_bind)`: sort a list of (score, device) pairs in place.

Fit walks the sorted list from its end, so the device that sorts last is tried first.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from hami.device.model import ScoringWeights

NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS_ANNOTATION = "hami.io/device-scoring-weights"

BINPACK = "binpack"
SPREAD = "spread"
NUMA = "numa"
MUTEX = "mutex"
TOPOLOGY = "topology-aware"

DEFAULT_WEIGHTS = ScoringWeights()

_F32 = struct.Struct("f")


class PolicyError(ValueError):
    """A policy or weight annotation could not be read: names the key and the text."""

    def __init__(self, key: str, value: str, expected: str):
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"invalid {key} {value!r}: {expected}")


def f32(x: float) -> float:
    """Round to the nearest IEEE-754 float32 (what Go's float32 arithmetic stores)."""
    return _F32.unpack(_F32.pack(x))[0]


# --------------------------------------------------------------------------- overrides

def node_policy_for(annotations: Mapping[str, str] | None, default: str) -> str:
    """Pod annotation `hami.io/node-scheduler-policy`, else the configured policy."""
    if annotations:
        value = annotations.get(NODE_POLICY_ANNOTATION)
        if value is not None:
            return value
    return default


def gpu_policy_for(annotations: Mapping[str, str] | None, default: str) -> str:
    """Pod annotation `hami.io/gpu-scheduler-policy` (may be a comma chain), else the default."""
    if annotations:
        value = annotations.get(GPU_POLICY_ANNOTATION)
        if value is not None:
            return value
    return default


def policy_contains(policy: str, name: str) -> bool:
    """HAMi PolicyContains: split on `,`, trim each member, compare exactly."""
    if "," not in policy:
        return policy.strip() == name
    return any(p.strip() == name for p in policy.split(","))


def parse_scoring_weights(text: str) -> ScoringWeights:
    """`slot=1,core=1,memory=3`: all three keys, integers >= 0, not all zero."""
    key = SCORING_WEIGHTS_ANNOTATION
    values: dict[str, int] = {}
    for part in text.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or name not in ("slot", "core", "memory"):
            raise PolicyError(key, text, "expected slot=<int>,core=<int>,memory=<int>")
        if name in values:
            raise PolicyError(key, text, f"duplicate key {name}")
        raw = raw.strip()
        try:
            n = int(raw, 10)
        except ValueError:
            raise PolicyError(key, text, f"{name} must be an integer, got {raw!r}") from None
        if n < 0:
            raise PolicyError(key, text, f"{name} must be >= 0, got {n}")
        values[name] = n
    missing = [k for k in ("slot", "core", "memory") if k not in values]
    if missing:
        raise PolicyError(key, text, "missing " + ", ".join(missing))
    if not any(values.values()):
        raise PolicyError(key, text, "at least one weight must be > 0")
    return ScoringWeights(values["slot"], values["core"], values["memory"])


def weights_for(annotations: Mapping[str, str] | None) -> ScoringWeights:
    """The pod's scoring weights; raises PolicyError for a malformed annotation."""
    if annotations:
        text = annotations.get(SCORING_WEIGHTS_ANNOTATION)
        if text is not None:
            return parse_scoring_weights(text)
    return DEFAULT_WEIGHTS


def parse_bool(text: str | None) -> bool:
    """Go strconv.ParseBool, false on any parse error."""
    return text in ("1", "t", "T", "TRUE", "true", "True")


# --------------------------------------------------------------------------- node order

def node_order_descending(policy: str) -> bool:
    """True when the most used node is preferred (binpack; anything but `spread`).

    HAMi sorts ascending for binpack and takes the last element, i.e. the highest score;
    spread sorts descending and takes the last, i.e. the lowest.
    """
    return policy != SPREAD


# --------------------------------------------------------------------------- device order

_CHAIN_KEYS = (BINPACK, SPREAD, NUMA)


def gpu_sort_chain(policy: str) -> tuple[str, ...]:
    """Sort keys named in a comma chain, in written order, deduplicated (gpuSortKeyChain)."""
    seen: list[str] = []
    for part in policy.split(","):
        name = part.strip()
        if name in _CHAIN_KEYS and name not in seen:
            seen.append(name)
    return tuple(seen)


def _chain_for(policy: str, numa_bind: bool) -> tuple[str, ...]:
    chain = gpu_sort_chain(policy) or (SPREAD,)
    if numa_bind and chain[0] != NUMA:
        chain = (NUMA,) + tuple(k for k in chain if k != NUMA)
    return chain


def device_sort_key(policy: str, numa_bind: bool) -> Callable[[tuple[float, Any]], tuple]:
    """Key for (score, device) pairs so that ascending order equals Go's Less order."""
    p = policy.strip()
    if "," in p or p == NUMA:
        chain = _chain_for(p, numa_bind)
        parts = []
        for k in chain:
            if k == BINPACK:
                parts.append(lambda s, d: s)
            elif k == SPREAD:
                parts.append(lambda s, d: -s)
            else:
                parts.append(lambda s, d: d.numa)
        if chain == (SPREAD,):
            return lambda it: (-it[0], it[1].index)
        if chain == (BINPACK,):
            return lambda it: (it[0], it[1].index)
        if chain == (NUMA, SPREAD):
            return lambda it: (it[1].numa, -it[0], it[1].index)
        if chain == (NUMA, BINPACK):
            return lambda it: (it[1].numa, it[0], it[1].index)
        return lambda it: tuple(f(it[0], it[1]) for f in parts) + (it[1].index,)
    if p == MUTEX:
        return lambda it: (-it[1].used, it[1].numa)
    binpack = p == BINPACK
    if numa_bind:
        if binpack:
            return lambda it: (-it[1].numa, it[0])
        return lambda it: (it[1].numa, -it[0])
    if binpack:
        return lambda it: (it[0], it[1].numa)
    return lambda it: (-it[0], it[1].numa)


def sort_devices(items: list, policy: str, numa_bind: bool) -> None:
    """Sort (score, device) pairs in place exactly as Go's sort.Sort(DeviceUsageList) would."""
    key = device_sort_key(policy, numa_bind)
    if len(items) <= 12:
        # Go's pdqsort uses insertion sort for n <= 12: stable, same as list.sort.
        items.sort(key=key)
        return
    keys = [key(it) for it in items]
    order = list(range(len(items)))
    go_sort(order, lambda i, j: keys[order[i]] < keys[order[j]])
    items[:] = [items[i] for i in order]


# --------------------------------------------------------------------------- Go's pdqsort

def go_sort(data: list, less: Callable[[int, int], bool]) -> None:
    """Port of Go's sort.Sort (pdqsort, Go >= 1.19) over `data` with `less(i, j)` on indices.

    Swaps happen on `data`; `less` must read the current positions of `data`.
    """
    n = len(data)
    if n <= 1:
        return
    limit = n.bit_length()
    _pdqsort(data, less, 0, n, limit)


def _swap(data: list, i: int, j: int) -> None:
    data[i], data[j] = data[j], data[i]


def _insertion_sort(data, less, a, b):
    for i in range(a + 1, b):
        j = i
        while j > a and less(j, j - 1):
            _swap(data, j, j - 1)
            j -= 1


def _sift_down(data, less, lo, hi, first):
    root = lo
    while True:
        child = 2 * root + 1
        if child >= hi:
            return
        if child + 1 < hi and less(first + child, first + child + 1):
            child += 1
        if not less(first + root, first + child):
            return
        _swap(data, first + root, first + child)
        root = child


def _heap_sort(data, less, a, b):
    first = a
    lo = 0
    hi = b - a
    for i in range((hi - 1) // 2, -1, -1):
        _sift_down(data, less, i, hi, first)
    for i in range(hi - 1, -1, -1):
        _swap(data, first, first + i)
        _sift_down(data, less, lo, i, first)


_U64 = (1 << 64) - 1


def _pdqsort(data, less, a, b, limit):
    max_insertion = 12
    was_balanced = True
    was_partitioned = True
    while True:
        length = b - a
        if length <= max_insertion:
            _insertion_sort(data, less, a, b)
            return
        if limit == 0:
            _heap_sort(data, less, a, b)
            return
        if not was_balanced:
            _break_patterns(data, a, b)
            limit -= 1
        pivot, hint = _choose_pivot(data, less, a, b)
        if hint == _DECREASING:
            _reverse_range(data, a, b)
            pivot = (b - 1) - (pivot - a)
            hint = _INCREASING
        if was_balanced and was_partitioned and hint == _INCREASING:
            if _partial_insertion_sort(data, less, a, b):
                return
        if a > 0 and not less(a - 1, pivot):
            mid = _partition_equal(data, less, a, b, pivot)
            a = mid
            continue
        mid, already = _partition(data, less, a, b, pivot)
        was_partitioned = already
        left_len, right_len = mid - a, b - mid
        balance_threshold = length // 8
        if left_len < right_len:
            was_balanced = left_len >= balance_threshold
            _pdqsort(data, less, a, mid, limit)
            a = mid + 1
        else:
            was_balanced = right_len >= balance_threshold
            _pdqsort(data, less, mid + 1, b, limit)
            b = mid


def _partition(data, less, a, b, pivot):
    _swap(data, a, pivot)
    i, j = a + 1, b - 1
    while i <= j and less(i, a):
        i += 1
    while i <= j and not less(j, a):
        j -= 1
    if i > j:
        _swap(data, j, a)
        return j, True
    _swap(data, i, j)
    i += 1
    j -= 1
    while True:
        while i <= j and less(i, a):
            i += 1
        while i <= j and not less(j, a):
            j -= 1
        if i > j:
            break
        _swap(data, i, j)
        i += 1
        j -= 1
    _swap(data, j, a)
    return j, False


def _partition_equal(data, less, a, b, pivot):
    _swap(data, a, pivot)
    i, j = a + 1, b - 1
    while True:
        while i <= j and not less(a, i):
            i += 1
        while i <= j and less(a, j):
            j -= 1
        if i > j:
            break
        _swap(data, i, j)
        i += 1
        j -= 1
    return i


def _partial_insertion_sort(data, less, a, b):
    max_steps = 5
    shortest_shifting = 50
    i = a + 1
    for _ in range(max_steps):
        while i < b and not less(i, i - 1):
            i += 1
        if i == b:
            return True
        if b - a < shortest_shifting:
            return False
        _swap(data, i, i - 1)
        if i - a >= 2:
            j = i - 1
            while j >= 1:
                if not less(j, j - 1):
                    break
                _swap(data, j, j - 1)
                j -= 1
        if b - i >= 2:
            j = i + 1
            while j < b:
                if not less(j, j - 1):
                    break
                _swap(data, j, j - 1)
                j += 1
    return False


def _break_patterns(data, a, b):
    length = b - a
    if length >= 8:
        random = length & _U64
        modulus = 1 << length.bit_length()  # nextPowerOfTwo
        start = a + (length // 4) * 2 - 1
        for idx in range(start, start + 3):
            random ^= (random << 13) & _U64
            random ^= random >> 17
            random ^= (random << 5) & _U64
            other = random & (modulus - 1)
            if other >= length:
                other -= length
            _swap(data, idx, a + other)


_UNKNOWN, _INCREASING, _DECREASING = 0, 1, 2


def _choose_pivot(data, less, a, b):
    shortest_ninther = 50
    max_swaps = 4 * 3
    length = b - a
    swaps = [0]
    i = a + length // 4 * 1
    j = a + length // 4 * 2
    k = a + length // 4 * 3
    if length >= 8:
        if length >= shortest_ninther:
            i = _median_adjacent(data, less, i, swaps)
            j = _median_adjacent(data, less, j, swaps)
            k = _median_adjacent(data, less, k, swaps)
        j = _median(data, less, i, j, k, swaps)
    if swaps[0] == 0:
        return j, _INCREASING
    if swaps[0] == max_swaps:
        return j, _DECREASING
    return j, _UNKNOWN


def _order2(data, less, a, b, swaps):
    if less(b, a):
        swaps[0] += 1
        return b, a
    return a, b


def _median(data, less, a, b, c, swaps):
    a, b = _order2(data, less, a, b, swaps)
    b, c = _order2(data, less, b, c, swaps)
    a, b = _order2(data, less, a, b, swaps)
    return b


def _median_adjacent(data, less, a, swaps):
    return _median(data, less, a - 1, a, a + 1, swaps)


def _reverse_range(data, a, b):
    i, j = a, b - 1
    while i < j:
        _swap(data, i, j)
        i += 1
        j -= 1


# --------------------------------------------------------------------------- device score

_TEN = f32(10.0)


def device_score(dev: Any, requests: Any, weights: ScoringWeights = DEFAULT_WEIGHTS) -> float:
    """HAMi DeviceListsScore.ComputeScore (§6.2), float32.

    `dev` has count/totalcore/totalmem/used/usedcores/usedmem/type; `requests` is an iterable of
    ContainerDeviceRequest. Only requests whose `type` equals the device type exactly count, so
    for registered NVIDIA cards (type = model name) the score is the current utilisation.
    """
    count, tcore, tmem = dev.count, dev.totalcore, dev.totalmem
    if count == 0 or tcore == 0 or tmem == 0:
        return 0.0
    req = core = mem = 0
    dtype = dev.type
    for r in requests:
        if r.type != dtype:
            continue
        req += 1
        core += r.coresreq
        pct = r.mempercentagereq
        if pct != 0 and pct != 101:
            mem += tmem * pct // 100 if tmem * pct >= 0 else -((-tmem * pct) // 100)
        else:
            mem += r.memreq
    us = f32(f32(req + dev.used) / f32(count))
    cs = f32(f32(core + dev.usedcores) / f32(tcore))
    ms = f32(f32(mem + dev.usedmem) / f32(tmem))
    if weights.slot == 1 and weights.core == 1 and weights.memory == 1:
        return f32(_TEN * f32(f32(us + cs) + ms))
    a = f32(f32(weights.slot) * us)
    b = f32(f32(weights.core) * cs)
    c = f32(f32(weights.memory) * ms)
    return f32(_TEN * f32(f32(a + b) + c))
