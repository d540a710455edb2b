"""`hami doctor pod` says first when a request can never fit the cluster (hami.doctor.neverfit).

Covers: the pure check for GPU count, memory per GPU, cores per GPU, and "enough large cards on one
node"; requests that fit an idle cluster and nodes without registration give no verdict; the doctor's
`never-fits` leaf in the embedded API server for memory (with over-commit named and its risk), cores and
GPU count, ahead of any event-based leaf; whatif's memory-scaling suggestion carries the over-commit word.
"""

from __future__ import annotations

from hami.device.model import PERCENTAGE_UNSET, ContainerDeviceRequest, DeviceInfo
from hami.doctor.neverfit import never_fits
from hami.doctor.pod import diagnose
from hami.whatif.suggest import wording

from .conftest import doctor_args


def cards(*mems: int, cores: int = 100) -> list[DeviceInfo]:
    return [DeviceInfo(id=f"GPU-{i}", count=10, devmem=m, devcore=cores, type="NVIDIA", index=i)
            for i, m in enumerate(mems)]


def req(nums=1, mem=0, cores=0, pct=PERCENTAGE_UNSET) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums=nums, memreq=mem, mempercentagereq=pct, coresreq=cores)


NODES = {"a": cards(40960, 40960), "b": cards(81920)}


def test_memory_beyond_the_largest_card_never_fits_and_names_both_numbers():
    v = never_fits([req(mem=90000)], NODES)
    assert v is not None and v.what == "memory" and v.container == 0
    assert "90000 MiB" in v.line and "81920 MiB" in v.line and "never fit" in v.line
    assert "over-commit" in v.fix and "run out of memory" in v.fix and "1.10" in v.fix


def test_more_gpus_than_any_node_never_fits():
    v = never_fits([None, req(nums=3)], NODES)
    assert v is not None and (v.what, v.container) == ("gpus", 1) and "largest node registers 2" in v.line


def test_cores_beyond_what_a_card_registers_never_fit():
    v = never_fits([req(cores=150)], NODES)
    assert v is not None and v.what == "cores" and "150" in v.line and "100" in v.line


def test_two_large_cards_on_one_node_are_needed_together():
    v = never_fits([req(nums=2, mem=50000)], NODES)  # b has one 80 GiB card, a has two of 40 GiB
    assert v is not None and v.what == "gpus" and "the best has 1" in v.line


def test_requests_that_fit_an_idle_cluster_get_no_verdict():
    assert never_fits([req(nums=2, mem=40960, cores=100), req(mem=81920), req(pct=100)], NODES) is None
    assert never_fits([req(mem=10**6)], {"unregistered": []}) is None  # registration is another branch


async def test_doctor_pod_memory_never_fits_comes_first(cluster, kube):
    cluster.node("n1")  # 2 x 40960 MiB
    cluster.live_lease()
    cluster.pod("p", mem=50000)
    cluster.event("p", "FilteringFailed", "no available node, 1 nodes do not meet: n1: CardInsufficientMemory")
    d = await diagnose(kube, doctor_args(pod="default/p"))
    assert d.leaf == "never-fits"
    assert "50000 MiB" in d.summary and "40960 MiB" in d.summary
    assert "over-commit" in d.fix


async def test_doctor_pod_gpu_count_and_cores_never_fit(cluster, kube):
    cluster.node("n1")
    cluster.live_lease()
    cluster.pod("many", gpu=3)
    d = await diagnose(kube, doctor_args(pod="default/many"))
    assert d.leaf == "never-fits" and "3 GPUs" in d.summary and "registers 2" in d.summary
    spec = cluster.pod("hot", mem=1000)["spec"]
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "120"
    cluster.store.delete("pods", "default", "hot")  # a pod's resources are immutable: a new pod asks for them
    cluster.store.create("pods", "default", {"metadata": {"name": "hot"}, "spec": spec})
    d = await diagnose(kube, doctor_args(pod="default/hot"))
    assert d.leaf == "never-fits" and "120 cores" in d.summary


def test_whatif_memory_scaling_suggestion_says_over_commit():
    assert "over-commit" in wording("deviceMemoryScaling 1 -> 2")
    assert "over-commit" not in wording("deviceMemoryScaling 2 -> 1")
    assert wording("deviceSplitCount 10 -> 2") == "deviceSplitCount were 2"


def test_doctor_nodes_explains_the_handshake_values_it_shows():
    from hami.doctor.tree import NodeHealth, render_nodes

    row = NodeHealth(name="n1", gpu_node=True, register="ok (2 GPUs)", hami_core="-",
                     handshake="Requesting_2026-11-26 10:00:00", handshake_age=5.0, lock_holder="-",
                     lock_age=None, schedulable_gpus=2, healthy=True, problems=(), vendors=())
    text = render_nodes([row])
    assert "Requesting_<time>" in text and "60 s old" in text
    assert "Deleted_<time>" not in text  # only the values the table shows are explained
