"""Forged placements and squatting, against the running scheduler, node agent and embedded API server
over real HTTP and gRPC:
- the scheduler counts a pod's devices only if hami placed it: an unbound pod annotated with a node
  and both its GPUs fills nothing; the same pod counts once it holds the node's lock, or is bound
  where its placement says;
- /bind of a GPU pod with no placement that fits answers an Error and binds nothing;
- the node agent serves only the pod holding its node's lock: a pod claiming `allocating` without it
  gets a clear gRPC error naming it, a Warning Event, and no devices;
- the scheduler's /metrics carry no GPU UUIDs unless the operator opts in;
- the embedded API server authenticates bearer tokens and puts the caller's userInfo into the
  AdmissionReview: a forged pod (or a PATCH adding a placement) from the demo user (with its token, or
  with none, as kubectl sends to an http:// server) is refused by the real webhook, hami's scheduler
  account may write placements, an unknown token is 401."""

from __future__ import annotations

import aiohttp
import grpc
import orjson
import pytest
from aiohttp import web

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.principals import EMBEDDED_SCHEDULER_USER
from hami.scheduler.admission.webhook import WebhookSettings, mutate
from hami.scheduler.metrics import SchedulerMetrics
from hami.scheduler.role import usage_snapshot
from hami.sim.apiserver.admission import WebhookAdmission
from hami.sim.apiserver.authn import demo_user_info, service_account_info
from tests.agent.harness import LOCK, U1, NodeHarness
from tests.kube.helpers import eventually, gpu_uuid, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env


def squatter(name: str, node: str) -> dict:
    devs = codec.encode_pod_devices(((ContainerDevice(gpu_uuid(node, 0), "NVIDIA", 40960, 100),
                                      ContainerDevice(gpu_uuid(node, 1), "NVIDIA", 40960, 100)),))
    return pod_obj(name, gpus=0, annotations={codec.VGPU_NODE_ANNOTATION: node, codec.ALLOCATED_ANNOTATION: devs,
                                              codec.TO_ALLOCATE_ANNOTATION: devs})


def used(env, node: str) -> int:
    return sum(d.usedmem for d in env.sched.state.index.node(node).by_id.values())


async def test_an_unbound_squatter_fills_nothing_until_it_holds_the_lock_or_is_bound(apiserver):
    async with running_env(apiserver, hami_nodes(2)) as env:
        uid = env.create_pod(squatter("squat", "n0"))["metadata"]["uid"]
        probe = env.create_pod(pod_obj("probe", mem=30000))
        await eventually(lambda: env.sched.state.pod("default", "probe") is not None)
        assert used(env, "n0") == 0 and env.sched.state.index.pod(uid) is None
        out = await env.filter(probe, ["n0"])
        assert out.get("NodeNames") == ["n0"], out  # the squatted node still takes a pod
        # Holding the node's lock (a /bind in progress, perhaps another replica's) counts it.
        env.store.patch("nodes", "", "n0", orjson.dumps({"metadata": {"annotations": {
            codec.NODE_LOCK_ANNOTATION: codec.encode_node_lock(1_790_000_000, "default", "squat")}}}),
            "application/merge-patch+json")
        await eventually(lambda: env.sched.state.index.pod(uid) is not None)
        assert env.sched.state.index.pod(uid).node == "n0"


async def test_bind_of_a_gpu_pod_that_fits_nowhere_is_an_error_and_binds_nothing(apiserver):
    async with running_env(apiserver, hami_nodes(1)) as env:
        pod = env.create_pod(pod_obj("huge", mem=90000))
        await eventually(lambda: env.sched.state.pod("default", "huge") is not None)
        out = await env.bind(pod, "n0")
        assert "no placement fits node n0" in out["Error"] and "nothing bound" in out["Error"]
        stored = env.pod("default", "huge")
        assert not stored["spec"].get("nodeName")
        assert codec.BIND_PHASE_ANNOTATION not in (stored["metadata"].get("annotations") or {})


async def test_agent_refuses_an_allocating_pod_that_does_not_hold_the_lock():
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        forged = await h.create_pod("forged", {"main": 1}, f"{U1},NVIDIA,40960,100:;", lock=False)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.kubelet.allocate_pod(forged)
        text = err.value.details()
        assert "no binding pod found on node" in text and "default/forged" in text and LOCK in text
        events = [e.obj for e in h.server.store.list("events", "default")[1]]
        assert any(e["reason"] == "AllocationRefused" and e["involvedObject"]["name"] == "forged" for e in events)
        annos = (await h.client.get_pod("default", "forged"))["metadata"]["annotations"]
        assert annos[codec.TO_ALLOCATE_ANNOTATION] == f"{U1},NVIDIA,40960,100:;"  # nothing handed out


async def test_scheduler_metrics_carry_no_uuids_unless_the_operator_opts_in(apiserver):
    async with running_env(apiserver, hami_nodes(1)) as env:
        text = env.sched.metrics.exposition().decode()
        assert 'device_uuid="n0/0"' in text and gpu_uuid("n0", 0) not in text
        opted = SchedulerMetrics(lambda: usage_snapshot(env.sched.state), lambda: {}, device_uuids=True)
        assert gpu_uuid("n0", 0) in opted.exposition().decode()


@pytest.fixture
async def real_webhook():
    """The scheduler's webhook function over real HTTP, as the embedded cluster serves it."""
    settings = WebhookSettings()

    async def handle(request):
        return web.json_response(mutate(orjson.loads(await request.read()), settings))

    app = web.Application()
    app.router.add_post("/webhook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/webhook"
    await runner.cleanup()


FORGED = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "forged", "namespace": "default", "annotations": {
    codec.BIND_PHASE_ANNOTATION: "allocating", codec.VGPU_NODE_ANNOTATION: "gpu-node-2",
    codec.TO_ALLOCATE_ANNOTATION: "GPU-x,NVIDIA,40960,100:;"}},
    "spec": {"schedulerName": "my-scheduler", "nodeName": "gpu-node-2",
             "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def test_embedded_server_sends_the_callers_user_info_and_the_webhook_refuses_forgeries(apiserver, real_webhook):
    apiserver.admission = WebhookAdmission(real_webhook, operations=("CREATE", "UPDATE"))
    user = apiserver.authn.issue(demo_user_info())
    sched = apiserver.authn.issue(service_account_info(EMBEDDED_SCHEDULER_USER))
    url = f"{apiserver.url}/api/v1/namespaces/default/pods"

    async def call(method, path, token, body, ctype="application/json"):
        headers = {"Content-Type": ctype, **({"Authorization": f"Bearer {token}"} if token else {})}
        async with aiohttp.ClientSession() as http, http.request(method, path, data=orjson.dumps(body),
                                                                 headers=headers) as r:
            return r.status, orjson.loads(await r.read())

    status, body = await call("POST", url, user, FORGED)
    assert status == 403 and "hami.io/bind-phase" in body["message"] and "hami-demo-user" in body["message"]
    status, body = await call("POST", url, "not-a-token", FORGED)
    assert status == 401
    apiserver.authn.anonymous = demo_user_info()  # kubectl sends no token to an http:// server
    status, body = await call("POST", url, "", FORGED)
    assert status == 403 and "hami-demo-user" in body["message"]
    plain = {**FORGED, "metadata": {"name": "plain", "namespace": "default"},
             "spec": {"containers": FORGED["spec"]["containers"]}}
    status, _ = await call("POST", url, user, plain)
    assert status == 201
    add = {"metadata": {"annotations": {codec.VGPU_NODE_ANNOTATION: "gpu-node-1"}}}
    status, body = await call("PATCH", f"{url}/plain", user, add, "application/merge-patch+json")
    assert status == 403 and codec.VGPU_NODE_ANNOTATION in body["message"]
    status, body = await call("PATCH", f"{url}/plain", sched, add, "application/merge-patch+json")
    assert status == 200 and body["metadata"]["annotations"][codec.VGPU_NODE_ANNOTATION] == "gpu-node-1"


async def test_a_big_admission_is_judged_off_the_event_loop(apiserver):
    """Issue 27 §2: an AdmissionReview of 64 KiB or more runs on the webhook's worker thread, so the loop
    keeps answering /filter and the probes; a small one stays on the loop (no thread hop)."""
    import threading

    async with running_env(apiserver, hami_nodes(1)) as env:
        seen: list[int] = []
        inner = env.sched.extender.webhook

        def recording(body):
            seen.append(threading.get_ident())
            return inner(body)

        env.sched.extender.webhook = recording
        ctrs = [{"name": f"c{i}", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}} for i in range(1000)]
        big = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "operation": "CREATE", "namespace": "default", "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": "big", "namespace": "default"}, "spec": {"containers": ctrs}}}}
        small = {**big, "request": {**big["request"], "object": pod_obj("small")}}
        async with aiohttp.ClientSession() as http:
            for review in (big, small):
                async with http.post(env.sched.url + "/webhook", data=orjson.dumps(review)) as r:
                    assert r.status == 200
                    assert (await r.json())["response"]["allowed"] is True
        assert len(orjson.dumps(big)) >= 64 * 1024 > len(orjson.dumps(small))
        assert seen[0] != threading.get_ident() and seen[1] == threading.get_ident()
