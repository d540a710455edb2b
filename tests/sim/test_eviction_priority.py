"""What the embedded API server serves for preemption: PriorityClasses with the Priority admission, the
pods/eviction subresource, and the simulated kubelet finishing graceful deletions.

Covers: PriorityClasses over the real kubernetes-asyncio client (scheduling.k8s.io/v1, discovery);
a pod created over HTTP gets spec.priority and spec.preemptionPolicy from its priorityClassName, from
the globalDefault class (the lowest when several) when it names none, 0 without any, and the
system classes resolve; an unknown class or a spec.priority that disagrees with the class is 403 as
kube-apiserver answers; a class with a reserved name or an out-of-range value is 422.
Eviction (policy/v1, CoreV1Api.create_namespaced_pod_eviction): no PDB -> a graceful deletion
(deletionTimestamp, deletionGracePeriodSeconds from the pod's terminationGracePeriodSeconds) that the
kubelet's stop half ends after min(stop knob, grace); a PDB with no allowance -> 429 with a
DisruptionBudget cause and the pod untouched; a written allowance is taken (decremented,
disruptedPods) once; two PDBs -> 500; a Pending pod is evicted without asking the budget; a UID
precondition that does not match -> 409; a derived allowance counts the terminating pod as gone.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client as k8s

from hami.apierror import ApiError
from hami.sim.kubelet.termination import PodTerminator, stop_delay
from tests.kube.helpers import client_for, eventually


def pod(name: str, *, node: str = "n0", labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "x"}], **({"nodeName": node} if node else {}), **spec}}


def running(store, p: dict) -> dict:
    store.create("pods", "default", p)
    store.patch("pods", "default", p["metadata"]["name"], b'{"status":{"phase":"Running"}}',
                "application/merge-patch+json", subresource="status")
    return store.get("pods", "default", p["metadata"]["name"])


def pc(name: str, value: int, **kw) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **kw}


async def test_priority_admission_fills_priority_and_policy(apiserver, kube_api):
    sched = k8s.SchedulingV1Api(kube_api)
    core = k8s.CoreV1Api(kube_api)
    await sched.create_priority_class(pc("inference", 100000, description="online"))
    await sched.create_priority_class(pc("batch-never", 10, preemptionPolicy="Never"))
    names = {p.metadata.name for p in (await sched.list_priority_class()).items}
    assert names == {"inference", "batch-never"}
    got = await core.create_namespaced_pod("default", pod("a", node="", priorityClassName="inference"))
    assert (got.spec.priority, got.spec.preemption_policy) == (100000, "PreemptLowerPriority")
    got = await core.create_namespaced_pod("default", pod("b", node="", priorityClassName="batch-never"))
    assert (got.spec.priority, got.spec.preemption_policy) == (10, "Never")
    got = await core.create_namespaced_pod("default", pod("c", node=""))
    assert (got.spec.priority, got.spec.priority_class_name) == (0, None)
    got = await core.create_namespaced_pod("default", pod("d", node="", priorityClassName="system-node-critical"))
    assert got.spec.priority == 2000001000
    await sched.create_priority_class(pc("default-low", 5, globalDefault=True))
    await sched.create_priority_class(pc("default-high", 50, globalDefault=True))
    got = await core.create_namespaced_pod("default", pod("e", node=""))
    assert (got.spec.priority, got.spec.priority_class_name) == (5, "default-low")


async def test_priority_admission_refuses_what_kube_apiserver_refuses(apiserver, kube_api):
    sched = k8s.SchedulingV1Api(kube_api)
    core = k8s.CoreV1Api(kube_api)
    await sched.create_priority_class(pc("inference", 100000))
    with pytest.raises(k8s.ApiException) as e:
        await core.create_namespaced_pod("default", pod("a", node="", priorityClassName="nope"))
    assert e.value.status == 403 and "no PriorityClass with name nope was found" in e.value.body
    with pytest.raises(k8s.ApiException) as e:
        await core.create_namespaced_pod("default", pod("b", node="", priorityClassName="inference", priority=7))
    assert e.value.status == 403 and "computed 100000" in e.value.body
    for bad in (pc("system-mine", 1), pc("huge", 2000000000), pc("odd", 1, preemptionPolicy="Sometimes")):
        with pytest.raises(k8s.ApiException) as e:
            await sched.create_priority_class(bad)
        assert e.value.status == 422
    assert apiserver.store.count("pods") == 0


def test_stop_delay_is_the_knob_capped_by_the_grace():
    p = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 3},
         "spec": {"nodeName": "n0"}}
    assert stop_delay(p, 10) == 3 and stop_delay(p, 1.5) == 1.5 and stop_delay(p, 0) == 0
    assert stop_delay({**p, "spec": {}}, 1) is None                       # on no node: deleted at once
    assert stop_delay({"metadata": {}, "spec": {"nodeName": "n0"}}, 1) is None  # not terminating


async def test_eviction_without_budget_starts_a_graceful_deletion_the_kubelet_ends(apiserver, kube_api):
    store = apiserver.store
    running(store, pod("v", terminationGracePeriodSeconds=20))
    core = k8s.CoreV1Api(kube_api)
    await core.create_namespaced_pod_eviction("v", "default", k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name="v", namespace="default")))
    left = store.get("pods", "default", "v")["metadata"]
    assert left["deletionGracePeriodSeconds"] == 20 and left["deletionTimestamp"]
    client = await client_for(apiserver.kubeconfig)
    stop = asyncio.Event()
    terminator = PodTerminator(client, stop_seconds=0.2)
    task = asyncio.create_task(terminator.run(stop))
    try:
        await eventually(lambda: store.count("pods") == 0, 5)
        assert terminator.stopped == 1
    finally:
        stop.set()
        await task
        await client.close()


async def test_eviction_honours_pod_disruption_budgets(apiserver):
    store = apiserver.store
    for i in range(2):
        running(store, pod(f"db{i}", labels={"app": "db"}))
    store.create("poddisruptionbudgets.policy", "default", {
        "metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.evict_pod("default", "db0")          # 2 healthy, 1 needed: allowed
        assert store.get("pods", "default", "db0")["metadata"].get("deletionTimestamp")
        with pytest.raises(ApiError) as e:                 # db0 is terminating: db1 is the last healthy one
            await client.evict_pod("default", "db1")
        assert e.value.code == 429 and "disruption budget" in e.value.message
        assert e.value.body["details"]["causes"][0]["reason"] == "DisruptionBudget"
        assert not store.get("pods", "default", "db1")["metadata"].get("deletionTimestamp")
        with pytest.raises(ApiError) as e:
            await client.evict_pod("default", "db1", uid="not-its-uid")
        assert e.value.code in (409, 429)
        store.create("pods", "default", pod("later", node="", labels={"app": "db"}))  # Pending: no budget asked
        await client.evict_pod("default", "later")
        assert "later" not in {e.obj["metadata"]["name"] for e in store.list("pods", "default")[1]}
        store.create("poddisruptionbudgets.policy", "default", {
            "metadata": {"name": "db2"}, "spec": {"maxUnavailable": 5, "selector": {"matchLabels": {"app": "db"}}}})
        with pytest.raises(ApiError) as e:
            await client.evict_pod("default", "db1")
        assert e.value.code == 500 and "more than one PodDisruptionBudget" in e.value.message
    finally:
        await client.close()


async def test_eviction_takes_a_written_allowance_once(apiserver):
    store = apiserver.store
    for i in range(2):
        running(store, pod(f"w{i}", labels={"app": "web"}))
    store.create("poddisruptionbudgets.policy", "default", {
        "metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1}})
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.evict_pod("default", "w0", uid=store.get("pods", "default", "w0")["metadata"]["uid"])
        status = store.get("poddisruptionbudgets.policy", "default", "web")["status"]
        assert status["disruptionsAllowed"] == 0 and set(status["disruptedPods"]) == {"w0"}
        with pytest.raises(ApiError) as e:
            await client.evict_pod("default", "w1")
        assert e.value.code == 429
    finally:
        await client.close()
