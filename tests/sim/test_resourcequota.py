"""The embedded API server's ResourceQuota (hami.sim.apiserver.quota): kube-apiserver's admission of a
pod CREATE and the quota controller's `status.used`.

Covers: what a pod counts (requests defaulting to limits, init containers against the app containers'
sum, overhead, extended resources only as `requests.<r>`, terminal pods nothing); a create that would
pass a hard limit answered 403 with kube-apiserver's text and stored nothing; `status.used` following
creates, terminal phases and deletions; a hard key Kubernetes does not count (`limits.nvidia.com/gpumem`,
HAMi's) keeps whatever was written; twenty creates at once never pass the limit together; the
store's running count equals a recount from scratch after any sequence of creates, ends and deletes.
"""

from __future__ import annotations

import asyncio
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kube.client import ApiError
from hami.sim.apiserver import quota
from tests.kube.helpers import client_for


def _pod(name: str, limits: dict | None = None, requests: dict | None = None, init: dict | None = None,
         phase: str = "") -> dict:
    spec = {"containers": [{"name": "c", "image": "x", "resources": {
        **({"limits": limits} if limits else {}), **({"requests": requests} if requests else {})}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "image": "x", "resources": {"limits": init}}]
    pod = {"metadata": {"name": name}, "spec": spec}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def test_a_pod_counts_what_kubernetes_pod_evaluator_counts():
    pod = _pod("p", limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000", "cpu": "2"},
               requests={"cpu": "500m"}, init={"nvidia.com/gpu": "3", "memory": "1Gi"})
    pod["spec"]["overhead"] = {"cpu": "100m"}
    got = quota.pod_usage(pod)
    assert got["requests.nvidia.com/gpu"] == 3  # the init container's 3 against the app's 2
    assert got["requests.nvidia.com/gpumem"] == 4000 and "limits.nvidia.com/gpumem" not in got
    assert got["requests.cpu"] == got["cpu"] == Fraction(6, 10) and got["limits.cpu"] == Fraction(21, 10)
    assert got["requests.memory"] == 1 << 30 and got["pods"] == 1
    assert quota.pod_usage(_pod("done", limits={"nvidia.com/gpu": "1"}, phase="Succeeded")) == {}
    assert quota.format_quantity(Fraction(6, 10)) == "600m" and quota.format_quantity(Fraction(3)) == "3"


@given(st.dictionaries(st.sampled_from(["pods", "cpu", "requests.cpu", "limits.cpu", "limits.memory",
                                        "requests.nvidia.com/gpu", "limits.nvidia.com/gpu", "nvidia.com/gpu",
                                        "requests.hugepages-2Mi", "count/pods", "services",
                                        "requests.example.kubernetes.io/x"]), st.just("1")))
def test_the_evaluator_counts_only_keys_kubernetes_counts(hard):
    st_ = quota.status({"spec": {"hard": hard}, "status": {"used": dict.fromkeys(hard, "7")}}, {})
    for key in hard:  # counted keys are recounted (no pods: 0), the others keep the value written
        expected = "0" if key in ("pods", "cpu", "requests.cpu", "limits.cpu", "limits.memory",
                                  "requests.nvidia.com/gpu", "requests.hugepages-2Mi", "count/pods") else "7"
        assert st_["used"][key] == expected, key
    assert st_["hard"] == hard


def _quota(hard: dict, used: dict | None = None) -> dict:
    q = {"metadata": {"name": "gpu"}, "spec": {"hard": hard}}
    if used is not None:
        q["status"] = {"used": used}
    return q


async def test_a_create_past_the_limit_is_refused_as_kube_apiserver_and_used_follows_the_pods(apiserver):
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.create("namespaces", {"metadata": {"name": "q"}})
        await client.create("resourcequotas", _quota({"requests.nvidia.com/gpu": "3", "pods": "10",
                                                      "limits.nvidia.com/gpumem": "8000"}), "q")
        apiserver.store.update("resourcequotas", "q", "gpu", {**apiserver.store.get("resourcequotas", "q", "gpu"),
                                                              "status": {"used": {"limits.nvidia.com/gpumem": "6000"}}},
                               subresource="status")
        await client.create("pods", _pod("a", limits={"nvidia.com/gpu": "2"}), "q")
        got = (await client.get("resourcequotas", "gpu", "q"))["status"]
        assert got["used"] == {"limits.nvidia.com/gpumem": "6000", "pods": "1", "requests.nvidia.com/gpu": "2"}
        with pytest.raises(ApiError) as refused:
            await client.create("pods", _pod("b", limits={"nvidia.com/gpu": "2"}), "q")
        assert refused.value.status == 403
        assert ('pods "b" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, '
                "used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=3") in refused.value.message
        with pytest.raises(ApiError):
            await client.get("pods", "b", "q")
        # Kubernetes never checks HAMi's limits.nvidia.com/gpumem: 9000 MiB more is its webhook's business
        await client.create("pods", _pod("c", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "9000"}), "q")
        pod = apiserver.store.get("pods", "q", "a")
        apiserver.store.update("pods", "q", "a", {**pod, "status": {"phase": "Succeeded"}}, subresource="status")
        assert (await client.get("resourcequotas", "gpu", "q"))["status"]["used"]["requests.nvidia.com/gpu"] == "1"
        await client.delete("pods", "c", "q")
        assert (await client.get("resourcequotas", "gpu", "q"))["status"]["used"]["requests.nvidia.com/gpu"] == "0"
    finally:
        await client.close()


async def test_creates_at_one_instant_never_pass_the_limit_together(apiserver):
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.create("namespaces", {"metadata": {"name": "q"}})
        await client.create("resourcequotas", _quota({"requests.nvidia.com/gpu": "5"}), "q")

        async def create(i: int) -> bool:
            try:
                await client.create("pods", _pod(f"p{i}", limits={"nvidia.com/gpu": "1"}), "q")
                return True
            except ApiError as exc:
                assert exc.status == 403 and "exceeded quota" in exc.message
                return False

        got = await asyncio.gather(*(create(i) for i in range(20)))
        assert sum(got) == 5
        assert (await client.get("resourcequotas", "gpu", "q"))["status"]["used"] == {"requests.nvidia.com/gpu": "5"}
    finally:
        await client.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "end", "delete", "relabel"]), st.integers(0, 5),
                          st.integers(1, 3)), max_size=25))
def test_the_running_count_equals_a_recount_from_scratch(ops):
    """The store keeps each namespace's pod totals running (count in on create, out on end or delete);
    after any sequence the quota's status.used is what counting the pods afresh gives."""
    from hami.sim.apiserver.store import Store

    store = Store()
    store.create("namespaces", "", {"metadata": {"name": "q"}})
    store.create("resourcequotas", "q", _quota({"requests.nvidia.com/gpu": "1000", "pods": "1000"}))
    for op, i, gpus in ops:
        name = f"p{i}"
        exists = name in {p["metadata"]["name"] for p in (e.obj for e in store.iter_entries("pods", "q"))}
        if op == "create" and not exists:
            store.create("pods", "q", _pod(name, limits={"nvidia.com/gpu": str(gpus)}))
        elif op == "end" and exists:
            store.update("pods", "q", name, {**store.get("pods", "q", name), "status": {"phase": "Failed"}},
                         subresource="status")
        elif op == "relabel" and exists:
            pod = store.get("pods", "q", name)
            store.update("pods", "q", name, {**pod, "metadata": {**pod["metadata"], "labels": {"x": str(gpus)}}})
        elif op == "delete" and exists:
            store.delete("pods", "q", name)
    pods = [e.obj for e in store.iter_entries("pods", "q")]
    assert store.get("resourcequotas", "q", "gpu")["status"] == quota.status(
        store.get("resourcequotas", "q", "gpu"), quota.totals_of(pods))
