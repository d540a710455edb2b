"""Scheduling policies: node order, GPU order, pod overrides and scoring weights (pure).

HAMi sources: `pkg/scheduler/policy/node_policy.go`, `pkg/scheduler/policy/gpu_policy.go`,
`pkg/util/util.go` (PolicyContains, GetGPUSchedulerPolicyByPod),
`pkg/util/device_scoring_weights.go`. Spec: scheduler.md §6.

Public functions
----------------
- `node_policy_for(annotations, default)` / `gpu_policy_for(annotations, default)`: the pod's
  `hami.io/node-scheduler-policy` / `hami.io/gpu-scheduler-policy` override when it names known
  policies, else the flag value; `ignored_policies(...)`: HAMi's warning texts for the others.
- `policy_contains(policy, name)`: HAMi's PolicyContains (comma list, members trimmed).
- `parse_scoring_weights(text)` -> ScoringWeights, raises PolicyError naming the field.
- `weights_for(annotations)`: the pod's `hami.io/device-scoring-weights` or the default weights.
- `f32(x)`: round a Python float to IEEE float32, as Go computes scores in float32.
- `device_sort_key(policy, numa_bind)`: a key function for Python's stable `list.sort` that
  reproduces Go's `sort.Sort(DeviceUsageList)`; items are `(score, device)` pairs where device
  has `.numa`, `.used` and `.index`. Go's sort is insertion sort (stable) up to 12 elements;
  for longer lists `sort_devices` runs `gosort.go_sort` (Go's pdqsort) so ties land where Go
  puts them; `go_sort` is re-exported here.
- `sort_devices(items, policy, numa_bind)`: sort a list of (score, device) pairs in place;
  `sorted_devices(items, policy, numa_bind)`: their devices in that order.

Fit walks the sorted list from its end, so the device that sorts last is tried first.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

from hami.device.codec import go_quote, go_trim_space
from hami.device.model import ScoringWeights
from hami.scheduler.placement.gosort import go_sort

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
F32_PACK, F32_UNPACK = _F32.pack, _F32.unpack
# Integers up to 2**24 are exact in float32: converting them rounds nothing.
F32_EXACT = 1 << 24


class PolicyError(ValueError):
    """A policy or weight annotation could not be read, in HAMi's words (ParseDeviceScoringWeights):
    `invalid hami.io/device-scoring-weights annotation "<text>": <problem>`."""

    def __init__(self, key: str, value: str, expected: str):
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"invalid {key} annotation {go_quote(value)}: {expected}")


def f32(x: float) -> float:
    """Round to the nearest IEEE-754 float32 (what Go's float32 arithmetic stores)."""
    return F32_UNPACK(F32_PACK(x))[0]


# --------------------------------------------------------------------------- overrides

_NODE_POLICIES = frozenset({BINPACK, SPREAD})
_GPU_POLICIES = frozenset({BINPACK, SPREAD, NUMA, MUTEX, TOPOLOGY})


def valid_node_policy(value: str) -> bool:
    """IsValidNodeSchedulerPolicy: one name, surrounding space ignored."""
    return go_trim_space(value) in _NODE_POLICIES


def valid_gpu_policy(value: str) -> bool:
    """IsValidGPUSchedulerPolicy: a name or a comma chain of them, each member trimmed."""
    return all(go_trim_space(p) in _GPU_POLICIES for p in value.split(","))


def node_policy_for(annotations: Mapping[str, str] | None, default: str) -> str:
    """resolveNodeSchedulerPolicy: the pod's `hami.io/node-scheduler-policy` (trimmed) when it names a
    policy, else the configured one (see `ignored_policies` for HAMi's warning)."""
    if annotations:
        value = annotations.get(NODE_POLICY_ANNOTATION)
        if value is not None and valid_node_policy(value):
            return go_trim_space(value)
    return default


def gpu_policy_for(annotations: Mapping[str, str] | None, default: str) -> str:
    """GetGPUSchedulerPolicyByPod: the pod's `hami.io/gpu-scheduler-policy` (as written, may be a
    comma chain) when every member names a policy, else the configured one."""
    if annotations:
        value = annotations.get(GPU_POLICY_ANNOTATION)
        if value is not None and valid_gpu_policy(value):
            return value
    return default


def ignored_policies(annotations: Mapping[str, str] | None, namespace: str, name: str,
                     node_default: str, gpu_default: str) -> list[str]:
    """HAMi's warnings for policy annotations it ignores, byte for byte:
    `ignoring unrecognized hami.io/gpu-scheduler-policy="binpakc" on pod ns/p, using configured policy "spread"`."""
    out = []
    for key, valid, default in ((GPU_POLICY_ANNOTATION, valid_gpu_policy, gpu_default),
                                (NODE_POLICY_ANNOTATION, valid_node_policy, node_default)):
        value = (annotations or {}).get(key)
        if value is not None and not valid(value):
            out.append(f"ignoring unrecognized {key}={go_quote(value)} on pod {namespace}/{name}, "
                       f"using configured policy {go_quote(default)}")
    return out


def policy_contains(policy: str, name: str) -> bool:
    """HAMi PolicyContains: split on `,`, strings.TrimSpace each member, compare exactly."""
    return any(go_trim_space(p) == name for p in policy.split(","))


_GO_INT = re.compile(r"[+-]?[0-9]+")


def parse_scoring_weights(text: str) -> ScoringWeights:
    """ParseDeviceScoringWeights (pkg/util/device_scoring_weights.go): exactly three `key=value`
    entries, each of slot/core/memory once, integers >= 0, not all zero. Texts are HAMi's."""
    key = SCORING_WEIGHTS_ANNOTATION
    parts = text.split(",")
    if len(parts) != 3:
        raise PolicyError(key, text, "expected slot, core, and memory weights")
    values: dict[str, int] = {}
    for part in parts:
        name, sep, raw = go_trim_space(part).partition("=")
        if not sep:
            raise PolicyError(key, text, "expected key=value entries")
        name = go_trim_space(name)
        if name in values:
            raise PolicyError(key, text, f"duplicate {go_quote(name)} weight")
        raw = go_trim_space(raw)
        if not _GO_INT.fullmatch(raw) or not -(2 ** 63) <= int(raw) < 2 ** 63:  # strconv.ParseInt(s, 10, 64)
            raise PolicyError(key, text, f"{go_quote(name)} weight must be an integer")
        n = int(raw)
        if n < 0:
            raise PolicyError(key, text, f"{go_quote(name)} weight must not be negative")
        if name not in ("slot", "core", "memory"):
            raise PolicyError(key, text, f"unknown weight {go_quote(name)}")
        values[name] = n
    if not any(values.values()):
        raise PolicyError(key, text, "at least one weight must be positive")
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
        name = go_trim_space(part)  # the same trimming as policy_contains (HAMi: strings.TrimSpace)
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
    p = go_trim_space(policy)
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


def sorted_devices(items: list, policy: str, numa_bind: bool) -> list:
    """The devices of (score, device) pairs in `sort_devices`' order. For the plain binpack and
    spread policies on a node of up to 12 devices each pair is sorted as a tuple of its key,
    (score or -score, numa, position): the same order as list.sort by `device_sort_key`, which
    is stable, without a key call per device."""
    if len(items) <= 12 and not numa_bind and (policy == SPREAD or policy == BINPACK):
        if policy == BINPACK:
            keyed = [(s, d.numa, i, d) for i, (s, d) in enumerate(items)]
        else:
            keyed = [(-s, d.numa, i, d) for i, (s, d) in enumerate(items)]
        keyed.sort()
        return [k[3] for k in keyed]
    sort_devices(items, policy, numa_bind)
    return [d for _, d in items]


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
    a, b, c = req + dev.used, core + dev.usedcores, mem + dev.usedmem
    if -F32_EXACT <= a <= F32_EXACT and -F32_EXACT <= b <= F32_EXACT and -F32_EXACT <= c <= F32_EXACT \
            and -F32_EXACT <= count <= F32_EXACT and -F32_EXACT <= tcore <= F32_EXACT \
            and -F32_EXACT <= tmem <= F32_EXACT:
        # float32(x) == x for these, and int / int is the correctly rounded quotient, as the
        # float division of the exact operands is: one rounding to float32 per ratio, as Go.
        us = F32_UNPACK(F32_PACK(a / count))[0]
        cs = F32_UNPACK(F32_PACK(b / tcore))[0]
        ms = F32_UNPACK(F32_PACK(c / tmem))[0]
    else:
        us = f32(f32(a) / f32(count))
        cs = f32(f32(b) / f32(tcore))
        ms = f32(f32(c) / f32(tmem))
    if weights.slot == 1 and weights.core == 1 and weights.memory == 1:
        return f32(_TEN * f32(f32(us + cs) + ms))
    a = f32(f32(weights.slot) * us)
    b = f32(f32(weights.core) * cs)
    c = f32(f32(weights.memory) * ms)
    return f32(_TEN * f32(f32(a + b) + c))
