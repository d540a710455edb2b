"""whatif's tie-ins: `hami tune --whatif-scenario FILE` hands its recommendation to whatif as a
scenario that parses and replays; `hami doctor pod` on a pending pod prints
"whatif: this pod would fit if ..." (and `whatif` in --json) when one single change places it,
against the embedded API server.
"""

from __future__ import annotations

import asyncio
import json

import yaml

from hami.cli.main import main
from hami.device import codec
from hami.device.model import ContainerDevice, DeviceInfo
from hami.doctor.recommend import PodInfo, recommend, whatif_scenario
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import run_plan
from hami.whatif.scenario import parse_plan_text
from tests.kube.helpers import pod_obj
from tests.whatif import snap


def test_tune_recommendation_becomes_a_whatif_scenario():
    pods = [PodInfo("default", f"p{i}", "Pending", "", 1, (3000,), 0) for i in range(3)]
    rec = recommend(pods, {}, node_count=1, current_split=2)
    doc = whatif_scenario(rec, 1.0, 2)
    assert doc == {"scenarios": [{"name": "tune", "changes": {"deviceSplitCount": rec.split_count}}]}
    plan = parse_plan_text(yaml.safe_dump(doc), "tune.yaml")
    assert [s.name for s in plan.scenarios] == ["baseline", "tune"]
    cluster = parse_snapshot(snap.listing(snap.node("a", count=2), snap.device_config(split=2),
                                          *(snap.pod(f"p{i}", mem=3000) for i in range(3))), "s.json")
    base, tuned = run_plan(cluster, plan)
    assert (base.placed, tuned.placed) == (2, 3)


async def test_tune_cli_writes_the_scenario_file(apiserver, tmp_path):
    apiserver.store.create("pods", "default", pod_obj("w", mem=3000))
    out = tmp_path / "tune.yaml"
    rc = await asyncio.to_thread(main, ["tune", "--kubeconfig", apiserver.kubeconfig, "--device-split-count", "2",
                                        "--whatif-scenario", str(out)])
    assert rc == 0
    plan = parse_plan_text(out.read_text(), str(out))
    assert plan.scenarios[1].changes.split_count == 20  # the guide's table for a 3000 MiB request


def _node(name: str, count: int) -> dict:
    devs = [DeviceInfo(id=f"GPU-{name}-0", count=count, devmem=40960, devcore=100, type="NVIDIA A100", index=0,
                       numa=0, mode="hami-core", health=True)]
    return {"metadata": {"name": name, "annotations": {
        codec.REGISTER_ANNOTATION: codec.encode_node_devices(devs),
        codec.HANDSHAKE_ANNOTATION: codec.encode_handshake_requesting(0)}},
        "status": {"allocatable": {"nvidia.com/gpu": str(count)}}}


async def test_doctor_pod_says_what_single_change_would_make_a_pending_pod_fit(apiserver, cli_out):
    store = apiserver.store
    store.create("nodes", "", _node("n1", 1))
    running = pod_obj("run", mem=1000)
    text = codec.encode_pod_devices(((ContainerDevice("GPU-n1-0", "NVIDIA", 1000, 0),),))
    running["metadata"]["annotations"] = {codec.VGPU_NODE_ANNOTATION: "n1", codec.ALLOCATED_ANNOTATION: text}
    running["spec"]["nodeName"] = "n1"
    store.create("pods", "default", running)
    store.create("pods", "default", pod_obj("wait", mem=1000))
    args = ["doctor", "pod", "default/wait", "--kubeconfig", apiserver.kubeconfig]
    assert await asyncio.to_thread(main, args) == 1
    out = cli_out.readouterr().out
    assert out.startswith("pod default/wait: ")
    assert out.rstrip().endswith("whatif: this pod would fit if deviceSplitCount were 2")
    assert await asyncio.to_thread(main, args + ["--json"]) == 1
    assert json.loads(cli_out.readouterr().out)["whatif"] == "this pod would fit if deviceSplitCount were 2"
    # A pod no single change can place gets no whatif line.
    store.create("pods", "default", pod_obj("huge", mem=900000))
    assert await asyncio.to_thread(main, ["doctor", "pod", "default/huge", "--kubeconfig", apiserver.kubeconfig,
                                          "--json"]) == 1
    assert json.loads(cli_out.readouterr().out)["whatif"] is None
