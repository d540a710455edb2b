"""KubeClient against the embedded API server: dict helpers, ApiError, the request counter by
verb/resource/code, merge vs JSON patch content types, the per-request timeout, and the
token bucket (fake clock)."""

from __future__ import annotations

import asyncio

import pytest

from hami.kube.client import JSON_PATCH, ApiError, KubeClient, TokenBucket
from tests.kube.helpers import Clock, client_for, node_obj


async def test_helpers_return_plain_dicts_and_count_requests(client: KubeClient):
    created = await client.create("nodes", node_obj("n1"))
    assert isinstance(created, dict) and created["metadata"]["name"] == "n1"
    got = await client.get_node("n1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    listed = await client.list_nodes()
    assert [n["metadata"]["name"] for n in listed["items"]] == ["n1"]
    assert client.requests[("create", "nodes", "201")] == 1
    assert client.requests[("get", "nodes", "200")] == 1
    assert client.requests[("list", "nodes", "200")] == 1
    assert client.total_requests(verb="get") == 1


async def test_errors_raise_api_error_with_status_and_are_counted(client: KubeClient):
    with pytest.raises(ApiError) as info:
        await client.get_pod("default", "missing")
    assert info.value.status == 404 and info.value.not_found
    assert "missing" in info.value.message
    assert client.requests[("get", "pods", "404")] == 1


async def test_merge_patch_with_stale_resource_version_conflicts(client: KubeClient):
    node = await client.create("nodes", node_obj("n1"))
    rv = node["metadata"]["resourceVersion"]
    await client.patch_node("n1", {"metadata": {"annotations": {"a": "1"}, "resourceVersion": rv}})
    with pytest.raises(ApiError) as info:
        await client.patch_node("n1", {"metadata": {"annotations": {"a": "2"}, "resourceVersion": rv}})
    assert info.value.conflict
    assert (await client.get_node("n1"))["metadata"]["annotations"]["a"] == "1"


async def test_merge_patch_null_deletes_and_json_patch_escapes_keys(client: KubeClient):
    await client.create("nodes", node_obj("n1", annotations={"hami.io/x": "1"}))
    await client.patch_node("n1", {"metadata": {"annotations": {"hami.io/x": None}}})
    assert "hami.io/x" not in (await client.get_node("n1"))["metadata"]["annotations"]
    await client.patch_node("n1", [{"op": "add", "path": "/metadata/annotations/hami.io~1y", "value": "2"}],
                            content_type=JSON_PATCH)
    assert (await client.get_node("n1"))["metadata"]["annotations"]["hami.io/y"] == "2"


async def test_request_timeout_becomes_api_error_zero(apiserver):
    c = await client_for(apiserver.kubeconfig, timeout=0.2)
    try:
        apiserver.faults.delay = 2.0
        with pytest.raises(ApiError) as info:
            await c.list_nodes()
        assert info.value.status == 0
        assert c.requests[("list", "nodes", "error")] == 1
    finally:
        apiserver.faults.reset()
        await c.close()


async def test_bind_pod_sets_node_name(client: KubeClient):
    from tests.kube.helpers import pod_obj

    pod = await client.create("pods", pod_obj("p"), "default")
    await client.bind_pod("default", "p", pod["metadata"]["uid"], "n1")
    assert (await client.get_pod("default", "p"))["spec"]["nodeName"] == "n1"
    assert client.requests[("create", "pods/binding", "201")] == 1


async def test_token_bucket_allows_burst_then_paces_at_qps():
    clock = Clock()
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)
        clock.now += delay

    bucket = TokenBucket(qps=5, burst=3, clock=clock, sleep=fake_sleep)
    for _ in range(3):
        await bucket.acquire()
    assert slept == []
    for _ in range(5):
        await bucket.acquire()
    assert len(slept) == 5
    assert clock.now == pytest.approx(1.0)  # 5 more tokens at 5/s take one second


async def test_token_bucket_disabled_with_zero_qps():
    bucket = TokenBucket(qps=0, burst=1)
    await asyncio.wait_for(asyncio.gather(*(bucket.acquire() for _ in range(100))), 1.0)


async def test_client_applies_the_bucket_to_every_call(apiserver, monkeypatch):
    c = await client_for(apiserver.kubeconfig, qps=1000, burst=2)
    calls = []
    for lane, bucket in c.buckets.items():
        orig = bucket.acquire

        async def counting(lane=lane, orig=orig):
            calls.append(lane)
            await orig()

        monkeypatch.setattr(bucket, "acquire", counting)
    try:
        await c.list_nodes()
        await c.list_pods()
        with pytest.raises(ApiError):
            await c.get_node("x")
        # LISTs (re-lists) take the background lane, a GET the critical one.
        assert calls == ["background", "background", "critical"]
    finally:
        await c.close()


async def test_missing_kubeconfig_is_a_clear_error_naming_the_file(tmp_path, monkeypatch):
    from hami.config import KubeSettings
    from hami.kube.client import KubeClient, KubeConfigError

    missing = tmp_path / "nope"
    with pytest.raises(KubeConfigError, match=f"kubeconfig {missing}: no such file"):
        await KubeClient.from_settings(KubeSettings(kubeconfig=str(missing)))
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(KubeConfigError, match=f"kubeconfig {bad}"):
        await KubeClient.from_settings(KubeSettings(kubeconfig=str(bad)))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="--embedded"):
        await KubeClient.from_settings(KubeSettings())
