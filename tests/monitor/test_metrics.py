"""The scrape-time collector: exact sample values of every HAMi metric through the registry for
each layout, skipped devices and init containers, last-kernel rules, host metrics from the fake
GPU backend, host-PID repair restoring utilization (the seed-003 bug), bad files counted by reason
with one warning per file and never failing the scrape, legacy names, and `promtool check
metrics` on the exposition (promtool from PATH or .ci/tools; missing promtool fails the test)."""

from __future__ import annotations

import os
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami.gpu.fake import FakeBackend
from hami.monitor.hostpid import cgroup_line, write_fake_proc
from hami.monitor.metrics import MonitorCollector
from hami.monitor.shm import DeviceMemory
from hami.monitor.shmwrite import Dev, Proc
from tests.tools import promtool

from ._fixtures import U0, U1, VERSIONS, cache_file, fake_gpus, pod

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UID = "0a1b2c3d-1111-4000-8000-000000000001"
UID2 = "0a1b2c3d-2222-4000-8000-000000000002"
NOW = 1_700_000_100


def make(tmp_path, pods, *, backend=None, legacy=False, warn=None):
    reg = CollectorRegistry(auto_describe=False)
    col = MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="node-1", pods=lambda: pods,
                           backend=backend, proc_root=str(tmp_path / "proc"), legacy=legacy,
                           warn=warn, clock=lambda: NOW)
    reg.register(col)
    return reg, col


def lbl(container="main", d=0, uuid=U0, name="p1"):
    return {"namespace": "ns", "pod": name, "container": container, "node": "n1", "vdevice_index": str(d),
            "device_uuid": uuid, "zone": "vGPU"}


@pytest.mark.parametrize("version", VERSIONS)
def test_container_metrics_have_hami_names_labels_and_values(tmp_path, version):
    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0, limit=4 << 30, sm_limit=30), Dev(U1)],
               [Proc(pid=10, hostpid=4010, used={0: DeviceMemory(context_size=300, module_size=0, data_size=700,
                                                                  total=1000)}, sm_util={0: 20}),
                Proc(pid=11, hostpid=4011, used={0: 24, 1: 5 << 20}, sm_util={0: 5, 1: 9}),
                Proc(pid=12, hostpid=4012, status=0, used={0: 1 << 30}, sm_util={0: 50})],
               version, last_kernel_time=NOW - 30)
    reg, _ = make(tmp_path, [pod(UID)])
    g = reg.get_sample_value
    exited = 1 << 30  # HAMi sums every slot below proc_num, the exited (status 0) one too
    assert g("hami_vgpu_memory_used_bytes", lbl()) == 1024 + exited
    assert g("hami_container_device_memory_bytes", lbl()) == 1024 + exited
    assert g("hami_vgpu_memory_limit_bytes", lbl()) == 4 << 30
    assert g("hami_vgpu_memory_context_bytes", lbl()) == 300
    assert g("hami_vgpu_memory_module_bytes", lbl()) == 0
    assert g("hami_vgpu_memory_buffer_bytes", lbl()) == 724 + exited
    assert g("hami_container_device_utilization_ratio", lbl()) == 75
    assert g("hami_vgpu_core_used_percent", lbl()) == 75
    assert g("hami_vgpu_core_limit_percent", lbl()) == 30
    assert g("hami_vgpu_memory_used_bytes", lbl(d=1, uuid=U1)) == 5 << 20
    assert g("hami_vgpu_core_limit_percent", lbl(d=1, uuid=U1)) == 100
    last = g("hami_container_last_kernel_elapsed_seconds", lbl())
    assert last == (None if version == "0" else 30)  # v0 has no last_kernel_time
    assert g("hami_monitor_cache_files") == 1


def test_last_kernel_in_the_future_reads_zero_and_unset_is_absent(tmp_path):
    root = str(tmp_path / "containers")
    cache_file(root, UID, "main", [Dev(U0)], [Proc(pid=1)], "1.2", last_kernel_time=NOW + 50)
    cache_file(root, UID2, "main", [Dev(U0)], [Proc(pid=1)], "1.2", last_kernel_time=0)
    reg, _ = make(tmp_path, [pod(UID), pod(UID2, name="p2")])
    assert reg.get_sample_value("hami_container_last_kernel_elapsed_seconds", lbl()) == 0
    assert reg.get_sample_value("hami_container_last_kernel_elapsed_seconds", lbl(name="p2")) is None
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", lbl(name="p2")) == 0


def test_uninitialised_devices_unknown_pods_and_init_containers_are_not_reported(tmp_path):
    root = str(tmp_path / "containers")
    cache_file(root, UID, "main", [Dev(U0), Dev(U1)], [Proc(pid=1, used={0: 7, 1: 8})], "1.2", device_num=3)
    cache_file(root, UID, "setup", [Dev(U0)], [Proc(pid=2, used={0: 9})], "1.2")
    cache_file(root, UID2, "main", [Dev(U0)], [Proc(pid=3, used={0: 9})], "1.2")
    reg, _ = make(tmp_path, [pod(UID, init=("setup",))])
    text = generate_latest(reg).decode()
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", lbl()) == 7
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", lbl(d=1, uuid=U1)) == 8
    assert 'vdevice_index="2"' not in text  # device 2 has no UUID yet
    assert 'container="setup"' not in text and 'pod="p2"' not in text


def test_host_metrics_come_from_the_gpu_backend(tmp_path):
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [
        {"uuid": U0, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "memory_used_mib": 1024,
         "utilization": 55, "memory_utilization": 12},
        {"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "index": 1},
    ])
    reg, _ = make(tmp_path, [], backend=FakeBackend(f))
    host = {"node": "node-1", "device_index": "0", "device_uuid": U0,
            "device_type": "NVIDIA A100-SXM4-40GB", "zone": "vGPU"}
    assert reg.get_sample_value("hami_host_gpu_memory_used_bytes", host) == 1024 * 1024 * 1024
    assert reg.get_sample_value("hami_host_gpu_utilization_ratio", host) == 55
    assert reg.get_sample_value("hami_host_gpu_memory_controller_utilization_ratio", host) == 12
    assert reg.get_sample_value("hami_host_gpu_utilization_ratio", {**host, "device_index": "1",
                                                                     "device_uuid": U1}) == 0


def test_broken_backend_costs_only_host_metrics(tmp_path):
    class Broken:
        def list_gpus(self):
            raise RuntimeError("NVML: driver not loaded")

        def process_utilization(self, uuid):
            raise RuntimeError("NVML: driver not loaded")

    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0)], [Proc(pid=5, hostpid=5, used={0: 3})])
    warnings = []
    reg, _ = make(tmp_path, [pod(UID)], backend=Broken(), warn=lambda msg, **kw: warnings.append(msg))
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", lbl()) == 3
    assert any("listing GPUs failed" in w for w in warnings)


def test_hostpid_repair_restores_utilization_hami_reads_as_zero(tmp_path):
    # The seed-003 case: HAMi-core stored the container PID as host PID; NVML samples carry host PIDs.
    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0), Dev(U1)],
               [Proc(pid=12, hostpid=12, used={0: 100}), Proc(pid=13, hostpid=0, used={1: 5}),
                Proc(pid=14, hostpid=4014, used={0: 1}, sm_util={0: 6})])
    proc = str(tmp_path / "proc")
    write_fake_proc(proc, 36103, [36103, 12], cgroup_line(UID, "cid-main"))
    write_fake_proc(proc, 36104, [36104, 13], cgroup_line(UID, "cid-main"))
    write_fake_proc(proc, 36200, [36200, 12], cgroup_line(UID2, "cid-other"))  # same ns pid, other pod
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [
        {"uuid": U0, "memory_mib": 40960, "processes": [{"pid": 36103, "sm_util": 41}, {"pid": 4014, "sm_util": 6},
                                                         {"pid": 36200, "sm_util": 90}]},
        {"uuid": U1, "memory_mib": 40960, "index": 1, "processes": [{"pid": 36104, "sm_util": 17}]},
    ])
    reg, _ = make(tmp_path, [pod(UID, cids={"main": "cid-main"})], backend=FakeBackend(f))
    assert reg.get_sample_value("hami_container_device_utilization_ratio", lbl()) == 47  # 41 repaired + 6
    assert reg.get_sample_value("hami_vgpu_core_used_percent", lbl(d=1, uuid=U1)) == 17
    assert reg.get_sample_value("hami_monitor_hostpid_repaired_slots_current") == 2
    assert reg.get_sample_value("hami_monitor_hostpid_repaired_slots_total") == 2
    assert reg.get_sample_value("hami_monitor_hostpid_unresolved_slots") == 0
    reg.get_sample_value("hami_monitor_hostpid_repaired_slots_total")  # scrape again: distinct slots
    assert reg.get_sample_value("hami_monitor_hostpid_repaired_slots_total") == 2


def test_without_proc_entries_the_slot_stays_unresolved(tmp_path):
    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0)], [Proc(pid=12, hostpid=12, sm_util={0: 0})])
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 1, "processes": [{"pid": 99,
                                                                                             "sm_util": 5}]}])
    reg, _ = make(tmp_path, [pod(UID)], backend=FakeBackend(f))
    assert reg.get_sample_value("hami_container_device_utilization_ratio", lbl()) == 0
    assert reg.get_sample_value("hami_monitor_hostpid_unresolved_slots") == 1


def _bad_files(root):
    def put(uid, data):
        d = os.path.join(root, f"{uid}_main")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "x.cache"), "wb") as fh:
            fh.write(data)

    put("bad-empty", b"")
    put("bad-small", b"\x4e\xf7\x2f\x01\x01")
    put("bad-magic", bytes(2_008_953))
    import struct
    put("bad-version", struct.pack("<iII", 19920718, 7, 0) + bytes(2_008_953 - 12))
    d = os.path.join(root, "bad-count_main")
    os.makedirs(d)
    for n in ("a.cache", "b.cache", "libvgpu.so"):
        open(os.path.join(d, n), "w").close()


def test_bad_files_are_counted_by_reason_warned_once_and_never_fail_the_scrape(tmp_path):
    root = str(tmp_path / "containers")
    cache_file(root, UID, "main", [Dev(U0)], [Proc(pid=1, used={0: 42})])
    _bad_files(root)
    uids = ["bad-empty", "bad-small", "bad-magic", "bad-version", "bad-count"]
    warnings = []
    reg, _ = make(tmp_path, [pod(UID)] + [pod(u, name=u) for u in uids],
                  warn=lambda msg, **kw: warnings.append(kw["path"]))
    generate_latest(reg)
    text = generate_latest(reg).decode()  # second scrape: counted again, warned no more
    samples = {(s.name, s.labels.get("reason")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("hami_vgpu_memory_used_bytes", None)] == 42
    for reason in ("empty", "too_small", "bad_magic", "unknown_version", "cache_count"):
        assert samples[("hami_monitor_cache_errors_total", reason)] == 2, reason
    assert samples[("hami_monitor_cache_errors_total", "torn")] == 0
    assert len(warnings) == len(set(warnings)) == 5


def test_exposition_passes_promtool(tmp_path):
    root = str(tmp_path / "containers")
    for i, version in enumerate(VERSIONS):
        cache_file(root, f"{UID}{i}", "main", [Dev(U0, limit=1 << 30), Dev(U1)],
                   [Proc(pid=1, hostpid=9, used={0: 5, 1: 6}, sm_util={0: 3})], version, last_kernel_time=NOW - 1)
    _bad_files(root)
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 40960, "utilization": 3}])
    pods = [pod(f"{UID}{i}", name=f"p{i}") for i in range(4)] + [pod("bad-magic", name="bm")]
    reg, _ = make(tmp_path, pods, backend=FakeBackend(f))
    from hami.monitor.metrics import render

    body = render(reg.collect())  # what the role serves on /metrics
    res = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()
    assert body.count(b"hami_vgpu_memory_used_bytes{") == 8


def test_legacy_metrics_carry_hami_legacy_names_and_only_their_own_lint(tmp_path):
    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0, limit=1 << 30)],
               [Proc(pid=1, hostpid=9, used={0: DeviceMemory(context_size=10, data_size=20, total=50)},
                     sm_util={0: 3})], "1.2", last_kernel_time=NOW - 4)
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 40960, "utilization": 3}])
    reg, _ = make(tmp_path, [pod(UID)], backend=FakeBackend(f), legacy=True)
    old = {"podnamespace": "ns", "podname": "p1", "ctrname": "main", "vdeviceid": "0", "deviceuuid": U0,
           "zone": "vGPU"}
    g = reg.get_sample_value
    assert g("vGPU_device_memory_usage_in_bytes", old) == 50
    assert g("vGPU_device_memory_limit_in_bytes", old) == 1 << 30
    assert g("Device_utilization_desc_of_container", old) == 3
    assert g("Device_last_kernel_of_container", old) == 4
    assert g("Device_memory_desc_of_container", {**old, "context": "10", "module": "0", "data": "20",
                                                  "offset": "20"}) == 50
    host = {"nodeid": "node-1", "deviceidx": "0", "deviceuuid": U0, "devicetype": "NVIDIA-NVIDIA Fake GPU",
            "zone": "vGPU"}
    assert g("HostCoreUtilization", host) == 3 and g("HostGPUMemoryUsage", host) == 0
    res = subprocess.run([promtool(), "check", "metrics"], input=generate_latest(reg), capture_output=True,
                         timeout=60)
    problems = [ln for ln in (res.stdout + res.stderr).decode().splitlines() if ln.strip()]
    assert problems and all("camelCase" in ln for ln in problems), problems
    assert {ln.split()[0] for ln in problems} <= {"HostCoreUtilization", "HostGPUMemoryUsage",
                                                   "vGPU_device_memory_usage_in_bytes",
                                                   "vGPU_device_memory_limit_in_bytes"}


def test_build_info_is_exported(tmp_path):
    reg, _ = make(tmp_path, [])
    text = generate_latest(reg).decode()
    assert "hami_build_info{" in text and 'compiler="cpython"' in text


def test_fast_renderer_is_byte_identical_to_generate_latest(tmp_path):
    from hami.monitor.metrics import BuildInfo, render

    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0, limit=1 << 30), Dev(U1)],
               [Proc(pid=1, hostpid=9, used={0: 123456789, 1: 7}, sm_util={0: 3})], "1.2", last_kernel_time=NOW - 4)
    _bad_files(str(tmp_path / "containers"))
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 40960, "utilization": 3}])
    reg, col = make(tmp_path, [pod(UID), pod("bad-magic", name="bm")], backend=FakeBackend(f), legacy=True)
    col.build = BuildInfo(version="1.0", revision='we"ird\\rev\nx', build_date="2026-11-22")
    families = list(reg.collect())  # one scrape (counters move between scrapes)

    class Fixed:
        def collect(self):
            return families

    fixed = CollectorRegistry(auto_describe=False)
    fixed.register(Fixed())
    body = render(families)
    assert body == generate_latest(fixed)
    assert b'revision="we\\"ird\\\\rev\\nx"' in body


def test_mig_device_info_comes_from_the_allocations_annotation(tmp_path):
    import json

    p = pod(UID, containers=("main",), init=("setup",))
    p["metadata"]["annotations"] = {"hami.io/vgpu-mig-allocations": json.dumps([
        {"containerIndex": 1, "deviceIndex": 0, "gpuUUID": U0, "profile": "1g.10gb",
         "placement": {"start": 6, "size": 1}, "migUUID": "MIG-aaaa", "gpuInstanceID": 13, "computeInstanceID": 0},
        {"containerIndex": 1, "deviceIndex": 1, "gpuUUID": U1, "profile": "2g.20gb",
         "placement": {"start": 0, "size": 2}},  # not applied yet: no runtime identity
    ])}
    bad = pod(UID2, name="p2")
    bad["metadata"]["annotations"] = {"hami.io/vgpu-mig-allocations": "[{"}
    reg, _ = make(tmp_path, [p, bad], legacy=True)
    want = {"namespace": "ns", "pod": "p1", "container": "main", "node": "n1", "vdevice_index": "0", "device_uuid": U0,
            "mig_uuid": "MIG-aaaa", "profile": "1g.10gb", "gpu_instance_id": "13", "compute_instance_id": "0",
            "zone": "vGPU"}
    assert reg.get_sample_value("hami_mig_device_info", want) == 1
    assert reg.get_sample_value("MigInfo", {"podnamespace": "ns", "podname": "p1", "ctrname": "main",
                                            "vdeviceid": "0", "deviceuuid": U0, "instanceid": "13",
                                            "zone": "vGPU"}) == 1
    assert generate_latest(reg).count(b"hami_mig_device_info{") == 1


def test_nvml_errors_leave_that_gpus_metrics_out_and_are_counted_never_zero(tmp_path):
    """GPU U0's utilization reads fail (NVML error): its host utilization and its containers'
    repaired SM utilization are absent, U1 still reports, and each failed read is counted."""
    import dataclasses

    from hami.gpu.backend import GpuBackendError

    cache_file(str(tmp_path / "containers"), UID, "main", [Dev(U0), Dev(U1)],
               [Proc(pid=12, hostpid=12, used={0: 100}), Proc(pid=13, hostpid=0, used={1: 5})])
    proc = str(tmp_path / "proc")
    write_fake_proc(proc, 36103, [36103, 12], cgroup_line(UID, "cid-main"))
    write_fake_proc(proc, 36104, [36104, 13], cgroup_line(UID, "cid-main"))
    fake = FakeBackend(fake_gpus(str(tmp_path / "gpus.yaml"), [
        {"uuid": U0, "memory_mib": 40960, "utilization": 60, "processes": [{"pid": 36103, "sm_util": 41}]},
        {"uuid": U1, "memory_mib": 40960, "index": 1, "utilization": 20,
         "processes": [{"pid": 36104, "sm_util": 17}]},
    ]))

    class LosingU0:
        name = "fake"

        def list_gpus(self):
            return [dataclasses.replace(g, utilization=None, memory_utilization=None) if g.uuid == U0 else g
                    for g in fake.list_gpus()]

        def process_utilization(self, uuid):
            if uuid == U0:
                raise GpuBackendError(f"nvml: process utilization of {uuid}: GPU is lost")
            return fake.process_utilization(uuid)

    reg, _ = make(tmp_path, [pod(UID, cids={"main": "cid-main"})], backend=LosingU0(), warn=lambda *a, **k: None)
    host0 = {"node": "node-1", "device_index": "0", "device_uuid": U0,
             "device_type": "NVIDIA Fake GPU", "zone": "vGPU"}
    host1 = {**host0, "device_index": "1", "device_uuid": U1}
    assert reg.get_sample_value("hami_host_gpu_utilization_ratio", host0) is None
    assert reg.get_sample_value("hami_host_gpu_utilization_ratio", host1) == 20
    assert reg.get_sample_value("hami_container_device_utilization_ratio", lbl()) is None
    assert reg.get_sample_value("hami_vgpu_core_used_percent", lbl()) is None
    assert reg.get_sample_value("hami_vgpu_memory_used_bytes", lbl()) == 100  # memory comes from the cache file
    assert reg.get_sample_value("hami_vgpu_core_used_percent", lbl(d=1, uuid=U1)) == 17
    # every get_sample_value above was a scrape (6 so far); this one is the 7th: one failed read of each per scrape
    errors = {s.labels["call"]: s.value for f in text_string_to_metric_families(generate_latest(reg).decode())
              if f.name == "hami_monitor_gpu_backend_errors" for s in f.samples if s.name.endswith("_total")}
    assert errors == {"process_utilization": 7.0, "utilization": 7.0}
