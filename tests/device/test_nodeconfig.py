"""Tests for hami.device.nodeconfig: which per-node entry applies and what it changes.

Covers: exact name beats a shell glob, first match in file order, no match; the merge of
`nodeconfig` over the `nvidia:` section (spec node.md §1.1): set values win, unset ones keep the
global value, operatingmode, filterdevices only when non-empty, the unreadable-config-file mode;
FilterDeviceToRegister semantics (pkg/device/nvidia/device_test.go Test_FilterDeviceToRegister);
devmem/devcore scaling with Go's int32 truncation (spec node.md §1.2 table).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device.model import FilterDevices, NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import (
    DeviceSettings,
    effective_device_settings,
    resolve_node_config,
    settings_for_node,
)

ENTRIES = (
    NodeDeviceConfig(name="inference-pool-*", devicesplitcount=4),
    NodeDeviceConfig(name="inference-pool-7", devicesplitcount=7),
    NodeDeviceConfig(name="inference-*", devicesplitcount=2),
    NodeDeviceConfig(name="gpu-node-[12]", operatingmode="mps"),
)


@pytest.mark.parametrize(
    ("node", "want"),
    [
        ("inference-pool-7", "inference-pool-7"),
        ("inference-pool-3", "inference-pool-*"),
        ("inference-x", "inference-*"),
        ("gpu-node-2", "gpu-node-[12]"),
        ("gpu-node-3", None),
        ("Inference-pool-3", None),
        ("other", None),
    ],
    ids=["exact-beats-earlier-glob", "first-glob-in-file-order", "second-glob", "glob-class", "class-miss",
         "case-sensitive", "no-match"],
)
def test_resolve_node_config_exact_beats_glob(node, want):
    got = resolve_node_config(ENTRIES, node)
    assert (got.name if got else None) == want


def test_no_entry_keeps_the_global_settings():
    cfg = NvidiaConfig(device_split_count=5, device_memory_scaling=1.5, device_core_scaling=2.0,
                       pre_configured_device_memory=100, lib_cuda_log_level="3", enable_numa_topology=True,
                       disable_core_limit=True)
    s = effective_device_settings(cfg, None)
    assert s == DeviceSettings(5, 1.5, 2.0, 100, "3", True, "hami-core", FilterDevices(), False, True, None)


def test_set_values_win_unset_values_keep_global():
    cfg = NvidiaConfig(device_split_count=10, device_memory_scaling=1.0, device_core_scaling=1.0,
                       lib_cuda_log_level="1")
    entry = NodeDeviceConfig(name="n1", devicesplitcount=4, devicememoryscaling=1.5, preconfigureddevicememory=0,
                             enablenumatopology=False, operatingmode="mig",
                             filterdevices=FilterDevices(uuid=("GPU-x",)), enablegetpreferredallocation=True)
    s = effective_device_settings(cfg, entry)
    assert (s.split_count, s.memory_scaling, s.core_scaling, s.lib_cuda_log_level) == (4, 1.5, 1.0, "1")
    assert (s.mode, s.filter.uuid, s.enable_get_preferred_allocation, s.matched_entry) == (
        "mig", ("GPU-x",), True, "n1")


def test_empty_operating_mode_and_empty_filter_change_nothing():
    s = effective_device_settings(NvidiaConfig(), NodeDeviceConfig(name="n1", operatingmode=""))
    assert s.mode == "hami-core" and s.filter == FilterDevices()


def test_unreadable_node_config_file_leaves_mode_empty():
    """node.md §1.1: when /config/config.json cannot be read the mode is "" (omitted on the wire)."""
    assert effective_device_settings(NvidiaConfig(), None, node_config_readable=False).mode == ""


def test_settings_for_node_combines_resolve_and_merge():
    s = settings_for_node(NvidiaConfig(), ENTRIES, "inference-pool-9")
    assert (s.split_count, s.matched_entry) == (4, "inference-pool-*")


FILTER = [
    ("filter is nil", FilterDevices(), "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "0", False),
    ("uuid is empty", FilterDevices(uuid=("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76",)), "", "0", False),
    ("uuid is not in filter", FilterDevices(uuid=("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b77",)),
     "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "0", False),
    ("uuid is in filter", FilterDevices(uuid=("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76",)),
     "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "0", True),
    ("idx is empty", FilterDevices(index=(0,)), "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "", False),
    ("idx is not in filter", FilterDevices(index=(1,)), "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "0", False),
    ("idx is in filter", FilterDevices(index=(0,)), "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "0", True),
    ("idx is invalid", FilterDevices(index=(0,)), "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "a", False),
    ("idx as int", FilterDevices(index=(3,)), "GPU-z", 3, True),
]


@pytest.mark.parametrize(("flt", "uuid", "idx", "want"), [f[1:] for f in FILTER], ids=[f[0] for f in FILTER])
def test_filtered_like_filter_device_to_register(flt, uuid, idx, want):
    """pkg/device/nvidia/device_test.go Test_FilterDeviceToRegister."""
    assert DeviceSettings(filter=flt).filtered(uuid, idx) is want


@pytest.mark.parametrize(
    ("mode", "mem_scaling", "core_scaling", "mib", "devmem", "devcore"),
    [
        ("hami-core", 1.0, 1.0, 40960, 40960, 100),
        ("hami-core", 1.5, 2.0, 40960, 61440, 200),
        ("hami-core", 0.3, 0.33, 1001, 300, 33),
        ("mig", 1.5, 2.0, 40960, 40960, 100),
    ],
    ids=["defaults", "scaled", "truncated", "mig-unscaled"],
)
def test_devmem_and_devcore_follow_the_register_table(mode, mem_scaling, core_scaling, mib, devmem, devcore):
    """node.md §1.2: devmem = int32(float64(MiB) * scaling) (not in MIG), devcore = int32(scaling*100)."""
    s = DeviceSettings(mode=mode, memory_scaling=mem_scaling, core_scaling=core_scaling)
    assert (s.devmem(mib), s.devcore()) == (devmem, devcore)


@given(
    names=st.lists(st.sampled_from(["a", "a*", "*", "b?", "[ab]", "node-1", "node-*"]), max_size=6),
    node=st.sampled_from(["a", "ab", "b1", "node-1", "node-2", "zzz"]),
)
@settings(deadline=None, max_examples=100)
def test_an_exact_entry_is_always_preferred(names, node):
    entries = tuple(NodeDeviceConfig(name=n, devicesplitcount=i + 1) for i, n in enumerate(names))
    got = resolve_node_config(entries, node)
    if node in names:
        assert got is not None and got.name == node and got.devicesplitcount == names.index(node) + 1
    elif got is not None:
        assert got is entries[[e.name for e in entries].index(got.name)]
