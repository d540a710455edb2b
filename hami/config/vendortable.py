"""The vendor table as shipped, and the NVIDIA row's resource names from the `nvidia:` section."""

from __future__ import annotations

import dataclasses
import functools

from hami.device.model import NvidiaConfig
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import VendorTable, parse_vendor_table


@functools.lru_cache(maxsize=1)
def default_vendor_table() -> VendorTable:
    """config/vendors.yaml as shipped inside the package (hami/device/vendors.yaml), read once."""
    from importlib.resources import files

    import yaml

    src = files("hami.device").joinpath("vendors.yaml")
    return parse_vendor_table(yaml.safe_load(src.read_text()), "hami/device/vendors.yaml")


def vendors_with_nvidia(table: VendorTable, nvidia: NvidiaConfig) -> VendorTable:
    """The NVIDIA row takes its resource names from the `nvidia:` section, as HAMi's does."""
    for v in table.vendors:
        if HOOKS[v.hook].nvidia:
            table = table.with_vendor(dataclasses.replace(
                v, count_resource=nvidia.resource_count_name, memory_resource=nvidia.resource_memory_name,
                percentage_resource=nvidia.resource_memory_percentage_name,
                core_resource=nvidia.resource_core_name))
    return table
