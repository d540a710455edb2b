"""pods/binding in the embedded API server against kube-apiserver's BindingREST
(pkg/registry/core/pod/storage/storage.go, setPodHostAndAnnotations / setPodNodeAndMetadata), over
HTTP with the kubernetes-asyncio client: the Binding's metadata.annotations merged into the pod in
the one write that sets spec.nodeName and PodScheduled (each key overwrites, keys not named are
kept, null is the empty string, a non-string is a 400 naming the field), labels not copied; the UID
and resourceVersion preconditions; a pod being deleted, already assigned or still gated refused
409 on pods/binding with upstream's text and nothing changed; target.kind other than Node, no
target.name, a name differing from the URL's refused; hypothesis: any annotation maps merge as
Go's map assignment does."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.apierror import ApiError
from hami.config import KubeSettings
from hami.kube.client import KubeClient, resource_path
from hami.sim.apiserver.store import Store


def _pod(name: str = "p", annotations: dict | None = None, **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "annotations": annotations or {},
                         "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


@pytest.fixture
async def client(apiserver):
    c = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig), role="sim")
    yield c
    await c.close()


async def _bind(client: KubeClient, name: str, body: dict):
    return await client.request("create", "pods/binding", "POST", resource_path("pods", "default", name, "binding"),
                                body=body, content_type="application/json")


def _binding(name: str, node: str = "n1", **meta) -> dict:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **meta},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


async def test_annotations_merge_into_the_pod_in_the_write_that_binds_it(apiserver, client):
    apiserver.store.create("pods", "default", _pod(annotations={"keep": "1", "over": "old"}))
    rv = apiserver.store.get("pods", "default", "p")["metadata"]["resourceVersion"]
    await client.bind_pod("default", "p", "", "n1", annotations={"over": "new", "hami.io/vgpu-node": "n1"})
    pod = apiserver.store.get("pods", "default", "p")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"keep": "1", "over": "new", "hami.io/vgpu-node": "n1"}
    assert int(pod["metadata"]["resourceVersion"]) == int(rv) + 1  # one write
    assert [c["status"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"] == ["True"]


async def test_binding_labels_are_not_copied_and_null_is_the_empty_string(apiserver, client):
    apiserver.store.create("pods", "default", _pod())
    await _bind(client, "p", _binding("p", labels={"hami.io/vgpu-node": "n1"}, annotations={"a": None}))
    pod = apiserver.store.get("pods", "default", "p")
    assert pod["metadata"]["labels"] == {"app": "x"}
    assert pod["metadata"]["annotations"] == {"a": ""}


async def test_a_non_string_annotation_is_a_400_and_nothing_changes(apiserver, client):
    apiserver.store.create("pods", "default", _pod())
    with pytest.raises(ApiError) as exc:
        await _bind(client, "p", _binding("p", annotations={"a": 5}))
    assert exc.value.status == 400 and "ObjectMeta.metadata.annotations of type string" in str(exc.value)
    assert not apiserver.store.get("pods", "default", "p")["spec"].get("nodeName")


@pytest.mark.parametrize(("setup", "meta", "status", "text"), [
    ({"nodeName": "n0"}, {}, 409, 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned '
                                  'to node "n0"'),
    ({"schedulingGates": [{"name": "g"}]}, {}, 409,
     'Operation cannot be fulfilled on pods/binding "p": pod p has non-empty .spec.schedulingGates'),
    ({}, {"uid": "other"}, 409, 'Operation cannot be fulfilled on pods "p": Precondition failed: UID in '
                                'precondition: other'),
    ({}, {"resourceVersion": "1"}, 409, 'Operation cannot be fulfilled on pods "p": Precondition failed: '
                                        'ResourceVersion in precondition: 1'),
    ({}, {"name": "q"}, 400, "name in URL does not match name in Binding object"),
])
async def test_refusals_keep_the_pod_as_it_was(apiserver, client, setup, meta, status, text):
    apiserver.store.create("pods", "default", _pod(annotations={"a": "1"}, **setup))
    before = apiserver.store.get("pods", "default", "p")
    body = _binding("p", annotations={"a": "2"})
    body["metadata"].update(meta)
    with pytest.raises(ApiError) as exc:
        await _bind(client, "p", body)
    assert exc.value.status == status and text in str(exc.value), str(exc.value)
    assert apiserver.store.get("pods", "default", "p") == before


def test_a_pod_being_deleted_is_not_bound():
    store = Store()
    store.create("pods", "default", _pod())
    entry = store.entry("pods", "default", "p")
    entry.obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # graceful deletion under way
    with pytest.raises(ApiError) as exc:
        store.bind("default", "p", _binding("p"))
    assert exc.value.status == 409 and "pod p is being deleted, cannot be assigned to a host" in str(exc.value)


@pytest.mark.parametrize(("target", "text"), [
    ({"kind": "Node"}, "target.name: Required value"),
    ({"kind": "Pod", "name": "n1"}, 'target.kind: Unsupported value: "Pod"'),
])
def test_target_validation(target, text):
    store = Store()
    store.create("pods", "default", _pod())
    with pytest.raises(ApiError) as exc:
        store.bind("default", "p", {"metadata": {"name": "p"}, "target": target})
    assert exc.value.status == 422 and text in str(exc.value)


def test_an_empty_target_kind_is_a_node():
    store = Store()
    store.create("pods", "default", _pod())
    store.bind("default", "p", {"metadata": {"name": "p"}, "target": {"name": "n1"}})
    assert store.get("pods", "default", "p")["spec"]["nodeName"] == "n1"


text = st.text(max_size=8)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(text, text, max_size=6), st.dictionaries(text, st.one_of(text, st.none()), max_size=6))
def test_merge_is_gos_map_assignment(existing, incoming):
    store = Store()
    store.create("pods", "default", _pod(annotations=existing))
    store.bind("default", "p", orjson.loads(orjson.dumps(_binding("p", annotations=incoming))))
    want = dict(existing)
    for k, v in incoming.items():
        want[k] = "" if v is None else v
    assert (store.get("pods", "default", "p")["metadata"].get("annotations") or {}) == want
