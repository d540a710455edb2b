"""Every text the scheduler hands to people (pure, no I/O): the reasons of FailedNodes and the
Kubernetes Events built from them.

HAMi sources: `pkg/device/common/common.go` (reason keys, `GenReason`, `ParseReason`),
`pkg/scheduler/event.go` and `pkg/scheduler/scheduler.go` (event texts). Spec: scheduler.md §5.

- Reason keys (`CARD_INSUFFICIENT_MEMORY`, ...), `gen_reason(counts, cards)`, `parse_reason(text)`.
- Event reasons `FILTERING_FAILED`, `FILTERING_SUCCEED`, `BINDING_SUCCEED`, `BINDING_FAILED` and
  their texts: `filtering_failed_messages(failed_nodes)`, `no_available_node_message(n)`,
  `filtering_succeed_message(node, fit_scores, total)`, `binding_succeed_message(...)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# Reason keys (pkg/device/common/common.go).
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
NUMA_NOT_FIT = "NumaNotFit"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
NODE_UNFIT_POD = "NodeUnfitPod"
NODE_FIT_POD = "NodeFitPod"
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
MODE_NOT_FIT = "ModeNotFit"
DEVICE_TYPE_NOT_FOUND = "Device type not found"

# Event reasons (the `reason` field of the core/v1 Events the scheduler writes).
FILTERING_FAILED = "FilteringFailed"
FILTERING_SUCCEED = "FilteringSucceed"
BINDING_FAILED = "BindingFailed"
BINDING_SUCCEED = "BindingSucceed"


# --------------------------------------------------------------------------- reasons

def gen_reason(counts: Mapping[str, int], cards: int) -> str:
    """GenReason: `"%d/%d %s"` per key, sorted as strings, joined by `", "`."""
    return ", ".join(sorted(f"{n}/{cards} {k}" for k, n in counts.items()))


_REASON_ITEM = re.compile(r"^(\d+)/(\d+) ([A-Za-z][A-Za-z0-9_]*)$")


def parse_reason(text: str) -> dict[str, int]:
    """ParseReason: `{key: count}` for every `N/M Key` entry; other text yields nothing."""
    out: dict[str, int] = {}
    for part in text.split(", "):
        m = _REASON_ITEM.match(part.strip())
        if m:
            out[m.group(3)] = out.get(m.group(3), 0) + int(m.group(1))
    return out


# --------------------------------------------------------------------------- event texts

def filtering_failed_messages(failed_nodes: Mapping[str, str]) -> list[str]:
    """FilteringFailed texts, one per reason key: `2 nodes CardInsufficientMemory(node1,node2)`.

    Only `N/M Key` reasons produce one (bare ones like NodeInsufficientDevice do not).
    Ordered by reason key (HAMi's map order is random).
    """
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed_nodes.items():
        nodes = by_reason.get(reason)
        if nodes is None:
            by_reason[reason] = [node]
        else:
            nodes.append(node)
    by_key: dict[str, list[str]] = {}
    for reason, nodes in by_reason.items():  # nodes mostly share a handful of reasons
        for key in parse_reason(reason):
            by_key.setdefault(key, []).extend(nodes)
    return [
        f"{len(nodes)} nodes {key}({','.join(sorted(nodes))})"
        for key, nodes in sorted(by_key.items())
    ]


def no_available_node_message(node_count: int) -> str:
    return f"no available node, {node_count} nodes do not meet"


def filtering_succeed_message(node: str, fit_scores: Sequence[tuple[str, float]], total: int) -> str:
    """`find fit node(n1), 1 nodes not fit, 1 nodes fit(n1:15.00)`; `total` = candidate count."""
    fits = ",".join(f"{n}:{s:.2f}" for n, s in fit_scores)
    return f"find fit node({node}), {total - len(fit_scores)} nodes not fit, {len(fit_scores)} nodes fit({fits})"


def binding_succeed_message(node: str, namespace: str, name: str) -> str:
    return f"Successfully binding node [{node}] to {namespace}/{name}"
