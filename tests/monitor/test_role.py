"""`hami --role monitor` against the embedded API server: /metrics and /healthz over HTTP, pods of
this node only (field selector), a pod appearing and disappearing, grace-period removal of dirs of
vanished pods (never a dir of an existing pod, only once synced), the feedback loop writing (and
not writing with --feedback=false), and that the role imports neither grpc nor pynvml."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import aiohttp
import pytest

from hami.app import RoleContext
from hami.config import Config, KubeSettings, MonitorSettings, SimSettings
from hami.monitor import role
from hami.monitor.scan import read_region_file
from hami.monitor.shmwrite import Dev, Proc

from ._fixtures import U0, cache_file, fake_gpus


def pod_body(name, node, containers=("main",)):
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "x"} for c in containers]}}


async def start(apiserver, tmp_path, embedded=False, **monitor):
    settings = dict(node_name="node-1", cache_dir=str(tmp_path / "containers"), metrics_bind_address="127.0.0.1:0",
                    proc_root=str(tmp_path / "proc"), gpu_backend="fake",
                    fake_gpus=fake_gpus(str(tmp_path / "gpus.yaml"), [{"uuid": U0, "memory_mib": 1024,
                                                                        "utilization": 7}]))
    settings.update(monitor)
    cfg = Config(roles=("monitor",), kube=KubeSettings(kubeconfig=apiserver.kubeconfig),
                 monitor=MonitorSettings(**settings), sim=SimSettings(embedded=embedded))
    ctx = RoleContext(name="monitor", config=cfg, stop=asyncio.Event())
    task = asyncio.create_task(role.run(ctx))
    await asyncio.wait_for(ctx.ready.wait(), 20)
    entry = ctx.shared["monitor"][settings["node_name"] or "*"]
    return ctx, task, entry["address"], entry["monitor"]


async def scrape(address, path="/metrics"):
    async with aiohttp.ClientSession() as s, s.get(f"http://{address}{path}") as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def until(pred, timeout=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if await pred():
            return True
        await asyncio.sleep(0.05)
    return False


async def stop(ctx, task):
    ctx.stop.set()
    await asyncio.wait_for(task, 10)


async def test_role_serves_metrics_for_pods_of_this_node(apiserver, tmp_path):
    mine = apiserver.store.create("pods", "default", pod_body("mine", "node-1")).obj
    other = apiserver.store.create("pods", "default", pod_body("other", "node-2")).obj
    root = str(tmp_path / "containers")
    cache_file(root, mine["metadata"]["uid"], "main", [Dev(U0, limit=1 << 30)], [Proc(pid=3, used={0: 77})])
    cache_file(root, other["metadata"]["uid"], "main", [Dev(U0)], [Proc(pid=3, used={0: 88})])
    ctx, task, address, _ = await start(apiserver, tmp_path)
    try:
        status, _, body = await scrape(address, "/healthz")
        assert (status, body) == (200, "ok\n")

        async def shows_mine():
            return 'pod="mine"' in (await scrape(address))[2]

        assert await until(shows_mine)
        status, _, body = await scrape(address, "/readyz")  # the pod cache synced: ready
        assert (status, body) == (200, "ok\n")
        assert (await scrape(address, "/debug/pprof/"))[0] == 404  # never profiling on the NodePort
        status, ctype, body = await scrape(address)
        assert status == 200 and ctype.startswith("text/plain")
        want = (f'hami_vgpu_memory_used_bytes{{container="main",device_uuid="{U0}",namespace="default",'
                'node="node-1",pod="mine",vdevice_index="0",zone="vGPU"} 77.0')
        assert want in body
        assert 'pod="other"' not in body
        assert 'hami_host_gpu_utilization_ratio{device_index="0"' in body
        late = apiserver.store.create("pods", "default", pod_body("late", "node-1")).obj
        cache_file(root, late["metadata"]["uid"], "main", [Dev(U0)], [Proc(pid=4, used={0: 5})])

        async def shows_late():
            return 'pod="late"' in (await scrape(address))[2]

        assert await until(shows_late)
    finally:
        await stop(ctx, task)


async def test_dirs_of_vanished_pods_are_removed_after_grace_and_existing_pods_kept(apiserver, tmp_path):
    live = apiserver.store.create("pods", "default", pod_body("live", "node-1")).obj
    gone = apiserver.store.create("pods", "default", pod_body("gone", "node-1")).obj
    root = str(tmp_path / "containers")
    live_file = cache_file(root, live["metadata"]["uid"], "main", [Dev(U0)], [])
    gone_file = cache_file(root, gone["metadata"]["uid"], "main", [Dev(U0)], [])
    fresh_file = cache_file(root, "not-yet-seen-uid", "main", [Dev(U0)], [])
    old = 1_000_000.0
    for f in (live_file, gone_file):
        os.utime(os.path.dirname(f), (old, old))
    ctx, task, _, mon = await start(apiserver, tmp_path, cache_grace=60.0)
    try:
        assert await until(lambda: _true(mon.synced()))
        apiserver.store.delete("pods", "default", "gone")

        async def gone_from_store():
            return all(p["metadata"]["name"] != "gone" for p in mon.pods())

        assert await until(gone_from_store)
        result = await asyncio.to_thread(mon.housekeeping)
        assert result["removed"] == 1
        exists = await asyncio.to_thread(lambda: [os.path.exists(p) for p in (
            os.path.dirname(gone_file), live_file, fresh_file)])
        # gone: removed; live: an existing pod's dir is never removed, however old; fresh: in its grace period
        assert exists == [False, True, True]
    finally:
        await stop(ctx, task)


async def _true(v):
    return v


@pytest.mark.parametrize("enabled", [True, False], ids=["feedback-on", "feedback-off"])
async def test_feedback_loop_writes_only_when_enabled(apiserver, tmp_path, enabled):
    p = apiserver.store.create("pods", "default", pod_body("fb", "node-1")).obj
    path = cache_file(str(tmp_path / "containers"), p["metadata"]["uid"], "main", [Dev(U0)], [Proc(pid=1)],
                      "1.2", recent_kernel=2, utilization_switch=1)
    ctx, task, _, mon = await start(apiserver, tmp_path, feedback=enabled)
    mon.mig_lock = str(tmp_path / "no-mig-lock")
    try:
        assert await until(lambda: _true(bool(mon.pods())))
        result = await asyncio.to_thread(mon.housekeeping)
        r = read_region_file(path)
        if enabled:
            assert result["writes"] == 2 and (r.recent_kernel, r.utilization_switch) == (1, 0)
        else:
            assert result["writes"] == 0 and (r.recent_kernel, r.utilization_switch) == (2, 1)
    finally:
        await stop(ctx, task)


def test_feedback_pauses_while_mig_apply_lock_exists(tmp_path):
    lock = tmp_path / "hami-mig-apply.lock"
    lock.write_text("")
    uid = "u-1"
    path = cache_file(str(tmp_path / "containers"), uid, "main", [Dev(U0)], [], "1.2", recent_kernel=2)
    pods = [{"metadata": {"uid": uid, "name": "p", "namespace": "d"}, "spec": {"containers": [{"name": "main"}]}}]
    mon = role.Monitor(cache_dir=str(tmp_path / "containers"), node_name="n", pods=lambda: pods,
                       synced=lambda: True, mig_lock=str(lock))
    assert mon.housekeeping()["writes"] == 0
    lock.unlink()
    assert mon.housekeeping()["writes"] == 2 and read_region_file(path).recent_kernel == 1


def test_reaping_waits_for_the_pod_list(tmp_path):
    path = cache_file(str(tmp_path / "containers"), "u-1", "main", [Dev(U0)], [])
    os.utime(os.path.dirname(path), (1.0, 1.0))
    mon = role.Monitor(cache_dir=str(tmp_path / "containers"), node_name="n", pods=lambda: [],
                       synced=lambda: False, feedback_enabled=False)
    assert mon.housekeeping()["removed"] == 0 and os.path.exists(path)


def test_split_bind_accepts_hami_forms():
    assert role.split_bind(":9394") == ("0.0.0.0", 9394)
    assert role.split_bind("127.0.0.1:0") == ("127.0.0.1", 0)
    assert role.split_bind("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError, match="metrics-bind-address"):
        role.split_bind("9394")


def test_monitor_role_imports_neither_grpc_nor_pynvml():
    code = ("import sys, hami.monitor.role, hami.monitor.dump, hami.gpu.backend; "
            "print(sorted(m for m in ('grpc', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_embedded_monitor_without_node_name_serves_every_simulated_node(apiserver, tmp_path):
    import yaml

    gpus = tmp_path / "gpus-all.yaml"
    gpus.write_text(yaml.safe_dump({"nodes": {
        "sim-1": {"gpus": [{"uuid": U0, "memory_mib": 1024, "utilization": 11}]},
        "sim-2": {"gpus": [{"uuid": "GPU-0d4c6a5e-0000-4000-8000-000000000009", "memory_mib": 1024,
                            "utilization": 22}]}}}))
    a = apiserver.store.create("pods", "default", pod_body("on-a", "sim-1")).obj
    b = apiserver.store.create("pods", "default", pod_body("on-b", "sim-2")).obj
    root = str(tmp_path / "containers")
    cache_file(root, a["metadata"]["uid"], "main", [Dev(U0)], [Proc(pid=1, used={0: 1})])
    cache_file(root, b["metadata"]["uid"], "main", [Dev(U0)], [Proc(pid=1, used={0: 2})])
    ctx, task, address, _ = await start(apiserver, tmp_path, embedded=True, node_name="", fake_gpus=str(gpus))
    try:
        async def both():
            body = (await scrape(address))[2]
            return 'pod="on-a"' in body and 'pod="on-b"' in body

        assert await until(both)
        body = (await scrape(address))[2]
        assert 'node="sim-1",zone="vGPU"} 11.0' in body and 'node="sim-2",zone="vGPU"} 22.0' in body
    finally:
        await stop(ctx, task)


def test_monitor_is_unready_until_its_pod_cache_syncs(tmp_path):
    synced = [False]
    mon = role.Monitor(cache_dir=str(tmp_path), node_name="n", pods=list, synced=lambda: synced[0])
    assert mon.health.reasons() == ["pods: initial list not done"]
    synced[0] = True
    assert mon.health.reasons() == []


async def test_monitor_goes_unready_when_its_watch_breaks_and_ready_after_recovery(apiserver, tmp_path):
    ctx, task, address, _ = await start(apiserver, tmp_path)
    informer = ctx.shared["monitor"]["node-1"]["informer"]
    informer.backoff_max, informer.unready_after = 0.2, 0.5  # the role's bound is 60 s
    try:
        assert await until(lambda: _ready(address, 200))
        await apiserver.stop()
        assert await until(lambda: _ready(address, 503))
        status, _, body = await scrape(address, "/readyz")
        assert status == 503 and body.startswith("monitor not ready:\n- pods: watch broken for "), body
        assert (await scrape(address, "/healthz"))[:3:2] == (200, "ok\n")  # still alive
        await apiserver.start()
        assert await until(lambda: _ready(address, 200))
    finally:
        await stop(ctx, task)


async def _ready(address, want: int) -> bool:
    return (await scrape(address, "/readyz"))[0] == want
