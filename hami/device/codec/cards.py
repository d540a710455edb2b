"""Plain cards from a node's capacity (pkg/device/metax GetNodeDevices for the exclusive GPU).

Some device plugins write no register annotation and every card is alike: the capacity of the
count resource is the number of cards; card i is `<id format>` with the row's count (sharing
slots), memory (MiB) and cores.
"""

from __future__ import annotations

import orjson

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import go_json_value
from hami.device.model import DeviceInfo

MAX_CARDS = 1024  # a capacity beyond any real node is refused, not materialised


TOPOLOGY_LOSSES = "TopologyLosses"
TOPOLOGY_SCORES = "TopologyScores"


def plain_cards(node: str, cards: int, vendor: str, id_format: str, resource: str, count: int, memory: int,
                cores: int, topology: str = "") -> tuple[DeviceInfo, ...]:
    if cards <= 0:
        raise CodecError(f"device not found {resource}", field=resource, text=str(cards))
    if cards > MAX_CARDS:
        raise CodecError(f"{cards} cards is more than {MAX_CARDS}", field=resource, text=str(cards))
    return tuple(DeviceInfo(id=id_format.format(node=node, index=i), count=count, devmem=memory, devcore=cores,
                            type=vendor, index=i, numa=0, health=True, vendor=vendor, custom_info=topology)
                 for i in range(cards))


def topology_info(losses: str | None, scores: str | None) -> str:
    """The node's topology annotations carried on its cards (custom_info; "" when neither)."""
    info = {k: v for k, v in ((TOPOLOGY_LOSSES, losses), (TOPOLOGY_SCORES, scores)) if v is not None}
    return go_json_value(info) if info else ""


def node_topology(devices) -> dict[str, str] | None:
    """The topology annotations a node's plain cards carry (None when none do)."""
    for d in devices:
        if d.custom_info and (TOPOLOGY_LOSSES in d.custom_info or TOPOLOGY_SCORES in d.custom_info):
            return orjson.loads(d.custom_info)
    return None


def topology_value(text: str, cards: int) -> int:
    """MetaX's parseMetaxAnnos: the annotation as Go's map[int]int, its entry for `cards`;
    0 when it does not decode or has no such entry."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return 0
    if type(doc) is not dict:
        return 0
    out = {}
    for k, v in doc.items():
        key = k[1:] if k[:1] in "+-" else k
        if not key.isdigit() or not key.isascii() or type(v) is not int:
            return 0
        out[int(k)] = v
    return out.get(cards, 0)
