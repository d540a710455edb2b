"""Hostile input to the non-HTTP surfaces, each driven by hypothesis with a counted
number of examples (recorded for docs/reliability.md):
- every annotation codec (node register JSON and legacy, pod devices, container devices, node lock,
  handshake, pair scores, scoring weights, MIG allocations, cordon, unix seconds, RFC 3339,
  quantities in container limits) gets valid encodings damaged at the character level: only
  `CodecError` (a ValueError naming the field) ever comes out;
- config files (--device-config-file YAML, --node-config-file JSON, the fake GPU file): the shipped
  examples damaged as text and as documents (wrong types, missing keys, huge numbers): only
  `ConfigError` / `GpuBackendError`, each naming the file;
- HAMi-core cache files: random bytes, truncation, a wrong version or magic, random byte damage:
  only `ShmError`; a file growing and shrinking while a reader parses it in a loop: only
  `ShmError` or a consistent region; and the monitor's /metrics keeps answering over a cache dir
  full of such files;
- Allocate over real gRPC with wrong device counts, unknown or duplicated IDs, empty requests:
  a clear gRPC error (never an "Unexpected" exception), and the plugin keeps serving: a correct
  Allocate afterwards gets its pod's devices."""

from __future__ import annotations

import os
import random
import zlib

import grpc
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.config import ConfigError, build_config
from hami.device import codec, request
from hami.device.codec import CodecError
from hami.device.model import ContainerDevice, DeviceInfo, MigPlacement, NvidiaConfig
from hami.gpu.backend import GpuBackendError
from hami.gpu.fake import FakeBackend
from hami.monitor.role import Monitor
from hami.monitor.scan import read_region_file
from hami.monitor.shm import ShmError, parse_bytes
from hami.monitor.shmwrite import Dev, Proc, build_region, write_region
from tests.agent.harness import U1, U2, NodeHarness
from tests.reliability._fuzz import damage_text as _damage
from tests.reliability._fuzz import mutate_doc
from tests.reliability._record import ROOT, record

EXAMPLES = 300
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


_DEV = DeviceInfo(id="GPU-0d4c6a5e-0000-4000-8000-000000000001", count=10, devmem=40960, devcore=100,
                  type="NVIDIA A100-SXM4-40GB", index=1, numa=1, mode="hami-core", health=True)
_CD = ContainerDevice(idx=0, uuid="GPU-0d4c6a5e-0000-4000-8000-000000000001", type="NVIDIA", usedmem=3000,
                      usedcores=30)
CODECS = {
    "node register (JSON)": (codec.decode_node_devices, codec.encode_node_devices([_DEV, _DEV])),
    "node register (legacy)": (codec.decode_node_devices, codec.encode_node_devices_legacy([_DEV, _DEV])),
    "pod devices": (codec.decode_pod_devices, codec.encode_pod_devices([[_CD], [_CD, _CD]])),
    "container devices": (codec.decode_container_devices, codec.encode_container_devices([_CD, _CD])),
    "node lock": (codec.decode_node_lock, codec.encode_node_lock(1_790_000_000, "default", "p-1")),
    "handshake": (codec.decode_handshake, codec.encode_handshake_requesting(1_790_000_000)),
    "handshake reported": (codec.decode_handshake, codec.encode_handshake_reported(1_790_000_000.25)),
    "pair scores": (codec.decode_pair_scores,
                    '[{"uuid":"GPU-a","score":{"GPU-b":60,"GPU-c":20}},{"uuid":"GPU-b","score":{"GPU-a":60}}]'),
    "scoring weights": (codec.decode_scoring_weights, "slot=1,core=2,memory=3"),
    "MIG allocations": (codec.decode_mig_allocations, codec.encode_mig_allocations(
        [codec.MigAllocation(0, 0, "GPU-a", "1g.10gb", MigPlacement(0, 1))])),
    "device cordon": (codec.decode_device_cordon, "GPU-a,GPU-b"),
    "unix seconds": (codec.decode_unix_seconds, "1790000000"),
    "rfc3339": (codec.parse_rfc3339, "2026-09-21T14:13:20Z"),
    "quantity": (lambda t: request.parse_quantity(t, field="nvidia.com/gpumem"), "40Gi"),
}


@pytest.mark.parametrize("name", sorted(CODECS))
def test_every_annotation_codec_damaged_raises_only_codec_error(name):
    decode, valid = CODECS[name]
    decode(valid)  # the seed itself is valid
    ran = []

    @FUZZ
    @given(rng=st.randoms(use_true_random=False))
    def fuzz(rng):
        ran.append(1)
        text = _damage(rng, valid)
        try:
            decode(text)
        except CodecError as err:
            assert str(err) and err.field
    fuzz()
    record(f"codec {name}", fuzz_inputs=len(ran))


# --------------------------------------------------------------------------- config files

def _device_config_text() -> str:
    with open(os.path.join(ROOT, "config", "device-config.yaml")) as fh:
        return fh.read()


def _node_config_text() -> str:
    with open(os.path.join(ROOT, "config", "node-config.json")) as fh:
        return fh.read()


FAKE_GPUS = {"gpus": [{"uuid": U1, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": 0,
                       "processes": [{"pid": 12, "sm_util": 40, "memory_mib": 1000}]},
                      {"uuid": U2, "memory_mib": 40960, "healthy": False, "utilization": 5}]}


def _fuzz_text(rng: random.Random, text: str, dump) -> str:
    if rng.random() < 0.5:
        return _damage(rng, text)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None
    return dump(mutate_doc(rng, doc))


CONFIG_FILES = {
    "device config (YAML)": ("device-config.yaml", _device_config_text,
                             lambda d: yaml.safe_dump(d), "device_config_file"),
    "node config (JSON)": ("node-config.json", _node_config_text,
                           lambda d: orjson.dumps(d, option=orjson.OPT_NON_STR_KEYS).decode(), "node_config_file"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_FILES))
def test_damaged_config_files_give_config_error_naming_the_file(name, tmp_path):
    fname, text_fn, dump, flag = CONFIG_FILES[name]
    seed_text = text_fn()
    path = str(tmp_path / fname)
    ran = []

    @settings(FUZZ, max_examples=150)
    @given(rng=st.randoms(use_true_random=False))
    def fuzz(rng):
        ran.append(1)
        try:
            text = _fuzz_text(rng, seed_text, dump)
        except (TypeError, ValueError, OverflowError, RecursionError):
            depth = rng.randint(1, 5000)
            text = "[" * depth + "]" * depth  # valid, and nested deeper than the recursion limit
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)
        try:
            build_config({flag: path}, env={})
        except ConfigError as err:
            assert path in str(err)
    fuzz()
    record(f"config {name}", fuzz_inputs=len(ran))


def test_damaged_fake_gpu_files_give_gpu_backend_error(tmp_path):
    path = str(tmp_path / "gpus.yaml")
    seed_text = yaml.safe_dump(FAKE_GPUS)
    ran = []

    @settings(FUZZ, max_examples=80)
    @given(rng=st.randoms(use_true_random=False))
    def fuzz(rng):
        ran.append(1)
        try:
            text = _fuzz_text(rng, seed_text, lambda d: yaml.safe_dump(d))
        except (TypeError, ValueError, OverflowError, RecursionError):
            text = "[" * 3000 + "]" * 3000
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)
        try:
            backend = FakeBackend(path, node_name="n1")
            for g in backend.list_gpus():
                backend.process_utilization(g.uuid)
        except GpuBackendError as err:
            assert "fake GPU file" in str(err) or path in str(err)
    fuzz()
    record("config fake GPU file (YAML)", fuzz_inputs=len(ran))


# --------------------------------------------------------------------------- cache files

IMAGE = build_region([Dev(U1, limit=1 << 30, sm_limit=30), Dev(U2, limit=2 << 30)],
                     [Proc(pid=7, hostpid=4007, used={0: 1 << 20, 1: 2 << 20}, sm_util={0: 10})], "1.2")


def test_cache_file_images_damaged_raise_only_shm_error():
    ran, reasons = [], {}

    @FUZZ
    @given(rng=st.randoms(use_true_random=False))
    def fuzz(rng):
        ran.append(1)
        k = rng.randrange(5)
        if k == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.choice((0, 5, 12, 64, 4096))))
        elif k == 1:
            data = IMAGE[: rng.randrange(len(IMAGE) + 1)]
        elif k == 2:  # wrong version / magic
            data = bytearray(IMAGE)
            data[rng.choice((0, 4, 8)) + rng.randrange(4)] = rng.randrange(256)
            data = bytes(data)
        elif k == 3:
            data = bytearray(IMAGE)
            for _ in range(rng.randint(1, 64)):
                data[rng.randrange(4096)] = rng.randrange(256)
            data = bytes(data)
        else:
            data = IMAGE + bytes(rng.randrange(1, 64))
        try:
            parse_bytes(data)
        except ShmError as err:
            reasons[err.reason] = reasons.get(err.reason, 0) + 1
    fuzz()
    assert reasons  # the damage really produced errors
    record("cache file images", fuzz_inputs=len(ran), reasons=reasons)


def test_cache_file_growing_and_shrinking_while_read(tmp_path):
    """The file changes between the parser's reads: truncated, extended, rewritten, scribbled on."""
    from hami.monitor.shm import parse

    path = str(tmp_path / "c.cache")
    write_region(path, [Dev(U1, limit=1 << 30)], [Proc(pid=3, used={0: 5 << 20})], "1.2")
    rng = random.Random(9)

    def churn(fd: int) -> None:
        op = rng.randrange(5)
        if op == 0:
            os.ftruncate(fd, rng.randrange(len(IMAGE)))
        elif op == 1:
            os.ftruncate(fd, len(IMAGE) + rng.randrange(1 << 16))
        elif op == 2:
            os.pwrite(fd, IMAGE, 0)
            os.ftruncate(fd, len(IMAGE))
        elif op == 3:
            os.pwrite(fd, os.urandom(rng.randrange(1, 256)), rng.randrange(len(IMAGE)))

    reads, ok, reasons = 0, 0, {}
    fd = os.open(path, os.O_RDWR)
    try:
        while reads < 400:
            reads += 1
            if reads % 3 == 0:
                churn(fd)

            def read(off: int, n: int) -> bytes:
                if rng.random() < 0.3:
                    churn(fd)
                return os.pread(fd, n, off)
            try:
                region = parse(read, os.fstat(fd).st_size)
                ok += 1
                assert len(region.uuids) == 16
            except ShmError as err:
                reasons[err.reason] = reasons.get(err.reason, 0) + 1
            try:  # and through the monitor's own file reader
                read_region_file(path)
            except ShmError as err:
                reasons[err.reason] = reasons.get(err.reason, 0) + 1
    finally:
        os.close(fd)
    assert reasons and ok
    record("cache file growing/shrinking while read", fuzz_inputs=reads, parsed=ok, reasons=reasons)


def test_monitor_keeps_serving_over_a_cache_dir_of_hostile_files(tmp_path):
    rng = random.Random(4)
    root = tmp_path / "containers"
    pods = []
    for i in range(40):
        uid = f"uid-{i}"
        pods.append({"metadata": {"uid": uid, "name": f"p{i}", "namespace": "ns"},
                     "spec": {"nodeName": "n1", "containers": [{"name": "main"}]}})
        d = root / f"{uid}_main"
        d.mkdir(parents=True)
        data = bytearray(IMAGE[: rng.randrange(len(IMAGE) + 1)] if i % 3 else IMAGE)
        for _ in range(rng.randint(0, 20)):
            data[rng.randrange(max(1, min(len(data), 4096)))] = rng.randrange(256) if data else 0
        (d / f"{i:04x}.cache").write_bytes(bytes(data))
    mon = Monitor(cache_dir=str(root), node_name="n1", pods=lambda: pods, synced=lambda: True)
    from prometheus_client.parser import text_string_to_metric_families

    for scrape in range(1, 4):
        text = mon.exposition().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}  # parses: a valid exposition
        errors = sum(s.value for s in families["hami_monitor_cache_errors"].samples if s.name.endswith("_total"))
        # Most files are cut short, so each scrape counts errors; never more than one per file per scrape.
        assert 0 < errors <= 40 * scrape, errors
    record("monitor over hostile cache dir", fuzz_inputs=40, scrapes=3)


# --------------------------------------------------------------------------- gRPC Allocate

async def test_allocate_with_wrong_device_counts_gives_clear_grpc_errors():
    rng = random.Random(zlib.crc32(b"allocate"))
    ids = [f"{U1}-{i}" for i in range(10)] + [f"{U2}-{i}" for i in range(10)]
    junk = ["", "GPU-unknown-0", "🚀", "x" * 300, f"{U1}-99"]
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        stub = h.kubelet.plugins["nvidia.com/gpu"].stub
        ok = errors = 0
        need_pod = True
        for i in range(120):
            if need_pod:  # a fresh binding pod: one container on U1, then one on U2
                await h.create_pod(f"f{i}", {"main": 1, "side": 1}, f"{U1},NVIDIA,1000,10:;{U2},NVIDIA,1000,10:;",
                                   bind_time=100 + i)
                need_pod, expect = False, [U1, U2]
            reqs = [[rng.choice(ids + junk) for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(0, 2))]
            if i % 4 == 0:
                reqs = [[rng.choice(ids)]]  # the right count: must succeed with this pod's device
            try:
                answer = await h.kubelet.allocate(reqs)
                ok += 1
                for resp in answer.container_responses:  # never another pod's device
                    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == expect.pop(0)
                need_pod = not expect
            except grpc.aio.AioRpcError as err:
                errors += 1
                need_pod = True
                assert err.code() == grpc.StatusCode.UNKNOWN, err
                assert err.details() and not err.details().startswith("Unexpected"), err.details()
        # Still serving: options, and a correct allocation gets its own devices.
        opts = await stub.GetDevicePluginOptions(__import__("hami.agent._pb.api_pb2", fromlist=["Empty"]).Empty())
        assert opts is not None
        pod = await h.create_pod("good", {"main": 1}, f"{U2},NVIDIA,2000,20:;", bind_time=10_000)
        (c,) = (await h.kubelet.allocate_pod(pod)).values()
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == U2 and c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
        assert errors > 0 and ok > 0
        record("gRPC Allocate (wrong device counts)", fuzz_inputs=120, errors=errors, allocated=ok)


@pytest.fixture(autouse=True)
def _nvidia_defaults():
    assert NvidiaConfig().resource_count_name == "nvidia.com/gpu"
