"""AMD's pod device string carries the card's product type, as HAMi v2.10.0 writes it
(pkg/device/amd/device.go Fit keeps `dev.Type`; design doc docs/develop/amd-vgpu.md 4.2: "The type
field uses device product name"; TestDevices_Fit "retains the registered product type in the
allocation").

Covers: with the node's devices given, `hami.io/amd-devices-*` name each card's registered type
while the devices stay AMD's (vendor keys, quota, usage); reading the annotation back gives AMD
devices again, so usage and /bind's re-check see the vendor; without the node (a full-Nodes
request for a node the cache does not know) the vendor's name is written.
"""

from __future__ import annotations

from types import SimpleNamespace

from hami.config import default_vendor_table
from hami.device.allocation import allocated_devices, allocation_annotations
from hami.device.model import ContainerDevice

TABLE = default_vendor_table()
PRODUCT = "AMD_Instinct_MI300X_VF"
DEVICES = ((ContainerDevice("dev-0", "AMD", 100, 10, 0),),)
NODE = SimpleNamespace(by_id={"dev-0": SimpleNamespace(type=PRODUCT)})


def test_the_device_string_names_the_product_and_reads_back_as_amd():
    annos = allocation_annotations(DEVICES, TABLE, 1755757239, "n", {}, node_usage=NODE)
    assert annos == {"hami.io/amd-devices-to-allocate": f"dev-0,{PRODUCT},100,10:;",
                     "hami.io/amd-devices-allocated": f"dev-0,{PRODUCT},100,10:;"}
    back = allocated_devices(annos, TABLE)
    assert [(cd.uuid, cd.type, cd.usedmem, cd.usedcores) for ctr in back for cd in ctr] == [("dev-0", "AMD", 100, 10)]


def test_without_the_node_the_vendor_is_written():
    annos = allocation_annotations(DEVICES, TABLE, 1755757239, "n", {})
    assert annos["hami.io/amd-devices-allocated"] == "dev-0,AMD,100,10:;"
