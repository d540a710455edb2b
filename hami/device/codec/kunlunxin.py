"""Kunlunxin XPUs as HAMi derives them from a node (pkg/device/kunlun GetNodeDevices).

The XPU device plugin writes no register annotation: the node's capacity of `kunlunxin.com/xpu`
is the number of cards. Card i is `<node>-kunlun-<i>`, count 100, devmem 98304 MiB, devcore 100,
type `kunlun`; the second half of the cards sits on NUMA node 1 (an 8-card board is two wings of
4). At allocation the plugin reads `BAIDU_COM_DEVICE_IDX`: the card indexes, comma-separated.
"""

from __future__ import annotations

from hami.device.codec.errors import CodecError
from hami.device.model import DeviceInfo

DEVICE_IDX = "BAIDU_COM_DEVICE_IDX"
CARD_MEMORY_MIB = 98304
MAX_CARDS = 1024  # a capacity beyond any real node is refused, not materialised


def devices_from_capacity(node: str, cards: int, *, vendor: str = "kunlun", id_format: str = "{node}-kunlun-{index}",
                          resource: str = "kunlunxin.com/xpu") -> tuple[DeviceInfo, ...]:
    """GetNodeDevices; no cards is HAMi's `device not found <resource>`."""
    if cards <= 0:
        raise CodecError(f"device not found {resource}", field=resource, text=str(cards))
    if cards > MAX_CARDS:
        raise CodecError(f"{cards} cards is more than {MAX_CARDS}", field=resource, text=str(cards))
    return tuple(DeviceInfo(id=id_format.format(node=node, index=i), count=100, devmem=CARD_MEMORY_MIB, devcore=100,
                            type=vendor, index=i, numa=1 if i >= cards // 2 else 0, health=True, vendor=vendor)
                 for i in range(cards))
