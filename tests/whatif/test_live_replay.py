"""A snapshot of a real run replays pod for pod: the embedded API server, the real scheduler
(extender /filter and /bind over HTTP, its watch cache) placing pods one at a time, a snapshot taken
with kubectl's JSON (`kubectl get nodes,pods,resourcequotas -A -o json`) and `hami whatif` replaying
every pod from an empty cluster (`replay: {}`) lands each pod on the same node and the same cards
(the same `hami.io/vgpu-devices-allocated`), and leaves the same pods pending.
Also `hami whatif snapshot -o FILE` against the same server reads the same cluster.
"""

from __future__ import annotations

import asyncio
import json
import random

import orjson

from hami.cli.main import main
from hami.device import codec
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import run_scenario
from hami.whatif.scenario import parse_plan
from tests.kube.helpers import node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env
from tests.tools import find_kubectl


def _workload(rng: random.Random, n: int) -> list[dict]:
    pods = []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 2])
        mem = rng.choice([2000, 6000, 12000, 30000])
        cores = rng.choice([None, 10, 30, 60])
        annos = {}
        if rng.random() < 0.2:
            annos[codec.GPU_SCHEDULER_POLICY_ANNOTATION] = "binpack"
        if rng.random() < 0.1:
            annos[codec.NODE_SCHEDULER_POLICY_ANNOTATION] = "spread"
        pods.append(pod_obj(f"p{i:03d}", rng.choice(["team-a", "team-b"]), gpus=gpus, mem=mem, cores=cores,
                            annotations=annos))
    pods.append(pod_obj("toolarge", "team-a", gpus=1, mem=90000))
    return pods


def _plugin_allocate(store, key: str, node: str) -> None:
    """What the device plugin does after Allocate: bind-phase=success, the node lock released."""
    ns, name = key.split("/")
    store.patch("pods", ns, name, b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}',
                "application/merge-patch+json")
    store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {codec.NODE_LOCK_ANNOTATION: None}}}),
                "application/merge-patch+json")


async def _kubectl_json(kubeconfig: str, tmp_path) -> dict:
    proc = await asyncio.create_subprocess_exec(
        find_kubectl(), "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "kcache"),
        "get", "nodes,pods,resourcequotas", "-A", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def test_replay_of_a_kubectl_snapshot_matches_the_live_scheduler_pod_for_pod(apiserver, tmp_path):
    nodes = [node_obj(f"n{i}", gpus=i % 2 + 1, count=4, handshake=requesting_now()) for i in range(4)]
    names = sorted(n["metadata"]["name"] for n in nodes)
    live: dict[str, tuple[str, str]] = {}
    for ns in ("team-a", "team-b"):
        apiserver.store.create("namespaces", "", {"metadata": {"name": ns}})
    async with running_env(apiserver, nodes) as env:
        for pod in _workload(random.Random(5), 30):
            created = env.create_pod(pod)
            await asyncio.sleep(0)  # creation order = creationTimestamp order, names break ties
            key = f"{created['metadata']['namespace']}/{created['metadata']['name']}"
            # Wait for the scheduler's watch to see earlier binds, as kube-scheduler's queue does.
            for _ in range(200):
                if env.sched.state.pods is not None and key in env.sched.state.pods.store:
                    break
                await asyncio.sleep(0.01)
            res = await env.filter(created, names)
            if res.get("NodeNames"):
                node = res["NodeNames"][0]
                assert (await env.bind(created, node))["Error"] == ""
                _plugin_allocate(env.store, key, node)
                annos = env.pod(*key.split("/"))["metadata"]["annotations"]
                live[key] = (node, annos[codec.ALLOCATED_ANNOTATION])
            else:
                live[key] = ("", "")
        doc = await _kubectl_json(apiserver.kubeconfig, tmp_path)
    placed = sum(1 for node, _ in live.values() if node)
    assert placed >= 12 and len(live) - placed >= 2 and live["team-a/toolarge"] == ("", "")
    cluster = parse_snapshot(doc, "kubectl.json")
    assert set(cluster.nodes) == set(names) and len(cluster.pods) == len(live)
    plan = parse_plan({"workloads": [{"replay": {}}]}, "replay.yaml")
    result = run_scenario(cluster, plan.scenarios[0], plan)
    replayed = {o.pod: (o.node, o.devices) for o in result.outcomes}
    assert list(replayed) == sorted(live, key=lambda k: k.split("/")[1])  # creation order
    assert replayed == live


async def test_whatif_snapshot_command_reads_the_live_cluster(apiserver, tmp_path):
    for n in (node_obj("n0", gpus=2), node_obj("plain", registered=False)):
        apiserver.store.create("nodes", "", n)
    apiserver.store.create("namespaces", "", {"metadata": {"name": "ml"}})
    apiserver.store.create("pods", "ml", pod_obj("wait", "ml", mem=1000))
    apiserver.store.create("resourcequotas", "ml", {"metadata": {"name": "q", "namespace": "ml"},
                                                     "spec": {"hard": {"limits.nvidia.com/gpumem": "500"}}})
    out = tmp_path / "snap.json"
    rc = await asyncio.to_thread(main, ["whatif", "snapshot", "-o", str(out), "--kubeconfig", apiserver.kubeconfig])
    assert rc == 0
    cluster = parse_snapshot(json.loads(out.read_text()), str(out))
    assert set(cluster.nodes) == {"n0"} and [p.key for p in cluster.pods] == ["ml/wait"]
    assert cluster.quotas[0].hard == {"limits.nvidia.com/gpumem": 500}
    # The admitted pending pod is refused by the fit's quota check in the baseline replay.
    plan = parse_plan({}, "p")
    result = run_scenario(cluster, plan.scenarios[0], plan)
    assert [(o.pod, o.reasons) for o in result.outcomes] == [("ml/wait", ("ResourceQuotaNotFit",))]


async def test_whatif_on_the_live_cluster_reads_and_replays(apiserver, cli_out):
    apiserver.store.create("nodes", "", node_obj("n0", gpus=1, count=1))
    apiserver.store.create("pods", "default", pod_obj("a", mem=1000))
    apiserver.store.create("pods", "default", pod_obj("b", mem=1000))
    argv = ["whatif", "--kubeconfig", apiserver.kubeconfig, "--format", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    doc = json.loads(cli_out.readouterr().out)
    pods = doc["scenarios"][0]["pods"]
    assert [(p["pod"], p["node"]) for p in pods] == [("default/a", "n0"), ("default/b", None)]
    assert pods[1]["reasons"] == ["CardTimeSlicingExhausted"]
    # Nothing was written: both pods are still unplaced in the API server.
    for name in ("a", "b"):
        assert codec.VGPU_NODE_ANNOTATION not in (apiserver.store.get("pods", "default", name)["metadata"]
                                                  .get("annotations") or {})
