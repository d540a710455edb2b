"""`hami doctor pod`: every leaf of the runbook's decision tree, each built in the embedded API server.

Covers: scheduler not running (stale leader Lease; unreachable --scheduler-url), no HAMi resource,
wrong schedulerName, no event with everything right, FilteringFailed with advice for every reason
code, register annotation missing, handshake stale, BindingFailed from lock contention (with the
lock holder as evidence) and from an API error, FilteringSucceed but Pending, bind-phase=failed,
a ResourceQuota that blocks the pod (by reason code and by quota arithmetic), a Running pod, and
the CLI's text and --json output with its exit code.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys

import pytest

from hami.device import codec
from hami.doctor.pod import diagnose
from hami.doctor.tree import REASON_ADVICE

from .conftest import doctor_args


async def run(kube, pod="default/p", **kw):
    return await diagnose(kube, doctor_args(pod=pod, **kw))


async def test_scheduler_not_running_from_a_stale_lease(cluster, kube):
    cluster.node("n1")
    cluster.lease(renewed_ago=600)
    cluster.pod("p")
    d = await run(kube)
    assert d.leaf == "scheduler-not-running"
    assert any("renewed 600s ago" in e or "renewed 599s ago" in e for e in d.evidence)
    assert "rollout restart" in d.fix


async def test_scheduler_not_running_from_healthz(cluster, kube):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # held bound and never listening: refused, and no other test can take it
    port = sock.getsockname()[1]
    cluster.node("n1")
    cluster.live_lease()  # the URL wins over the lease
    cluster.pod("p")
    try:
        d = await run(kube, scheduler_url=f"http://127.0.0.1:{port}")
    finally:
        sock.close()
    assert d.leaf == "scheduler-not-running"
    assert f"127.0.0.1:{port}/healthz" in d.evidence[0]


async def test_no_hami_resource(cluster, kube):
    cluster.live_lease()
    cluster.pod("p", gpu=None)
    d = await run(kube)
    assert d.leaf == "no-hami-resource"
    assert "nvidia.com/gpu" in d.fix


async def test_wrong_scheduler_name(cluster, kube):
    cluster.live_lease()
    cluster.pod("p", scheduler="default-scheduler")
    d = await run(kube)
    assert d.leaf == "wrong-scheduler-name"
    assert "spec.schedulerName=default-scheduler" in d.evidence


async def test_no_event_although_everything_is_right(cluster, kube):
    cluster.event("other", "FilteringSucceed", "find fit node(n1)")  # the scheduler is alive: it writes events
    cluster.pod("p")
    d = await run(kube)
    assert d.leaf == "no-event"
    assert "running" in d.evidence[0] and "-v=5" in d.fix


FILTER_CODES = sorted(set(REASON_ADVICE) - {"NodeUnfitPod", "ResourceQuotaNotFit"})


@pytest.mark.parametrize("code", FILTER_CODES)
async def test_filtering_failed_gives_advice_for_the_reason_code(cluster, kube, code):
    cluster.node("n1")
    cluster.pod("p")
    cluster.event("p", "FilteringFailed", f"1 nodes {code}(n1)", etype="Warning", age=20)
    cluster.event("p", "FilteringFailed", "no available node, 1 nodes do not meet", etype="Warning", age=19)
    d = await run(kube)
    assert d.leaf == "filtering-failed"
    assert d.fix.startswith(f"{code}: {REASON_ADVICE[code][0]} -> {REASON_ADVICE[code][1]}")


async def test_more_gpus_than_the_largest_node_is_never_fits_before_the_events(cluster, kube):
    # Before hami.doctor.neverfit this walked to filtering-failed/NodeInsufficientDevice; the request can
    # never fit, so the doctor now says that first, with the numbers.
    cluster.node("n1", gpus=2)
    cluster.pod("p", gpu=4)
    cluster.event("p", "FilteringFailed", "no available node, 1 nodes do not meet", etype="Warning")
    d = await run(kube)
    assert d.leaf == "never-fits"
    assert "asks for 4 GPUs; the largest node registers 2" in d.summary
    assert d.fix.startswith("ask for at most 2 GPUs per container")


async def test_node_register_annotation_missing(cluster, kube):
    cluster.node("n1", register=False)
    cluster.pod("p")
    cluster.event("p", "FilteringFailed", "1 nodes NodeUnfitPod(n1)", etype="Warning")
    d = await run(kube)
    assert d.leaf == "node-register-missing"
    assert f"nodes without {codec.REGISTER_ANNOTATION}: n1" in d.evidence


async def test_handshake_stale(cluster, kube):
    cluster.node("n1", handshake_age=600, allocatable=0)
    cluster.node("n2")
    cluster.pod("p")
    cluster.event("p", "FilteringFailed", "no available node, 2 nodes do not meet", etype="Warning")
    d = await run(kube)
    assert d.leaf == "handshake-stale"
    assert any(e.startswith("node n1 hami.io/node-handshake=Requesting_") for e in d.evidence)
    assert not any("node n2" in e for e in d.evidence)


async def test_binding_failed_from_lock_contention_names_the_holder(cluster, kube):
    lock = codec.encode_node_lock(cluster.now - 30, "team", "holder-pod")
    cluster.node("n1", lock=lock)
    cluster.pod("p", annotations={codec.VGPU_NODE_ANNOTATION: "n1"})
    cluster.event("p", "FilteringSucceed", "find fit node(n1), 0 nodes not fit, 1 nodes fit(n1:1.00)", age=30)
    cluster.event("p", "BindingFailed", "node n1 has been locked within 5m0s: node lock contention "
                  "(held by team/holder-pod)", etype="Warning", age=29)
    d = await run(kube)
    assert d.leaf == "binding-lock-contention"
    assert any(e.startswith("node n1 lock holder team/holder-pod") for e in d.evidence)


async def test_binding_failed_from_an_api_error(cluster, kube):
    cluster.node("n1")
    cluster.pod("p", annotations={codec.VGPU_NODE_ANNOTATION: "n1"})
    cluster.event("p", "BindingFailed", "500 InternalError: etcdserver: request timed out", etype="Warning")
    d = await run(kube)
    assert d.leaf == "binding-api-error"
    assert "etcd" in d.fix


async def test_filtering_succeed_but_still_pending(cluster, kube):
    cluster.node("n1")
    cluster.pod("p")
    cluster.event("p", "FilteringSucceed", "find fit node(n1), 0 nodes not fit, 1 nodes fit(n1:1.00)")
    cluster.event("p", "FailedScheduling", "0/1 nodes are available: 1 node(s) had untolerated taint",
                  component="default-scheduler", etype="Warning")
    d = await run(kube)
    assert d.leaf == "filter-succeed-pending"
    assert any("untolerated taint" in e for e in d.evidence)


async def test_bind_phase_failed_means_allocate_failed_on_the_node(cluster, kube):
    cluster.node("n1")
    cluster.pod("p", annotations={codec.BIND_PHASE_ANNOTATION: "failed", codec.VGPU_NODE_ANNOTATION: "n1"})
    cluster.event("p", "BindingSucceed", "Successfully binding node [n1] to default/p")
    d = await run(kube)
    assert d.leaf == "allocate-failed"
    assert "n1" in d.summary and "node agent log on n1" in d.fix


async def test_resource_quota_by_reason_code(cluster, kube):
    cluster.node("n1")
    cluster.pod("p")
    cluster.quota("gpu-quota", {"limits.nvidia.com/gpumem": 8000}, {"limits.nvidia.com/gpumem": 8000})
    cluster.event("p", "FilteringFailed", "1 nodes ResourceQuotaNotFit(n1)", etype="Warning")
    d = await run(kube)
    assert d.leaf == "resource-quota"


async def test_resource_quota_by_arithmetic_when_no_code_is_given(cluster, kube):
    cluster.node("n1")
    cluster.pod("p", gpu=1, mem=4000)
    cluster.quota("gpu-quota", {"limits.nvidia.com/gpumem": 10000}, {"limits.nvidia.com/gpumem": 8000})
    cluster.event("p", "FilteringFailed", "no available node, 1 nodes do not meet", etype="Warning")
    d = await run(kube)
    assert d.leaf == "resource-quota"
    assert d.evidence[-1] == "ResourceQuota gpu-quota: limits.nvidia.com/gpumem used 8000 + 4000 > hard 10000"


async def test_running_pod_is_fine(cluster, kube, apiserver):
    cluster.node("n1")
    pod = cluster.pod("p", node_name="n1")
    apiserver.store.update("pods", "default", "p", {**pod, "status": {"phase": "Running"}}, subresource="status")
    d = await run(kube)
    assert d.leaf == "not-pending"


async def test_cli_prints_text_and_json_with_exit_code(cluster, apiserver):
    cluster.live_lease()
    cluster.pod("p", scheduler="other")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    base = [sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/p", "--kubeconfig", apiserver.kubeconfig]
    for extra in ([], ["--json"]):
        proc = await asyncio.create_subprocess_exec(*base, *extra, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 1, err.decode()
        if extra:
            doc = json.loads(out)
            assert doc["leaf"] == "wrong-scheduler-name" and doc["pod"] == "default/p"
            assert doc["evidence"] and doc["fix"] and doc["path"]
        else:
            text = out.decode()
            assert text.startswith("pod default/p: wrong-scheduler-name\n")
            assert "  evidence:\n" in text and "  fix: set spec.schedulerName: hami-scheduler" in text


async def test_cli_unknown_pod_exits_2_naming_it(apiserver):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hami.cli.main", "doctor", "pod", "default/ghost", "--kubeconfig", apiserver.kubeconfig,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert err.decode().startswith("hami doctor pod: default/ghost: 404")
