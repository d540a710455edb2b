"""Rules of single vendors that HAMi's common vendor Fit does not have (pure, no I/O).

`fit.fit_vendor_devices` walks a vendor's devices as every HAMi vendor package does; the few
places where one vendor's package differs are here, as plain functions over values:

* Ascend vNPU modes (pkg/device/ascend, HAMi v2.10): a pod annotated `huawei.com/vnpu-mode:
  hami-core` (HAMi-core soft partitioning) only fits a node that runs it (the node annotation
  `hami-vnpu-core: "true"`, else the chip's `hamiVnpuCore` default); `template` (hard vNPU
  templates) only a node that does not. Either way the node is refused as a whole, `ModeNotFit`.
  In hami-core mode every card counts 100 cores whatever it registered.
* Ascend 910C super-pod pairing (`superPod` / `modulePairs`): a physical module is two NPUs
  (indexes 2k and 2k+1); several NPUs are taken as whole modules only, fuller modules first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

VNPU_MODE = "huawei.com/vnpu-mode"
VNPU_HAMI_CORE = "hami-core"
VNPU_TEMPLATE = "template"
NODE_VNPU_CORE = "hami-vnpu-core"  # node annotation: "true" when the node runs HAMi-core for Ascend
MODULE_NPUS = 2  # NPUs per Ascend 910C module

T = TypeVar("T")


def vnpu_mode(annotations: Mapping[str, str] | None) -> str:
    return (annotations or {}).get(VNPU_MODE, "")


def node_runs_hami_core(node_annotations: Mapping[str, str], default: bool) -> bool:
    """HAMi's nodeSupportHamiCore: the node's `hami-vnpu-core` annotation when present, else the
    chip's global `hamiVnpuCore`."""
    value = node_annotations.get(NODE_VNPU_CORE)
    return default if value is None else value == "true"


def mode_refuses_node(mode: str, node_hami_core: bool) -> bool:
    """Ascend Fit's node gate: hami-core wants a HAMi-core node, template wants any other."""
    return (mode == VNPU_HAMI_CORE and not node_hami_core) or (mode == VNPU_TEMPLATE and node_hami_core)


def whole_modules(candidates: Sequence[T], index_of, want: int) -> list[T]:
    """computeBestCombination910C: group the fitting NPUs by module (index // 2), take whole
    modules (both NPUs fit) in the order the walk met them until `want` NPUs are covered. The
    caller refuses the node when the result is not exactly `want` long (a partial module is never
    handed out, and an odd `want` can only be met in hami-core split mode, where no pairing runs)."""
    modules: dict[int, list[T]] = {}
    for c in candidates:
        modules.setdefault(index_of(c) // MODULE_NPUS, []).append(c)
    out: list[T] = []
    left = want
    for members in modules.values():
        if left <= 0:
            break
        if len(members) == MODULE_NPUS:
            out.extend(members)
            left -= MODULE_NPUS
    return out


# --------------------------------------------------------------------------- AWS Neuron

# HAMi's reason keys (pkg/device/common) the Neuron fit gives; fit.py names the same strings.
_NOT_HEALTH = "CardNotHealth"
_TYPE_MISMATCH = "CardTypeMismatch"
_UUID_MISMATCH = "CardUuidMismatch"
_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
_EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"
_INSUFFICIENT_CORE = "CardInsufficientCore"
_NUMA_NOT_FIT = "NumaNotFit"
NEURON_GROUP_SIZES = (1, 4, 8, 16)  # devices a non-ring node hands out together, aligned
RING = "ring"  # mode of the devices of an Inferentia node (codec.awsneuron)


def _free_bits(used: int, want: int, width: int) -> int:
    """addCoreUsage: the lowest `want` bits of `width` that `used` leaves free."""
    got = 0
    for bit in range(width):
        if want <= 0:
            break
        if not used & (1 << bit):
            got |= 1 << bit
            want -= 1
    return got


def neuron_group(devices: Sequence, count: int) -> list:
    """graphSelect: `count` free, healthy devices next to each other by index; on a ring
    (Inferentia) any run, elsewhere only runs of 1, 4, 8 or 16 starting at a multiple of the size."""
    ordered = sorted(devices, key=lambda d: d.index)
    if not ordered:
        return []
    ring = ordered[0].mode == RING
    if not ring and count not in NEURON_GROUP_SIZES:
        return []
    step = 1 if ring else count
    for start in range(0, len(ordered) - count + 1, step):
        window = ordered[start:start + count]
        if all(d.used == 0 and d.health for d in window):
            return window
    return []


def fit_neuron(devices: Sequence, request, vendor, use_uuids, nouse_uuids, is_mutex: bool, make):
    """AWS Neuron's Fit (pkg/device/awsneuron): several devices as one group (NumaNotFit when no
    group is free, every device whole); one device walked from the end with its cores as mask
    bits (`popcount(total) - popcount(used) >= cores asked`). `make(dev, usedmem, usedcores)`
    builds the ContainerDevice. Returns (fits, devices, reason counts). A container's usedcores
    are the bits it takes (HAMi writes the device's whole mask after it, which its own usage sum
    then counts twice for a second container on a device)."""
    if request.nums > 1:
        group = neuron_group(devices, request.nums)
        if not group:
            return False, [], {_NUMA_NOT_FIT: 1}
        return True, [make(d, d.totalmem, d.totalcore) for d in group], {}
    reason: dict[str, int] = {}
    for dev in reversed(devices):
        if not dev.health:
            key = _NOT_HEALTH
        elif request.type not in dev.type or request.type != vendor.name:
            key = _TYPE_MISMATCH
        elif (use_uuids is not None and dev.id not in use_uuids) or (
                nouse_uuids is not None and dev.id in nouse_uuids):
            key = _UUID_MISMATCH
        elif dev.count <= dev.used:
            key = _SLICING_EXHAUSTED
        elif is_mutex and dev.used > 0:
            key = _EXCLUSIVE_CONFLICT
        elif dev.totalcore.bit_count() - (dev.usedcores & dev.totalcore).bit_count() < request.coresreq:
            key = _INSUFFICIENT_CORE
        else:
            bits = _free_bits(dev.usedcores, request.coresreq, dev.totalcore.bit_length())
            return True, [make(dev, 0, bits)], {}
        reason[key] = reason.get(key, 0) + 1
    return False, [], reason
