"""The embedded kube-scheduler loop reads hami's profile as kube-scheduler does (hami.kubesched.schedconfig):
with the device-plugin configuration (the extender manages HAMi's resources) a claim pod never reaches
the extender, so its node policy is lost; with the chart's DRA configuration (no managedResources,
NodeResourcesFit's args ignoring HAMi's resources) the extender filters, ranks and binds it.

Two nodes with one 40 GB GPU each; a claim pod pinned to n1 fills part of it; then a `binpack` claim
pod. In-tree scores tie (the pods ask no cpu or memory), so without the extender the loop takes the
first node, n0; with it, the extender's binpack answers the fuller n1. The extender binds it after
DynamicResources' PreBind, without HAMi's bind-phase marks (no Allocate ever answers a claim pod).
"""

from __future__ import annotations

import asyncio

import pytest

from hami.config.build import build_config
from hami.device.model import NvidiaConfig
from hami.dra.claims import device_class, translate_pod
from hami.dra.slices import build_slice, gpu_device
from hami.gpu.backend import GpuInfo
from hami.kube.client import ApiError
from hami.kubesched.schedconfig import profile
from hami.sim.cluster import kube_scheduler_configuration
from hami.sim.controllers.resourceclaims import ResourceClaimController
from hami.sim.dynamicresources import DynamicResources
from hami.sim.kubescheduler import ExtenderConfig, KubeSchedulerLoop
from tests.kube.helpers import client_for
from tests.kube.scheduler_env import running_env
from tests.sim._kubesched import FAST

SCHED = "hami-scheduler"


def _node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}


def _pod(ns: str, name: str, mem: int, *, policy: str = "", node: str = "") -> tuple[dict, list[dict]]:
    raw = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns,
                        "annotations": {"hami.io/node-scheduler-policy": policy} if policy else {}},
           "spec": {"schedulerName": SCHED, "containers": [{"name": "main", "image": "cuda", "resources": {
               "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}}}]}}
    if node:
        raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    t = translate_pod(raw, NvidiaConfig())
    return t.pod, t.templates


async def _place(client, ns: str, name: str, mem: int, **kw) -> dict:
    pod, templates = _pod(ns, name, mem, **kw)
    for tmpl in templates:
        try:
            await client.create("resourceclaimtemplates", {**tmpl, "metadata": {**tmpl["metadata"], "namespace": ns}},
                                ns)
        except ApiError as exc:
            assert exc.status == 409
    await client.create("pods", pod, ns)
    for _ in range(1500):
        got = await client.get("pods", name, ns)
        if (got.get("spec") or {}).get("nodeName"):
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"{ns}/{name} was not bound")


async def _run(client, ext: ExtenderConfig, ns: str, **loop_kw) -> tuple[dict, KubeSchedulerLoop]:
    await client.create("namespaces", {"metadata": {"name": ns}})
    loop = KubeSchedulerLoop(client, ext, SCHED, timings=FAST, dra=DynamicResources(client), **loop_kw)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(ResourceClaimController(client).run(stop))]
    try:
        seed = await _place(client, ns, "seed", 20000, node="n1")
        assert seed["spec"]["nodeName"] == "n1"
        return await _place(client, ns, "bp", 8000, policy="binpack"), loop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        for name in ("bp", "seed"):  # the next configuration starts from empty GPUs
            await client.delete("pods", name, ns)


@pytest.mark.parametrize("dra_chart", [False, True], ids=["device-plugin-config", "dra-config"])
async def test_a_claim_pod_gets_the_extenders_binpack_only_with_the_dra_configuration(apiserver, dra_chart):
    for name in ("n0", "n1"):
        apiserver.store.create("nodes", "", _node(name))
    async with running_env(apiserver, dra=True) as env:
        client = await client_for(apiserver.kubeconfig)
        try:
            await client.create("deviceclasses", device_class())
            for name in ("n0", "n1"):
                gpu = gpu_device(GpuInfo(f"GPU-{name}", 0, "NVIDIA A100-SXM4-40GB", 40960, minor=0), 40960,
                                 split_count=4)
                await client.create("resourceslices", build_slice(name, [gpu], 1))
            prof = profile(kube_scheduler_configuration(build_config(
                {"roles": ("scheduler",), "dra": dra_chart}, env={})), SCHED)
            ext = ExtenderConfig.from_entry(prof.extenders[0], env.sched.url)
            pod, loop = await _run(client, ext, "ml", fit_ignored=prof.fit_ignored)
        finally:
            await client.close()
    if dra_chart:
        assert loop.stats.filters >= 2 and pod["spec"]["nodeName"] == "n1"  # binpack: the fuller node
        assert "hami.io/bind-phase" not in (pod["metadata"].get("annotations") or {})
    else:
        assert ext.managed_resources and loop.stats.filters == 0  # IsInterested: the claim pod asks none
        assert pod["spec"]["nodeName"] == "n0"  # the in-tree tie: the first node, policy lost
