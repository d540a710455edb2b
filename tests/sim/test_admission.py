"""Mutating admission in the embedded API server: pod CREATE goes through the webhook, its JSONPatch
is applied, a denial reaches the client as a Status error, an unreachable webhook admits unchanged
(failurePolicy Ignore), and `hami.io/webhook=ignore` on the pod or its namespace skips the call."""

import base64

import aiohttp
import orjson
import pytest
from aiohttp import web

from hami.sim.admission import WebhookAdmission


@pytest.fixture
async def webhook():
    seen = []

    async def handle(request):
        review = await request.json()
        seen.append(review)
        pod = review["request"]["object"]
        uid = review["request"]["uid"]
        if pod["spec"].get("nodeName"):
            return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": uid, "allowed": False, "status": {"code": 403, "message": "pod has node assigned"}}})
        patch = [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": uid, "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(orjson.dumps(patch)).decode()}})

    app = web.Application()
    app.router.add_post("/webhook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/webhook", seen
    await runner.cleanup()


def _pod(name, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}


async def _create(apiserver, body, ns="default"):
    async with aiohttp.ClientSession() as http, \
            http.post(f"{apiserver.url}/api/v1/namespaces/{ns}/pods", data=orjson.dumps(body)) as r:
        return r.status, await r.json()


async def test_pod_create_is_mutated_by_the_webhook(apiserver, webhook):
    url, seen = webhook
    apiserver.admission = WebhookAdmission(url)
    status, obj = await _create(apiserver, _pod("a"))
    assert status == 201 and obj["spec"]["schedulerName"] == "hami-scheduler"
    assert seen[0]["request"]["operation"] == "CREATE" and seen[0]["request"]["namespace"] == "default"
    assert apiserver.store.get("pods", "default", "a")["spec"]["schedulerName"] == "hami-scheduler"


async def test_denial_is_a_status_error_and_nothing_is_stored(apiserver, webhook):
    url, _ = webhook
    apiserver.admission = WebhookAdmission(url)
    status, obj = await _create(apiserver, _pod("b", nodeName="n1"))
    assert status == 403 and obj["kind"] == "Status"
    assert obj["message"] == 'admission webhook "vgpu.hami.io" denied the request: pod has node assigned'
    with pytest.raises(Exception, match="not found"):
        apiserver.store.get("pods", "default", "b")


async def test_unreachable_webhook_admits_unchanged(apiserver):
    apiserver.admission = WebhookAdmission("http://127.0.0.1:9/webhook", timeout=2)
    status, obj = await _create(apiserver, _pod("c"))
    assert status == 201 and obj["spec"]["schedulerName"] == "default-scheduler"  # the server's default


async def test_ignore_label_on_pod_or_namespace_skips_the_webhook(apiserver, webhook):
    url, seen = webhook
    apiserver.admission = WebhookAdmission(url)
    pod = _pod("d")
    pod["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    status, obj = await _create(apiserver, pod)
    assert status == 201 and obj["spec"]["schedulerName"] == "default-scheduler"  # the server's default
    apiserver.store.create("namespaces", "", {"metadata": {"name": "quiet", "labels": {"hami.io/webhook": "ignore"}}})
    status, obj = await _create(apiserver, _pod("e"), ns="quiet")
    assert status == 201 and obj["spec"]["schedulerName"] == "default-scheduler"  # the server's default
    assert seen == []
