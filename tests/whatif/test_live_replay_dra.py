"""DRA pods replay pod for pod: the live embedded `--dra` loop against `hami whatif`'s replay.

Live: the embedded API server, three nodes publishing HAMi's ResourceSlices (GPUs with `memory`,
`cores` and `shares` capacities, as hami.dra.slices builds them; one node labelled and with a larger
GPU), HAMi's DeviceClass, the scheduler role with `--dra` (its extender ranks nodes for pods with
claims by GPU fill: the Placer's filter_claims), the embedded kube-scheduler loop with the
DynamicResources plugin calling that extender (no bindVerb, as hami.sim.cluster wires it) and the
resourceclaim controller. Pods arrive one at a time: most as the `--dra` webhook makes them
(hami.dra.claims.translate_pod: claim templates), some with hand-written claims (one claim shared by
two pods), some with the spread node policy or a nodeSelector, and one too large for any GPU.

Then `hami whatif snapshot`'s reads of the same server (hami.whatif.snapshot.take_with) and a replay
of every pod from an empty cluster (`replay: {}`): each pod lands on the same node with the same
devices and the same capacity consumed, and the same pods stay pending.
"""

from __future__ import annotations

import asyncio
import random

from hami.device.model import NvidiaConfig
from hami.dra.claims import claim_spec, device_class, translate_pod
from hami.dra.slices import build_slice, gpu_device
from hami.gpu.backend import GpuInfo
from hami.kube.client import ApiError
from hami.sim.controllers.resourceclaims import ResourceClaimController
from hami.sim.dynamicresources import DynamicResources
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from hami.whatif.cluster import parse_snapshot
from hami.whatif.draplace import allocation_text
from hami.whatif.engine import run_scenario
from hami.whatif.scenario import parse_plan
from hami.whatif.snapshot import take_with
from tests.kube.helpers import client_for
from tests.kube.scheduler_env import running_env
from tests.sim._kubesched import FAST

NODES = {"n0": (40960, 40960), "n1": (40960, 40960), "n2": (81920,)}


def _node(name: str) -> dict:
    labels = {"kubernetes.io/hostname": name, **({"gpu-size": "large"} if name == "n2" else {})}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}


def _slice(name: str, sizes: tuple[int, ...]) -> dict:
    gpus = [gpu_device(GpuInfo(f"GPU-{name}-{i}", i, "NVIDIA A100-SXM4-40GB", mib, minor=i), mib, split_count=4)
            for i, mib in enumerate(sizes)]
    return build_slice(name, gpus, 1)


def _workload(rng: random.Random, n: int) -> list[tuple[dict, dict | None]]:
    """(pod, a hand-written claim to create first or None), in arrival order."""
    out = []
    for i in range(n):
        mem = rng.choice([4000, 8000, 16000, 30000])
        annos = {"hami.io/node-scheduler-policy": "spread"} if rng.random() < 0.2 else {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"p{i:03d}", "namespace": "ml", "annotations": annos},
               "spec": {"schedulerName": "default-scheduler", "containers": [
                   {"name": "main", "image": "cuda", "resources": {"limits": {
                       "nvidia.com/gpu": str(rng.choice([1, 1, 1, 2])), "nvidia.com/gpumem": str(mem),
                       **({"nvidia.com/gpucores": "30"} if rng.random() < 0.3 else {})}}}]}}
        if rng.random() < 0.15:
            pod["spec"]["nodeSelector"] = {"gpu-size": "large"}
        if i % 7 == 3:  # a hand-written claim
            name = f"claim-{i:03d}"
            claim = {"metadata": {"name": name, "namespace": "ml"}, "spec": claim_spec(1, mem, None, [])}
            pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
            out.append((pod, claim))
            continue
        out.append((pod, None))
    shared = {"metadata": {"name": "shared-claim", "namespace": "ml"}, "spec": claim_spec(1, 2000, None, [])}
    for j, name in enumerate(("s-first", "s-second")):
        out.insert(5 + 6 * j, ({"metadata": {"name": name, "namespace": "ml"}, "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-claim"}]}}, shared if j == 0 else None))
    big = {"metadata": {"name": "toolarge", "namespace": "ml"}, "spec": {"schedulerName": "default-scheduler",
           "containers": [{"name": "main", "image": "cuda",
                           "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "90000"}}}]}}
    out.append((big, None))
    for idx, (pod, _) in enumerate(out):  # names sort in arrival order (creation times are whole seconds)
        pod["metadata"]["name"] = f"a{idx:03d}-{pod['metadata']['name']}"
    return out


async def _settled(client, name: str) -> str | None:
    """The node the pod is bound to, "" once kube-scheduler called it unschedulable, None meanwhile."""
    pod = await client.get("pods", name, "ml")
    if (pod.get("spec") or {}).get("nodeName"):
        return pod["spec"]["nodeName"]
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and "nodes are available" in (
                c.get("message") or ""):
            return ""
    return None


async def _live_devices(client, pod: dict) -> str:
    names = {}
    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        names[s["name"]] = s["resourceClaimName"]
    claims = {}
    for pc in pod["spec"]["resourceClaims"]:
        claim_name = pc.get("resourceClaimName") or names[pc["name"]]
        claims[pc["name"]] = await client.get("resourceclaims", claim_name, "ml")
    return allocation_text(pod, claims)


async def test_dra_replay_matches_the_live_embedded_loop_pod_for_pod(apiserver):
    store = apiserver.store
    store.create("namespaces", "", {"metadata": {"name": "ml"}})
    for name in NODES:
        store.create("nodes", "", _node(name))
    async with running_env(apiserver, dra=True) as env:
        client = await client_for(apiserver.kubeconfig)
        await client.create("deviceclasses", device_class())
        for name, sizes in NODES.items():
            await client.create("resourceslices", _slice(name, sizes))
        loop = KubeSchedulerLoop(client, ExtenderConfig(env.sched.url, bind_verb=""), "default-scheduler",
                                 timings=FAST, dra=DynamicResources(client))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(ResourceClaimController(client).run(stop))]
        live: dict[str, tuple[str, str]] = {}
        try:
            for raw, claim in _workload(random.Random(7), 26):
                if claim is not None:
                    await client.create("resourceclaims", claim, "ml")
                translated = translate_pod(raw, NvidiaConfig())
                pod = translated.pod if translated is not None else raw
                for tmpl in translated.templates if translated is not None else ():
                    try:
                        await client.create("resourceclaimtemplates", {**tmpl, "metadata": {
                            **tmpl["metadata"], "namespace": "ml"}}, "ml")
                    except ApiError as exc:
                        assert exc.status == 409  # the same shape made it already
                await client.create("pods", pod, "ml")
                name = pod["metadata"]["name"]
                for _ in range(1500):
                    node = await _settled(client, name)
                    if node is not None:
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError(f"{name} neither bound nor unschedulable")
                got = await client.get("pods", name, "ml")
                live[f"ml/{name}"] = (node, await _live_devices(client, got) if node else "")
            doc = await take_with(client)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
            await client.close()
    placed = [k for k, (node, _) in live.items() if node]
    assert len(placed) >= 15 and live[next(k for k in live if k.endswith("-toolarge"))] == ("", "")
    shared = [node for k, (node, _) in live.items() if k.endswith(("-s-first", "-s-second"))]
    assert len(shared) == 2 and shared[0] and shared[0] == shared[1]  # one claim, one node
    assert len({node for node, _ in live.values() if node}) == 3
    cluster = parse_snapshot(doc, "live")
    assert set(cluster.nodes) == set(NODES) and all(cluster.nodes[n].dra for n in NODES)
    assert len(cluster.dra.slices) == 3 and cluster.dra.templates and "ml/shared-claim" in cluster.dra.claims
    plan = parse_plan({"workloads": [{"replay": {}}]}, "replay.yaml")
    result = run_scenario(cluster, plan.scenarios[0], plan)
    replayed = {o.pod: (o.node, o.devices) for o in result.outcomes}
    assert list(replayed) == list(live)  # arrival order
    mismatched = {k: (live[k], replayed.get(k)) for k in live if replayed.get(k) != live[k]}
    assert not mismatched
    pending = [o for o in result.outcomes if not o.node]
    assert pending and all(o.reasons for o in pending)
