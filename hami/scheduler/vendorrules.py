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
