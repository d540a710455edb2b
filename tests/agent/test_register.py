"""Registration rules (hami.agent.register): split count, memory and core scaling, the `NVIDIA-`
prefix, operating mode, health, filterdevices, NVML memory NOT_SUPPORTED, per-node overrides and
glob matching, kubelet device IDs `<UUID>-<i>` with NUMA topology, physical IDs, order-insensitive
comparison, and the exact annotation JSON produced through hami.device.codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.agent.register import build_devices, device_type, physical_id, plugin_devices, same_devices
from hami.device import codec
from hami.device.model import FilterDevices, NodeDeviceConfig, NvidiaConfig
from hami.device.nodeconfig import DeviceSettings, effective_device_settings, resolve_node_config
from hami.gpu.backend import GpuInfo

U1 = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
U2 = "GPU-91ab03c4-77de-4c0a-8b21-222222222222"


def gpus():
    return [
        GpuInfo(U2, 1, "NVIDIA A100-SXM4-40GB", 40960, numa=1),
        GpuInfo(U1, 0, "NVIDIA A100-SXM4-40GB", 40960, numa=0),
    ]


def test_default_registration_matches_hami_json_exactly():
    devices = build_devices(gpus(), effective_device_settings(NvidiaConfig(), None))
    assert codec.encode_node_devices(devices) == (
        '[{"id":"GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111","count":10,"devmem":40960,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true},'
        '{"id":"GPU-91ab03c4-77de-4c0a-8b21-222222222222","index":1,"count":10,"devmem":40960,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-40GB","numa":1,"mode":"hami-core","health":true}]'
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        ("Tesla V100-PCIE-32GB", "NVIDIA-Tesla V100-PCIE-32GB"),
        ("NVIDIAish", "NVIDIAish"),
        ("nvidia lower", "NVIDIA-nvidia lower"),
    ],
    ids=["prefixed", "tesla", "starts-with-NVIDIA", "lowercase"],
)
def test_device_type_prefixes_names_not_starting_with_nvidia(name, expected):
    assert device_type(name) == expected


def test_scaling_split_and_mode_from_node_config_override_nvidia_section():
    nvidia = NvidiaConfig(device_split_count=10, device_memory_scaling=1.0, device_core_scaling=1.0)
    node = NodeDeviceConfig(name="n1", devicesplitcount=4, devicememoryscaling=1.5, devicecorescaling=2.0,
                            operatingmode="mps")
    s = effective_device_settings(nvidia, node)
    d = build_devices(gpus(), s)
    assert [x.count for x in d] == [4, 4]
    assert [x.devmem for x in d] == [61440, 61440]
    assert [x.devcore for x in d] == [200, 200]
    assert {x.mode for x in d} == {"mps"}


def test_memory_scaling_truncates_like_go_int_conversion():
    s = DeviceSettings(memory_scaling=0.3)
    (d,) = build_devices([GpuInfo(U1, 0, "NVIDIA T4", 15109)], s)
    assert d.devmem == int(15109 * 0.3) == 4532


def test_unhealthy_gpu_registers_without_health_and_kubelet_sees_unhealthy_ids():
    g = [GpuInfo(U1, 0, "NVIDIA T4", 15360, healthy=False), GpuInfo(U2, 1, "NVIDIA T4", 15360)]
    s = DeviceSettings(split_count=2)
    d = build_devices(g, s)
    assert [x.health for x in d] == [False, True]
    assert '"health"' not in codec.encode_node_devices(d[:1])
    ids = plugin_devices(g, s)
    assert [(p.id, p.health) for p in ids] == [
        (f"{U1}-0", "Unhealthy"), (f"{U1}-1", "Unhealthy"), (f"{U2}-0", "Healthy"), (f"{U2}-1", "Healthy"),
    ]


def test_filterdevices_by_uuid_and_index_hide_gpus_from_both_lists():
    three = gpus() + [GpuInfo("GPU-3", 2, "NVIDIA T4", 15360)]
    s = DeviceSettings(filter=FilterDevices(uuid=(U2,), index=(2,)))
    assert [d.id for d in build_devices(three, s)] == [U1]
    assert {physical_id(p.id) for p in plugin_devices(three, s)} == {U1}


def test_memory_not_supported_uses_preconfigured_memory_or_skips_the_gpu():
    g = [GpuInfo(U1, 0, "NVIDIA GH200", 0, memory_supported=False)]
    assert build_devices(g, DeviceSettings()) == ()
    (d,) = build_devices(g, DeviceSettings(preconfigured_memory=97280, memory_scaling=2.0))
    assert d.devmem == 97280


def test_numa_topology_only_when_enabled():
    assert {p.numa for p in plugin_devices(gpus(), DeviceSettings())} == {None}
    assert [p.numa for p in plugin_devices(gpus(), DeviceSettings(split_count=1, enable_numa_topology=True))] == [0, 1]


def test_unknown_mode_file_omits_mode_key():
    d = build_devices(gpus()[:1], effective_device_settings(NvidiaConfig(), None, node_config_readable=False))
    assert '"mode"' not in codec.encode_node_devices(d)


def test_node_config_exact_name_beats_glob_and_glob_matches():
    cfgs = (NodeDeviceConfig(name="gpu-*", devicesplitcount=3), NodeDeviceConfig(name="gpu-7", devicesplitcount=7))
    assert resolve_node_config(cfgs, "gpu-7").devicesplitcount == 7
    assert resolve_node_config(cfgs, "gpu-2").devicesplitcount == 3
    assert resolve_node_config(cfgs, "cpu-1") is None


def test_preferred_allocation_and_log_level_come_from_node_entry():
    s = effective_device_settings(NvidiaConfig(lib_cuda_log_level="1"),
                        NodeDeviceConfig(name="n", libcudaloglevel="3", enablegetpreferredallocation=True))
    assert (s.lib_cuda_log_level, s.enable_get_preferred_allocation) == ("3", True)
    assert effective_device_settings(NvidiaConfig(lib_cuda_log_level="1"), None).lib_cuda_log_level == "1"


@pytest.mark.parametrize(
    ("device_id", "uuid"),
    [
        (f"{U1}-3", U1),
        (f"{U1}-12", U1),
        (U1, U1),
        (f"{U1}::2", U1),
        ("MIG-GPU-abc[1-2]", "MIG-GPU-abc"),
        (f"{U1}-x", f"{U1}-x"),
    ],
    ids=["split", "split-2-digits", "bare", "annotated", "mig", "non-numeric-tail"],
)
def test_physical_id_strips_the_split_suffix(device_id, uuid):
    assert physical_id(device_id) == uuid


def test_same_devices_ignores_order_but_not_values():
    d = build_devices(gpus(), DeviceSettings())
    assert same_devices(d, tuple(reversed(d)))
    assert not same_devices(d, build_devices(gpus(), DeviceSettings(split_count=5)))
    assert same_devices(codec.decode_node_devices(codec.encode_node_devices(d)), d)


@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(1, 200_000), st.booleans(), st.integers(0, 3),
                  st.sampled_from(["NVIDIA A100", "Tesla T4", "GeForce RTX 4090"])),
        max_size=8, unique_by=lambda t: t[0],
    ),
    st.integers(1, 64),
    st.sampled_from([0.5, 1.0, 1.5, 3.0]),
)
def test_registration_round_trips_through_the_codec(rows, split, scaling):
    g = [GpuInfo(f"GPU-{i:08d}-0000-4000-8000-000000000000", i, name, mem, healthy=h, numa=numa)
         for i, mem, h, numa, name in rows]
    devices = build_devices(g, DeviceSettings(split_count=split, memory_scaling=scaling))
    assert len(devices) == len(g)
    assert same_devices(codec.decode_node_devices(codec.encode_node_devices(devices)), devices)
    assert len(plugin_devices(g, DeviceSettings(split_count=split))) == split * len(g)
