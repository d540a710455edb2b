"""The embedded API server's SelfSubjectAccessReviews and the scheduler's write-permission readiness.

Covers: a review answers allowed for everything by default and `allowed: false` (with the rule's
reason) for a denied (verb, resource/subresource); the same rule makes the real request 403 with
kube-apiserver's forbidden text (namespaced and cluster-scoped); a review with neither or both of
resourceAttributes / nonResourceAttributes is 422; discovery lists the resource create-only; real
kubectl `auth can-i` agrees. The scheduler is unready naming each denied need (pods/binding, pods
patch, nodes patch) and ready again once RBAC allows it; a server that does not serve reviews (404)
leaves readiness to the other checks. The review runs at start and again only when a request is
refused (401/403), while a need is denied, or after its max age: never on a timer while idle.
"""

from __future__ import annotations

import asyncio

import pytest

from hami.kube.access import SSAR_PATH, SSAR_RESOURCE, AccessProbe
from hami.kube.client import ApiError
from hami.sim.apiserver.authz import Attributes, forbidden
from tests.kube.helpers import client_for, eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.tools import find_kubectl


def _review(**attrs) -> dict:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}


async def _ask(client, **attrs) -> dict:
    return await client.request("create", "selfsubjectaccessreviews", "POST", SSAR_PATH, body=_review(**attrs),
                                content_type="application/json")


async def test_reviews_follow_the_denial_rules_and_the_requests_get_the_real_403(apiserver):
    client = await client_for(apiserver.kubeconfig)
    try:
        out = await _ask(client, verb="create", resource="pods", subresource="binding", namespace="default")
        assert out["status"] == {"allowed": True} and out["kind"] == "SelfSubjectAccessReview"
        apiserver.authz.user = "system:serviceaccount:hami-system:hami-scheduler"
        apiserver.authz.deny("create", "pods/binding", reason="no RoleBinding")
        apiserver.authz.deny("patch", "nodes")
        out = await _ask(client, verb="create", resource="pods", subresource="binding", namespace="default")
        assert out["status"] == {"allowed": False, "reason": "no RoleBinding"}
        assert (await _ask(client, verb="patch", resource="nodes"))["status"] == {"allowed": False}
        assert (await _ask(client, verb="patch", resource="pods"))["status"] == {"allowed": True}
        apiserver.store.create("pods", "default", pod_obj("p"))
        apiserver.store.create("nodes", "", hami_nodes(1)[0])
        with pytest.raises(ApiError) as bind:
            await client.bind_pod("default", "p", "", "n0")
        assert bind.value.code == 403 and bind.value.reason == "Forbidden"
        assert str(bind.value.message) == (
            'pods/binding "p" is forbidden: User "system:serviceaccount:hami-system:hami-scheduler" cannot '
            'create resource "pods/binding" in API group "" in the namespace "default": no RoleBinding')
        with pytest.raises(ApiError) as patch:
            await client.patch("nodes", "n0", {"metadata": {"labels": {"a": "b"}}})
        assert patch.value.message == (
            'nodes "n0" is forbidden: User "system:serviceaccount:hami-system:hami-scheduler" cannot patch '
            'resource "nodes" in API group "" at the cluster scope')
        await client.patch_pod("default", "p", {"metadata": {"labels": {"a": "b"}}})  # not denied: works
        apiserver.authz.allow_all()
        assert await client.bind_pod("default", "p", "", "n0") is not None
    finally:
        await client.close()


@pytest.mark.parametrize("spec", [{}, {"resourceAttributes": {"verb": "get", "resource": "pods"},
                                      "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}])
async def test_a_review_needs_exactly_one_kind_of_attributes(apiserver, spec):
    client = await client_for(apiserver.kubeconfig)
    try:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec}
        with pytest.raises(ApiError) as err:
            await client.request("create", "selfsubjectaccessreviews", "POST", SSAR_PATH, body=body,
                                 content_type="application/json")
        assert err.value.code == 422
        assert "exactly one of nonResourceAttributes or resourceAttributes" in err.value.message
        doc = await client.request("get", "discovery", "GET", "/apis/authorization.k8s.io/v1")
        assert doc["resources"] == [{"name": "selfsubjectaccessreviews", "singularName": "", "namespaced": False,
                                     "kind": "SelfSubjectAccessReview", "verbs": ["create"]}]
    finally:
        await client.close()


def test_forbidden_text_for_a_collection_of_a_named_group():
    err = forbidden("u", Attributes("list", "coordination.k8s.io", "leases", namespace="kube-system"))
    assert err.message == ('leases.coordination.k8s.io is forbidden: User "u" cannot list resource "leases" in '
                           'API group "coordination.k8s.io" in the namespace "kube-system"')


async def test_kubectl_auth_can_i_agrees(apiserver):
    kubectl = find_kubectl()
    apiserver.authz.deny("create", "pods/binding")

    async def can_i(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            kubectl, "--kubeconfig", apiserver.kubeconfig, "auth", "can-i", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return out.decode().strip() or err.decode().strip()

    assert await can_i("create", "pods", "--subresource=binding") == "no"
    assert await can_i("patch", "pods") == "yes"


async def test_the_scheduler_is_unready_while_rbac_denies_its_writes(apiserver):
    apiserver.authz.deny("create", "pods/binding")
    apiserver.authz.deny("patch", "nodes")
    async with running_env(apiserver, hami_nodes(1)) as env:
        reasons = env.sched.readiness()
        assert reasons == ["RBAC denies create pods/binding: /bind cannot bind pods",
                           "RBAC denies patch nodes: node locks and handshakes cannot be written"]
        async with env.http.get(env.sched.url + "/readyz") as r:
            text = await r.text()
            assert r.status == 503 and "RBAC denies create pods/binding" in text
        apiserver.authz.allow_all()
        await env.sched.access.check_once()  # what the re-check while a need is denied (every 60 s) does
        assert env.sched.readiness() == []
        async with env.http.get(env.sched.url + "/readyz") as r:
            assert r.status == 200


async def test_a_server_without_reviews_leaves_readiness_to_the_other_checks(apiserver):
    client = await client_for(apiserver.kubeconfig)
    try:
        probe = AccessProbe(client)
        assert probe.reasons() == ["write permissions not verified yet"]
        apiserver.authz.deny("create", "selfsubjectaccessreviews", group="authorization.k8s.io")
        await probe.check_once()
        assert probe.reasons() == [] and probe.unknown.startswith("HTTP 403")
    finally:
        await client.close()


async def test_the_review_waits_for_a_refused_request_not_a_timer(apiserver):
    """Allowed and answering: the review sleeps for its max age (no SSAR while idle), successful
    requests do not wake it; a write refused 403 (a RoleBinding removed) reviews at once and makes the
    need denied; while denied it re-reviews every denied_recheck, so granting RBAC back is seen."""
    client = await client_for(apiserver.kubeconfig)
    probe = AccessProbe(client, max_age=600.0, denied_recheck=0.05, min_gap=0.0)
    stop = asyncio.Event()
    task = asyncio.create_task(probe.run(stop))
    try:
        await eventually(lambda: probe.checks == 1 and probe.asleep_for == 600.0, 5)
        reviews = client.total_requests("create", SSAR_RESOURCE)
        assert reviews == 3
        apiserver.store.create("pods", "default", pod_obj("p"))
        for _ in range(20):  # answered requests are no reason to review again
            await client.get_pod("default", "p")
        await client.patch("pods", "p", {"metadata": {"labels": {"a": "b"}}}, "default")
        await asyncio.sleep(0)
        assert client.total_requests("create", SSAR_RESOURCE) == reviews and probe.checks == 1

        apiserver.authz.deny("patch", "pods")
        with pytest.raises(ApiError) as refused:
            await client.patch("pods", "p", {"metadata": {"labels": {"a": "c"}}}, "default")
        assert refused.value.code == 403
        await eventually(lambda: probe.reasons() == ["RBAC denies patch pods: /bind cannot write device placements"],
                         5)
        assert probe.asleep_for == 0.05  # denied: no write will come to say it is granted again
        apiserver.authz.allow_all()
        await eventually(lambda: probe.reasons() == [] and probe.asleep_for == 600.0, 5)
    finally:
        stop.set()
        await task
        await client.close()


async def test_an_unauthorized_answer_reviews_again_at_most_once_per_min_gap(apiserver):
    """A 401 (credentials rotated) anywhere asks for a review too; a burst of refusals is one review
    after min_gap, not one each; the review's own refusals (reviews forbidden) ask for nothing."""
    client = await client_for(apiserver.kubeconfig)
    probe = AccessProbe(client, max_age=600.0, min_gap=0.3)
    stop = asyncio.Event()
    task = asyncio.create_task(probe.run(stop))
    try:
        await eventually(lambda: probe.checks == 1, 5)
        assert client.on_request is not None
        for _ in range(10):
            client.on_request("list", "pods", "401", 0.01)
        await eventually(lambda: probe.checks == 2, 5)
        await asyncio.sleep(0.4)  # past another min_gap: the burst was answered by one review
        assert probe.checks == 2 and not probe.refused.is_set()
        client.on_request("create", SSAR_RESOURCE, "403", 0.01)
        assert not probe.refused.is_set()
    finally:
        stop.set()
        await task
        await client.close()
