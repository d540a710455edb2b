"""Mutating admission and pods/log in the embedded API server: pod CREATE goes through the webhook, its JSONPatch
is applied, a denial reaches the client as a Status error, an unreachable webhook admits unchanged
(failurePolicy Ignore), and `hami.io/webhook=ignore` on the namespace skips the call; on the pod it does not
(a pod cannot opt itself out)."""

import base64

import aiohttp
import orjson
import pytest
from aiohttp import web

from hami.apierror import ApiError
from hami.sim.apiserver.admission import WebhookAdmission
from tests.ports import serve_app


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
    url, runner = await serve_app(app)
    yield f"{url}/webhook", seen
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
    with pytest.raises(ApiError, match="not found") as info:
        apiserver.store.get("pods", "default", "b")
    assert info.value.code == 404


async def test_unreachable_webhook_admits_unchanged(apiserver):
    apiserver.admission = WebhookAdmission("http://127.0.0.1:9/webhook", timeout=2)
    status, obj = await _create(apiserver, _pod("c"))
    assert status == 201 and obj["spec"]["schedulerName"] == "default-scheduler"  # the server's default


async def test_ignore_label_on_namespace_skips_the_webhook_on_the_pod_it_does_not(apiserver, webhook):
    url, seen = webhook
    apiserver.admission = WebhookAdmission(url)
    pod = _pod("d")
    pod["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    status, obj = await _create(apiserver, pod)
    assert status == 201 and len(seen) == 1  # the pod's own label is no opt-out
    seen.clear()
    apiserver.store.create("namespaces", "", {"metadata": {"name": "quiet", "labels": {"hami.io/webhook": "ignore"}}})
    status, obj = await _create(apiserver, _pod("e"), ns="quiet")
    assert status == 201 and obj["spec"]["schedulerName"] == "default-scheduler"  # the server's default
    assert seen == []


async def test_pod_log_subresource_serves_lines_the_process_provides(apiserver):
    apiserver.store.create("pods", "kube-system", _pod("sched"))
    apiserver.store.create("pods", "default", _pod("other"))
    apiserver.pod_logs = lambda ns, name: ["a", "b", "c"] if (ns, name) == ("kube-system", "sched") else None
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{apiserver.url}/api/v1/namespaces/kube-system/pods/sched/log?tailLines=2") as r:
            assert r.status == 200 and await r.text() == "b\nc\n"
        async with http.get(f"{apiserver.url}/api/v1/namespaces/default/pods/other/log") as r:
            assert r.status == 400 and "simulated" in (await r.json())["message"]
        async with http.get(f"{apiserver.url}/api/v1/namespaces/default/pods/none/log") as r:
            assert r.status == 404
