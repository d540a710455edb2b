"""`hami tune` on a synthetic cluster whose right answers are known.

Covers: 10 running inference pods asking 8 GiB each and peaking at 4 GiB give the guide's
example ratio 1.8 (peaks taken over repeated scrapes of two monitors, not the last scrape); the
smallest memory request (2 GiB) gives deviceSplitCount 20; the one pod whose SM use stays 0 is
listed; Pending pods are grouped by node; the same numbers from a Prometheus API (legacy labels);
the split-count table edges; metrics that are not an exposition raise TuneError naming the source;
the CLI's --json output; other vendors' pods counted per vendor with their Pending ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import pytest
from aiohttp import web

from hami.config import default_vendor_table
from hami.doctor import recommend as tuning
from hami.doctor.tune import compute
from tests.ports import serve_app

GIB = 1024**3
RUNNING = [f"inf-{i}" for i in range(10)]


def build(cluster, apiserver) -> None:
    cluster.node("n1", gpus=4)
    cluster.node("n2", gpus=4)
    for i, name in enumerate(RUNNING):
        node = "n1" if i < 5 else "n2"
        pod = cluster.pod(name, ns="default", mem=8192, node_name=node)
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "30"
        apiserver.store.update("pods", "default", name, {**pod, "status": {"phase": "Running"}}, subresource="status")
    cluster.pod("wait-0", mem=2048)
    cluster.pod("wait-1", mem=3000, annotations={"hami.io/vgpu-node": "n2"})
    cluster.pod("cpu-only", gpu=None)


def exposition(pods: list[str], used: float, idle: str = "inf-9", legacy: bool = False) -> str:
    lines = []
    for metric, value_of in ((tuning.USED, lambda p: used), (tuning.LIMIT, lambda p: 8 * GIB),
                             (tuning.CORE_USED, lambda p: 0 if p == idle else 20),
                             (tuning.CORE_LIMIT, lambda p: 30)):
        lines.append(f"# TYPE {metric} gauge")
        for p in pods:
            labels = (f'podnamespace="default",podname="{p}",ctrname="c",vdeviceid="0",deviceuuid="GPU-{p}",zone="vGPU"'
                      if legacy else
                      f'namespace="default",pod="{p}",container="c",vdevice_index="0",device_uuid="GPU-{p}",zone="vGPU"')
            lines.append(f"{metric}{{{labels}}} {float(value_of(p))}")
    return "\n".join(lines) + "\n"


@pytest.fixture
async def monitors():
    """Two fake monitors: the first scrape of each reports 4 GiB used, later ones 1 GiB."""
    hits = {"n1": 0, "n2": 0}

    def handler(node, pods):
        async def h(request):
            hits[node] += 1
            used = 4 * GIB if hits[node] == 1 else 1 * GIB
            return web.Response(text=exposition(pods, used), content_type="text/plain")
        return h

    app = web.Application()
    app.router.add_get("/n1/metrics", handler("n1", RUNNING[:5]))
    app.router.add_get("/n2/metrics", handler("n2", RUNNING[5:]))
    app.router.add_get("/garbage", lambda r: web.Response(text="hami_vgpu_memory_used_bytes{ oops"))

    async def query(request):
        q = request.query["query"]
        name = q[len("max_over_time("):q.index("[")]
        result = []
        for s in tuning.parse_metrics(exposition(RUNNING, 4 * GIB, legacy=True)):
            if s.name == name:
                result.append({"metric": {"__name__": name, **s.labels}, "value": [0, str(s.value)]})
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    app.router.add_get("/prom/api/v1/query", query)
    url, runner = await serve_app(app)
    yield url, hits
    await runner.cleanup()


def tune_args(**kw) -> argparse.Namespace:
    base = dict(metrics_url=[], prometheus_url="", window="7d", samples=1, interval=0.0,
                device_memory_scaling=1.0, device_split_count=10, json=False)
    base.update(kw)
    return argparse.Namespace(**base)


def check_known_answers(rec: tuning.Recommendations) -> None:
    assert rec.devices_measured == 10
    assert rec.requested_bytes == 10 * 8 * GIB and rec.peak_used_bytes == 10 * 4 * GIB
    assert rec.memory_scaling == 1.8
    assert rec.split_count == 20 and rec.request_mib["min"] == 2048
    assert rec.idle_core_pods == ("default/inf-9",)
    assert rec.pending_by_node == {"(not placed)": ("default/wait-0",), "n2": ("default/wait-1",)}


async def test_tune_from_monitor_scrapes_uses_peaks(cluster, apiserver, kube, monitors):
    build(cluster, apiserver)
    base, hits = monitors
    rec = await compute(kube, tune_args(metrics_url=[f"{base}/n1/metrics", f"{base}/n2/metrics"], samples=2))
    assert hits == {"n1": 2, "n2": 2}
    check_known_answers(rec)
    assert rec.advice[0].startswith("deviceMemoryScaling: can rise to 1.80 (requested 81920 MiB / peak used 40960 MiB")


async def test_tune_from_prometheus_with_legacy_labels(cluster, apiserver, kube, monitors):
    build(cluster, apiserver)
    base, _ = monitors
    rec = await compute(kube, tune_args(prometheus_url=f"{base}/prom"))
    check_known_answers(rec)


async def test_unreadable_metrics_raise_tune_error_naming_the_url(cluster, apiserver, kube, monitors):
    base, _ = monitors
    with pytest.raises(tuning.TuneError, match=f"{base}/garbage"):
        await compute(kube, tune_args(metrics_url=[f"{base}/garbage"]))


@pytest.mark.parametrize(("mib", "split"), [(16384, 5), (20000, 5), (8192, 10), (16383, 10), (2048, 20),
                                            (8191, 20), (2047, 40), (512, 40)])
def test_split_count_table(mib, split):
    assert tuning.split_for(mib)[0] == split


def test_split_count_capped_on_large_clusters_and_no_headroom_advice():
    pods = [tuning.PodInfo("d", "p", "Running", "n", 1, (1000,), 0)]
    usage = {("d", "p", "c", "0"): tuning.PeakUsage(limit_bytes=1000, peak_used_bytes=1000)}
    rec = tuning.recommend(pods, usage, node_count=500)
    assert rec.split_count == 30 and rec.memory_scaling == 0.9
    assert rec.advice[0].startswith("deviceMemoryScaling: keep at most 0.90")


async def test_cli_json(cluster, apiserver, monitors):
    build(cluster, apiserver)
    base, _ = monitors
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hami.cli.main", "tune", "--kubeconfig", apiserver.kubeconfig,
        "--metrics-url", f"{base}/n1/metrics", "--metrics-url", f"{base}/n2/metrics", "--json",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["memory_scaling"] == 1.8 and doc["split_count"] == 20


def test_vendor_pods_are_counted_and_their_pending_ones_listed():
    """`hami tune` knows the vendor table: pods asking for other vendors (a count resource, or AWS
    Neuron's cores alone, in any container) are counted per vendor, their Pending ones listed, and
    the advice says HAMi-core's knobs are NVIDIA's; NVIDIA-only pods are not vendor pods."""
    table = default_vendor_table()

    def pod(name, phase, limits, init=False):
        spec = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
        if init:
            spec = {"initContainers": spec["containers"], "containers": [{"name": "m"}]}
        return {"metadata": {"namespace": "d", "name": name}, "spec": spec, "status": {"phase": phase}}

    raw = [pod("a1", "Running", {"huawei.com/Ascend910B3": "1"}),
           pod("a2", "Pending", {"huawei.com/Ascend910B3": "2"}),
           pod("m1", "Pending", {"cambricon.com/mlu": "1"}, init=True),
           pod("n1", "Pending", {"aws.amazon.com/neuroncore": "1"}),
           pod("g1", "Pending", {"nvidia.com/gpu": "1"})]
    vpods = [v for v in (tuning.vendor_pod(p, table) for p in raw) if v is not None]
    assert [(v.name, v.vendors) for v in vpods] == [
        ("a1", ("Ascend910B3",)), ("a2", ("Ascend910B3",)), ("m1", ("MLU",)), ("n1", ("AWSNeuron",))]
    rec = tuning.recommend([], {}, vendor_pods=vpods)
    assert rec.vendor_pods == {"AWSNeuron": 1, "Ascend910B3": 2, "MLU": 1}
    assert rec.vendor_pending == {"AWSNeuron": ("d/n1",), "Ascend910B3": ("d/a2",), "MLU": ("d/m1",)}
    assert any(a.startswith("4 pod(s) ask for other vendors' devices (AWSNeuron: 1, Ascend910B3: 2, MLU: 1)")
               for a in rec.advice)
    assert any(a.startswith("1 Ascend910B3 pod(s) Pending") and a.endswith("d/a2") for a in rec.advice)
    assert tuning.recommend([], {}).vendor_pods == {}
