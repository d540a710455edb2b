"""hami.dra.templates: the --dra webhook's ResourceClaimTemplates, created over real HTTP.

Covers: a template is created once (a second pod of the same shape costs no request, one made
elsewhere answers 409 and counts as made); RBAC refusing the create turns the admission answer
into a denial naming the template.
"""

from __future__ import annotations

import pytest

from hami.config import KubeSettings
from hami.device.model import NvidiaConfig
from hami.dra.claims import translate_pod
from hami.dra.templates import TemplateMaker, deny
from hami.kube.client import KubeClient


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


async def test_a_refused_create_denies_the_pod(apiserver, client):
    apiserver.authz.deny("create", "resourceclaimtemplates", "resource.k8s.io")
    error = await TemplateMaker(client).ensure("default", _templates())
    assert error.startswith("could not create ResourceClaimTemplate default/hami-gpu-")
    review = deny({"response": {"uid": "u", "allowed": True, "patch": "x", "patchType": "JSONPatch"}}, error)
    assert review["response"] == {"uid": "u", "allowed": False, "status": {"code": 500, "message": error}}
