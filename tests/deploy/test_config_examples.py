"""The commented configuration examples in config/.

Covers: config/device-config.yaml and config/node-config.json load through hami's one config builder
with no warnings; the device example says the same as the Helm chart's default device ConfigMap; the
node example resolves exact names before globs (`inference-pool-*`) and merges over the nvidia section;
every node-config key is explained in config/README.md.
"""

from __future__ import annotations

import json

import yaml

from hami.config import build_config, parse_device_config
from hami.device.nodeconfig import resolve_node_config, settings_for_node
from tests.deploy.chart import ROOT, one, rendered

DEVICE = ROOT / "config" / "device-config.yaml"
NODE = ROOT / "config" / "node-config.json"


def _no_warning(message: str) -> None:
    raise AssertionError(message)


def _config():
    warnings: list[str] = []
    cfg = build_config({"device_config_file": str(DEVICE), "node_config_file": str(NODE), "roles": ("node-agent",)},
                       env={}, warn=warnings.append)
    return cfg, warnings


def test_examples_load_without_warnings():
    cfg, warnings = _config()
    assert warnings == []
    assert cfg.nvidia.device_split_count == 10 and cfg.nvidia.gpu_core_policy == "default"
    assert cfg.nvidia.lib_cuda_log_level == "1"
    assert len(cfg.nvidia.mig_profile_allowlist) == 2
    assert [n.name for n in cfg.node_configs] == ["gpu-node-01", "inference-pool-*", "training-pool-*"]


def test_device_example_matches_the_chart_default():
    chart_text = one(rendered("default"), "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    chart = parse_device_config(yaml.safe_load(chart_text), "chart", _no_warning)
    example = parse_device_config(yaml.safe_load(DEVICE.read_text()), str(DEVICE), _no_warning)
    assert chart == example
    # and it is really commented
    assert sum(1 for line in DEVICE.read_text().splitlines() if line.lstrip().startswith("#")) >= 20


def test_node_example_exact_name_then_glob_then_defaults():
    cfg, _ = _config()
    assert resolve_node_config(cfg.node_configs, "gpu-node-01").name == "gpu-node-01"
    pool = settings_for_node(cfg.nvidia, cfg.node_configs, "inference-pool-7")
    assert (pool.split_count, pool.memory_scaling) == (20, 1.5)
    training = settings_for_node(cfg.nvidia, cfg.node_configs, "training-pool-a")
    assert (training.split_count, training.enable_numa_topology) == (5, True)
    exact = settings_for_node(cfg.nvidia, cfg.node_configs, "gpu-node-01")
    assert exact.split_count == 4 and exact.filter.uuid == ("GPU-0d4c6a5e-0000-4000-8000-000000000003",)
    assert exact.lib_cuda_log_level == "0"
    other = settings_for_node(cfg.nvidia, cfg.node_configs, "cpu-node-1")
    assert other.split_count == 10 and other.memory_scaling == 1.0
    assert resolve_node_config(cfg.node_configs, "inference-pool") is None


def test_every_node_key_is_documented():
    readme = (ROOT / "config" / "README.md").read_text()
    keys = {k for entry in json.loads(NODE.read_text())["nodeconfig"] for k in entry}
    keys |= {"preconfigureddevicememory", "migstrategy", "enablenumatopology"}
    for key in keys:
        assert f"`{key}`" in readme, key
