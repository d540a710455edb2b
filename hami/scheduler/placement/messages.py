"""The texts of the Kubernetes Events the scheduler writes (pure, no I/O), built from the fit's
reason strings (`fit.gen_reason` / `fit.parse_reason`, which stay beside the fit that makes them).

HAMi sources: `pkg/scheduler/event.go` and `pkg/scheduler/scheduler.go`. Spec: scheduler.md §5.

- Event reasons `FILTERING_FAILED`, `FILTERING_SUCCEED`, `BINDING_SUCCEED`, `BINDING_FAILED` and
  their texts: `filtering_failed_messages(failed_nodes)`, `no_available_node_message(n)`,
  `filtering_succeed_message(node, fit_scores, total)`, `binding_succeed_message(...)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami.scheduler.placement.fit import parse_reason

# Event reasons (the `reason` field of the core/v1 Events the scheduler writes).
FILTERING_FAILED = "FilteringFailed"
FILTERING_SUCCEED = "FilteringSucceed"
BINDING_FAILED = "BindingFailed"
BINDING_SUCCEED = "BindingSucceed"


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
    if len(fit_scores) == 1:  # /filter past FULL_EVALUATION_MAX_NODES names the node it stopped at
        (n, s), = fit_scores
        return f"find fit node({node}), {total - 1} nodes not fit, 1 nodes fit({n}:{s:.2f})"
    fits = ",".join(f"{n}:{s:.2f}" for n, s in fit_scores)
    return f"find fit node({node}), {total - len(fit_scores)} nodes not fit, {len(fit_scores)} nodes fit({fits})"


def binding_succeed_message(node: str, namespace: str, name: str) -> str:
    return f"Successfully binding node [{node}] to {namespace}/{name}"
