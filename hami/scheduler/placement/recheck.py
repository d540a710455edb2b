"""/bind's re-check under the node lock, as data (pure, no I/O): the same fit /filter runs.

The placement /filter chose is checked by the fit /filter ran (`fit.try_pod`), with the same
PodRequest and the node's usage from the same index (this pod taken off), restricted to the
devices /filter chose: the placement still holds when that fit gives them back exactly. Nothing
here re-states a capacity rule, so /bind can never refuse what /filter placed on an idle node (a
hami-core Ascend pod's 100 cores per NPU, Kunlunxin's board groups, MetaX app classes are the
fit's, not a second rendering of them). When they no longer fit, the caller fits the pod on the
whole node again (the same function) and writes that placement, or refuses with the fit's reason.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.device.model import ContainerDevice
from hami.scheduler.placement.usage import NodeUsage


def chosen_ids(devices: Iterable[Iterable[ContainerDevice]]) -> frozenset[str]:
    return frozenset(cd.uuid for ctr in devices for cd in ctr)


def only_devices(node: NodeUsage, ids: frozenset[str]) -> NodeUsage:
    """A copy of `node` with only the devices named (their usage, cordons, NetworkIDs, MetaLink
    zones, app-class counts and QoS expectations kept), for the fit to run on."""
    copy = NodeUsage(node.name, [d.clone() for d in node.devices if d.id in ids], node.cordoned,
                     node.pair_scores, node.networks, node.link_zones, node.topology)
    if node.app_classes is not None:
        copy.app_classes = {k: list(v) for k, v in node.app_classes.items()}
    copy.qos_expected = node.qos_expected
    copy.dies = node.dies
    copy.drs = node.drs
    return copy


def same_placement(got, chosen) -> bool:
    """The fit's devices are /filter's: per container, the same devices with the same shares."""
    if len(got) != len(chosen):
        return False
    return all(sorted(map(_key, a)) == sorted(map(_key, b)) for a, b in zip(got, chosen, strict=True))


def _key(cd: ContainerDevice) -> tuple:
    return (cd.uuid, cd.type, cd.usedmem, cd.usedcores)


def taken_message(node: str, reason: str) -> str:
    """/bind's error when the devices /filter chose are gone and the pod no longer fits the node."""
    return f"the devices chosen on node {node} were taken by a concurrent placement; the fit now answers: {reason}"
