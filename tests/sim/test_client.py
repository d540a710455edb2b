"""The embedded API server through the real kubernetes-asyncio client, over HTTP.

Covers: create/get/replace/delete (201, 409 AlreadyExists, 404 NotFound as Status objects), the
global monotonic resourceVersion and generation, PUT with a stale resourceVersion (409), the three
patch types (merge with null deletes, strategic with list merge keys, JSON patch with `test` and
`~1`), resourceVersion as a patch precondition, status subresources, pods/binding (409 when bound),
every label-selector form and the field selectors (pods, events for kubectl describe), list
resourceVersion, paging with limit/continue (410 for an expired token), Table answers for kubectl,
events.k8s.io/v1 as a view of core/v1 Events (both ways, watch, patch, delete),
the OpenAPI v3 stub, leases and events.k8s.io, watch order with ADDED/MODIFIED/DELETED, bookmarks,
timeoutSeconds, 410 Gone then re-list, a server restart under an open watch, a slow watcher dropped
after its bounded buffer, and bad input (400, 404, 413, 422).
"""

from __future__ import annotations

import asyncio
import itertools
import os

import aiohttp
import orjson
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def pod(name: str, ns: str = "default", **spec) -> dict:
    body = {"metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}], **spec}}
    return body


def node(name: str, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"conditions": [{"type": "Ready",
                                                                                           "status": "True"}]}}


async def eventually(cond, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        for _ in itertools.count():
            if cond():
                return
            await asyncio.sleep(0.01)


def status_of(exc: ApiException) -> dict:
    return orjson.loads(exc.body)


async def test_crud_round_trip_gives_real_codes_and_status_objects(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    created = await v1.create_namespaced_pod("default", pod("p1"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.status.phase == "Pending"
    assert created.spec.scheduler_name == "default-scheduler"
    got = await v1.read_namespaced_pod("p1", "default")
    assert got.metadata.resource_version == created.metadata.resource_version

    with pytest.raises(ApiException) as exc:
        await v1.create_namespaced_pod("default", pod("p1"))
    assert exc.value.status == 409
    body = status_of(exc.value)
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists" and body["code"] == 409

    got.metadata.labels["tier"] = "gold"
    replaced = await v1.replace_namespaced_pod("p1", "default", got)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.labels["tier"] == "gold"

    await v1.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException) as exc:
        await v1.read_namespaced_pod("p1", "default")
    assert exc.value.status == 404 and status_of(exc.value)["reason"] == "NotFound"


async def test_every_write_bumps_one_global_resource_version(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    start = apiserver.store.rv
    a = await v1.create_node(node("n-a"))
    b = await v1.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    c = await v1.patch_node("n-a", {"metadata": {"labels": {"x": "1"}}}, _content_type=MERGE)
    rvs = [int(o.metadata.resource_version) for o in (a, b, c)]
    assert rvs == [start + 1, start + 2, start + 3]
    nodes = await v1.list_node()
    assert nodes.metadata.resource_version == str(apiserver.store.rv)


async def test_put_with_stale_resource_version_conflicts(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n1"))
    first = await v1.read_node("n1")
    second = await v1.read_node("n1")
    first.metadata.labels = {"a": "1"}
    await v1.replace_node("n1", first)
    second.metadata.labels = {"b": "2"}
    with pytest.raises(ApiException) as exc:
        await v1.replace_node("n1", second)
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "Conflict"
    assert (await v1.read_node("n1")).metadata.labels == {"a": "1"}


async def test_generation_follows_spec_changes_only(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n1"))
    n = await v1.patch_node("n1", {"metadata": {"annotations": {"k": "v"}}}, _content_type=MERGE)
    assert n.metadata.generation == 1
    n = await v1.patch_node("n1", {"spec": {"unschedulable": True}}, _content_type=MERGE)
    assert n.metadata.generation == 2


async def test_merge_patch_null_deletes_and_lists_replace(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node({"metadata": {"name": "n1", "annotations": {"keep": "1", "hami.io/node-lock": "x"}}})
    n = await v1.patch_node("n1", {"metadata": {"annotations": {"hami.io/node-lock": None, "new": "2"}},
                                   "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}, _content_type=MERGE)
    assert n.metadata.annotations == {"keep": "1", "new": "2"}
    n = await v1.patch_node("n1", {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}, _content_type=MERGE)
    assert [t.key for t in n.spec.taints] == ["b"]


async def test_strategic_merge_patch_merges_containers_env_and_conditions_by_key(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("p1"))
    p = await v1.patch_namespaced_pod("p1", "default", {"spec": {"containers": [
        {"name": "main", "image": "busybox:2"}]}}, _content_type=STRATEGIC)
    c = p.spec.containers[0]  # merged by name: the image changed, the rest of the container stayed
    assert c.image == "busybox:2"
    assert [(e.name, e.value) for e in c.env] == [("A", "1"), ("B", "2")]
    # The env merge is computed by key too, but a pod's env is immutable (kube-apiserver's update rule).
    with pytest.raises(ApiException) as exc:
        await v1.patch_namespaced_pod("p1", "default", {"spec": {"containers": [
            {"name": "main", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}]}},
            _content_type=STRATEGIC)
    assert exc.value.status == 422 and "pod updates may not change fields" in exc.value.body

    await v1.patch_namespaced_pod_status("p1", "default", {"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}}, _content_type=STRATEGIC)
    p = await v1.patch_namespaced_pod_status("p1", "default", {"status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}, _content_type=STRATEGIC)
    assert {(x.type, x.status) for x in p.status.conditions} == {("Ready", "True"), ("PodScheduled", "True")}


async def test_json_patch_supports_test_and_slash_escapes(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node({"metadata": {"name": "n1", "annotations": {"hami.io/node-handshake": "Reported"}}})
    n = await v1.patch_node("n1", [
        {"op": "test", "path": "/metadata/annotations/hami.io~1node-handshake", "value": "Reported"},
        {"op": "replace", "path": "/metadata/annotations/hami.io~1node-handshake", "value": "Requesting"},
        {"op": "add", "path": "/metadata/annotations/a~0b", "value": "tilde"},
    ], _content_type=JSON_PATCH)
    assert n.metadata.annotations == {"hami.io/node-handshake": "Requesting", "a~b": "tilde"}
    with pytest.raises(ApiException) as exc:
        await v1.patch_node("n1", [{"op": "test", "path": "/metadata/annotations/hami.io~1node-handshake",
                                    "value": "Reported"}], _content_type=JSON_PATCH)
    assert exc.value.status == 422
    assert (await v1.read_node("n1")).metadata.annotations["hami.io/node-handshake"] == "Requesting"


@pytest.mark.parametrize("ctype", [MERGE, STRATEGIC])
async def test_resource_version_in_a_patch_is_a_precondition(kube_api, ctype):
    v1 = client.CoreV1Api(kube_api)
    n = await v1.create_node(node("n1"))
    rv = n.metadata.resource_version
    await v1.patch_node("n1", {"metadata": {"resourceVersion": rv, "annotations": {"hami.io/mutex.lock": "t1"}}},
                        _content_type=ctype)
    with pytest.raises(ApiException) as exc:
        await v1.patch_node("n1", {"metadata": {"resourceVersion": rv, "annotations": {"hami.io/mutex.lock": "t2"}}},
                            _content_type=ctype)
    assert exc.value.status == 409
    assert (await v1.read_node("n1")).metadata.annotations["hami.io/mutex.lock"] == "t1"


async def test_json_patch_replacing_resource_version_is_a_precondition(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n1"))
    with pytest.raises(ApiException) as exc:
        await v1.patch_node("n1", [{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}],
                            _content_type=JSON_PATCH)
    assert exc.value.status == 409


async def test_status_subresource_is_the_only_way_to_change_status(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("p1"))
    p = await v1.patch_namespaced_pod("p1", "default", {"status": {"phase": "Running"}}, _content_type=MERGE)
    assert p.status.phase == "Pending"
    p = await v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"},
                                                               "spec": {"nodeName": "sneaky"}}, _content_type=MERGE)
    assert p.status.phase == "Running" and p.spec.node_name is None


async def test_binding_sets_node_name_once(kube_api):
    v1 = client.CoreV1Api(kube_api)
    p = await v1.create_namespaced_pod("default", pod("p1"))
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name="p1", uid=p.metadata.uid,
                                                            annotations={"hami.io/bind-phase": "success"}),
                               target=client.V1ObjectReference(kind="Node", name="n1"))
    resp = await v1.create_namespaced_pod_binding("p1", "default", binding, _preload_content=False)
    assert resp.status == 201
    bound = await v1.read_namespaced_pod("p1", "default")
    assert bound.spec.node_name == "n1"
    assert bound.metadata.annotations["hami.io/bind-phase"] == "success"
    with pytest.raises(ApiException) as exc:  # errors raise before the (Status) body is decoded
        await v1.create_namespaced_pod_binding("p1", "default", binding)
    assert exc.value.status == 409 and "already assigned" in status_of(exc.value)["message"]


async def test_binding_with_another_uid_conflicts(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("p1"))
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name="p1", uid="not-the-uid"),
                               target=client.V1ObjectReference(kind="Node", name="n1"))
    with pytest.raises(ApiException) as exc:
        await v1.create_namespaced_pod_binding("p1", "default", binding)
    assert exc.value.status == 409
    assert (await v1.read_namespaced_pod("p1", "default")).spec.node_name is None


LABEL_CASES = [
    ("gpu=a100", {"n-a100"}),
    ("gpu==a100", {"n-a100"}),
    ("gpu!=a100", {"n-t4", "n-plain"}),
    ("gpu in (a100,t4)", {"n-a100", "n-t4"}),
    ("gpu notin (a100)", {"n-t4", "n-plain"}),
    ("gpu", {"n-a100", "n-t4"}),
    ("!gpu", {"n-plain"}),
    ("gpu,zone=z1", {"n-a100"}),
    ("", {"n-a100", "n-t4", "n-plain"}),
]


@pytest.mark.parametrize(("selector", "expected"), LABEL_CASES, ids=[c[0] or "empty" for c in LABEL_CASES])
async def test_label_selectors_of_every_form(kube_api, selector, expected):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n-a100", {"gpu": "a100", "zone": "z1"}))
    await v1.create_node(node("n-t4", {"gpu": "t4", "zone": "z2"}))
    await v1.create_node(node("n-plain", {"zone": "z1"}))
    got = await v1.list_node(label_selector=selector)
    assert {n.metadata.name for n in got.items} == expected


async def test_field_selectors_on_pods(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespace({"metadata": {"name": "team"}})
    await v1.create_namespaced_pod("default", pod("a", schedulerName="hami-scheduler"))
    await v1.create_namespaced_pod("default", pod("b"))
    await v1.create_namespaced_pod("team", pod("c", "team", nodeName="n1"))
    await v1.patch_namespaced_pod_status("b", "default", {"status": {"phase": "Running"}}, _content_type=MERGE)

    async def names(**kw) -> set[str]:
        return {p.metadata.name for p in (await v1.list_pod_for_all_namespaces(**kw)).items}

    assert await names(field_selector="status.phase=Pending") == {"a", "c"}
    assert await names(field_selector="status.phase!=Pending") == {"b"}
    assert await names(field_selector="spec.schedulerName=hami-scheduler") == {"a"}
    assert await names(field_selector="spec.nodeName=n1") == {"c"}
    assert await names(field_selector="spec.nodeName=") == {"a", "b"}
    assert await names(field_selector="metadata.namespace=team") == {"c"}
    assert await names(field_selector="metadata.name=b,status.phase==Running") == {"b"}
    assert await names(field_selector="status.phase=Pending", label_selector="app in (a,b)") == {"a"}
    in_ns = await v1.list_namespaced_pod("default", field_selector="metadata.name=c")
    assert in_ns.items == []


async def test_event_field_selectors_used_by_kubectl_describe(kube_api):
    v1 = client.CoreV1Api(kube_api)
    p = await v1.create_namespaced_pod("default", pod("p1"))
    for i, (name, uid) in enumerate([("p1", p.metadata.uid), ("p2", "other")]):
        await v1.create_namespaced_event("default", {
            "metadata": {"name": f"ev{i}"}, "reason": "FilteringFailed", "type": "Warning", "message": "m",
            "involvedObject": {"kind": "Pod", "name": name, "namespace": "default", "uid": uid}})
    sel = (f"involvedObject.name=p1,involvedObject.namespace=default,involvedObject.uid={p.metadata.uid},"
           "involvedObject.kind=Pod")
    got = await v1.list_namespaced_event("default", field_selector=sel)
    assert [e.metadata.name for e in got.items] == ["ev0"]


async def test_unsupported_field_or_bad_selector_is_400(kube_api):
    v1 = client.CoreV1Api(kube_api)
    for kw in ({"field_selector": "spec.bogus=1"}, {"label_selector": "a in (b"}):
        with pytest.raises(ApiException) as exc:
            await v1.list_pod_for_all_namespaces(**kw)
        assert exc.value.status == 400 and status_of(exc.value)["reason"] == "BadRequest"


async def test_leases_and_events_k8s_io_are_served(kube_api):
    coord = client.CoordinationV1Api(kube_api)
    lease = await coord.create_namespaced_lease("kube-system", {
        "metadata": {"name": "hami-scheduler"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    updated = await coord.replace_namespaced_lease("hami-scheduler", "kube-system", lease)
    assert updated.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"  # stale resourceVersion
    with pytest.raises(ApiException) as exc:
        await coord.replace_namespaced_lease("hami-scheduler", "kube-system", lease)
    assert exc.value.status == 409
    ev = client.EventsV1Api(kube_api)
    await ev.create_namespaced_event("default", {"metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
                                                 "reportingController": "hami", "reportingInstance": "x",
                                                 "action": "Bind",
                                                 "reason": "BindingSucceed", "type": "Normal",
                                                 "regarding": {"kind": "Pod", "name": "p"}})
    got = await ev.list_namespaced_event("default", field_selector="regarding.name=p")
    assert [e.metadata.name for e in got.items] == ["e1"]


async def test_create_in_missing_namespace_is_404(kube_api):
    v1 = client.CoreV1Api(kube_api)
    with pytest.raises(ApiException) as exc:
        await v1.create_namespaced_config_map("nowhere", {"metadata": {"name": "cm"}})
    assert exc.value.status == 404


async def collect(stream, n: int, types: tuple[str, ...] = ("ADDED", "MODIFIED", "DELETED")) -> list[tuple[str, str]]:
    out = []
    async with asyncio.timeout(10):
        async for ev in stream:
            if ev["type"] in types:
                out.append((ev["type"], ev["raw_object"]["metadata"]["name"]))
            if len(out) == n:
                break
    return out


async def test_watch_delivers_events_in_commit_order(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("old"))
    listed = await v1.list_node()
    w = watch.Watch()
    stream = w.stream(v1.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=30)

    async def writes():
        await v1.create_node(node("n1"))
        await v1.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, _content_type=MERGE)
        await v1.delete_node("old")
        await v1.delete_node("n1")

    task = asyncio.create_task(writes())
    got = await collect(stream, 4)
    await task
    await w.close()
    assert got == [("ADDED", "n1"), ("MODIFIED", "n1"), ("DELETED", "old"), ("DELETED", "n1")]


async def test_watch_without_resource_version_starts_with_current_objects(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("p1"))
    w = watch.Watch()
    got = await collect(w.stream(v1.list_namespaced_pod, "default", timeout_seconds=30), 1)
    await w.close()
    assert got == [("ADDED", "p1")]


async def test_watch_with_field_selector_sees_objects_leave_and_enter(kube_api):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_namespaced_pod("default", pod("p1"))
    rv = (await v1.list_pod_for_all_namespaces()).metadata.resource_version
    w = watch.Watch()
    stream = w.stream(v1.list_pod_for_all_namespaces, field_selector="status.phase=Pending",
                      resource_version=rv, timeout_seconds=30)

    async def writes():
        await v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}}, _content_type=MERGE)
        await v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Pending"}}, _content_type=MERGE)

    task = asyncio.create_task(writes())
    got = await collect(stream, 2)
    await task
    await w.close()
    assert got == [("DELETED", "p1"), ("ADDED", "p1")]


async def test_watch_sends_bookmarks_with_a_resumable_version(kube_api, apiserver):
    apiserver.bookmark_interval = 0.05
    v1 = client.CoreV1Api(kube_api)
    rv = (await v1.list_node()).metadata.resource_version
    await v1.create_namespaced_config_map("default", {"metadata": {"name": "other-resource"}})
    w = watch.Watch()
    bookmark = None
    async with asyncio.timeout(10):
        async for ev in w.stream(v1.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=30):
            if ev["type"] == "BOOKMARK":
                bookmark = ev["raw_object"]
                break
    await w.close()
    assert bookmark["kind"] == "Node"
    assert int(bookmark["metadata"]["resourceVersion"]) == apiserver.store.rv > int(rv)


async def test_an_idle_watch_gets_its_last_bookmark_before_its_deadline(kube_api, apiserver):
    """kube-apiserver's rhythm: a bookmark a minute (the default here too), and one just before the
    watch's deadline, so the client resumes from a fresh version; then the watch ends."""
    assert apiserver.bookmark_interval == 60.0
    v1 = client.CoreV1Api(kube_api)
    rv = (await v1.list_node()).metadata.resource_version
    await v1.create_namespaced_config_map("default", {"metadata": {"name": "moves-the-version"}})
    w = watch.Watch()
    events = []
    async with asyncio.timeout(30):
        async for ev in w.stream(v1.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=3):
            events.append(ev)
    await w.close()
    assert [ev["type"] for ev in events] == ["BOOKMARK"]  # the stream ended at its deadline, after one bookmark
    assert int(events[0]["raw_object"]["metadata"]["resourceVersion"]) == apiserver.store.rv


@pytest.mark.parametrize("path", ["/api/v1/nodes?watch=true", "/api/v1/nodes?watch=True", "/api/v1/nodes?watch=1",
                                  "/api/v1/watch/nodes?x=1", "/api/v1/watch/namespaces/default/pods?x=1",
                                  "/api/v1/namespaces/default/pods?watch=TRUE"])
async def test_watch_spellings_and_timeout_seconds(apiserver, path):
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):
        async with s.get(f"{apiserver.url}{path}&timeoutSeconds=1&resourceVersion={apiserver.store.rv}") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
            assert await r.read() == b""  # no events, then the server ends the stream


async def test_watch_from_compacted_version_is_410_then_relist_recovers(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    apiserver.store.set_watch_window(3)
    old_rv = (await v1.list_node()).metadata.resource_version
    for i in range(5):
        await v1.create_node(node(f"n{i}"))
    with pytest.raises(ApiException) as exc:
        async for _ in watch.Watch().stream(v1.list_node, resource_version=old_rv, timeout_seconds=5):
            pass
    assert exc.value.status == 410

    async with aiohttp.ClientSession() as s:  # the raw answer: an ERROR event carrying a Status
        async with s.get(f"{apiserver.url}/api/v1/nodes?watch=1&resourceVersion={old_rv}") as r:
            line = orjson.loads(await r.content.readline())
    assert line["type"] == "ERROR" and line["object"]["code"] == 410 and line["object"]["reason"] == "Expired"

    relisted = await v1.list_node()
    assert len(relisted.items) == 5
    w = watch.Watch()
    stream = w.stream(v1.list_node, resource_version=relisted.metadata.resource_version, timeout_seconds=30)
    task = asyncio.create_task(v1.delete_node("n0"))
    assert await collect(stream, 1) == [("DELETED", "n0")]
    await task
    await w.close()


async def test_open_watch_survives_server_restart(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n1"))
    rv = (await v1.list_node()).metadata.resource_version
    w = watch.Watch()  # no timeout_seconds: kubernetes-asyncio reconnects from the last version it saw
    stream = w.stream(v1.list_node, resource_version=rv)
    got: list[tuple[str, str]] = []
    first = asyncio.Event()

    async def consume():
        async for ev in stream:
            got.append((ev["type"], ev["raw_object"]["metadata"]["labels"].get("step", "")))
            first.set()
            if len(got) == 3:
                return

    task = asyncio.create_task(consume())
    await v1.patch_node("n1", {"metadata": {"labels": {"step": "1"}}}, _content_type=MERGE)
    await asyncio.wait_for(first.wait(), 10)
    await apiserver.restart()
    # Written while the client reconnects: replayed from the watch window.
    apiserver.store.patch("nodes", "", "n1", b'{"metadata":{"labels":{"step":"2"}}}', MERGE)
    await v1.patch_node("n1", {"metadata": {"labels": {"step": "3"}}}, _content_type=MERGE)
    await asyncio.wait_for(task, 10)
    await w.close()
    assert got == [("MODIFIED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3")]


async def test_watcher_that_stops_reading_is_dropped(apiserver):
    store = apiserver.store
    store.watch_buffer = 50
    big = "x" * 20000
    reader, writer = await asyncio.open_connection("127.0.0.1", apiserver.port)
    writer.write(b"GET /api/v1/configmaps?watch=true&resourceVersion=%d HTTP/1.1\r\nHost: x\r\n\r\n" % store.rv)
    await writer.drain()
    await eventually(store.watchers)
    watcher = store.watchers()[0]
    for i in range(2000):  # ~40 MB of events, far beyond socket buffers plus 50 queued events
        store.create("configmaps", "default", {"metadata": {"name": f"cm{i}"}, "data": {"k": big}})
        if watcher.dropped:
            break
        if i % 50 == 0:
            await asyncio.sleep(0)
    assert watcher.dropped and "buffer" in watcher.drop_reason
    assert store.watchers() == [] and len(watcher.lines) == 0
    writer.close()


async def test_restart_with_downtime_refuses_then_serves_again(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    await v1.create_node(node("n1"))
    await apiserver.stop()
    with pytest.raises(aiohttp.ClientConnectorError):
        await v1.read_node("n1")
    await apiserver.start()
    assert (await v1.read_node("n1")).metadata.name == "n1"


async def test_faults_fail_writes_then_recover(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    apiserver.faults.fail_next_writes(2, 429)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            await v1.create_node(node("n1"))
        assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "1"
    assert (await v1.list_node()).items == []  # reads are not affected
    await v1.create_node(node("n1"))
    apiserver.faults.fail_next_writes(1, 500)
    with pytest.raises(ApiException) as exc:
        await v1.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE)
    assert exc.value.status == 500 and status_of(exc.value)["reason"] == "InternalError"


async def test_silent_watch_fault_sends_nothing(apiserver):
    apiserver.faults.silent_watch = True
    apiserver.store.create("nodes", "", node("n1"))
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{apiserver.url}/api/v1/nodes?watch=true&timeoutSeconds=1") as r:
            assert r.status == 200
            assert await r.read() == b""


async def raw(apiserver, method: str, path: str, data: bytes = b"", ctype: str = "application/json"):
    async with aiohttp.ClientSession() as s:
        async with s.request(method, apiserver.url + path, data=data, headers={"Content-Type": ctype}) as r:
            return r.status, await r.json(content_type=None)


BAD_INPUT = [
    ("POST", "/api/v1/namespaces/default/pods", b"{not json", 400, "BadRequest"),
    ("POST", "/api/v1/namespaces/default/pods", b"[1]", 400, "BadRequest"),
    ("GET", "/api/v1/namespaces/default/gizmos", b"", 404, "NotFound"),
    ("GET", "/apis/example.com/v1/things", b"", 404, "NotFound"),
    ("POST", "/api/v1/namespaces/default/configmaps",
     b'{"metadata":{"name":"x"},"data":{"k":"' + b"y" * (3 * 1024 * 1024) + b'"}}', 413, "RequestEntityTooLarge"),
    ("POST", "/api/v1/namespaces/default/pods", b'{"metadata":{}}', 422, "Invalid"),
    ("POST", "/api/v1/namespaces/default/pods", b'{"metadata":{"name":"p","namespace":"other"}}', 422, "Invalid"),
    ("POST", "/api/v1/nodes", b'{"metadata":{"name":"Not_A_Name"}}', 422, "Invalid"),
    ("PATCH", "/api/v1/namespaces/default", b"{}", 415, "UnsupportedMediaType"),
    ("POST", "/api/v1/nodes", b'{"metadata":{"name":"n","labels":"x"}}', 422, "Invalid"),
    ("POST", "/api/v1/nodes", b'{"metadata":{"name":"n","annotations":{"a":1}}}', 422, "Invalid"),
]


@pytest.mark.parametrize(("method", "path", "body", "code", "reason"), BAD_INPUT,
                         ids=["malformed-json", "not-an-object", "unknown-resource", "unknown-group", "over-3MiB",
                              "no-name", "namespace-mismatch", "invalid-name", "patch-bad-type", "labels-not-a-map",
                              "annotation-not-a-string"])
async def test_bad_input_gets_a_status_with_the_right_code(apiserver, method, path, body, code, reason):
    status, doc = await raw(apiserver, method, path, body, "text/plain" if code == 415 else "application/json")
    assert status == code
    assert doc["kind"] == "Status" and doc["code"] == code and doc["reason"] == reason and doc["message"]


async def test_put_with_namespace_mismatch_is_422(apiserver):
    apiserver.store.create("configmaps", "default", {"metadata": {"name": "cm"}})
    status, doc = await raw(apiserver, "PUT", "/api/v1/namespaces/default/configmaps/cm",
                            b'{"metadata":{"name":"cm","namespace":"kube-system"}}')
    assert status == 422 and doc["reason"] == "Invalid"


async def test_discovery_documents(apiserver):
    async with aiohttp.ClientSession() as s:
        async def get(path):
            async with s.get(apiserver.url + path) as r:
                assert r.status == 200, path
                return await r.json()

        assert (await get("/version"))["major"] == "1"
        assert (await get("/api"))["versions"] == ["v1"]
        core = {r["name"] for r in (await get("/api/v1"))["resources"]}
        assert {"pods", "pods/status", "pods/binding", "nodes", "nodes/status", "events", "configmaps",
                "resourcequotas", "namespaces"} <= core
        groups = {g["name"] for g in (await get("/apis"))["groups"]}
        assert groups == {"events.k8s.io", "coordination.k8s.io", "policy", "authorization.k8s.io", "batch",
                          "resource.k8s.io", "scheduling.k8s.io"}
        assert [r["name"] for r in (await get("/apis/coordination.k8s.io/v1"))["resources"]] == ["leases"]


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def test_table_answers_for_kubectl_list_get_and_watch(apiserver):
    apiserver.store.create("nodes", "", node("n1"))
    async with aiohttp.ClientSession(headers={"Accept": TABLE}) as s:
        async with s.get(f"{apiserver.url}/api/v1/nodes") as r:
            doc = await r.json()
        assert doc["kind"] == "Table" and doc["rows"][0]["cells"][:2] == ["n1", "Ready"]
        async with s.get(f"{apiserver.url}/api/v1/nodes/n1?includeObject=Object") as r:
            doc = await r.json()
        assert doc["rows"][0]["object"]["kind"] == "Node"
        async with s.get(f"{apiserver.url}/api/v1/nodes?watch=1&timeoutSeconds=1") as r:
            ev = orjson.loads(await r.content.readline())
        assert ev["type"] == "ADDED" and ev["object"]["kind"] == "Table"


async def test_openapi_v3_stub_advertises_field_validation(apiserver):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{apiserver.url}/openapi/v3") as r:
            index = await r.json()
        url = index["paths"]["api/v1"]["serverRelativeURL"]
        async with s.get(apiserver.url + url) as r:
            doc = await r.json()
        async with s.get(f"{apiserver.url}/openapi/v2") as r:
            assert r.status == 404
    op = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert [p["name"] for p in op["parameters"]] == ["fieldValidation"]
    assert "apis/coordination.k8s.io/v1" in index["paths"]


async def test_list_pages_with_limit_and_continue(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    for i in range(7):
        await v1.create_node(node(f"n{i}", {"even": str(i % 2 == 0).lower()}))
    seen, token, rvs = [], None, set()
    while True:
        page = await v1.list_node(limit=3, _continue=token, label_selector="even=true")
        seen += [n.metadata.name for n in page.items]
        rvs.add(page.metadata.resource_version)
        token = page.metadata._continue
        if not token:
            break
        await v1.create_node(node(f"late{len(seen)}"))  # writes between pages do not change the list RV
    assert seen == ["n0", "n2", "n4", "n6"] and len(rvs) == 1
    first = await v1.list_node(limit=2)
    await v1.create_node(node("after-first-page"))
    apiserver.store.compact()
    with pytest.raises(ApiException) as exc:
        await v1.list_node(limit=2, _continue=first.metadata._continue)
    assert exc.value.status == 410
    with pytest.raises(ApiException) as exc:
        await v1.list_node(limit=2, _continue="garbage")
    assert exc.value.status == 400


async def test_dry_run_answers_without_storing(kube_api, apiserver):
    v1 = client.CoreV1Api(kube_api)
    before = apiserver.store.rv
    created = await v1.create_node(node("ghost"), dry_run="All")
    assert created.metadata.name == "ghost" and created.metadata.uid
    with pytest.raises(ApiException):
        await v1.read_node("ghost")
    await v1.create_node(node("n1"))
    patched = await v1.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}, dry_run="All", _content_type=MERGE)
    assert patched.metadata.labels == {"a": "b"}
    await v1.delete_node("n1", dry_run="All")
    assert (await v1.read_node("n1")).metadata.labels == {}
    assert apiserver.store.rv == before + 1


async def test_random_requests_never_crash_the_server(apiserver):
    """A seeded random walk over paths, methods, queries and bodies: every answer is a success or a
    Status with a 4xx code, never a 500 or a non-JSON error page."""
    import random

    rnd = random.Random(int(os.environ.get("HAMI_FUZZ_SEED", "20261122")))
    apiserver.store.create("pods", "default", pod("p"))
    apiserver.store.create("nodes", "", node("n"))
    segments = ["api", "apis", "v1", "namespaces", "default", "kube-system", "pods", "nodes", "p", "n", "status",
                "binding", "watch", "events", "leases", "coordination.k8s.io", "events.k8s.io", "x", "", "%20", "..",
                "configmaps", "resourcequotas", "finalize"]
    queries = ["", "?watch=true&timeoutSeconds=0.1", "?labelSelector=a", "?labelSelector=!a,b%20notin%20(c)",
               "?labelSelector=a%20in%20(", "?fieldSelector=x", "?limit=-1",
               "?limit=abc", "?continue=%%%", "?resourceVersion=abc&watch=1", "?timeoutSeconds=abc&watch=1",
               "?fieldSelector=metadata.name%3Dp", "?dryRun=All", "?includeObject=Object"]
    bodies = [b"", b"{", b"[]", b"null", b'{"metadata":null}', b'{"metadata":{"name":5}}', b'"x"',
              b'{"metadata":{"name":"p"},"spec":[]}', b'[{"op":"add"}]', b'{"target":"n"}', b'{"preconditions":5}',
              b'{"metadata":{"name":"q","labels":"x"}}', b'{"metadata":{"name":"q","resourceVersion":7}}',
              b'{"metadata":{"labels":["x"]}}', b'{"metadata":{"annotations":{"a":null}}}', b'{"status":7}',
              b'[{"op":"replace","path":"/metadata","value":7}]', b'{"metadata":{"name":"p","uid":5}}']
    ctypes = ["application/json", "application/merge-patch+json", "application/strategic-merge-patch+json",
              "application/json-patch+json", "text/plain"]
    async with aiohttp.ClientSession() as s:
        for _ in range(int(os.environ.get("HAMI_FUZZ_N", "400"))):
            path = "/" + "/".join(rnd.choice(segments) for _ in range(rnd.randint(1, 7))) + rnd.choice(queries)
            method = rnd.choice(["GET", "POST", "PUT", "PATCH", "DELETE"])
            body = rnd.choice(bodies)
            async with asyncio.timeout(10):
                async with s.request(method, apiserver.url + path, data=body,
                                     headers={"Content-Type": rnd.choice(ctypes)}) as r:
                    raw = await r.read()
            assert r.status < 500, (method, path, body, raw[:300])
            if r.status >= 400:
                doc = orjson.loads(raw)
                assert doc["kind"] == "Status" and doc["code"] == r.status, (method, path, raw[:300])


async def test_events_k8s_io_is_a_view_of_core_events(kube_api, apiserver):
    v1, ev1 = client.CoreV1Api(kube_api), client.EventsV1Api(kube_api)
    rv = (await ev1.list_namespaced_event("default")).metadata.resource_version
    w = watch.Watch()
    stream = w.stream(ev1.list_namespaced_event, "default", resource_version=rv,
                      field_selector="regarding.name=p1", timeout_seconds=30)
    await v1.create_namespaced_event("default", {
        "metadata": {"name": "core-made"}, "reason": "FilteringFailed", "type": "Warning", "message": "m1",
        "count": 3, "source": {"component": "hami-scheduler"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"}})
    async with asyncio.timeout(10):
        async for ev in stream:
            seen = ev["raw_object"]
            break
    await w.close()
    assert seen["apiVersion"] == "events.k8s.io/v1" and seen["regarding"]["name"] == "p1"
    assert seen["note"] == "m1" and seen["deprecatedCount"] == 3
    assert seen["deprecatedSource"] == {"component": "hami-scheduler"}

    await ev1.create_namespaced_event("default", {
        "metadata": {"name": "new-made"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "BindingSucceed",
        "type": "Normal", "note": "bound", "action": "Bind", "reportingController": "hami-scheduler",
        "reportingInstance": "i", "regarding": {"kind": "Pod", "name": "p1", "namespace": "default"}})
    core = await v1.read_namespaced_event("new-made", "default")
    assert core.message == "bound" and core.involved_object.name == "p1"
    assert core.reporting_component == "hami-scheduler"
    both = await v1.list_namespaced_event("default", field_selector="involvedObject.name=p1")
    assert sorted(e.metadata.name for e in both.items) == ["core-made", "new-made"]
    patched = await ev1.patch_namespaced_event("new-made", "default", {"note": "rebound"}, _content_type=MERGE)
    assert patched.note == "rebound" and (await v1.read_namespaced_event("new-made", "default")).message == "rebound"
    await ev1.delete_namespaced_event("core-made", "default")
    assert [e.metadata.name for e in (await v1.list_namespaced_event("default")).items] == ["new-made"]


async def test_delete_collection_honours_selectors(kube_api):
    v1 = client.CoreV1Api(kube_api)
    for name in ("a", "b", "c"):
        await v1.create_namespaced_pod("default", pod(name))
    await v1.delete_collection_namespaced_pod("default", label_selector="app in (a,b)")
    assert [p.metadata.name for p in (await v1.list_namespaced_pod("default")).items] == ["c"]
