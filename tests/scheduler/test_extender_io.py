"""The extender over real HTTP against the embedded API server: /filter in NodeNames mode
(nothing written, usage counted before the answer, no API reads), /bind's two critical writes
(lock, Binding carrying the placement) and the label written later off the critical path,
concurrent filters never double-book, pass-through pods, case-insensitive PascalCase keys,
errors in the `Error` field with HTTP 200, the body limit, full-Nodes mode (no patch), patch
failure rollback, the bounded wait for the first sync, events, probes, webhook and /metrics."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import orjson
import pytest

from hami.device import codec
from hami.scheduler.extender.hamiflow import patch_at_filter
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import config_for, eventually, node_obj, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env, start_env, stop_env
from tests.scheduler.test_bind_io import plugin_allocate

LOCK = codec.NODE_LOCK_ANNOTATION


@pytest.fixture
async def env(apiserver):
    async with running_env(apiserver, hami_nodes(3)) as e:
        yield e


async def test_filter_chooses_a_node_without_any_api_round_trip(env):
    pod = env.create_pod(pod_obj("p1", mem=1000, cores=10))
    reads = env.api_reads()
    writes = sum(env.client.lane_stats[lane].writes for lane in ("critical", "background"))
    out = await env.filter(pod, ["n0", "n1", "n2"])
    assert out["Error"] == "" and out["FailedNodes"] is None and len(out["NodeNames"]) == 1
    node = out["NodeNames"][0]
    assert env.api_reads() == reads
    assert sum(env.client.lane_stats[lane].writes for lane in ("critical", "background")) == writes
    # Nothing on the pod yet: a replica dying now leaves nothing behind.
    assert "hami.io/vgpu-node" not in env.pod("default", "p1")["metadata"]["annotations"]
    usage = env.sched.state.index.node(node).by_id
    [dev_id] = [u for u, d in usage.items() if d.used]
    assert (usage[dev_id].used, usage[dev_id].usedmem, usage[dev_id].usedcores) == (1, 1000, 10)


async def test_bind_writes_the_placement_in_the_binding_two_critical_writes(env):
    pod = env.create_pod(pod_obj("p1", mem=1000, cores=10))
    node = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    env.sched.labeler.delay = 0.0  # the label writer looks at the pod at once (default: 30 s later)
    crit = env.client.lane_stats["critical"].writes
    patches = env.client.total_requests(verb="patch", resource="pods")
    assert (await env.bind(pod, node))["Error"] == ""
    # lock and binding: two critical writes, no pod patch; the placement came in the Binding
    assert env.client.lane_stats["critical"].writes - crit == 2
    stored = env.pod("default", "p1")
    annos = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == node
    assert annos["hami.io/vgpu-node"] == node and annos["hami.io/bind-phase"] == "allocating"
    assert annos["hami.io/vgpu-devices-to-allocate"] == annos["hami.io/vgpu-devices-allocated"]
    [[dev], []] = codec.decode_pod_devices(annos["hami.io/vgpu-devices-allocated"])
    assert (dev.type, dev.usedmem, dev.usedcores) == ("NVIDIA", 1000, 10)
    assert int(annos["hami.io/vgpu-time"]) > 1_700_000_000
    assert int(annos["hami.io/bind-time"]) > 1_700_000_000
    # The label HAMi's vGPU monitor reads comes after, on the background lane, from the label writer
    # (no node agent labelled it here).
    await eventually(lambda: (env.pod("default", "p1")["metadata"].get("labels") or {}).get(
        "hami.io/vgpu-node") == node)
    assert env.client.total_requests(verb="patch", resource="pods") == patches + 1
    assert env.client.lane_stats["critical"].writes - crit == 2
    assert env.sched.labeler.writes == 1


async def test_label_writer_skips_a_pod_the_node_agent_labelled(env):
    pod = env.create_pod(pod_obj("p1", mem=1000, cores=10))
    node = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    labeler = env.sched.labeler
    labeler.delay = 3600.0  # held back while the "agent" labels the pod
    assert (await env.bind(pod, node))["Error"] == ""
    env.store.patch("pods", "default", "p1", orjson.dumps({"metadata": {"labels": {"hami.io/vgpu-node": node}}}),
                    "application/merge-patch+json")
    await eventually(lambda: (env.sched.state.pod("default", "p1")["metadata"].get("labels") or {}).get(
        "hami.io/vgpu-node") == node)
    labeler.clock = lambda: 1e12  # the delay has passed
    await labeler.label_due()
    assert (labeler.writes, labeler.skipped, labeler.pending) == (0, 1, 0)


async def test_writes_under_the_node_lock_go_ahead_of_other_binds_lock_writes(env, monkeypatch):
    """The pod patch and the binding are made under the held lock and marked urgent (they take the
    lane's next token ahead of other binds' queued lock writes); the lock write itself is not."""
    from hami.kube import client as clientmod
    from hami.kube import lanes

    seen: list[tuple[str, str, bool]] = []
    real = clientmod.KubeClient.request

    async def spy(self, verb, resource, method, path, **kw):
        if method != "GET":
            seen.append((verb, resource, lanes.is_urgent()))
        return await real(self, verb, resource, method, path, **kw)

    monkeypatch.setattr(clientmod.KubeClient, "request", spy)
    pod = env.create_pod(pod_obj("u1", mem=1000, cores=10))
    node = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert (await env.bind(pod, node))["Error"] == ""
    writes = [w for w in seen if w[1] != "events"]
    assert writes == [("patch", "nodes", False), ("create", "pods/binding", True)]


async def test_a_retried_bind_of_a_pod_bound_meanwhile_writes_nothing(env):
    """kube-scheduler retries a bind its extender timeout cut off, though the first attempt may have
    finished: to the same node that is a success without a write (bind-phase stays the agent's
    `success`), to another node an error naming where the pod is."""
    pod = env.create_pod(pod_obj("r1", mem=1000, cores=10))
    node = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert (await env.bind(pod, node))["Error"] == ""
    plugin_allocate(env.store, "r1", node)  # Allocate done: bind-phase success, lock released
    await eventually(lambda: (env.sched.state.pod("default", "r1").get("spec") or {}).get("nodeName") == node
                     and node not in env.sched.state.locked)
    writes = env.client.lane_stats["critical"].writes
    assert (await env.bind(pod, node))["Error"] == ""
    other = next(n for n in ("n0", "n1", "n2") if n != node)
    assert (await env.bind(pod, other))["Error"] == (
        f'409 Conflict: Operation cannot be fulfilled on pods "r1": pod r1 is already assigned to node "{node}"')
    assert env.client.lane_stats["critical"].writes == writes
    assert env.pod("default", "r1")["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert env.sched.binder.already_bound == 1


async def test_a_retried_bind_that_finds_the_pod_bound_once_it_has_the_lock_writes_nothing(env):
    """The retry queues for the node lock; while it waits, the first attempt's binding and Allocate
    complete. Holding the lock, it sees the pod bound: it releases its fresh lock and succeeds
    without a patch."""
    import time as _time

    pod = env.create_pod(pod_obj("r2", mem=1000, cores=10))
    node = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    env.create_pod(pod_obj("holder", mem=1000, cores=10))  # another pod mid-allocation holds the lock
    env.store.bind("default", "holder", {"target": {"kind": "Node", "name": node}})
    env.store.patch("pods", "default", "holder", b'{"metadata":{"annotations":{"hami.io/bind-phase":"allocating"}}}',
                    "application/merge-patch+json")
    lock = codec.encode_node_lock(_time.time(), "default", "holder")
    env.store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {codec.NODE_LOCK_ANNOTATION: lock}}}),
                    "application/merge-patch+json")
    await eventually(lambda: node in env.sched.state.locked)
    patches = env.client.total_requests(verb="patch", resource="pods")
    waits = env.sched.binder.lock_waits
    retry = asyncio.create_task(env.bind(pod, node))
    await eventually(lambda: env.sched.binder.lock_waits > waits)  # it met the lock ...
    assert not retry.done()  # ... and is queued behind it
    env.store.bind("default", "r2", {"target": {"kind": "Node", "name": node}})  # the first attempt's binding
    env.store.patch("pods", "default", "r2", b'{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}',
                    "application/merge-patch+json")
    await eventually(lambda: (env.sched.state.pod("default", "r2").get("spec") or {}).get("nodeName") == node)
    env.store.patch("nodes", "", node, orjson.dumps({"metadata": {"annotations": {codec.NODE_LOCK_ANNOTATION: None}}}),
                    "application/merge-patch+json")
    assert (await retry)["Error"] == ""
    assert env.client.total_requests(verb="patch", resource="pods") == patches
    assert env.pod("default", "r2")["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    await eventually(lambda: codec.NODE_LOCK_ANNOTATION not in (env.store.get("nodes", "",
            node)["metadata"].get("annotations") or {}))


async def test_filter_skips_a_locked_node_while_another_fits_and_packs_it_again_once_free(env):
    """Binpack picks the fullest node; while its lock is held the next pod goes elsewhere."""
    first = env.create_pod(pod_obj("f0", mem=8000))
    full = (await env.filter(first, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert (await env.bind(first, full))["Error"] == ""  # the lock stays until Allocate
    state = env.sched.state
    await eventually(lambda: full in state.locked)
    second = env.create_pod(pod_obj("f1", mem=1000))
    other = (await env.filter(second, ["n0", "n1", "n2"]))["NodeNames"][0]
    assert other != full
    [empty] = {"n0", "n1", "n2"} - {full, other}
    assert (await env.filter(env.create_pod(pod_obj("f2", mem=1000)), [empty, full]))["NodeNames"] == [empty]
    plugin_allocate(env.store, "f0", full)  # Allocate done: the lock is released
    await eventually(lambda: full not in state.locked)
    # Binpack packs again: the fullest node (no longer locked) over the empty one.
    assert (await env.filter(env.create_pod(pod_obj("f3", mem=1000)), [empty, full]))["NodeNames"] == [full]


async def test_concurrent_filters_never_double_book_exclusive_gpus(env):
    pods = [env.create_pod(pod_obj(f"x{i}", gpus=1, cores=100)) for i in range(7)]
    outs = await asyncio.gather(*(env.filter(p, ["n0", "n1", "n2"]) for p in pods))
    placed = [o["NodeNames"][0] for o in outs if o["NodeNames"]]
    assert len(placed) == 6  # 3 nodes x 2 GPUs, each exclusive
    uuids = []
    for p in pods:
        annos = env.placement("default", p["metadata"]["name"])
        if "hami.io/vgpu-devices-allocated" in annos:
            uuids.append(codec.decode_pod_devices(annos["hami.io/vgpu-devices-allocated"])[0][0].uuid)
    assert len(uuids) == len(set(uuids)) == 6
    last = [o for o in outs if not o["NodeNames"]][0]
    assert set(last["FailedNodes"]) == {"n0", "n1", "n2"}


async def test_pod_without_gpu_request_passes_through(env):
    pod = env.create_pod(pod_obj("cpu", gpus=0))
    out = await env.filter(pod, ["n0", "n1", "ghost"])
    assert out == {"NodeNames": ["n0", "n1", "ghost"], "FailedNodes": None, "Error": ""}
    assert "hami.io/vgpu-node" not in env.pod("default", "cpu")["metadata"].get("annotations", {})


async def test_keys_are_case_insensitive(env):
    pod = env.create_pod(pod_obj("p", mem=10))
    out = await env.filter(None, raw=orjson.dumps({"pod": pod, "nodenames": ["n1"]}))
    assert out["NodeNames"] == ["n1"]


@pytest.mark.parametrize(("raw", "error"), [
    (b"{not json", "unexpected"),
    (b"[1]", "cannot unmarshal"),
    (b'{"NodeNames":["n1"]}', "extender args missing pod"),
], ids=["syntax", "not-object", "no-pod"])
async def test_bad_requests_answer_200_with_error(env, raw, error):
    out = await env.filter(None, raw=raw)
    assert error in out["Error"]


async def test_unregistered_and_unknown_nodes_are_reported(apiserver):
    e = await start_env(apiserver, hami_nodes(1) + [node_obj("plain", registered=False)])
    try:
        pod = e.create_pod(pod_obj("big", mem=10**6))
        out = await e.filter(pod, ["n0", "plain", "ghost"])
        assert out["NodeNames"] is None and out["Error"] == ""
        assert out["FailedNodes"] == {"n0": "2/2 CardInsufficientMemory", "plain": "node unregistered",
                                      "ghost": "node unregistered"}
    finally:
        await stop_env(e)


async def test_failed_filter_emits_hami_events(env):
    pod = env.create_pod(pod_obj("big", mem=10**6))
    await env.filter(pod, ["n0", "n1", "n2"])
    await env.sched.events.flush()
    msgs = sorted(e.obj["message"] for e in env.store.list("events", "default")[1])
    assert msgs == ["3 nodes CardInsufficientMemory(n0,n1,n2)", "no available node, 3 nodes do not meet"]
    ev = env.store.list("events", "default")[1][0].obj
    assert ev["reason"] == "FilteringFailed" and ev["source"]["component"] == "hami-scheduler"


async def test_successful_filter_emits_filtering_succeed(env):
    pod = env.create_pod(pod_obj("ok", mem=10))
    out = await env.filter(pod, ["n0"])
    await env.sched.events.flush()
    [ev] = [e.obj for e in env.store.list("events", "default")[1]]
    assert ev["reason"] == "FilteringSucceed"
    assert ev["message"].startswith(f"find fit node({out['NodeNames'][0]}), 0 nodes not fit, 1 nodes fit(")


async def test_filtering_succeed_counts_every_fitting_node_as_hami_does(env):
    """HAMi fits every candidate: `find fit node(n), 0 nodes not fit, 3 nodes fit(n0:s,n1:s,n2:s)`."""
    pod = env.create_pod(pod_obj("all-fit", mem=10))
    out = await env.filter(pod, ["n0", "n1", "n2"])
    await env.sched.events.flush()
    [ev] = [e.obj for e in env.store.list("events", "default")[1]]
    chosen = out["NodeNames"][0]
    prefix = f"find fit node({chosen}), 0 nodes not fit, 3 nodes fit("
    assert ev["message"].startswith(prefix), ev["message"]
    listed = ev["message"][len(prefix):-1].split(",")
    assert sorted(item.split(":")[0] for item in listed) == ["n0", "n1", "n2"]
    assert all(item.split(":")[1].replace(".", "").isdigit() for item in listed)


async def test_failed_bind_leaves_nothing_behind(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    node = (await env.filter(pod, ["n0"]))["NodeNames"][0]
    await env.sched.events.flush()  # the FilteringSucceed event is written: the next write is the lock
    env.apiserver.faults.fail_next_writes(1, 500)  # the node lock's write
    out = await env.bind(pod, node)
    env.apiserver.faults.reset()
    assert out["Error"]
    stored = env.pod("default", "p")
    assert stored["spec"].get("nodeName") is None
    assert not {"hami.io/vgpu-node", "hami.io/bind-phase"} & set(stored["metadata"]["annotations"])
    assert LOCK not in env.store.get("nodes", "", node)["metadata"].get("annotations", {})


async def test_hami_flow_patch_failure_at_filter_rolls_back_usage_and_returns_error(env):
    patch_at_filter(env.sched.extender)  # HAMi's flow: the placement is patched at /filter
    pod = env.create_pod(pod_obj("p", mem=1000))
    env.apiserver.faults.fail_next_writes(1, 500)
    out = await env.filter(pod, ["n0"])
    env.apiserver.faults.reset()
    assert out["Error"] and not out.get("NodeNames")
    assert env.sched.state.index.pod(pod["metadata"]["uid"]) is None
    assert all(d.used == 0 for d in env.sched.state.index.node("n0").devices)


async def test_full_nodes_mode_returns_the_node_object_and_patches_nothing(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    nodes = {"items": [env.store.get("nodes", "", f"n{i}") for i in range(3)]}
    patches = env.client.total_requests(verb="patch")
    out = await env.filter(pod, nodes=nodes)
    assert out["Error"] == "" and len(out["Nodes"]["items"]) == 1
    assert out["Nodes"]["items"][0]["metadata"]["name"] in {"n0", "n1", "n2"}
    assert env.client.total_requests(verb="patch") == patches
    assert "hami.io/vgpu-node" not in env.pod("default", "p")["metadata"].get("annotations", {})


async def test_full_nodes_mode_decodes_nodes_unknown_to_the_cache(env):
    pod = env.create_pod(pod_obj("p", mem=1000))
    foreign = node_obj("elsewhere", 1)
    out = await env.filter(pod, nodes={"items": [foreign, node_obj("bare", registered=False)]})
    assert out["Nodes"]["items"][0]["metadata"]["name"] == "elsewhere"


async def test_body_over_limit_is_refused(apiserver):
    e = await start_env(apiserver, hami_nodes(1), max_request_bytes=1024)
    try:
        pod = pod_obj("p", annotations={"pad": "x" * 4096})
        async with e.http.post(e.sched.url + "/filter", data=orjson.dumps({"Pod": pod, "NodeNames": ["n0"]})) as r:
            assert r.status == 413
    finally:
        await stop_env(e)


async def test_filter_waits_bounded_for_first_sync(apiserver):
    await apiserver.stop()
    s = await start_scheduler(config_for(apiserver.kubeconfig, sync_timeout=0.3))
    try:
        async with aiohttp.ClientSession() as http:
            body = orjson.dumps({"Pod": pod_obj("p"), "NodeNames": ["n0"]})
            async with http.post(s.url + "/filter", data=body) as r:
                assert (await r.json())["Error"] == "context cancelled"
    finally:
        await s.close()
        await apiserver.start()


async def test_probes_answer_200(env):
    for path in ("/healthz", "/readyz"):
        async with env.http.get(env.sched.url + path) as r:
            assert r.status == 200


async def test_webhook_mutates_a_gpu_pod(env):
    pod = pod_obj("w", scheduler="")
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "namespace": "default", "operation": "CREATE", "object": pod}}
    async with env.http.post(env.sched.url + "/webhook", data=orjson.dumps(review)) as r:
        out = await r.json()
    assert out["response"]["uid"] == "u1" and out["response"]["allowed"] is True
    ops = orjson.loads(base64.b64decode(out["response"]["patch"]))
    assert [o["value"] for o in ops if o["path"] == "/spec/schedulerName"] == ["hami-scheduler"]


async def test_metrics_expose_hami_names_and_api_counters(env):
    pod = env.create_pod(pod_obj("m", mem=2048, cores=20))
    out = await env.filter(pod, ["n0"])
    assert out["NodeNames"] == ["n0"]
    assert (await env.bind(pod, "n0"))["Error"] == ""  # the placement is written at bind
    await eventually(lambda: env.sched.state.uid_keys.get(pod["metadata"]["uid"]))
    async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/metrics") as r:
        text = await r.text()
    assert 'hami_gpu_memory_limit_bytes{device_index="0",device_type="NVIDIA A100-SXM4-40GB"' in text
    assert 'zone="vGPU"' in text
    assert "hami_vgpu_memory_allocated_bytes{" in text and 'pod="m"' in text
    assert f"{2048 * 2**20:.1f}" in text or f"{2048 * 2**20:e}" in text or "2.147483648e+09" in text
    assert 'hami_scheduler_filter_duration_seconds_count{result="fit"} 1.0' in text
    assert 'hami_scheduler_kube_api_requests_total{code="200",resource="nodes",verb="patch"}' in text


async def test_mig_allocations_of_placed_pods_appear_as_mig_instance_info(env):
    """hami_node_gpu_mig_instance_info (spec §8.4): one series per MIG instance the device plugin created."""
    pod = env.create_pod(pod_obj("mig", mem=2048, cores=20))
    assert (await env.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
    assert (await env.bind(pod, "n0"))["Error"] == ""  # the placement is written at bind
    uid = pod["metadata"]["uid"]
    await eventually(lambda: env.sched.state.uid_keys.get(uid))
    uuid = env.sched.state.index.pod(uid).devices[0][0].uuid
    card = next(d.index for d in env.sched.state.index.node("n0").devices if d.id == uuid)
    allocations = orjson.dumps([{"containerIndex": 0, "deviceIndex": 0, "gpuUUID": uuid, "profile": "1g.5gb",
                                 "placement": {"start": 6, "size": 1}, "migUUID": "MIG-abc",
                                 "gpuInstanceID": 13, "computeInstanceID": 0}]).decode()
    env.store.patch("pods", "default", "mig", orjson.dumps(
        {"metadata": {"annotations": {codec.MIG_ALLOCATIONS_ANNOTATION: allocations}}}), "application/merge-patch+json")
    # No UUIDs on the Service unless the operator opts in: `<node>/<index>[/<gpu instance>]`.
    want = (f'hami_node_gpu_mig_instance_info{{compute_instance_id="0",device_index="{card}",device_uuid="n0/{card}",'
            f'gpu_instance_id="13",mig_uuid="n0/{card}/13",node="n0",placement_size="1",placement_start="6",'
            'profile="1g.5gb",zone="vGPU"} 1.0')
    assert uuid not in want

    async def scraped():
        async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/metrics") as r:
            return want in await r.text()

    for _ in range(50):
        if await scraped():
            break
        await asyncio.sleep(0.1)
    async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/metrics") as r:
        text = await r.text()
    assert want in text, [line for line in text.splitlines() if "mig" in line]


async def test_pod_that_no_longer_fits_drops_its_stale_placement(env):
    patch_at_filter(env.sched.extender)  # HAMi's flow left a placement on the pending pod
    pod = env.create_pod(pod_obj("s", mem=1000))
    assert (await env.filter(pod, ["n0"]))["NodeNames"] == ["n0"]
    await eventually(lambda: "hami.io/vgpu-node" in env.sched.state.pod("default", "s")["metadata"]["annotations"])
    # The bind never happened and the pod now fits nowhere (here: its GPU filter excludes every card).
    again = env.pod("default", "s")
    again["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] = "GPU-none"
    out = await env.filter(again, ["n0"])
    assert out["NodeNames"] is None
    stored = env.pod("default", "s")["metadata"]
    assert "hami.io/vgpu-node" not in stored["annotations"]
    assert "hami.io/vgpu-devices-allocated" not in stored["annotations"]
    assert "hami.io/vgpu-node" not in stored.get("labels", {})
    assert all(d.used == 0 for d in env.sched.state.index.node("n0").devices)


async def test_bind_without_this_replicas_decision_fits_the_pod_on_the_node_itself(env):
    """The other replica (or this one before a restart) ran /filter: nothing was written, so /bind
    fits the pod on kube-scheduler's node from its own cache and writes it in the one patch."""
    pod = env.create_pod(pod_obj("elsewhere", mem=1000, cores=10))
    chosen = (await env.filter(pod, ["n0", "n1", "n2"]))["NodeNames"][0]
    env.forget_held()  # as a restarted (or other) replica sees it
    other = next(n for n in ("n0", "n1", "n2") if n != chosen)
    assert (await env.bind(pod, other))["Error"] == ""
    stored = env.pod("default", "elsewhere")
    annos = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == other and annos["hami.io/vgpu-node"] == other
    registered = {d.id for d in codec.decode_node_devices(
        env.store.get("nodes", "", other)["metadata"]["annotations"][codec.REGISTER_ANNOTATION])}
    [[dev], []] = codec.decode_pod_devices(annos["hami.io/vgpu-devices-to-allocate"])
    assert dev.uuid in registered and (dev.usedmem, dev.usedcores) == (1000, 10)
