"""The vendors' own terms of the node score (pure, no I/O).

HAMi scores a fitting node as ComputeDefaultScore (the node's usage before the pod, `usage.node_score`)
plus, per device type the pod got, that vendor's `ScoreNode(node, the pod's devices, the node's
devices before the pod, policy)` (pkg/scheduler/policy/node_policy.go OverrideScore). NVIDIA and
most vendors add 0; rows whose `Vendor.node_score` names a term add one, which depends on the
devices chosen, so a pod asking for them is scored on every fitting node (score.select_node):

* Ascend 910 chips (pkg/device/ascend/device.go ScoreNode): 10 x, per container, the share of its
  NPUs on their largest super-pod network (`vendorrules.network_score`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hami.device.model import PodDevices
from hami.device.vendors import Vendor

from .policy import f32
from .usage import NodeUsage
from .vendorrules import network_score


def vendor_score(node: NodeUsage, devices: PodDevices, scored: Sequence[Vendor]) -> float:
    """The sum of the scored vendors' terms for the pod's `devices` on `node` (float32)."""
    total = 0.0
    for v in scored:
        if v.node_score == "network":
            containers = [[cd.uuid for cd in ctr if cd.type == v.name] for ctr in devices]
            term = network_score(containers, node.networks)
        else:
            continue
        total = f32(total + term)
    return total
