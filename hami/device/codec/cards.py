"""Plain cards from a node's capacity (pkg/device/metax GetNodeDevices for the exclusive GPU).

Some device plugins write no register annotation and every card is alike: the capacity of the
count resource is the number of cards; card i is `<id format>` with the row's count (sharing
slots), memory (MiB) and cores.
"""

from __future__ import annotations

from hami.device.codec.errors import CodecError
from hami.device.model import DeviceInfo

MAX_CARDS = 1024  # a capacity beyond any real node is refused, not materialised


def plain_cards(node: str, cards: int, vendor: str, id_format: str, resource: str, count: int, memory: int,
                cores: int) -> tuple[DeviceInfo, ...]:
    if cards <= 0:
        raise CodecError(f"device not found {resource}", field=resource, text=str(cards))
    if cards > MAX_CARDS:
        raise CodecError(f"{cards} cards is more than {MAX_CARDS}", field=resource, text=str(cards))
    return tuple(DeviceInfo(id=id_format.format(node=node, index=i), count=count, devmem=memory, devcore=cores,
                            type=vendor, index=i, numa=0, health=True, vendor=vendor) for i in range(cards))
