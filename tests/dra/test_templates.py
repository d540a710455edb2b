"""hami.dra.templates: the ResourceClaimTemplates of --dra pods, created over real HTTP from pods in the API.

Covers: a template is created once (a second pod of the same shape costs no request, one made
elsewhere answers 409 and counts as made); RBAC refusing the create is an error naming the template;
the reconciler over the pod watch makes a DRA pod's templates in that pod's namespace only, nothing
for a pod whose shapes do not rebuild its reference or are malformed, and retries a refused create
until it succeeds.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from hami.config import KubeSettings
from hami.device.model import NvidiaConfig
from hami.dra.claims import CLAIMS_ANNOTATION, translate_pod
from hami.dra.templates import TemplateMaker, TemplateReconciler
from hami.kube.client import KubeClient
from hami.kube.informer import Informer
from tests.kube.helpers import eventually


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig), role="sim")
    yield c
    await c.close()


def _templates():
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}}}]}}
    return list(translate_pod(pod, NvidiaConfig()).templates)


async def test_templates_are_made_once(apiserver, client):
    made = TemplateMaker(client)
    assert await made.ensure("default", _templates()) == ""
    assert await made.ensure("default", _templates()) == ""
    assert made.created == 1
    other = TemplateMaker(client)  # another replica: the template exists, 409 is success
    assert await other.ensure("default", _templates()) == "" and other.created == 0
    name = _templates()[0]["metadata"]["name"]
    assert (await client.get("resourceclaimtemplates", name, "default"))["spec"] == _templates()[0]["spec"]


async def test_a_refused_create_is_an_error_naming_the_template(apiserver, client):
    apiserver.authz.deny("create", "resourceclaimtemplates", "resource.k8s.io")
    error = await TemplateMaker(client).ensure("default", _templates())
    assert error.startswith("could not create ResourceClaimTemplate default/hami-gpu-")


def _dra_pod(name: str, ns: str) -> dict:
    pod = {"metadata": {"name": name, "namespace": ns}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}}}]}}
    return translate_pod(pod, NvidiaConfig()).pod


def _names(apiserver, ns: str) -> set[str]:
    return {e.obj["metadata"]["name"] for e in apiserver.store.list("resourceclaimtemplates.resource.k8s.io", ns)[1]}


async def test_the_reconciler_makes_a_dra_pods_templates_in_its_own_namespace_only(apiserver, client):
    store = apiserver.store
    for ns in ("team", "other"):
        store.create("namespaces", "", {"metadata": {"name": ns}})
    apiserver.authz.deny("create", "resourceclaimtemplates", "resource.k8s.io")  # refused first: retried
    rec = TemplateReconciler(TemplateMaker(client), max_delay=0.2)
    pods = Informer(client, "pods", handler=rec.on_pod)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(pods.run(stop)), asyncio.create_task(rec.run(stop))]
    try:
        good = _dra_pod("good", "team")
        store.create("pods", "team", good)
        edited = _dra_pod("edited", "other")  # its shapes say more than the template it references
        edited["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps({"c-nvidia": [32, None, 100]})
        store.create("pods", "other", edited)
        broken = _dra_pod("broken", "other")
        broken["metadata"]["annotations"][CLAIMS_ANNOTATION] = "{not json"
        store.create("pods", "other", broken)
        await eventually(lambda: ("team", good["spec"]["resourceClaims"][0]["resourceClaimTemplateName"])
                         in rec.pending, 5)
        apiserver.authz.allow_all()
        want = good["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        await eventually(lambda: _names(apiserver, "team") == {want}, 5)
        assert _names(apiserver, "other") == set() and not rec.pending
        created = apiserver.store.get("resourceclaimtemplates.resource.k8s.io", "team", want)
        assert created["spec"] == translate_pod({"metadata": {}, "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}}}]}},
            NvidiaConfig()).templates[0]["spec"]
    finally:
        stop.set()
        await asyncio.gather(*tasks)
