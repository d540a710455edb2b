"""Node and device scores, and the choice of a node for a pod (pure, no I/O).

API (what the /filter handler calls)
------------------------------------
Build once per request::

    from hami.scheduler.placement import fit, score
    pod = fit.pod_request(
        requests,                 # per container, init first: ContainerDeviceRequest | None
        num_init,                 # len(pod.spec.initContainers)
        annotations,              # pod metadata.annotations
        gpu_policy=cfg.scheduler.gpu_scheduler_policy,
        node_policy=cfg.scheduler.node_scheduler_policy,
        namespace=ns,
        quota=index.quota_view(ns),   # None when no ResourceQuota limits the namespace
    )                             # raises policy.PolicyError for bad device-scoring-weights
    sel = score.select_node(index.nodes, node_names, pod)

`select_node` returns a `Selection`:
  - `sel.node`: the chosen node name, or None when nothing fits;
  - `sel.devices`: PodDevices (one tuple of ContainerDevice per container, init first) to
    encode into `hami.io/vgpu-devices-to-allocate` / `-allocated`; `sel.mig`: MIG placements
    (`(container_index, device_index, gpu_uuid, profile, placement)`);
  - `sel.score`: the node score (float32 value) of the chosen node;
  - `sel.failed_nodes`: `{node: reason}`. Complete when `sel.node is None` (every candidate
    tried, `node unregistered` for names not in the index); on success it holds only the nodes
    tried before the winner (HAMi returns no FailedNodes on success anyway).
After a successful answer the caller records the allocation with
`index.add_pod(key, sel.node, sel.devices, namespace=ns, num_init=num_init)`.

Events: `messages.filtering_failed_messages(sel.failed_nodes)` and
`messages.no_available_node_message(len(node_names))` when nothing fits; for FilteringSucceed,
`evaluate_nodes(...)` (every candidate, off the hot path, on the usage *before* add_pod) and
`messages.filtering_succeed_message(node, fit_scores, total)`.

How the choice follows HAMi (§5, §6): HAMi fits every node, sorts the fitting ones by node score
(binpack ascending, spread descending) and takes the last. A node's score depends only on its
current usage (never on the pod), so trying nodes in preference order (binpack: highest score
first; spread: lowest first) and stopping at the first that fits gives the same node. Ties in
HAMi depend on goroutine timing; here they go to the earlier name in `node_names`. The exception:
a pod asking for a vendor whose ScoreNode adds a term (`PodRequest.scored`: Ascend 910 networks,
Kunlunxin boards; scheduler.vendorscore) is fitted on every candidate and the best final score
wins, ties to the node preferred before the terms.

Other functions: `node_score(devices)` (§6.1), `device_score(dev, requests, weights)` (§6.2),
`order_nodes(nodes, policy)`, `evaluate_nodes(nodes, node_names, pod)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from hami.device.model import MigPlacement, PodDevices
from hami.scheduler.placement.fit import FitResult, PodRequest, fit_pod, try_pod
from hami.scheduler.placement.policy import device_score, node_order_descending
from hami.scheduler.placement.usage import NodeUsage, node_score

__all__ = (
    "NODE_UNREGISTERED",
    "Selection",
    "device_score",
    "evaluate_nodes",
    "node_score",
    "order_nodes",
    "select_node",
)

NODE_UNREGISTERED = "node unregistered"

_SCORE = attrgetter("score_value")
_FIT_SCORE = attrgetter("score")


@dataclass(slots=True)
class Selection:
    node: str | None
    devices: PodDevices = ()
    score: float = 0.0
    mig: tuple[tuple[int, int, str, str, MigPlacement], ...] = ()
    failed_nodes: dict[str, str] = field(default_factory=dict)
    tried: int = 0  # how many nodes were fitted


def order_nodes(nodes: Sequence[NodeUsage], policy: str) -> list[NodeUsage]:
    """Nodes in the order HAMi would prefer them (first = chosen when it fits)."""
    return sorted(nodes, key=_SCORE, reverse=node_order_descending(policy))


def select_node(
    nodes: Mapping[str, NodeUsage],
    node_names: Sequence[str],
    pod: PodRequest,
    *,
    unregistered_reason: str = NODE_UNREGISTERED,
) -> Selection:
    """Pick the node HAMi would pick for `pod` among `node_names` (see module docstring)."""
    if pod.scored:  # the score depends on the devices chosen: fit every node, as HAMi does
        fits, failed = evaluate_nodes(nodes, node_names, pod, unregistered_reason=unregistered_reason)
        tried = sum(1 for name in node_names if name in nodes)
        if not fits:
            return Selection(None, (), 0.0, (), failed, tried)
        best = fits[0]
        return Selection(best.node, best.devices, best.score, best.mig, failed, tried)
    failed: dict[str, str] = {}
    get = nodes.get
    candidates = [n for name in node_names if (n := get(name)) is not None]
    if len(candidates) != len(node_names):
        for name in node_names:
            if name not in nodes:
                failed[name] = unregistered_reason
    tried = 0
    for n in order_nodes(candidates, pod.node_policy):
        tried += 1
        r = try_pod(n, pod)
        if r.__class__ is str:
            failed[n.name] = r
        else:
            return Selection(n.name, r[0], n.score_value, r[1], failed, tried)
    return Selection(None, (), 0.0, (), failed, tried)


def evaluate_nodes(
    nodes: Mapping[str, NodeUsage],
    node_names: Sequence[str],
    pod: PodRequest,
    *,
    unregistered_reason: str = NODE_UNREGISTERED,
) -> tuple[list[FitResult], dict[str, str]]:
    """Fit every candidate: (fitting results in preference order, failed {node: reason}).

    This is HAMi's full calcScore; use it for the FilteringSucceed event text, off the hot path.
    """
    failed: dict[str, str] = {}
    candidates: list[NodeUsage] = []
    for name in node_names:
        n = nodes.get(name)
        if n is None:
            failed[name] = unregistered_reason
        else:
            candidates.append(n)
    fits: list[FitResult] = []
    for n in order_nodes(candidates, pod.node_policy):
        r = fit_pod(n, pod)
        if r.fits:
            fits.append(r)
        else:
            failed[n.name] = r.reason
    if pod.scored:  # vendor terms moved the scores: HAMi's order of the final scores (stable)
        fits.sort(key=_FIT_SCORE, reverse=node_order_descending(pod.node_policy))
    return fits, failed
