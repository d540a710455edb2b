"""What each vendor `hook` of the vendor table means, in one place: the traits its rows share.

A row of config/vendors.yaml names its hook (`hook: ascend`); the hook's entry here says how the code
that serves every vendor treats that row: which codec owns it, how its cards are counted, what admits a
pod to it, which term it adds to the node score. Code reads these traits from `HOOKS[row.hook]`, never
by comparing the hook's name. The steps a hook does its own way are functions in the module that owns
the step, in a table keyed by hook beside it (hami.device.vendorrequest.OWN_REQUESTS, ...): the device
package may not import the scheduler's, so one table per step layer; every other hook takes the shared step.
hami.vendorsteps assembles every step's table into one view (hook -> step -> function) for reading and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Hook:
    # HAMi's NVIDIA device: its own codec, requests and allocation keys; every other row is "another vendor".
    nvidia: bool = False
    # Cards counted by the count resource itself (AWS Neuron, Kunlunxin XPU), as a `card_count` row is.
    counted_by_cards: bool = False
    # The webhook takes a pod naming only the row's memory or cores (AMD, Enflame DRS).
    admits_memory_or_cores: bool = False
    # The device config's `vnpus:` settings for every chip apply to its rows, and a node's hami-vnpu-core
    # annotation (else the chip's default) sets its devices' mode (Ascend).
    vnpu_chips: bool = False
    # MetaX sGPU: the device config's `sgpuTopologyAware` switch applies, and a placement remembers the
    # QoS policy its cards switch to.
    sgpu: bool = False
    # The term the row adds to the node score (scheduler.vendorscore): "network" for the chips whose name
    # starts with this prefix (Ascend 910), "board" for whole cards (a row without a memory resource),
    # a fixed term, or "" (then the row's own keys decide: topology, aic).
    network_score_prefix: str = ""
    whole_card_score: str = ""
    score: str = ""
    # A container's memory and cores are its total, split over the cards it asks (Mthreads).
    split_request_per_card: bool = False
    # A container naming only the row's memory or cores asks for it (Enflame DRS).
    asks_by_memory_or_cores: bool = False
    # The device string carries the card's registered product type, the vendor's name elsewhere (AMD).
    card_type_in_string: bool = False
    # Registered as cards in the node's capacity (Kunlunxin XPU), as a `card_count` row is.
    capacity_cards: bool = False
    # Registered from capacity with the node's instance-type label (AWS Neuron: devices and cores).
    capacity_with_instance_type: bool = False
    # Shares one card registers in the embedded cluster when the row has no templates (Cambricon: 100).
    sim_shares_per_card: int = 10


HOOKS: Mapping[str, Hook] = MappingProxyType({
    "nvidia": Hook(nvidia=True),
    "generic": Hook(),
    "ascend": Hook(vnpu_chips=True, network_score_prefix="Ascend910"),
    "cambricon": Hook(sim_shares_per_card=100),
    "mthreads": Hook(split_request_per_card=True),
    "awsneuron": Hook(counted_by_cards=True, capacity_with_instance_type=True),
    "kunlunxin": Hook(counted_by_cards=True, capacity_cards=True, whole_card_score="board"),
    "metax": Hook(sgpu=True, score="metax"),
    "amd": Hook(admits_memory_or_cores=True, card_type_in_string=True),
    "enflame": Hook(admits_memory_or_cores=True, asks_by_memory_or_cores=True),
})
