"""The UI's pure parts: the cluster view, the metrics parsers and the HTML escaping.

Covers: slices are counted only for pods hami placed (bound to the node their vgpu-node names; a pending
pod's hand-written annotations count nothing), with the monitor's use per slice; totals (registered,
allocated, used of the measured allocation); pending GPU pods grouped by the reason codes of their
FilteringFailed events; GPUs by model; quota rows; the exposition and Prometheus-answer parsers (and,
by hypothesis, that any text either parses or raises MetricsError); every page escapes hostile text from
annotations, event messages, reasons and names.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hami.ui import render
from hami.ui.metrics import MetricsError, parse_exposition, parse_query
from hami.ui.view import MIB, cluster_view, quota_rows

from .helpers import MODEL, filter_failed, node, pod

HOSTILE = '<script>alert("x")</script>'


def test_slices_only_for_placed_pods_with_their_use():
    pods = [pod("a", node="n1", card=0, mem=4000), pod("b", node="n1", card=1, mem=8000, cores=50),
            pod("squat", vgpu_node="n1", card=0, mem=40960),  # pending, annotations written by hand
            pod("done", node="n1", card=0, mem=9999, phase="Succeeded")]
    v = cluster_view([node("n1"), node("n2")], pods, usage={("default", "a", "GPU-n1-0"): 1000 * MIB})
    (n1, n2) = v.nodes
    assert [len(c.slices) for c in n1.cards] == [1, 1] and not any(c.slices for c in n2.cards)
    assert n1.cards[0].slices[0].used_bytes == 1000 * MIB and n1.cards[1].slices[0].used_bytes is None
    t = v.totals()
    assert (t["gpus"], t["mem_registered"], t["mem_allocated"], t["cores_allocated"]) == (4, 4 * 40960, 12000, 80)
    assert (t["measured_slices"], t["mem_allocated_measured"], t["mem_used"]) == (1, 4000, 1000)
    assert v.models == {MODEL: (2, 4)}


def test_pending_gpu_pods_by_reason_code():
    pods = [pod("w1"), pod("w2"), pod("cpu-only")]
    pods[2]["spec"]["containers"][0]["resources"] = {}
    events = [filter_failed("w1", "2 nodes CardInsufficientMemory(n1,n2)"),
              filter_failed("w2", "1 nodes CardInsufficientCore(n1)"), filter_failed("w2", "1 nodes NodeUnfitPod(n2)")]
    v = cluster_view([node("n1")], pods, events)
    assert [(p.name, p.reasons) for p in v.pending] == [("w1", ("CardInsufficientMemory",)),
                                                         ("w2", ("CardInsufficientCore", "NodeUnfitPod"))]
    assert v.pending_by_reason() == {"CardInsufficientMemory": 1, "CardInsufficientCore": 1, "NodeUnfitPod": 1}


def test_quota_rows_keep_gpu_quotas_only():
    q = [{"metadata": {"namespace": "ml", "name": "gpu"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
          "status": {"used": {"limits.nvidia.com/gpumem": "4000"}}},
         {"metadata": {"namespace": "x", "name": "cpu"}, "spec": {"hard": {"cpu": "4"}}}]
    assert quota_rows(q) == [("ml", "gpu", "4000", "20000", "0", "-")]


EXPO = """# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{namespace="default",pod="a",container="c",vdevice_index="0",device_uuid="GPU-1",\
zone="vGPU"} 1048576
# TYPE hami_gpu_temperature_celsius gauge
hami_gpu_temperature_celsius{node="n",device_index="0",device_uuid="GPU-1",device_type="A100"} 41
# TYPE hami_gpu_power_usage_watts gauge
hami_gpu_power_usage_watts{node="n",device_index="0",device_uuid="GPU-1",device_type="A100"} 82.5
"""


def test_parsers_read_the_monitor_and_prometheus():
    f = parse_exposition(EXPO, "m")
    assert f.usage == {("default", "a", "GPU-1"): 1048576} and f.health == {"GPU-1": (41.0, 82.5)}
    doc = {"status": "success", "data": {"result": [
        {"metric": {"namespace": "default", "pod": "a", "device_uuid": "GPU-1"}, "value": [0, "2048"]}]}}
    assert parse_query(doc, "p").usage == {("default", "a", "GPU-1"): 2048}
    for bad in ({"status": "error"}, {"status": "success", "data": {"result": [{"metric": {}}]}}, []):
        try:
            parse_query(bad, "p")
            raise AssertionError("accepted")
        except MetricsError as exc:
            assert str(exc).startswith("p: ")


@given(st.text(max_size=300))
def test_any_text_parses_or_raises_metrics_error(text):
    try:
        parse_exposition(text, "src")
    except MetricsError as exc:
        assert str(exc).startswith("src: ")


def test_every_page_escapes_hostile_text():
    n = node("n1")
    p = pod("a", node="n1", annotations={"x": HOSTILE})
    p["metadata"]["namespace"] = HOSTILE  # impossible on a real API server: the page must not care
    ev = filter_failed("w", f"1 nodes {HOSTILE}(n1)")
    v = cluster_view([n], [p, pod("w")], [ev])
    pages = [render.cluster_page(v, sources=[HOSTILE], errors=[HOSTILE]), render.node_page(v.nodes[0]),
             render.pod_page(p, [], [ev], None, {HOSTILE: HOSTILE}), render.not_found(HOSTILE),
             render.quotas_page([(HOSTILE,) * 6]),
             render.whatif_page({"at": HOSTILE, "seconds": 1.0, "baseline": {"placed": 0, "pending": 1},
                                 "suggestions": [{"change": HOSTILE, "placed": 1, "pending": 0, "gained": 1,
                                                  "tradeoff": HOSTILE}]}, running=False, wait=0)]
    for text in pages:
        assert "<script>alert" not in text and "<script>" not in text.replace("<script src='/static/ui.js'>", "")
    assert "&lt;script&gt;" in pages[0] and "&lt;script&gt;" in pages[3]


def _slice(node_name: str):
    from hami.dra.slices import build_slice, gpu_device
    from hami.gpu.backend import GpuInfo

    gpu = GpuInfo(index=0, uuid=f"GPU-{node_name}-0", name="NVIDIA H100", memory_total_mib=81920)
    return build_slice(node_name, [gpu_device(gpu, 81920)], 1)


def _claim(name: str, node_name: str, memory: str | None, cores: str | None) -> dict:
    result = {"request": "gpu", "driver": "hami-core-gpu.project-hami.io", "pool": node_name, "device": "hami-gpu-0"}
    used = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if used:
        result["consumedCapacity"] = used
    return {"metadata": {"name": name, "namespace": "ml"},
            "status": {"allocation": {"devices": {"results": [result]}},
                       "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": "u"}]}}


def test_dra_devices_show_what_each_claim_consumes():
    from hami.ui.draview import dra_devices

    devices = dra_devices([_slice("n1")], [_claim("a", "n1", "4000Mi", "30"), _claim("b", "n1", "8Gi", None),
                                           {"metadata": {"name": "pending"}, "status": {}}])
    (d,) = devices
    assert (d.node, d.name, d.uuid, d.memory_bytes, d.cores) == ("n1", "hami-gpu-0", "GPU-n1-0", 81920 * MIB, 100)
    assert [(s.claim, s.pods, s.memory_bytes, s.cores) for s in d.shares] == [
        ("ml/a", ("a-pod",), 4000 * MIB, 30), ("ml/b", ("b-pod",), 8 << 30, 100)]  # no cores consumed: all
    assert d.memory_allocated == 4000 * MIB + (8 << 30)
    page = render.cluster_page(cluster_view([], []), devices)
    assert "DRA devices" in page and "claim ml/a" in page and "/pod/ml/a-pod" in page


def test_mig_layout_shows_the_instances_pods_hold():
    from hami.device import codec
    from hami.device.codec.mig import MigAllocation
    from hami.device.model import DeviceInfo, MigPlacement, MigProfile

    profiles = (MigProfile("1g.10gb", 9856, 14, 1, tuple(MigPlacement(i, 1) for i in range(7))),
                MigProfile("3g.40gb", 39424, 42, 3, (MigPlacement(0, 4), MigPlacement(4, 4))))
    dev = DeviceInfo(id="GPU-m", count=7, devmem=81920, devcore=100, type="H100", index=0, mode="mig", health=True,
                     mig_profiles=profiles)
    n = {"metadata": {"name": "m1", "annotations": {codec.REGISTER_ANNOTATION: codec.encode_node_devices([dev])}},
         "status": {"allocatable": {"nvidia.com/gpu": "7"}}}
    mig = codec.encode_mig_allocations([MigAllocation(0, 0, "GPU-m", "3g.40gb", MigPlacement(4, 4))])
    p = pod("mig-pod", node="m1", mem=39424, annotations={codec.MIG_ALLOCATIONS_ANNOTATION: mig})
    p["metadata"]["annotations"][codec.ALLOCATED_ANNOTATION] = "GPU-m,NVIDIA,39424,42:;"
    p["metadata"]["annotations"][codec.TO_ALLOCATE_ANNOTATION] = "GPU-m,NVIDIA,39424,42:;"
    (card,) = cluster_view([n], [p]).nodes[0].cards
    assert card.mig_slices == 8 and card.mig_instances == ((4, 4, "3g.40gb", "default/mig-pod"),)
    html = render.mig_layout(card)
    assert html.count("<rect") == 9 and "3g.40gb -> default/mig-pod (slices 4..7)" in html
    assert "MIG layout" in render.node_page(cluster_view([n], [p]).nodes[0])


def test_the_pod_page_says_which_gpu_mode_the_pod_got_and_escapes_it():
    from hami.doctor.tree import Diagnosis

    d = Diagnosis(pod="ns/p", leaf="dra-unallocatable", summary="s", evidence=(), fix="f", path=(),
                  setup=("DRA: 1 ResourceSlice(s)", f"GPU mode dra: namespace ns has the label {HOSTILE}"))
    text = render.pod_page(pod("p"), [], [], d, {})
    assert "GPU mode dra: namespace ns has the label &lt;script&gt;" in text
    assert "DRA: 1 ResourceSlice(s)" not in text


def test_a_rebuild_reads_only_what_changed_and_formats_only_the_changed_nodes_rows():
    from hami.ui.render import NodeRows, cluster_page
    from hami.ui.view import ViewMemo

    nodes = [node(f"n{i}") for i in range(4)]
    pods = [pod(f"p{i}", node=f"n{i % 4}", card=i % 2, mem=1000 + i) for i in range(12)] + [pod("w")]
    memo, rows = ViewMemo(), NodeRows()
    first = cluster_view(nodes, pods, now=100.0, memo=memo)
    cluster_page(first, node_rows=rows)
    reads, builds, formatted = memo.reads, memo.card_builds, rows.built
    assert (reads, builds, formatted) == (17, 4, 4)
    pods[5] = pod("p5", node="n1", card=1, mem=9000)  # the watch's new object: p5 takes more of n1's card 1
    again = cluster_view(nodes, pods, now=100.0, memo=memo)
    page = cluster_page(again, node_rows=rows)
    assert (memo.reads - reads, memo.card_builds - builds, rows.built - formatted) == (1, 1, 1)
    assert again == cluster_view(nodes, pods, now=100.0)  # what a build from nothing gives
    assert page.split("<footer")[0] == cluster_page(cluster_view(nodes, pods, now=100.0)).split("<footer")[0]


def test_a_kept_view_equals_a_build_from_nothing_after_any_changes():
    import random

    from hami.ui.view import ViewMemo

    rng = random.Random(7)
    nodes = {f"n{i}": node(f"n{i}") for i in range(5)}
    pods = {f"p{i}": pod(f"p{i}", node=f"n{i % 5}", card=i % 2, mem=500 + i) for i in range(20)}
    memo = ViewMemo()
    usage: dict = {}
    for step in range(60):
        kind = rng.choice(("add", "delete", "move", "node", "usage", "pending"))
        name = f"p{rng.randrange(30)}"
        if kind == "add" or kind == "move":
            pods[name] = pod(name, node=f"n{rng.randrange(5)}", card=rng.randrange(2), mem=rng.randrange(100, 9000))
        elif kind == "delete":
            pods.pop(name, None)
        elif kind == "node":
            n = f"n{rng.randrange(6)}"
            nodes[n] = node(n, gpus=rng.choice((1, 2, 3)))
        elif kind == "usage":
            usage = {("default", name, f"GPU-n{rng.randrange(5)}-{rng.randrange(2)}"): rng.randrange(1 << 30)}
        else:
            pods[name] = pod(name)
        kept = cluster_view(list(nodes.values()), list(pods.values()), usage=usage, now=50.0, memo=memo)
        assert kept == cluster_view(list(nodes.values()), list(pods.values()), usage=usage, now=50.0), step
