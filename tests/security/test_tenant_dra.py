"""A hostile tenant against the --dra webhook, on the embedded API server with the
scheduler's real webhook, as the demo user:
- an AdmissionReview forged and sent straight to /webhook, naming kube-system, makes nothing there
  (the scheduler's cluster-wide create right is used only for pods that exist), while a GPU pod the
  tenant creates through the API gets its ResourceClaimTemplate in its own namespace;
- neither the forged review nor a pod carrying a mark the webhook never issued makes the scheduler
  believe the API server reaches its webhook; the tenant's real pod, admitted with the mark, does."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from hami.dra.claims import DRA_LABEL
from hami.scheduler.admission.admitted import MARK_ANNOTATION
from tests.kube.helpers import eventually
from tests.security._tenant import tenant_cluster
from tests.security.test_tenant_placement import gpu_pod
from tests.sim._kubesched import gpu_node

pytestmark = pytest.mark.timeout(60)
TEMPLATES = "resourceclaimtemplates.resource.k8s.io"


def templates(store, ns: str) -> set[str]:
    return {e.obj["metadata"]["name"] for e in store.list(TEMPLATES, ns)[1]}


async def test_a_forged_review_makes_nothing_and_proves_nothing(apiserver):
    apiserver.store.create("namespaces", "", {"metadata": {"name": "team"}})
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=2)], dra=True) as tenant:
        sched = tenant.env.sched
        forged = gpu_pod("forged", "kube-system", gpus=1, mem=4000)
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "operation": "CREATE", "namespace": "kube-system", "object": forged,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"}}}
        async with aiohttp.ClientSession() as http, http.post(sched.url + "/webhook",
                                                              data=orjson.dumps(review)) as r:
            assert r.status == 200
            answer = (await r.json())["response"]
        assert answer["allowed"] is True  # a well-formed review is answered: it just makes nothing
        # A pod carrying a mark this webhook never issued (the webhook is bypassed: straight to storage).
        apiserver.store.create("pods", "team", {**gpu_pod("stale", "team", gpus=0), "metadata": {
            "name": "stale", "namespace": "team", "annotations": {MARK_ANNOTATION: "guessed"}}})
        await eventually(lambda: sched.state.pod("team", "stale") is not None)
        assert sched.missed.webhook_answered() == 0.0
        # The tenant's real pod: admitted through the API with the mark, its template in its namespace.
        status, body = await tenant.create_pod(gpu_pod("real", "team", gpus=1, mem=4000))
        assert status == 201, body
        assert body["metadata"]["labels"][DRA_LABEL] == "true" and MARK_ANNOTATION in body["metadata"]["annotations"]
        want = body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        await eventually(lambda: templates(tenant.store, "team") == {want}, 10)
        await eventually(lambda: sched.missed.webhook_answered() > 0.0)
        # The forged pod reached the reconciler before the real one (one informer, in order) and its
        # queue is written in arrival order: with the real pod's template made, a template the forged
        # pod caused would exist already.
        assert not sched.templates.pending
        assert templates(tenant.store, "kube-system") == set()
