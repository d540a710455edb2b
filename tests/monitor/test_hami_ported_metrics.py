"""HAMi's cmd/vGPUmonitor metrics tests ported onto hami.monitor.metrics.MonitorCollector over real
cache files: metrics_container_test.go (TestCollectContainerMetrics values and labels, no
last-kernel sample without kernel activity, a UUID that is not valid UTF-8 skipped),
metrics_test.go (host metrics carry `node` / legacy `nodeid`, memory-controller utilization value)
and pathmonitor_test.go TestIsVaildPod (a cache dir of an unknown pod reports nothing)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from hami.gpu.fake import FakeBackend
from hami.monitor.metrics import MonitorCollector
from hami.monitor.shm import DeviceMemory
from hami.monitor.shmwrite import Dev, Proc

from ._fixtures import cache_file, fake_gpus, pod

TEST_UUID = "GPU-12345678-1234-1234-1234-123456789012"  # 40 chars
UID = "0a1b2c3d-1111-4000-8000-000000000001"
NOW = 160


def collect(tmp_path, pods, *, backend=None, legacy=False):
    reg = CollectorRegistry(auto_describe=False)
    reg.register(MonitorCollector(cache_dir=str(tmp_path / "containers"), node_name="test-node", pods=lambda: pods,
                                  backend=backend, proc_root=str(tmp_path / "proc"), legacy=legacy,
                                  clock=lambda: NOW))
    return reg


def trainer(uid=UID):
    p = pod(uid, name="trainer-0", namespace="team-a", containers=("worker",))
    return p


LABELS = {"namespace": "team-a", "pod": "trainer-0", "container": "worker", "node": "n1", "vdevice_index": "0",
          "device_uuid": TEST_UUID, "zone": "vGPU"}


def test_collect_container_metrics(tmp_path):
    """TestCollectContainerMetrics: total 8000, limit 10000, ctx 1000, mod 500, buf 300, sm 42, kernel 60 s ago."""
    cache_file(str(tmp_path / "containers"), UID, "worker", [Dev(TEST_UUID, limit=10000)],
               [Proc(pid=1, hostpid=11, used={0: DeviceMemory(context_size=1000, module_size=500, data_size=300,
                                                              total=8000)}, sm_util={0: 42})],
               "1.2", last_kernel_time=100)
    g = collect(tmp_path, [trainer()]).get_sample_value
    want = {
        "hami_vgpu_memory_used_bytes": 8000,
        "hami_vgpu_memory_limit_bytes": 10000,
        "hami_container_device_memory_bytes": 8000,
        "hami_container_device_utilization_ratio": 42,
        "hami_vgpu_memory_context_bytes": 1000,
        "hami_vgpu_memory_module_bytes": 500,
        "hami_vgpu_memory_buffer_bytes": 300,
        "hami_container_last_kernel_elapsed_seconds": 60,
    }
    assert {name: g(name, LABELS) for name in want} == want


def test_collect_container_metrics_no_kernel_activity(tmp_path):
    """TestCollectContainerMetricsNoKernelActivity: no last-kernel sample, the others still there."""
    cache_file(str(tmp_path / "containers"), UID, "worker", [Dev(TEST_UUID)], [], "1.2", last_kernel_time=0)
    g = collect(tmp_path, [trainer()]).get_sample_value
    assert g("hami_container_last_kernel_elapsed_seconds", LABELS) is None
    assert g("hami_vgpu_memory_used_bytes", LABELS) == 0
    assert g("hami_vgpu_memory_limit_bytes", LABELS) == 0


def test_collect_container_metrics_skips_invalid_utf8_uuid(tmp_path):
    """TestCollectContainerMetricsSkipsInvalidUTF8UUID: 40 bytes, not UTF-8 -> no container sample."""
    path = cache_file(str(tmp_path / "containers"), UID, "worker", [Dev("G" * 40)], [], "1.2")
    with open(path, "r+b") as fh:  # first UUID byte -> 0xff (uuids[] is at 64 in v1)
        fh.seek(64)
        fh.write(b"\xff")
    reg = collect(tmp_path, [trainer()])
    names = {s.name for m in reg.collect() for s in m.samples}
    assert not names & {"hami_vgpu_memory_used_bytes", "hami_container_device_memory_bytes"}


def test_unknown_pod_reports_nothing(tmp_path):
    """pathmonitor_test.go TestIsVaildPod: only dirs of pods that exist are reported."""
    cache_file(str(tmp_path / "containers"), "789", "worker", [Dev(TEST_UUID)], [Proc(pid=1, used={0: 5})], "1.2")
    reg = collect(tmp_path, [trainer("123"), trainer("456")])
    names = {s.name for m in reg.collect() for s in m.samples}
    assert "hami_vgpu_memory_used_bytes" not in names


def test_host_metrics_node_label_and_memory_controller_utilization(tmp_path):
    """TestHostGPUMetricsDescriptorsIncludeNodeLabel / TestCollectMemoryControllerUtilizationValue (73)."""
    f = fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": "GPU-abc123", "model": "A100", "memory_mib": 40960,
                                                 "utilization": 10, "memory_utilization": 73}])
    g = collect(tmp_path, [], backend=FakeBackend(f), legacy=True).get_sample_value
    host = {"node": "test-node", "device_index": "0", "device_uuid": "GPU-abc123", "device_type": "NVIDIA-A100",
            "zone": "vGPU"}
    assert g("hami_host_gpu_utilization_ratio", host) == 10
    # HAMi leaves `node` off this one; every per-device series here carries it (a join needs it).
    assert g("hami_host_gpu_memory_controller_utilization_ratio", host) == 73
    legacy = {"nodeid": "test-node", "deviceidx": "0", "deviceuuid": "GPU-abc123", "devicetype": "NVIDIA-A100",
              "zone": "vGPU"}
    assert g("HostCoreUtilization", legacy) == 10
