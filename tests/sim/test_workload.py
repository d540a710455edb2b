"""hami.sim.workload: the demo's pod mix is deterministic, and `summarize` counts phases and the
GPU memory in `hami.io/vgpu-devices-allocated` (through the codec; a damaged annotation counts none)
and, in DRA mode, the memory the demo pods' claims hold."""

import asyncio
import io

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.sim.workload import SHAPES, run_workload, sample_pod, summarize
from tests.kube.helpers import client_for


def _pod(phase: str, annotations: dict | None = None, shape: str = "small") -> dict:
    return {"metadata": {"name": "p", "annotations": annotations or {}, "labels": {"hami-demo/shape": shape}},
            "status": {"phase": phase}}


def test_sample_pod_cycles_through_the_shapes():
    names = [sample_pod(i, "hami-scheduler")["metadata"]["labels"]["hami-demo/shape"] for i in range(len(SHAPES) + 1)]
    assert names[:-1] == [s for s, _ in SHAPES] and names[-1] == SHAPES[0][0]
    assert sample_pod(3, "x")["spec"]["schedulerName"] == "x"


def test_summarize_counts_phases_and_allocated_memory():
    allocated = codec.encode_pod_devices((
        (ContainerDevice("GPU-a", "NVIDIA", 3000, 30, 0), ContainerDevice("GPU-b", "NVIDIA", 1000, 10, 1)),
        (),
        (ContainerDevice("GPU-c", "NVIDIA", 500, 0, 0),),
    ))
    pods = [
        _pod("Running", {codec.ALLOCATED_ANNOTATION: allocated}),
        _pod("Pending", {codec.BIND_PHASE_ANNOTATION: "failed", codec.ALLOCATED_ANNOTATION: allocated}),
        _pod("Pending"),
        _pod("Pending", shape="huge-mem"),
        _pod("Running", shape="too-many"),
        _pod("Succeeded", {codec.ALLOCATED_ANNOTATION: allocated}),
        _pod("Running", {codec.ALLOCATED_ANNOTATION: "GPU-x,NVIDIA,not-a-number,0:;"}),
    ]
    assert summarize(pods) == {"running": 3, "pending": 2, "never_fits": 1, "failed": 1,
                               "gpumem_mib": 2 * 4500}


def test_summarize_counts_the_memory_dra_claims_hold():
    """DRA mode: the claims reserved by running or pending demo pods, from consumedCapacity."""
    running, gone = _pod("Running"), _pod("Succeeded")
    running["metadata"]["uid"], gone["metadata"]["uid"] = "u1", "u2"

    def claim(uid, mib):
        return {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": uid}], "allocation": {"devices": {
            "results": [{"consumedCapacity": {"memory": str(mib << 20), "cores": "10"}}]}}}}
    assert summarize([running, gone], [claim("u1", 3000), claim("u2", 500), {"status": {}}])["gpumem_mib"] == 3000


async def test_the_demo_line_tells_pods_that_never_fit_from_pods_that_wait_and_points_at_doctor(apiserver):
    client = await client_for(apiserver.kubeconfig)
    out, stop = io.StringIO(), asyncio.Event()
    try:
        task = asyncio.create_task(run_workload(client, "hami-scheduler", stop, interval=0.01, limit=len(SHAPES),
                                                out=out))
        for _ in range(500):
            if "Why is a pod pending?" in out.getvalue():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # ~20 more rounds with nothing changing
        stop.set()
        assert await task == len(SHAPES)
    finally:
        await client.close()
    lines = out.getvalue().splitlines()
    # nothing schedules here: every pod is pending, two of them the shapes that can never fit
    assert f"demo: {len(SHAPES)} submitted | running 0 | pending {len(SHAPES)} (2 never fit by design, " \
           f"{len(SHAPES) - 2} wait for room) | failed 0 | GPU memory allocated 0 MiB" in lines
    assert f"demo: all {len(SHAPES)} submitted. Why is a pod pending? hami doctor pod default/demo-huge-mem-6" in lines
    assert sum("Why is a pod pending?" in ln for ln in lines) == 1
    settled = [ln for ln in lines if ln.startswith(f"demo: {len(SHAPES)} submitted")]
    assert len(settled) == 1  # the settled line is printed once, not every round
