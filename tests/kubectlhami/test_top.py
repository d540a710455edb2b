"""`kubectl hami`: the kubeconfig and context it picks (as kubectl does), the rows of `top gpus|nodes|pods`
from nodes, placed pods and the monitors' metrics, and its tables and -o json/yaml, on the embedded API
server (the CLI in process; the real kubectl runs it in tests/e2e/test_embedded.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo
from hami.kubectlhami import cli, top
from hami.kubectlhami.kubeconfig import KubeconfigError, kubeconfig_path, resolve
from hami.ui.view import cluster_view

U0, U1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-00000001-0000-4000-8000-000000000000"


def gpu_node(name: str) -> dict:
    devs = [DeviceInfo(id=u, count=10, devmem=40960, devcore=100, type="NVIDIA A100-SXM4-40GB", index=i, numa=0,
                       mode="hami-core", health=True) for i, u in enumerate((U0, U1))]
    return {"metadata": {"name": name, "annotations": {codec.REGISTER_ANNOTATION: codec.encode_node_devices(devs),
                                                       codec.HANDSHAKE_ANNOTATION: "Reported_2026-01-01 00:00:00"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"nvidia.com/gpu": "20"}, "capacity": {"nvidia.com/gpu": "20"}}}


def placed(ns: str, name: str, node: str, *shares: tuple[str, int, int]) -> dict:
    devices = [[ContainerDevice(idx=0, uuid=u, type="NVIDIA", usedmem=m, usedcores=c) for u, m, c in shares]]
    text = codec.encode_pod_devices(devices)
    return {"metadata": {"namespace": ns, "name": name, "annotations": {
                codec.VGPU_NODE_ANNOTATION: node, codec.BIND_PHASE_ANNOTATION: "success",
                codec.ALLOCATED_ANNOTATION: text, codec.TO_ALLOCATE_ANNOTATION: text}},
            "spec": {"nodeName": node, "schedulerName": "hami-scheduler", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


METRICS = f"""# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{{namespace="ml",pod="train",container="c",device_uuid="{U0}",vdevice_index="0"}} 2097152000
hami_vgpu_memory_used_bytes{{namespace="web",pod="infer",container="c",device_uuid="{U0}",vdevice_index="0"}} 1048576000
# TYPE hami_vgpu_core_used_percent gauge
hami_vgpu_core_used_percent{{namespace="ml",pod="train",container="c",device_uuid="{U0}",vdevice_index="0"}} 40
"""


def view():
    pods = [placed("ml", "train", "n1", (U0, 10000, 50), (U1, 4000, 20)), placed("web", "infer", "n1", (U0, 3000, 10))]
    return cluster_view([gpu_node("n1")], pods)


def measured() -> top.Measured:
    m = top.Measured()
    m.add(METRICS, "test")
    return m


def test_gpu_rows_count_slices_against_the_split_and_allocation_against_use():
    rows = {r["index"]: r for r in top.gpu_rows(view(), measured())}
    assert (rows[0]["slices"], rows[0]["split"]) == (2, 10)
    assert (rows[0]["memory_allocated_mib"], rows[0]["memory_used_mib"], rows[0]["memory_mib"]) == (13000, 3000, 40960)
    assert (rows[0]["cores_allocated"], rows[0]["cores_used"]) == (60, 40.0)  # infer reported no cores: not 0
    assert (rows[1]["slices"], rows[1]["memory_allocated_mib"], rows[1]["memory_used_mib"]) == (1, 4000, None)


def test_node_rows_sum_their_gpus_and_pod_rows_keep_to_the_namespace():
    (node,) = top.node_rows(view(), measured())
    assert (node["gpus"], node["slices"], node["split"], node["memory_allocated_mib"], node["cores_allocated"]) == (
        2, 3, 20, 17000, 80)
    assert node["memory_used_mib"] == 3000 and node["healthy"] is True
    ml = top.pod_rows(view(), measured(), "ml")
    assert [(r["pod"], r["gpu"], r["memory_allocated_mib"], r["memory_used_mib"]) for r in ml] == [
        ("train", 0, 10000, 2000), ("train", 1, 4000, None)]
    assert {r["namespace"] for r in top.pod_rows(view(), measured(), None)} == {"ml", "web"}


def test_the_table_is_kubectls_layout_and_a_missing_figure_is_a_dash():
    text = top.table("gpus", top.gpu_rows(view(), top.Measured()))
    header, first, second = text.splitlines()
    assert header.split()[:4] == ["NODE", "GPU", "MODEL", "SLICES"]
    assert first.split()[:2] == ["n1", "0"] and "2/10" in first and "13000/-/40960" in first
    assert "1/10" in second and "4000/-/40960" in second
    assert top.table("pods", []) == "No GPU pods found."


def test_a_metrics_page_that_is_not_prometheus_text_is_an_error_naming_it():
    with pytest.raises(top.MetricsError, match="http://m:9394/metrics: not a Prometheus"):
        top.Measured().add("hami_vgpu_memory_used_bytes{pod=\"x\" 1", "http://m:9394/metrics")


# ------------------------------------------------------------------ kubeconfig and context

def kubeconfig(tmp_path, server: str = "http://127.0.0.1:1") -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "a",
           "clusters": [{"name": "c", "cluster": {"server": server}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}},
                        {"name": "b", "context": {"cluster": "c", "user": "u", "namespace": "team-b"}}]}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_context_and_namespace_are_kubectls(tmp_path):
    path = kubeconfig(tmp_path)
    t = resolve(path, None, None)
    assert (t.kubeconfig, t.context, t.namespace, t.temporary) == (path, "a", "default", False)
    t = resolve(path, "b", None)
    assert (t.context, t.namespace, t.temporary) == ("b", "team-b", True)  # the context's namespace
    assert yaml.safe_load(open(t.kubeconfig))["current-context"] == "b"  # a private copy, the file untouched
    assert yaml.safe_load(open(path))["current-context"] == "a"
    assert resolve(path, "b", "other").namespace == "other"  # -n wins
    with pytest.raises(KubeconfigError, match=r"no context 'c' \(contexts: a, b\)"):
        resolve(path, "c", None)


def test_kubeconfig_is_the_flag_then_the_first_existing_file_of_kubeconfig_then_home(tmp_path):
    path = kubeconfig(tmp_path)
    assert kubeconfig_path("/x", {"KUBECONFIG": path}) == "/x"
    assert kubeconfig_path(None, {"KUBECONFIG": f"/nope:{path}"}) == path
    assert kubeconfig_path(None, {}).endswith("/.kube/config")


def test_a_bad_context_or_file_exits_2_naming_it(tmp_path, capsys):
    assert cli.main(["--kubeconfig", kubeconfig(tmp_path), "--context", "zz", "top", "gpus"]) == 2
    assert "no context 'zz'" in capsys.readouterr().err
    assert cli.main(["--kubeconfig", str(tmp_path / "missing"), "top", "gpus"]) == 2
    assert "missing" in capsys.readouterr().err


# ------------------------------------------------------------------ against the embedded API server

async def test_top_against_the_api_server_json_yaml_and_namespaces(apiserver, capsys):
    import asyncio

    store = apiserver.store
    store.create("nodes", "", gpu_node("n1"))
    for ns in ("ml", "web"):
        store.create("namespaces", "", {"metadata": {"name": ns}})
    store.create("pods", "ml", placed("ml", "train", "n1", (U0, 10000, 50)))
    store.create("pods", "web", placed("web", "infer", "n1", (U0, 3000, 10)))
    base = ["--kubeconfig", apiserver.kubeconfig]

    def run(*args: str) -> tuple[int, str]:
        rc = cli.main([*base, *args])
        return rc, capsys.readouterr().out

    rc, out = await asyncio.to_thread(run, "top", "gpus", "-o", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "hami.gpus"
    assert [(g["node"], g["index"], g["slices"], g["memory_allocated_mib"]) for g in doc["items"]] == [
        ("n1", 0, 2, 13000), ("n1", 1, 0, 0)]
    rc, out = await asyncio.to_thread(run, "top", "pods", "-n", "web", "-o", "yaml")
    assert rc == 0 and [p["pod"] for p in yaml.safe_load(out)["items"]] == ["infer"]
    rc, out = await asyncio.to_thread(run, "top", "pods", "-A")
    assert rc == 0 and out.splitlines()[0].split()[:2] == ["NAMESPACE", "POD"] and "train" in out and "infer" in out
    rc, out = await asyncio.to_thread(run, "top", "pods")  # the context's namespace: default, none there
    assert rc == 0 and out.strip() == "No GPU pods found."
