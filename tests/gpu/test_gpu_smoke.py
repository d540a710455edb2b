"""scripts/gpu-smoke in its dry-run mode (fake backend + saved nvidia-smi output), so the script a
GPU machine runs keeps working in CI, and the nvidia-smi XML parser.

Covers: a fake node matching the saved `nvidia-smi -q -x` passes every check (discovery, NUMA from
sysfs, register round trip, Allocate envs, health within tolerance, one MIG create/destroy of the
smallest profile leaving the card as found) and exits 0 with a table; a memory, NUMA or
temperature disagreement is a MISMATCH row and exit 1; `--no-mig` skips the cycle; the parser
reads N/A as absent, lists MIG devices, and refuses XML that is not nvidia-smi's naming the element.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hami.gpu.smi import parse_smi_xml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
A = "GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111"
T = "GPU-91ab03c4-77de-4c0a-8b21-222222222222"


def smi_xml(a_mem=40960, a_temp=41, mig_a="Disabled"):
    return f"""<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version>
  <gpu id="00000000:3B:00.0">
    <product_name>NVIDIA A100-SXM4-40GB</product_name>
    <uuid>{A}</uuid>
    <minor_number>0</minor_number>
    <mig_mode><current_mig>{mig_a}</current_mig><pending_mig>{mig_a}</pending_mig></mig_mode>
    <fb_memory_usage><total>{a_mem} MiB</total><used>0 MiB</used></fb_memory_usage>
    <temperature><gpu_temp>{a_temp} C</gpu_temp></temperature>
    <gpu_power_readings><power_draw>61.20 W</power_draw></gpu_power_readings>
  </gpu>
  <gpu id="00000000:86:00.0">
    <product_name>Tesla T4</product_name>
    <uuid>{T}</uuid>
    <minor_number>1</minor_number>
    <mig_mode><current_mig>N/A</current_mig></mig_mode>
    <fb_memory_usage><total>15360 MiB</total></fb_memory_usage>
    <temperature><gpu_temp>35 C</gpu_temp></temperature>
    <gpu_power_readings><power_draw>N/A</power_draw></gpu_power_readings>
  </gpu>
</nvidia_smi_log>
"""


@pytest.fixture
def node(tmp_path):
    sysfs = tmp_path / "sys"
    for bus, numa in (("0000:3b:00.0", 1), ("0000:86:00.0", 0)):
        (sysfs / "bus/pci/devices" / bus).mkdir(parents=True)
        (sysfs / "bus/pci/devices" / bus / "numa_node").write_text(f"{numa}\n")
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(yaml.safe_dump({"gpus": [
        {"uuid": A, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 1, "minor": 0,
         "mig": {"enabled": False}, "telemetry": {"temperature_c": 42, "power_w": 60.5, "power_limit_w": 400}},
        {"uuid": T, "model": "Tesla T4", "memory_mib": 15360, "numa": 0, "minor": 1, "index": 1,
         "telemetry": {"temperature_c": 35}},
    ]}))
    return tmp_path, gpus, sysfs


def run(tmp_path, gpus, sysfs, xml, *extra):
    path = tmp_path / "smi.xml"
    path.write_text(xml)
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gpu-smoke"), "--fake-gpus", str(gpus),
                           "--smi-xml", str(path), "--sysfs", str(sysfs), *extra],
                          capture_output=True, text=True, timeout=60)


def test_matching_node_passes_every_check_and_leaves_the_card_as_found(node):
    tmp_path, gpus, sysfs = node
    res = run(tmp_path, gpus, sysfs, smi_xml())
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "MISMATCH" not in out and "0 mismatch(es)" in out
    for row in ("GPU count", "NUMA", "register round trip UUIDs", "Allocate NVIDIA_VISIBLE_DEVICES",
                "temperature C", "create 1g.5gb@0", "card as found"):
        assert row in out, row
    assert "power_w" in out.split("GPU-91ab03c4")[-1]  # the T4 reports no power: listed as omitted


@pytest.mark.parametrize(("xml", "row"), [
    (smi_xml(a_mem=81920), "memory MiB"),
    (smi_xml(a_temp=70), "temperature C"),
    (smi_xml(mig_a="Enabled"), "MIG mode"),
])
def test_disagreement_is_a_mismatch_and_exit_1(node, xml, row):
    tmp_path, gpus, sysfs = node
    res = run(tmp_path, gpus, sysfs, xml, "--no-mig")
    assert res.returncode == 1
    bad = [ln for ln in res.stdout.splitlines() if ln.rstrip().endswith("MISMATCH")]
    assert len(bad) == 1 and row in bad[0]
    assert "--no-mig" in res.stdout


def test_numa_disagreement_is_a_mismatch(node):
    tmp_path, gpus, sysfs = node
    (sysfs / "bus/pci/devices/0000:86:00.0/numa_node").write_text("1\n")
    res = run(tmp_path, gpus, sysfs, smi_xml(), "--no-mig")
    assert res.returncode == 1 and any("NUMA" in ln and "MISMATCH" in ln for ln in res.stdout.splitlines())


def test_parser_reads_na_as_absent_and_lists_mig_devices():
    xml = smi_xml().replace("<gpu_power_readings><power_draw>61.20 W</power_draw></gpu_power_readings>",
                            "<mig_devices><mig_device><uuid>MIG-abc</uuid></mig_device></mig_devices>")
    a, t = parse_smi_xml(xml)
    assert (a.memory_total_mib, a.minor, a.mig_mode, a.temperature_c, a.power_w) == (40960, 0, "Disabled", 41.0, None)
    assert a.mig_devices == ("MIG-abc",) and a.bus_id == "00000000:3B:00.0"
    assert t.mig_mode is None and t.power_w is None and t.name == "Tesla T4"
    with pytest.raises(ValueError, match="<html>"):
        parse_smi_xml("<html></html>")
    with pytest.raises(ValueError, match=r"gpu\[0\] has no <uuid>"):
        parse_smi_xml("<nvidia_smi_log><gpu/></nvidia_smi_log>")


def test_parser_reads_a_real_h100_on_driver_580():
    """Saved from the lent H100 (docs/gpu-validation.md): power is only instant_/average_power_draw there."""
    xml = (Path(__file__).parent / "data" / "h100-driver-580.159.04-smi.xml").read_text()
    (gpu,) = parse_smi_xml(xml)
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.memory_total_mib == 81559 and gpu.minor == 0
    assert gpu.uuid == "GPU-d67ebd98-fa09-34b8-a05d-f46a7e4b72c9" and gpu.mig_mode == "Disabled"
    assert gpu.power_w == 82.40 and gpu.temperature_c is not None

