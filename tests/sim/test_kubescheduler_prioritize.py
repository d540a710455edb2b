"""/prioritize and --extender-prioritize under the faithful kube-scheduler loop, and the verb's wire format.

Covers: with a preferred node affinity to a half-full node and HAMi's spread policy preferring the
empty one, the affinity node wins when prioritize is configured (filter answers every fitting
node, the extender's 0..10 scores are weighed with NodeAffinity's, /bind re-places the devices on
kube-scheduler's choice, also when the filtering replica's memory is gone) and HAMi's node wins when
it is not; /prioritize scores binpack and spread
on 0..10 with non-fitting nodes at 0; bodies of the wrong shape get an `Error` naming the field
(HTTP 400, never 500; `Nodes.items: ["x"]` included).
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from hami.device import codec
from hami.scheduler.extender.hamiflow import patch_at_filter
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import running_env
from tests.sim._kubesched import gpu_node, running_cluster


def prefers(pod: dict, node: str) -> dict:
    pod["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}
    return pod


def labelled(name: str) -> dict:
    n = gpu_node(name)
    n["metadata"]["labels"] = {"kubernetes.io/hostname": name}
    return n


@pytest.mark.parametrize("prioritize", [True, False])
async def test_preferred_affinity_wins_with_prioritize_and_hami_choice_without(apiserver, prioritize):
    ext = {"prioritize_verb": "prioritize"} if prioritize else {}
    async with running_cluster(apiserver, [labelled("n0"), labelled("n1")], ext=ext,
                               node_scheduler_policy="spread", extender_prioritize=prioritize) as c:
        c.create(pod_obj("half", mem=20000, annotations={"nvidia.com/use-gpuuuid": gpu_uuid("n0", 0)}))
        await eventually(lambda: c.node_of("half") == "n0", 10)
        c.create(prefers(pod_obj("picky", mem=10000), "n0"))
        await eventually(lambda: c.node_of("picky"), 10)
        want = "n0" if prioritize else "n1"
        assert c.node_of("picky") == want
        annos = c.annotations("picky")
        assert annos["hami.io/vgpu-node"] == want
        devices = codec.decode_pod_devices(annos[codec.ALLOCATED_ANNOTATION])
        assert [d.uuid for d in devices[0]] == [gpu_uuid(want, 0)]
        assert c.loop.stats.prioritizes == (1 if prioritize else 0)


async def post(env, verb: str, body) -> tuple[int, object]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession() as http, http.post(env.sched.url + "/" + verb, data=raw) as r:
        return r.status, orjson.loads(await r.read())


@pytest.mark.parametrize("policy,want", [("binpack", {"n0": 10, "n1": 0, "n2": 0}),
                                         ("spread", {"n0": 0, "n1": 10, "n2": 0})])
async def test_prioritize_scales_hami_node_score_to_extender_range(apiserver, policy, want):
    nodes = [gpu_node("n0"), gpu_node("n1"), gpu_node("n2", mem=1000)]
    async with running_env(apiserver, nodes, node_scheduler_policy=policy) as env:
        p = env.create_pod(pod_obj("used", mem=20000))
        assert (await env.filter(p, ["n0"]))["NodeNames"] == ["n0"]
        status, scores = await post(env, "prioritize", {"Pod": pod_obj("x", mem=5000), "NodeNames": ["n0", "n1", "n2"]})
        assert status == 200
        assert {s["Host"]: s["Score"] for s in scores} == want


@pytest.mark.parametrize("body,field", [
    ({"Pod": "nope", "NodeNames": ["n0"]}, "Pod"),
    ({"Pod": {"metadata": 3}, "NodeNames": ["n0"]}, "Pod.metadata"),
    ({"Pod": {}, "NodeNames": "n0"}, "NodeNames"),
    ({"Pod": {}, "NodeNames": [1]}, "NodeNames"),
    ([1, 2], "extender args"),
    (b"{not json", "extender args"),
    ({"Pod": {}, "Nodes": {"items": ["x"]}}, "Nodes.items[0]"),
    ({"Pod": {}, "Nodes": {"items": [{"metadata": 7}]}}, "Nodes.items[0].metadata"),
    ({"Pod": {}, "Nodes": {"items": "x"}}, "Nodes.items"),
])
async def test_prioritize_bad_shapes_get_an_error_naming_the_field(apiserver, body, field):
    async with running_env(apiserver, [gpu_node("n0")]) as env:
        status, out = await post(env, "prioritize", body)
        assert status == 400
        assert field in out["Error"]


async def test_bind_re_places_on_another_node_even_after_a_restart_forgot_the_filter(apiserver):
    async with running_env(apiserver, [labelled("n0"), labelled("n1")], extender_prioritize=True) as env:
        patch_at_filter(env.sched.extender)  # a placement another replica (HAMi's flow) wrote at /filter
        p = env.create_pod(pod_obj("moved", mem=10000))
        out = await env.filter(p, ["n0", "n1"])
        assert sorted(out["NodeNames"]) == ["n0", "n1"]
        first = out["NodeNames"][0]
        other = "n1" if first == "n0" else "n0"
        await eventually(lambda: env.pod("default", "moved")["metadata"]["annotations"].get("hami.io/vgpu-node"), 5)
        env.forget_held()  # as a restarted (or other) replica would see it
        await eventually(lambda: (env.sched.state.pod("default", "moved") or {}).get("metadata", {}).get(
            "annotations", {}).get("hami.io/vgpu-node") == first, 5)
        assert (await env.bind(env.pod("default", "moved"), other))["Error"] == ""
        annos = env.pod("default", "moved")["metadata"]["annotations"]
        assert annos["hami.io/vgpu-node"] == other
        devices = codec.decode_pod_devices(annos[codec.ALLOCATED_ANNOTATION])
        assert [d.uuid for d in devices[0]] == [gpu_uuid(other, 0)]
        assert env.pod("default", "moved")["spec"]["nodeName"] == other
