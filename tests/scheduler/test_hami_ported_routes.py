"""HAMi v2.10 `pkg/scheduler/routes/route_test.go`, ported to the extender over real HTTP.

Covers TestMaxRequestSize and TestMaxRequestSizeBind (a body of 1 MiB + 100 spaces answers HTTP 200
with Go's `EOF` in Error), TestHealthzRoute, TestWebHookRoute, TestReadyzRouteLeader and
TestReadyzRouteNotLeader (200 either way), TestCheckBodyNil (an empty body is an `EOF` error),
TestPredicateRoute_DecodeError, TestPredicateRoute_CacheNotSynced (`context cancelled`),
TestPredicateRoute_FilterSuccess (a pod with no device request echoes NodeNames),
TestBind_DecodeError and TestBind_PodNotFound; a body cut off mid-value gives `unexpected EOF`.
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from hami.scheduler.role import start_scheduler
from tests.kube.helpers import config_for, eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env, start_env, stop_env

MAX_REQUEST_SIZE = 1024 * 1024  # HAMi routes.maxRequestSize


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(1)) as e:
        yield e


async def post(env, path: str, body: bytes) -> tuple[int, bytes]:
    async with env.http.post(env.sched.url + path, data=body) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("path", ["/filter", "/bind"], ids=["TestMaxRequestSize", "TestMaxRequestSizeBind"])
async def test_oversized_whitespace_body_reports_EOF(env, path):
    status, body = await post(env, path, b" " * (MAX_REQUEST_SIZE + 100))
    assert status == 200
    assert "EOF" in orjson.loads(body)["Error"]


@pytest.mark.parametrize("path", ["/filter", "/bind"])
async def test_TestCheckBodyNil_empty_body_is_an_EOF_error(env, path):
    status, body = await post(env, path, b"")
    assert status == 200 and orjson.loads(body)["Error"] == "EOF"


@pytest.mark.parametrize("path", ["/filter", "/bind"])
async def test_truncated_body_reports_unexpected_EOF(env, path):
    whole = orjson.dumps({"Pod": pod_obj("p"), "NodeNames": ["n0"]})
    status, body = await post(env, path, whole[: len(whole) // 2])
    assert status == 200 and orjson.loads(body)["Error"] == "unexpected EOF"


async def test_TestHealthzRoute(env):
    async with env.http.get(env.sched.url + "/healthz") as r:
        assert r.status == 200


async def test_TestWebHookRoute_answers_any_body(env):
    status, _ = await post(env, "/webhook", b"{}")
    assert status != 0 and status < 500


async def test_TestReadyzRouteLeader(env):
    async with env.http.get(env.sched.url + "/readyz") as r:
        assert r.status == 200


async def test_TestReadyzRouteNotLeader(apiserver):
    # two replicas: two identities (one process would otherwise give both the same hostname-pid)
    a = await start_env(apiserver, hami_nodes(1), identity="replica-a", leader_elect=True,
                        leader_elect_resource_namespace="default")
    b = await start_env(apiserver, identity="replica-b", leader_elect=True, leader_elect_resource_namespace="default")
    try:
        await eventually(lambda: a.sched.leader.is_leader or b.sched.leader.is_leader, timeout=10)
        follower = b if a.sched.leader.is_leader else a
        assert not follower.sched.leader.is_leader
        async with follower.http.get(follower.sched.url + "/readyz") as r:
            assert r.status == 200
    finally:
        await stop_env(b)
        await stop_env(a)


@pytest.mark.parametrize("path", ["/filter", "/bind"], ids=["TestPredicateRoute_DecodeError", "TestBind_DecodeError"])
async def test_decode_error_is_reported_in_the_body(env, path):
    status, body = await post(env, path, b"{not-json")
    assert status == 200
    assert orjson.loads(body)["Error"] != ""


async def test_TestPredicateRoute_CacheNotSynced(apiserver):
    await apiserver.stop()
    s = await start_scheduler(config_for(apiserver.kubeconfig, sync_timeout=0.2))
    try:
        async with aiohttp.ClientSession() as http:
            body = orjson.dumps({"Pod": pod_obj("p"), "NodeNames": ["node1"]})
            async with http.post(s.url + "/filter", data=body) as r:
                assert r.status == 200
                assert "context cancelled" in (await r.json())["Error"]
    finally:
        await s.close()


async def test_TestPredicateRoute_FilterSuccess_echoes_node_names(env):
    pod = {"metadata": {"name": "test-pod", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    out = await env.filter(pod, ["node1"])
    assert out["Error"] == ""
    assert out["NodeNames"] == ["node1"]


async def test_TestBind_PodNotFound(env):
    out = await env.bind({"metadata": {"name": "missing-pod", "namespace": "default", "uid": ""}}, "node1")
    assert out["Error"] != ""
