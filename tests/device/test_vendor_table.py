"""The vendor table as data: parsed from config/vendors.yaml, overridden like HAMi's device config
(`cambricon:` renames resources, `vnpus:` defines Ascend chips, `vendors:` adds rows), NVIDIA's row
named by the `nvidia:` section; a bad row is refused with the key and the file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami.config import ConfigError, build_config, default_vendor_table
from hami.device.vendors import VendorError, apply_device_config, parse_vendor_table

TABLE = default_vendor_table()


def test_shipped_table_has_nvidia_as_one_row_among_the_others():
    nvidia = TABLE.get("NVIDIA")
    assert nvidia.hook == "nvidia" and nvidia.register_key == "hami.io/node-nvidia-register"
    assert "NVIDIA" not in {v.name for v in TABLE.others}
    assert {"Ascend910B3", "MLU", "DCU", "MR-V100"} <= set(TABLE.by_name)
    assert TABLE.by_count["huawei.com/Ascend910B3"].name == "Ascend910B3"
    # Templates are sorted by memory, as HAMi's InitDevices sorts them.
    mems = [t.memory for t in TABLE.get("Ascend910A").templates]
    assert mems == sorted(mems)


def test_device_config_sections_override_the_table():
    doc = {
        "cambricon": {"resourceCountName": "cambricon.com/vmlu", "resourceMemoryName": "cambricon.com/mlu.vmem"},
        "vnpus": {"configs": [{"chipName": "Ascend910", "commonWord": "Ascend910C",
                               "resourceName": "huawei.com/Ascend910C",
                               "resourceMemoryName": "huawei.com/Ascend910C-memory",
                               "memoryAllocatable": 65536, "memoryCapacity": 65536,
                               "templates": [{"name": "vir10_3c_32g", "memory": 32768},
                                             {"name": "vir05_1c_16g", "memory": 16384}]}]},
        "vendors": [{"name": "GCU", "family": "enflame", "hook": "generic",
                     "resources": {"count": "enflame.com/vgcu", "memory": "enflame.com/vgcu-memory"},
                     "register": {"key": "hami.io/node-gcu-register"},
                     "allocation": {"toAllocate": "hami.io/gcu-devices-to-allocate",
                                    "allocated": "hami.io/gcu-devices-allocated"}}],
    }
    t = apply_device_config(TABLE, doc, "cm")
    mlu = t.get("MLU")
    assert (mlu.count_resource, mlu.memory_resource) == ("cambricon.com/vmlu", "cambricon.com/mlu.vmem")
    c = t.get("Ascend910C")
    assert (c.register_key, c.handshake_key, c.allocated_key, c.allocation_key) == (
        "hami.io/node-register-Ascend910C", "hami.io/node-handshake-Ascend910C",
        "hami.io/Ascend910C-devices-allocated", "huawei.com/Ascend910C")
    assert [x.name for x in c.templates] == ["vir05_1c_16g", "vir10_3c_32g"]
    assert t.get("GCU").hook == "generic" and "enflame.com/vgcu" in t.other_counts


def test_vnpus_super_pod_and_hami_vnpu_core_reach_the_ascend_rows():
    """HAMi's `vnpus: {hamiVnpuCore, configs: [{superPod: true, ...}]}`: 910C takes whole modules,
    every Ascend chip defaults to HAMi-core nodes; the shipped table has neither."""
    assert not TABLE.get("Ascend910C").module_pairs and not TABLE.get("Ascend910B3").vnpu_core
    doc = {"vnpus": {"hamiVnpuCore": True, "configs": [
        {"chipName": "Ascend910", "commonWord": "Ascend910C", "resourceName": "huawei.com/Ascend910C",
         "resourceMemoryName": "huawei.com/Ascend910C-memory", "memoryAllocatable": 65536,
         "memoryCapacity": 65536, "superPod": True}]}}
    t = apply_device_config(TABLE, doc, "cm")
    assert t.get("Ascend910C").module_pairs and t.get("Ascend910C").vnpu_core and t.get("Ascend910B3").vnpu_core
    assert not t.get("MLU").vnpu_core
    with pytest.raises(VendorError, match=r"vnpus\[0\]\.superPod in cm"):
        apply_device_config(TABLE, {"vnpus": [{"commonWord": "X", "resourceName": "x/y", "superPod": "yes"}]}, "cm")
    with pytest.raises(VendorError, match=r"vnpus\.hamiVnpuCore in cm"):
        apply_device_config(TABLE, {"vnpus": {"hamiVnpuCore": 1, "configs": []}}, "cm")


def test_vnpus_overwrite_env_and_runtime_class_reach_the_ascend_rows():
    """HAMi's Ascend `overwriteEnv` / `runtimeClassName`: per chip in a `vnpus` entry, or for every
    chip at the top of `vnpus:`; the webhook's list of chips that clear ASCEND_VISIBLE_DEVICES
    follows; wrong types are refused naming the key."""
    assert TABLE.overwrite_env == () and not TABLE.get("Ascend910B3").runtime_class_name
    chip = {"commonWord": "Ascend910B3", "resourceName": "huawei.com/Ascend910B3", "overwriteEnv": True,
            "runtimeClassName": "ascend"}
    t = apply_device_config(TABLE, {"vnpus": [chip]}, "cm")
    assert [v.name for v in t.overwrite_env] == ["Ascend910B3"] and t.get("Ascend910B3").runtime_class_name == "ascend"
    assert not t.get("Ascend910A").overwrite_env
    t = apply_device_config(TABLE, {"vnpus": {"overwriteEnv": True, "runtimeClassName": "npu", "configs": []}}, "cm")
    assert {v.name for v in t.overwrite_env} == {v.name for v in TABLE.vendors if v.hook == "ascend"}
    assert {v.runtime_class_name for v in t.vendors if v.hook == "ascend"} == {"npu"}
    assert not t.get("MLU").overwrite_env
    with pytest.raises(VendorError, match=r"vnpus\.overwriteEnv in cm"):
        apply_device_config(TABLE, {"vnpus": {"overwriteEnv": "yes", "configs": []}}, "cm")
    with pytest.raises(VendorError, match=r"vnpus\[0\]\.runtimeClassName in cm"):
        apply_device_config(TABLE, {"vnpus": [{**chip, "runtimeClassName": 3}]}, "cm")


def test_mthreads_memory_per_card_list_builds_the_legal_slices():
    """`mthreads: {memoryPerCard: [96, 160]}` (an S4000/S5000 cluster): admission takes the union of
    each model's powers of two and whole card; the shipped row derives HAMi's fixed list from 96."""
    assert TABLE.get("Mthreads").legal_memory == (2, 4, 8, 16, 32, 64, 96)
    t = apply_device_config(TABLE, {"mthreads": {"memoryPerCard": [96, 160]}}, "cm")
    mt = t.get("Mthreads")
    assert mt.memory_per_card == (96, 160)
    assert mt.legal_memory == (2, 4, 8, 16, 32, 64, 96, 128, 160)
    for bad in ([], [96, 0], "96", [1.5]):
        with pytest.raises(VendorError, match=r"mthreads\.memoryPerCard in cm"):
            apply_device_config(TABLE, {"mthreads": {"memoryPerCard": bad}}, "cm")


def test_config_file_overrides_reach_the_config_and_nvidia_names_its_row(tmp_path):
    f = tmp_path / "device-config.yaml"
    f.write_text("nvidia: {resourceCountName: example.com/vgpu}\ncambricon: {resourceCountName: cambricon.com/vmlu}\n")
    cfg = build_config({"device_config_file": str(f)}, env={})
    assert cfg.vendors.get("NVIDIA").count_resource == "example.com/vgpu"
    assert cfg.vendors.get("MLU").count_resource == "cambricon.com/vmlu"


@pytest.mark.parametrize(("row", "message"), [
    ({"name": "X", "family": "x", "hook": "magic", "resources": {"count": "x/y"}, "register": {"key": "k"},
      "allocation": {"toAllocate": "a", "allocated": "b"}}, "vendors[0].hook in f.yaml: 'magic' is not one of"),
    ({"name": "X", "family": "x", "resources": {"count": "x/y"}, "register": {"key": "k"}},
     "vendors[0].allocation in f.yaml: allocated is required"),
    ({"name": "X", "family": "x", "resources": {"count": "x/y"}, "register": {"key": "k"}, "memoryUnit": "256",
      "allocation": {"toAllocate": "a", "allocated": "b"}}, "vendors[0].memoryUnit in f.yaml: want an integer"),
    ({"name": "X", "family": "x", "resources": {"count": "nvidia.com/gpu"}, "register": {"key": "k"},
      "allocation": {"toAllocate": "a", "allocated": "b"}}, "resource 'nvidia.com/gpu' belongs to both NVIDIA and X"),
])
def test_bad_rows_are_refused_naming_the_key(row, message):
    with pytest.raises(VendorError) as err:
        apply_device_config(TABLE, {"vendors": [row]}, "f.yaml")
    assert message in str(err.value)


def test_a_bad_row_in_the_device_config_stops_the_role_naming_the_file(tmp_path):
    f = tmp_path / "device-config.yaml"
    f.write_text("vendors: [{name: X, family: x, hook: magic, resources: {count: x/y}, register: {key: k}}]\n")
    with pytest.raises(ConfigError) as err:
        build_config({"device_config_file": str(f)}, env={})
    assert str(f) in str(err.value) and "hook" in str(err.value)


def test_the_table_file_itself_must_be_a_vendor_list():
    with pytest.raises(VendorError, match="want a mapping with a `vendors:` list"):
        parse_vendor_table({"rows": []}, "t.yaml")


def test_the_shipped_table_has_no_duplicate_keys():
    """YAML keeps the last of two equal keys silently; a row must name each key once."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node):
        keys = [loader.construct_object(k) for k, _ in node.value]
        dup = {k for k in keys if keys.count(k) > 1}
        assert not dup, f"duplicate keys {dup} at line {node.start_mark.line + 1}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    path = Path(__file__).resolve().parents[2] / "config" / "vendors.yaml"
    assert yaml.load(path.read_text(), Loader=Strict)["vendors"]
