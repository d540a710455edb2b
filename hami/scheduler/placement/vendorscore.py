"""The vendors' own terms of the node score (pure, no I/O).

HAMi scores a fitting node as ComputeDefaultScore (the node's usage before the pod, `usage.node_score`)
plus, per device type the pod got, that vendor's `ScoreNode(node, the pod's devices, the node's
devices before the pod, policy)` (pkg/scheduler/policy/node_policy.go OverrideScore). NVIDIA and
most vendors add 0; two rows of the table add a term, which depends on the devices chosen, so a
pod asking for them is scored on every fitting node (score.select_node):

* Ascend 910 chips (pkg/device/ascend/device.go ScoreNode): 10 x, per container, the share of its
  NPUs on their largest super-pod network (`vendorrules.network_score`).
* Kunlunxin XPU, whole cards (pkg/device/kunlun/device.go ScoreNode, topo.go calcscore): how the
  pod changes the board's fragmentation. Each 4-card wing counts 0 when 4 of the cards in a set sit
  on it, 2 when 1 does, else 1 (an empty set counts 1); the cards the pod takes minus the cards in
  use before give -1: 3000, 0: 2000, 1: 1000, 2: 0, anything else 1000. A node with any other
  device than Kunlunxin's scores 0. (The vXPU row adds nothing, as HAMi's KunlunVDevices.)
* MetaX sGPU (pkg/device/metax/sdevice.go ScoreNode): for a pod of app class online
  (scoreOnlineDevices), per card the pod takes -100 per offline pod on a card running only
  offline pods, else -20 per online and -2 per offline pod; else, for a topology-aware pod
  (`metax-tech.com/sgpu-topology-aware`) taking whole cards (scoreExclusiveDevices, score.go),
  10 x the MetaLink pairs among them minus the pairs the idle cards lose; times 10000, or -10000
  under the spread node policy.
* Vastai (pkg/device/vastai/device.go ScoreNode): per container, the share of its dies on its
  fullest physical card (custominfo AIC), unweighted (`vendorrules.aic_score`).
* MetaX GPU, exclusive (pkg/device/metax/device.go ScoreNode): 2000 minus the node's
  `metax-tech.com/gpu.topology.losses` (binpack) or `.scores` (spread) entry for the number of
  cards the pod takes. HAMi adds it even for a pod taking no MetaX GPU on such a node (0 cards);
  here only pods asking for MetaX GPUs get it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from hami.device.codec.cards import TOPOLOGY_LOSSES, TOPOLOGY_SCORES, topology_value
from hami.device.model import PodDevices
from hami.device.vendors import Vendor
from hami.scheduler.placement.policy import f32
from hami.scheduler.placement.usage import NodeUsage
from hami.scheduler.placement.vendorrules import (
    METAX_APP_CLASS,
    aic_score,
    metax_topology_aware,
    network_score,
)

KUNLUN_TYPE = "kunlun"  # HAMi's KunlunGPUDevice: every device of a scored node has it in its type
WING = 4  # cards per wing of a Kunlunxin board (indexes 0-3 and 4-7)
# calcscore: the pod's bubbles minus the board's before -> the term (anything else: 1000).
_BOARD_TERMS = ((-1, 3000.0), (0, 2000.0), (1, 1000.0), (2, 0.0))


# A row's term (Vendor.node_score: from its hook's traits, else from its own keys) -> the term:
# (node, the pod's devices, the row, the node policy, the pod's annotations) -> float.
Term = Callable[[NodeUsage, PodDevices, Vendor, str, Mapping[str, str]], float]
TERMS: Mapping[str, Term] = MappingProxyType({
    "network": lambda node, devices, v, _policy, _annos: network_score(
        [[cd.uuid for cd in ctr if cd.type == v.name] for ctr in devices], node.networks),
    "board": lambda node, devices, v, _policy, _annos: board_score(
        node, [cd.idx for ctr in devices for cd in ctr if cd.type == v.name]),
    "topology": lambda node, devices, v, policy, _annos: topology_score(
        node, sum(1 for ctr in devices for cd in ctr if cd.type == v.name), policy),
    "aic": lambda node, devices, v, _policy, _annos: aic_score(
        [[cd.uuid for cd in ctr if cd.type == v.name] for ctr in devices], node.dies),
    "metax": lambda node, devices, v, policy, annos: metax_score(
        node, [cd for ctr in devices for cd in ctr if cd.type == v.name], policy, annos, v.topology_aware),
})


def vendor_score(node: NodeUsage, devices: PodDevices, scored: Sequence[Vendor], policy: str = "binpack",
                 annotations: Mapping[str, str] | None = None) -> float:
    """The sum of the scored vendors' terms (TERMS) for the pod's `devices` on `node` (float32);
    `policy` is the pod's node scheduler policy (MetaX weighs its term by it), `annotations` the
    pod's (MetaX: app class, topology awareness)."""
    total = 0.0
    for v in scored:
        term = TERMS.get(v.node_score)
        if term is not None:
            total = f32(total + term(node, devices, v, policy, annotations or {}))
    return total


ONLINE_WEIGHT = 10000  # MetaX sGPU ScoreNode's weight (negated for the spread policy)
TOPOLOGY_BASE = 2000  # MetaX GPU ScoreNode: 2000 - the node's loss (binpack) or score (spread)


def topology_score(node: NodeUsage, cards: int, policy: str) -> float:
    """MetaX GPU ScoreNode (pkg/device/metax/device.go): under binpack 2000 minus the node's
    `gpu.topology.losses` entry for the number of cards taken, under spread 2000 minus its
    `gpu.topology.scores` entry (a missing entry or an undecodable annotation counts 0); 0 when
    the node has no such annotation."""
    topo = node.topology or {}
    text = topo.get(TOPOLOGY_LOSSES if policy == "binpack" else TOPOLOGY_SCORES if policy == "spread" else "")
    if text is None:
        return 0.0
    return f32(TOPOLOGY_BASE - topology_value(text, cards))
DIRECT_LINK = 10  # score.go DirectLinkScore: two cards of one MetaLink zone


def metax_score(node: NodeUsage, cards: Sequence, policy: str, annotations: Mapping[str, str],
                topology_aware: bool = False) -> float:
    """MetaX sGPU ScoreNode: the online term for an online pod, else the MetaLink term when the
    pod is topology-aware and takes a whole card, else 0; x10000 (-10000 under spread)."""
    if annotations.get(METAX_APP_CLASS) == "online":
        raw = online_score(node, {cd.uuid for cd in cards})
    elif any(cd.usedcores == 100 for cd in cards) and metax_topology_aware(annotations, topology_aware):
        raw = link_score(node, [cd.uuid for cd in cards if cd.usedcores == 100])
    else:
        return 0.0
    return f32((-ONLINE_WEIGHT if policy == "spread" else ONLINE_WEIGHT) * raw)


def _pairs(zones: Sequence[int]) -> int:
    """LinkDevices.Score: DIRECT_LINK per pair of cards in the same (non-zero) zone."""
    counts: dict[int, int] = {}
    for z in zones:
        if z:
            counts[z] = counts.get(z, 0) + 1
    return DIRECT_LINK * sum(n * (n - 1) // 2 for n in counts.values())


def link_score(node: NodeUsage, taken: Sequence[str]) -> int:
    """scoreExclusiveDevices: 10 x the links among the whole cards taken, minus the links the
    idle cards lose (links among idle cards before, less those among the taken and the rest)."""
    zones = node.link_zones or {}
    taken_set = set(taken)
    idle = [d.id for d in node.devices if d.used == 0]
    allocated = _pairs([zones.get(u, 0) for u in taken])
    available = _pairs([zones.get(u, 0) for u in idle])
    rest = _pairs([zones.get(u, 0) for u in idle if u not in taken_set])
    return 10 * allocated - (available - allocated - rest)


def online_score(node: NodeUsage, cards: set[str]) -> int:
    """scoreOnlineDevices: the cards an online pod takes, scored by the app-class pods already on
    them (NodeUsage.app_classes); higher is better for the online pod."""
    classes = node.app_classes or {}
    result = 0
    for d in node.devices:
        if d.id not in cards:
            continue
        online, offline = classes.get(d.id, (0, 0))
        result += -100 * offline if offline > 0 and online == 0 else -20 * online - 2 * offline
    return result


def _wing_value(n: int) -> int:
    return 0 if n == WING else 2 if n == 1 else 1


def bubbles(indexes: set[int]) -> int:
    """countbubble: how badly a set of card indexes splits the two wings (lower is snugger)."""
    if not indexes:
        return 1
    left = sum(1 for i in indexes if i < WING)
    return _wing_value(left) + _wing_value(len(indexes) - left)


def board_score(node: NodeUsage, chosen: Sequence[int]) -> float:
    """Kunlunxin's ScoreNode for the card indexes the pod takes on `node`."""
    before = set()
    for d in node.devices:
        if KUNLUN_TYPE not in d.type:
            return 0.0
        if d.used > 0:
            before.add(d.index)
    delta = bubbles(set(chosen)) - bubbles(before)
    return next((term for d, term in _BOARD_TERMS if d == delta), 1000.0)
