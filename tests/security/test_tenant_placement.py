"""A hostile tenant against its own placement and the doors around admission,
through the embedded API server and the scheduler's real webhook, as the demo user:
- stripping hami.io/vgpu-node and the device annotations from its own running pod is refused (403,
  naming the key and the user); and where the webhook cannot stop it (down, failurePolicy Ignore),
  the scheduler keeps counting the bound pod by UID, so a second pod asking 2 x 30000 MiB beside
  one holding 2 x 30000 MiB on two 40960 MiB GPUs is not placed, and the namespace's GPU quota
  still counts it (the webhook refuses the next pod as over quota);
- a Binding carrying placement annotations is refused by admission (403), a plain one is not;
- changing spec.priority, spec.priorityClassName or spec.nodeName of a pod is refused (422) as
  kube-apiserver's pod update validation refuses it; an image change is still allowed."""

from __future__ import annotations

import pytest

from hami.device import codec
from tests.kube.helpers import eventually, pod_obj
from tests.ports import refusing_port
from tests.security._tenant import JSONPATCH, tenant_cluster, webhook_admission
from tests.sim._kubesched import gpu_node

pytestmark = pytest.mark.timeout(60)

PLACEMENT = (codec.VGPU_NODE_ANNOTATION, codec.ALLOCATED_ANNOTATION, codec.TO_ALLOCATE_ANNOTATION)


def gpu_pod(name: str, ns: str = "default", **kw) -> dict:
    """A GPU pod as a tenant writes it: no schedulerName (the webhook hands it to hami)."""
    pod = pod_obj(name, ns, **kw)
    del pod["spec"]["schedulerName"]
    pod.pop("status")
    return pod


async def running(tenant, name: str, ns: str = "default") -> dict:
    def placed():
        pod = tenant.store.get("pods", ns, name)
        annos = pod["metadata"].get("annotations") or {}
        return pod if pod["spec"].get("nodeName") and annos.get(codec.BIND_PHASE_ANNOTATION) == "success" else None
    return await eventually(placed, 20)


def strip() -> dict:
    return {"metadata": {"annotations": dict.fromkeys(PLACEMENT)}}


async def test_stripping_its_own_placement_is_refused(apiserver):
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=2)]) as tenant:
        status, body = await tenant.create_pod(gpu_pod("honest", gpus=2, mem=30000))
        assert status == 201, body
        await running(tenant, "honest")
        status, body = await tenant.patch_pod("honest", strip())
        assert status == 403, body
        assert codec.VGPU_NODE_ANNOTATION in body["message"] and "hami-demo-user" in body["message"]
        annos = tenant.store.get("pods", "default", "honest")["metadata"]["annotations"]
        assert all(k in annos for k in PLACEMENT)
        # Through pods/status (its metadata is written too): the same answer.
        status, body = await tenant.call("PATCH", "/api/v1/namespaces/default/pods/honest/status", strip(),
                                         "application/merge-patch+json")
        assert status == 403 and codec.VGPU_NODE_ANNOTATION in body["message"], body
        # Changing one to another value is refused the same way (a JSON patch this time).
        status, body = await tenant.patch_pod("honest", [
            {"op": "replace", "path": "/metadata/annotations/hami.io~1vgpu-devices-allocated", "value": ""}],
            ctype=JSONPATCH)
        assert status == 403 and codec.ALLOCATED_ANNOTATION in body["message"], body


@pytest.fixture
def dead_port():
    """Where a webhook that is down would be: connections are refused for the whole test."""
    with refusing_port() as port:
        yield port


async def test_a_bound_pod_stays_counted_when_its_placement_is_stripped_behind_the_webhook(apiserver, dead_port):
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=2)]) as tenant:
        status, body = await tenant.create_pod(gpu_pod("honest", gpus=2, mem=30000))
        assert status == 201, body
        uid = (await running(tenant, "honest"))["metadata"]["uid"]
        index = tenant.env.sched.state.index
        assert index.pod(uid) is not None
        # The webhook is down (failurePolicy: Ignore): the API server lets the strip through.
        apiserver.admission = webhook_admission(f"http://127.0.0.1:{dead_port}/webhook")
        status, body = await tenant.patch_pod("honest", strip())
        assert status == 200, body
        await eventually(lambda: codec.VGPU_NODE_ANNOTATION not in (
            tenant.env.sched.state.pod("default", "honest")["metadata"].get("annotations") or {}))
        assert index.pod(uid) is not None and index.pod(uid).node == "n0"
        assert sum(d.usedmem for d in index.node("n0").by_id.values()) == 60000
        apiserver.admission = webhook_admission(tenant.env.sched.url + "/webhook")  # back up
        # A second pod asking 2 x 30000 MiB does not fit beside it.
        status, body = await tenant.create_pod(gpu_pod("greedy", gpus=2, mem=30000, ns="default"))
        assert status == 201, body
        # kube-scheduler tried it in several cycles (the extender found no fit each time): not placed.
        await eventually(lambda: tenant.cluster.loop.stats.attempts.get("default/greedy", 0) >= 3, 20)
        assert not tenant.store.get("pods", "default", "greedy")["spec"].get("nodeName")
        # The pod ends: its devices are free again, and the waiting pod is placed.
        tenant.store.delete("pods", "default", "honest")
        await eventually(lambda: index.pod(uid) is None, 10)
        await running(tenant, "greedy")


async def test_the_namespace_quota_still_counts_a_stripped_pod(apiserver, dead_port):
    apiserver.store.create("namespaces", "", {"metadata": {"name": "team"}})
    apiserver.store.create("resourcequotas", "team", {"metadata": {"name": "gpu", "namespace": "team"},
                                                      "spec": {"hard": {"limits.nvidia.com/gpumem": "60000"}}})
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=4)]) as tenant:
        status, body = await tenant.create_pod(gpu_pod("honest", "team", gpus=2, mem=30000))
        assert status == 201, body
        await running(tenant, "honest", "team")
        apiserver.admission = webhook_admission(f"http://127.0.0.1:{dead_port}/webhook")
        status, body = await tenant.patch_pod("honest", strip(), ns="team")
        assert status == 200, body
        await eventually(lambda: codec.VGPU_NODE_ANNOTATION not in (
            tenant.env.sched.state.pod("team", "honest")["metadata"].get("annotations") or {}))
        apiserver.admission = webhook_admission(tenant.env.sched.url + "/webhook")  # back up
        status, body = await tenant.create_pod(gpu_pod("more", "team", gpus=1, mem=1000))
        assert status == 403 and "exceeding resource quota" in body["message"], body


async def test_a_binding_carrying_placement_annotations_is_refused(apiserver):
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=2)]) as tenant:
        pod = gpu_pod("squat", gpus=1)
        pod["spec"]["schedulerName"] = "tenant-scheduler"  # the webhook leaves other schedulers' pods alone
        status, body = await tenant.create_pod(pod)
        assert status == 201, body
        node = tenant.store.get("nodes", "", "n0")
        uuids = [d.id for d in codec.decode_node_devices(node["metadata"]["annotations"][codec.REGISTER_ANNOTATION])]
        devs = codec.encode_pod_devices([[codec_device(u) for u in uuids]])
        forged = {codec.VGPU_NODE_ANNOTATION: "n0", codec.ALLOCATED_ANNOTATION: devs,
                  codec.BIND_PHASE_ANNOTATION: "success"}
        status, body = await tenant.bind("squat", "n0", forged)
        assert status == 403, body
        assert "hami.io/" in body["message"] and "hami-demo-user" in body["message"]
        stored = tenant.store.get("pods", "default", "squat")
        assert not stored["spec"].get("nodeName")
        assert not set(forged) & set(stored["metadata"].get("annotations") or {})
        status, body = await tenant.bind("squat", "n0", {"note": "mine"})  # no placement key: RBAC's call
        assert status == 201, body
        assert tenant.store.get("pods", "default", "squat")["spec"]["nodeName"] == "n0"


def codec_device(uuid: str):
    from hami.device.model import ContainerDevice
    return ContainerDevice(uuid, "NVIDIA", 40960, 100)


@pytest.mark.parametrize(("field", "value"), [("priority", 1_000_000_000),
                                              ("priorityClassName", "system-node-critical"), ("nodeName", "n0")])
async def test_immutable_pod_fields_cannot_be_changed_by_update(apiserver, field, value):
    async with tenant_cluster(apiserver, [gpu_node("n0", gpus=2)]) as tenant:
        pod = gpu_pod("p", gpus=0)
        pod["spec"]["schedulerName"] = "tenant-scheduler"
        status, body = await tenant.create_pod(pod)
        assert status == 201, body
        before = tenant.store.get("pods", "default", "p")["spec"]
        status, body = await tenant.patch_pod("p", {"spec": {field: value}})
        assert status == 422, body
        assert "pod updates may not change fields other than" in body["message"], body
        assert f"{field}" in body["message"]
        assert tenant.store.get("pods", "default", "p")["spec"].get(field) == before.get(field)
        # PUT of the whole object with the field changed: the same answer.
        whole = tenant.store.get("pods", "default", "p")
        whole["spec"][field] = value
        status, body = await tenant.call("PUT", "/api/v1/namespaces/default/pods/p", whole)
        assert status == 422, body
        # What kube-apiserver lets an update change still changes.
        status, body = await tenant.patch_pod("p", {"spec": {"containers": [{"name": "c0", "image": "cuda:2"}]}},
                                              ctype="application/strategic-merge-patch+json")
        assert status == 200, body
        assert body["spec"]["containers"][0]["image"] == "cuda:2"
