"""hami.sim.workload: the demo's pod mix is deterministic, and `summarize` counts phases and the
GPU memory in `hami.io/vgpu-devices-allocated` (through the codec; a damaged annotation counts none)."""

from hami.device import codec
from hami.device.model import ContainerDevice
from hami.sim.workload import SHAPES, sample_pod, summarize


def _pod(phase: str, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "status": {"phase": phase}}


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
        _pod("Succeeded", {codec.ALLOCATED_ANNOTATION: allocated}),
        _pod("Running", {codec.ALLOCATED_ANNOTATION: "GPU-x,NVIDIA,not-a-number,0:;"}),
    ]
    assert summarize(pods) == {"running": 2, "pending": 1, "failed": 1, "gpumem_mib": 2 * 4500}
