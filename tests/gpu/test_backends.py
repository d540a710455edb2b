"""GPU backends (hami.gpu): the fake YAML file (defaults, validation errors naming the field, edits
picked up without restart, bad edits keeping the last good list, per-node sections, per-process
samples), the factory, and NVML's pure helpers (ignored XIDs from the environment, sysfs bus ids,
NUMA lookup) plus its clear error when the library cannot load."""

from __future__ import annotations

import os
import tempfile

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami.gpu import GpuBackendError, make_backend
from hami.gpu.fake import FakeBackend, parse_fake_gpus
from hami.gpu.nvml import DEFAULT_IGNORED_XIDS, ignored_xids, numa_node, sysfs_bus_id

U1 = "GPU-0d4c6a5e-0000-4000-8000-000000000001"
U2 = "GPU-0d4c6a5e-0000-4000-8000-000000000002"


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        yaml.safe_dump(doc, fh)
    os.replace(tmp, path)


@pytest.fixture
def fake_file():
    d = tempfile.mkdtemp(dir="/tmp")
    path = os.path.join(d, "gpus.yaml")
    write(path, {"gpus": [
        {"uuid": U1, "memory_mib": 40960},
        {"uuid": U2, "model": "Tesla T4", "memory_mib": 15360, "numa": 1, "utilization": 55,
         "processes": [{"pid": 1234, "sm_util": 40, "memory_mib": 1000}, {"pid": 99, "sm_util": 5}]},
    ]})
    yield path
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def test_fake_defaults_and_values(fake_file):
    b = make_backend("fake", fake_file)
    g1, g2 = b.list_gpus()
    assert (g1.uuid, g1.index, g1.name, g1.memory_total_mib, g1.numa, g1.healthy) == (
        U1, 0, "NVIDIA Fake GPU", 40960, 0, True)
    assert (g2.index, g2.name, g2.numa, g2.utilization, g2.memory_used_mib) == (1, "Tesla T4", 1, 55, 1000)
    assert b.process_utilization(U2) == {1234: 40, 99: 5}
    assert b.process_utilization(U1) == {} and b.process_utilization("GPU-nope") == {}
    assert b.process_memory(U2) == {1234: 1000, 99: 0}


def test_fake_picks_up_edits_and_keeps_last_good_on_bad_edit(fake_file):
    b = FakeBackend(fake_file)
    write(fake_file, {"gpus": [{"uuid": U1, "memory_mib": 40960, "healthy": False}]})
    (g,) = b.list_gpus()
    assert g.healthy is False
    with open(fake_file, "w") as fh:
        fh.write("gpus: [ {uuid: x\n")
    assert [x.uuid for x in b.list_gpus()] == [U1]
    assert "expected ',' or '}'" in b.last_error
    write(fake_file, {"gpus": [{"uuid": U2, "memory_mib": 1}]})
    assert [x.uuid for x in b.list_gpus()] == [U2] and b.last_error == ""


def test_fake_per_node_sections(fake_file):
    write(fake_file, {"nodes": {"a": {"gpus": [{"uuid": U1, "memory_mib": 1}]}, "b": [{"uuid": U2, "memory_mib": 2}]}})
    assert [g.uuid for g in FakeBackend(fake_file, node_name="a").list_gpus()] == [U1]
    assert [g.uuid for g in FakeBackend(fake_file, node_name="b").list_gpus()] == [U2]
    assert FakeBackend(fake_file, node_name="c").list_gpus() == []


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([1], "(top level)"),
        ({"gpus": {"a": 1}}, "gpus"),
        ({"gpus": [{"memory_mib": 1}]}, "gpus[0].uuid"),
        ({"gpus": [{"uuid": U1}]}, "gpus[0].memory_mib"),
        ({"gpus": [{"uuid": U1, "memory_mib": "lots"}]}, "gpus[0].memory_mib"),
        ({"gpus": [{"uuid": U1, "memory_mib": 1, "healthy": "yes"}]}, "gpus[0].healthy"),
        ({"gpus": [{"uuid": U1, "memory_mib": 1, "numa": -1}]}, "gpus[0].numa"),
        ({"gpus": [{"uuid": U1, "memory_mib": 1, "processes": [{"sm_util": 3}]}]}, "gpus[0].processes[0].pid"),
        ({"gpus": [{"uuid": U1, "memory_mib": 1}, {"uuid": U1, "memory_mib": 1}]}, "gpus[1].uuid"),
    ],
    ids=["not-mapping", "gpus-not-list", "no-uuid", "no-memory", "memory-text", "healthy-text", "numa-negative",
         "process-no-pid", "duplicate-uuid"],
)
def test_fake_errors_name_the_field(doc, field):
    with pytest.raises(GpuBackendError) as err:
        parse_fake_gpus(doc, "f.yaml")
    assert f"f.yaml: {field}" in str(err.value)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                        ["gpus", "uuid", "memory_mib", "processes", "pid", "healthy", "numa", "nodes"]), c, max_size=4),
                    max_leaves=12))
def test_fake_parser_raises_only_its_error_type(doc):
    try:
        parse_fake_gpus(doc, "f", node_name="n")
    except GpuBackendError:
        pass


def test_factory_errors():
    with pytest.raises(GpuBackendError, match="--fake-gpus"):
        make_backend("fake", "")
    with pytest.raises(GpuBackendError, match="unknown GPU backend 'cuda'"):
        make_backend("cuda")
    with pytest.raises(GpuBackendError, match="cannot read"):
        make_backend("fake", "/nonexistent/gpus.yaml")


def test_nvml_missing_library_is_a_clear_error(monkeypatch):
    import pynvml

    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(GpuBackendError, match="cannot load NVML.*--gpu-backend fake"):
        make_backend("nvml")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DEFAULT_IGNORED_XIDS),
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, None),
        ({"DP_DISABLE_HEALTHCHECKS": "xids"}, None),
        ({"DP_DISABLE_HEALTHCHECKS": "48, 79"}, DEFAULT_IGNORED_XIDS | {48, 79}),
        ({"DP_ENABLE_HEALTHCHECKS": "13,31"}, DEFAULT_IGNORED_XIDS - {13, 31}),
    ],
    ids=["default", "all", "xids", "extra", "enable"],
)
def test_ignored_xids_follow_hami_environment(env, expected):
    assert ignored_xids(env) == expected


def test_sysfs_bus_id_and_numa_lookup():
    assert sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    root = tempfile.mkdtemp(dir="/tmp")
    for bus, value in (("0000:3b:00.0", "1\n"), ("0000:af:00.0", "-1\n")):
        os.makedirs(os.path.join(root, "bus/pci/devices", bus))
        with open(os.path.join(root, "bus/pci/devices", bus, "numa_node"), "w") as fh:
            fh.write(value)
    assert numa_node("00000000:3B:00.0", root) == 1
    assert numa_node("00000000:AF:00.0", root) == 0  # negative -> 0
    assert numa_node("00000000:01:00.0", root) == 0  # unknown -> 0
