"""`nvidia-smi -q -x` parsed into what hami's discovery reports (the reference for scripts/gpu-smoke).

Pure: XML text in, `SmiGpu` values out; "N/A" and missing fields are None. Raises ValueError
naming the element when the XML is not nvidia-smi's.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

_NUM = re.compile(r"[-+]?[0-9]+(\.[0-9]+)?")


@dataclass(frozen=True, slots=True)
class SmiGpu:
    uuid: str
    name: str
    bus_id: str
    minor: int | None
    memory_total_mib: int | None
    mig_mode: str | None  # "Enabled" | "Disabled" | None (not MIG-capable: N/A)
    temperature_c: float | None
    power_w: float | None
    mig_devices: tuple[str, ...] = ()  # MIG UUIDs nvidia-smi lists under the GPU


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else value


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUM.search(text)
    return float(m.group(0)) if m else None


# Where the board's draw is, newest first: drivers from 535 split `power_draw` into instant and average
# readings (seen on an H100 with 580.159.04: only instant_/average_power_draw), older ones have one.
_POWER_PATHS = tuple(f"{block}/{field}" for block in ("gpu_power_readings", "power_readings")
                     for field in ("power_draw", "instant_power_draw", "average_power_draw"))


def _power(gpu: ET.Element) -> float | None:
    for path in _POWER_PATHS:
        value = _num(_text(gpu, path))
        if value is not None:
            return value
    return None


def parse_smi_xml(text: str) -> list[SmiGpu]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi XML: root element is <{root.tag}>, expected <nvidia_smi_log>")
    out = []
    for i, gpu in enumerate(root.findall("gpu")):
        uuid = _text(gpu, "uuid")
        if not uuid:
            raise ValueError(f"nvidia-smi XML: gpu[{i}] has no <uuid>")
        minor = _num(_text(gpu, "minor_number"))
        mem = _num(_text(gpu, "fb_memory_usage/total"))
        power = _power(gpu)
        migs = tuple(u for u in (_text(d, "uuid") for d in gpu.findall("mig_devices/mig_device")) if u)
        out.append(SmiGpu(
            uuid=uuid, name=_text(gpu, "product_name") or "",
            bus_id=(gpu.get("id") or _text(gpu, "pci/pci_bus_id") or ""),
            minor=None if minor is None else int(minor), memory_total_mib=None if mem is None else int(mem),
            mig_mode=_text(gpu, "mig_mode/current_mig"), temperature_c=_num(_text(gpu, "temperature/gpu_temp")),
            power_w=power, mig_devices=migs,
        ))
    return out
