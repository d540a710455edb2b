"""Pods created while the webhook was down, with the scheduler running against the
embedded API server and pods created straight into the store (as kube-apiserver does when a
`failurePolicy: Ignore` webhook cannot be reached):
- a GPU pod owned by a ReplicaSet that kept `default-scheduler` is evicted (pods/eviction, never a
  pod delete right) so its controller recreates it through the webhook, with a Normal Event;
- a bare GPU pod gets one Warning Event `MissedWebhook` saying to recreate it, and is left alone;
- nothing happens until a pod this webhook admitted (its `hami.io/admitted` mark) is seen in the API
  after the pods were created (the webhook reachable again: no eviction loop while it is still down);
  a forged AdmissionReview sent straight to /webhook, or a pod carrying a mark the webhook never
  issued, proves nothing;
- pods without a GPU request, pods of other schedulers and hami's own pods are never touched;
- the pure rule `missed()` on bound, terminating, finished and foreign pods."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from hami.scheduler.admission.admitted import MARK_ANNOTATION
from hami.scheduler.admission.missed import missed
from hami.sim.apiserver.admission import WebhookAdmission
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env
from tests.reliability._record import record

pytestmark = pytest.mark.timeout(60)


def _names(store) -> set[str]:
    return {e.obj["metadata"]["name"] for e in store.list("pods", "default")[1]}


def _events(store, reason: str) -> dict[str, tuple[str, str]]:
    return {e.obj["involvedObject"]["name"]: (e.obj["type"], e.obj["message"])
            for e in store.list("events", "default")[1] if e.obj.get("reason") == reason}


async def test_missed_gpu_pods_are_recreated_through_their_controller_or_warned(apiserver):
    async with running_env(apiserver, hami_nodes(1), missed_webhook_grace=0.2) as env:
        store = apiserver.store
        owned = pod_obj("owned", mem=1000, scheduler="default-scheduler")
        owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1",
                                                 "uid": "rs-uid", "controller": True}]
        for p in (owned, pod_obj("bare", mem=1000, scheduler="default-scheduler"),
                  pod_obj("cpu-only", gpus=0, scheduler="default-scheduler"),
                  pod_obj("other-sched", mem=1000, scheduler="volcano"),
                  pod_obj("ours", mem=1000)):
            store.create("pods", "default", p)
        reconciler = env.sched.missed
        await eventually(lambda: set(reconciler.seen) == {"default/owned", "default/bare"}, 5)
        judged = reconciler.judged
        # Both judged past the grace, with no admission answered since: nothing done.
        await eventually(lambda: reconciler.judged >= judged + 2, 10)
        assert _names(store) >= {"owned", "bare"} and reconciler.deleted == reconciler.warned == 0

        await asyncio.sleep(1.0)  # creationTimestamps have whole seconds: answer strictly later
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "operation": "CREATE", "namespace": "default",
                              "object": pod_obj("probe", gpus=0)}}
        async with env.http.post(env.sched.url + "/webhook", data=orjson.dumps(review)) as r:
            assert r.status == 200  # someone reached /webhook: not the API server applying its answer
            answer = await r.json()
        store.create("pods", "default", pod_obj("stale-mark", gpus=0, annotations={
            MARK_ANNOTATION: "a-mark-never-issued"}))
        await eventually(lambda: env.sched.state.pod("default", "stale-mark") is not None, 5)  # seen by the cache
        judged = reconciler.judged
        # Both judged past the grace again: a forged review or mark moves nothing.
        await eventually(lambda: reconciler.judged >= judged + 2, 10)
        assert _names(store) >= {"owned", "bare"} and reconciler.deleted == reconciler.warned == 0
        assert env.sched.missed.webhook_answered() == 0.0
        assert answer["response"]["allowed"] is True
        # The API server calls the webhook again: a pod created through it carries the mark.
        apiserver.admission = WebhookAdmission(env.sched.url + "/webhook", operations=("CREATE", "UPDATE"))
        async with aiohttp.ClientSession() as http, http.post(
                f"{apiserver.url}/api/v1/namespaces/default/pods", data=orjson.dumps(pod_obj("admitted", gpus=0)),
                headers={"Content-Type": "application/json"}) as r:
            assert r.status == 201
            assert MARK_ANNOTATION in (await r.json())["metadata"]["annotations"]
        await eventually(lambda: "owned" not in _names(store) and reconciler.warned == 1
                         and {"owned", "bare"} <= set(_events(store, "MissedWebhook")), 10)  # events are written async
        events = _events(store, "MissedWebhook")
        assert events["owned"][0] == "Normal" and "ReplicaSet rs1 creates it again" in events["owned"][1]
        assert events["bare"][0] == "Warning" and "delete and create it again" in events["bare"][1]
        assert _names(store) == {"bare", "cpu-only", "other-sched", "ours", "stale-mark", "admitted"}
        await asyncio.sleep(0.5)
        assert (reconciler.deleted, reconciler.warned) == (1, 1)  # said once, not every tick
        record("pods created while the webhook was down", evicted_through_controller=reconciler.deleted,
               bare_pods_warned=reconciler.warned, untouched=3)


@pytest.mark.parametrize("pod,want", [
    ({"spec": {"schedulerName": "default-scheduler"}, "status": {"phase": "Pending"}}, True),
    ({"spec": {}}, True),
    ({"spec": {"schedulerName": "default-scheduler", "nodeName": "n1"}}, False),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}, False),
    ({"spec": {}, "status": {"phase": "Failed"}}, False),
    ({"spec": {"schedulerName": "hami-scheduler"}}, False),
    ({"spec": {"schedulerName": "volcano"}}, False),
])
def test_missed_rule(pod, want):
    assert missed(pod, scheduler_name="hami-scheduler", force_overwrite_default=True, asks_for_devices=True) is want
    assert missed(pod, scheduler_name="hami-scheduler", force_overwrite_default=True, asks_for_devices=False) is False


def test_without_force_overwrite_default_scheduler_pods_are_not_ours():
    pod = {"spec": {"schedulerName": "default-scheduler"}}
    assert missed(pod, scheduler_name="hami-scheduler", force_overwrite_default=False, asks_for_devices=True) is False


async def test_the_watcher_sleeps_while_nothing_is_missed_and_wakes_for_a_missed_pod(apiserver):
    """Idle is idle: with no missed pod the watcher does not wake at all (it used to every second);
    a pod seen missed wakes it, and while the webhook is not shown reachable it waits again grace
    after grace without reading the pod from the API (its creation time comes from the cache)."""
    async with running_env(apiserver, hami_nodes(1), missed_webhook_grace=0.2) as env:
        reconciler = env.sched.missed
        await eventually(lambda: reconciler.wakes == 0 and env.sched.state.pods.synced.is_set(), 5)
        # A pod that is not missed goes through the same handler and must not wake it either.
        apiserver.store.create("pods", "default", pod_obj("ours", mem=1000))
        await eventually(lambda: env.sched.state.pod("default", "ours") is not None, 5)
        assert reconciler.wakes == 0 and not reconciler.seen
        apiserver.store.create("pods", "default", pod_obj("bare", mem=1000, scheduler="default-scheduler"))
        await eventually(lambda: "default/bare" in reconciler.seen, 5)
        await eventually(lambda: reconciler.wakes >= 1, 5)  # the new pod woke it
        # the grace over with no admission answered: the pod waits again (the webhook not shown reachable),
        # its creation time read from the cache's projection: no GET at all
        client = env.sched.client

        def pod_gets() -> int:
            return sum(n for key, n in client.requests.items() if key[0] == "get" and key[1] == "pods")

        gets = pod_gets()
        judged = reconciler.judged
        await eventually(lambda: reconciler.judged >= judged + 3 and "default/bare" in reconciler.seen, 10)
        assert pod_gets() - gets == 0
        assert reconciler.created["default/bare"] > 0  # what it waited on, from the cache
