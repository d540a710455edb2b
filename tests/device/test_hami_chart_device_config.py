"""HAMi v2.10's own chart device config loads, every section of it.

`tests/device/data/hami-v2.10-device-config.yaml` is HAMi v2.10.0's
charts/hami/templates/scheduler/device-configmap.yaml rendered with the chart's default values.
Covers: the whole file builds a Config (before, the `kunlun:` section stopped the role with exit 2:
"resource 'kunlunxin.com/xpu' belongs to both kunlun and XPU"); the sections of families with
several rows name each row's own resources (`kunlun:` resourceCountName the whole XPU,
resourceV*Name the vXPU; `metax:` resourceCountName the exclusive GPU, resourceV*Name the sGPU);
`vnpus[].memoryFactor` reaches the Ascend rows; the v2.10 devices' sections (`amd:`, `biren:`,
`vastai:`) name their rows' resources.
"""

from __future__ import annotations

from pathlib import Path

from hami.config import build_config

CHART_CONFIG = Path(__file__).parent / "data" / "hami-v2.10-device-config.yaml"


def test_every_section_of_hami_v210_chart_device_config_loads():
    cfg = build_config({"device_config_file": str(CHART_CONFIG)}, env={})
    t = cfg.vendors
    assert t.get("kunlun").count_resource == "kunlunxin.com/xpu"
    xpu = t.get("XPU")
    assert (xpu.count_resource, xpu.memory_resource) == ("kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory")
    assert t.get("Metax-GPU").count_resource == "metax-tech.com/gpu"
    sgpu = t.get("Metax-SGPU")
    assert (sgpu.count_resource, sgpu.memory_resource, sgpu.core_resource) == (
        "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore")
    assert sgpu.topology_aware is False
    mlu = t.get("MLU")
    assert (mlu.count_resource, mlu.memory_resource, mlu.core_resource) == (
        "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore")
    assert t.get("DCU").count_resource == "hygon.com/dcunum"
    assert t.get("GCU").count_resource == "enflame.com/gcu"
    drs = t.get("Enflame")
    assert (drs.count_resource, drs.memory_resource, drs.core_resource) == (
        "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core")
    assert t.get("AWSNeuron").core_resource == "aws.amazon.com/neuroncore"
    assert t.get("Mthreads").count_resource == "mthreads.com/vgpu"
    b3 = t.get("Ascend910B3")
    assert (b3.core_resource, b3.memory_allocatable, b3.memory_unit) == ("huawei.com/Ascend910B3-core", 65536, 1)
    assert t.get("Ascend310P").memory_allocatable == 21527  # the chart's value, not the shipped row's
    amd = t.get("AMD")
    assert (amd.count_resource, amd.memory_resource, amd.core_resource) == (
        "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores")
    assert t.get("Biren").count_resource == "birentech.com/gpu"
    assert t.get("Vastai").count_resource == "vastaitech.com/va"
    assert cfg.nvidia.resource_count_name == "nvidia.com/gpu"
    # No two rows share a count resource (what made the kunlun section fatal).
    counts = [v.count_resource for v in t.vendors]
    assert len(counts) == len(set(counts))


def test_a_kunlun_section_renames_only_its_own_rows(tmp_path):
    f = tmp_path / "dc.yaml"
    f.write_text("kunlun: {resourceCountName: example.com/xpu, resourceVCountName: example.com/vxpu,"
                 " resourceVMemoryName: example.com/vxpu-mem}\n")
    t = build_config({"device_config_file": str(f)}, env={}).vendors
    assert t.get("kunlun").count_resource == "example.com/xpu"
    assert (t.get("XPU").count_resource, t.get("XPU").memory_resource) == ("example.com/vxpu", "example.com/vxpu-mem")
    assert t.by_count["example.com/xpu"].name == "kunlun"


# HAMi v2.10.0's device table: pkg/scheduler/config/config.go InitDevicesWithConfig, in its order
# (the Ascend `vnpus` chips and the Iluvatar chips as one entry each), with the status-table row
# of docs/vendors.md that covers it.
HAMI_V210_DEVICES = {
    "NVIDIA": "NVIDIA", "Cambricon": "Cambricon MLU", "Hygon": "Hygon DCU",
    "Enflame GCU": "Enflame GCU (whole cards) / DRS vGCU", "Enflame DRS vGCU": "Enflame GCU (whole cards) / DRS vGCU",
    "Mthreads": "Mthreads", "MetaX GPU": "MetaX sGPU / GPU (exclusive)", "MetaX sGPU": "MetaX sGPU / GPU (exclusive)",
    "Kunlunxin XPU": "Kunlunxin XPU / vXPU", "Kunlunxin vXPU": "Kunlunxin XPU / vXPU", "AWS Neuron": "AWS Neuron",
    "AMD": "AMD Instinct vGPU (MI300X)", "Vastai": "Vastai", "Biren": "Biren",
    "Ascend": "Huawei Ascend 910A / 910B2 / 910B3 / 910B4 / 910B4-1 / 910C / 310P",
    "Iluvatar": "Iluvatar CoreX MR-V100 / MR-V50 / BI-V150 / BI-V100",
}


def test_the_vendor_status_table_lists_every_device_of_hami_v210():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "vendors.md").read_text(encoding="utf-8")
    table = doc[doc.index("## Status per vendor"):]
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")}
    missing = {device: row for device, row in HAMI_V210_DEVICES.items() if row not in rows}
    assert not missing, f"docs/vendors.md's status table has no row for {missing}"
