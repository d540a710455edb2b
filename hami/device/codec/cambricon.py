"""Cambricon MLU wire formats (pkg/device/cambricon).

Cambricon's device plugin writes no register annotation: the scheduler derives the cards from the
node's capacity, `cores` = capacity of `cambricon.com/mlu.smlu.vcore` (100 per card) and `memory`
= capacity of `cambricon.com/mlu.smlu.vmemory` (in 256 MiB units), as `GetNodeDevices` does:
card i has id `<node>-cambricon-mlu-<i>`, count 100, devmem `memory*256*100/cores` MiB, devcore 100.

At allocation the scheduler pairs memory with cores for the plugin in `CAMBRICON_DSMLU_PROFILE`:
`<card index>_<cores>_<memory in 256 MiB units>` (and `CAMBRICON_DSMLU_ASSIGNED=false`).
"""

from __future__ import annotations

from hami.device.codec.errors import CodecError
from hami.device.model import DeviceInfo

DSMLU_PROFILE = "CAMBRICON_DSMLU_PROFILE"
DSMLU_ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
MEMORY_UNIT_MIB = 256
_INT32 = (1 << 31) - 1
MAX_CARDS = 1024


def devices_from_capacity(node: str, cores: int, memory: int, *, vendor: str = "MLU",
                          id_format: str = "{node}-cambricon-mlu-{index}", cores_per_card: int = 100,
                          resource: str = "cambricon.com/mlu.smlu.vcore",
                          memory_unit: int = MEMORY_UNIT_MIB) -> tuple[DeviceInfo, ...]:
    """GetNodeDevices from capacity; no cores is HAMi's `device not found <resource>`. Mthreads
    registers the same way (16 cores a card, 512 MiB units): devcore is the cores of a card."""
    if cores <= 0:
        raise CodecError(f"device not found {resource}", field=resource, text=str(cores))
    devmem = (memory * memory_unit * cores_per_card // cores) if memory > 0 else 0
    devmem = (devmem + (1 << 31)) % (1 << 32) - (1 << 31)  # Go int32 conversion
    if -(-cores // cores_per_card) > MAX_CARDS:  # a capacity beyond any real node is refused, not materialised
        raise CodecError(f"{cores} cores is more than {MAX_CARDS} cards", field=resource, text=str(cores))
    out = []
    i = 0
    while i * cores_per_card < cores:
        out.append(DeviceInfo(id=id_format.format(node=node, index=i), count=100, devmem=devmem,
                              devcore=cores_per_card, type=vendor, index=i, numa=0, health=True, vendor=vendor))
        i += 1
    return tuple(out)


def encode_dsmlu_profile(index: int, cores: int, memory_mib: int) -> str:
    """`<index>_<cores>_<memory/256>` (Go integer division)."""
    units = abs(memory_mib) // MEMORY_UNIT_MIB * (1 if memory_mib >= 0 else -1)
    return f"{index}_{cores}_{units}"


def decode_dsmlu_profile(text: str) -> tuple[int, int, int]:
    """(index, cores, memory in MiB) of a DSMLU profile value."""
    parts = text.split("_")
    if len(parts) != 3:
        raise CodecError(f"malformed dsmlu profile: expected 3 parts, got {len(parts)}", field=DSMLU_PROFILE,
                         text=text)
    try:
        index, cores, units = (int(p) for p in parts)
    except ValueError:
        raise CodecError("malformed dsmlu profile: not an integer", field=DSMLU_PROFILE, text=text) from None
    if not all(0 <= v <= _INT32 for v in (index, cores, units)):
        raise CodecError("malformed dsmlu profile: out of range", field=DSMLU_PROFILE, text=text)
    return index, cores, units * MEMORY_UNIT_MIB
