"""Simulated nodes of other vendors: `--sim-gpus` names a vendor row (or a prefix of one), `;`
gives per-node groups; a vendor node registers as that vendor's HAMi device plugin would (read
back by the scheduler's own decoders); a pod bound to a vendor-only node runs, its bind phase
success and the node lock released, as the vendor plugin does after Allocate."""

from __future__ import annotations

import asyncio

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.codec import ascend as ascend_codec
from hami.device.vendorregister import decode_one
from hami.sim.cluster import GpuShape, fake_gpu_document, parse_sim_gpu_groups
from hami.sim.kubelet.vendornodes import VendorPodRunner, vendor_for_model, vendor_registration
from tests.kube.helpers import client_for, eventually, node_obj, pod_obj

TABLE = default_vendor_table()


def test_models_name_vendor_rows_exactly_or_by_prefix():
    assert vendor_for_model("Ascend910B3", TABLE).name == "Ascend910B3"
    assert vendor_for_model("Ascend910B", TABLE).name == "Ascend910B2"  # first 910B row of the table
    assert vendor_for_model("MLU", TABLE).name == "MLU"
    assert vendor_for_model("NVIDIA A100-SXM4-40GB", TABLE) is None
    assert vendor_for_model("NVIDIA", TABLE) is None  # NVIDIA's row is our own agent's


def test_groups_go_to_nodes_in_turn():
    groups = parse_sim_gpu_groups("2xNVIDIA A100-SXM4-40GB:40960; 2xAscend910B3:65536 ,1xMLU:24576")
    assert groups == [[GpuShape(2, "NVIDIA A100-SXM4-40GB", 40960)],
                      [GpuShape(2, "Ascend910B3", 65536), GpuShape(1, "MLU", 24576)]]
    doc = fake_gpu_document(["a", "b", "c"], [groups[0], []])
    assert [len(doc["nodes"][n]["gpus"]) for n in "abc"] == [2, 0, 2]


def test_vendor_registration_reads_back_through_the_scheduler_decoders():
    asc, mlu, dcu = TABLE.get("Ascend910B3"), TABLE.get("MLU"), TABLE.get("DCU")
    annos, capacity = vendor_registration("n2", 2, [(asc, 2, 65536), (mlu, 2, 24576), (dcu, 1, 16384)])
    devices = decode_one(asc, "n2", annos, capacity)
    assert [(d.id, d.count, d.devmem, d.type, d.index, d.vendor) for d in devices] == [
        ("Ascend910B3-0002-0000", 4, 65536, "Ascend910B3", 0, "Ascend910B3"),
        ("Ascend910B3-0002-0001", 4, 65536, "Ascend910B3", 1, "Ascend910B3")]
    assert capacity["huawei.com/Ascend910B3"] == "2"
    # Byte-exact: what the plugin writes is what our encoder writes for what we decoded.
    assert codec.encode_node_devices(d for d in devices) == annos["hami.io/node-register-Ascend910B3"]
    assert [d.custom_info for d in devices] == ['{"NetworkID":0}'] * 2
    cards = decode_one(mlu, "n2", annos, capacity)
    assert [(d.id, d.devmem, d.devcore) for d in cards] == [("n2-cambricon-mlu-0", 24576, 100),
                                                            ("n2-cambricon-mlu-1", 24576, 100)]
    assert "cambricon" not in "".join(annos)  # Cambricon's plugin writes no annotation
    [dc] = decode_one(dcu, "n2", annos, capacity)
    assert (dc.type, dc.devmem, dc.count) == ("DCU", 16384, 10)
    assert annos["hami.io/node-dcu-register"].endswith(":")  # the legacy colon form


def test_simulated_910_npus_carry_the_plugins_network_ids():
    """The Ascend plugin's getDeviceNetworkID: NPUs 0-3 on network 0, 4+ on 1; every 910C NPU on 0;
    non-910 chips (310P) register no custominfo."""
    for name, want in (("Ascend910B3", [0, 0, 0, 0, 1, 1]), ("Ascend910C", [0] * 6), ("Ascend310P", None)):
        v = TABLE.get(name)
        annos, capacity = vendor_registration("n", 1, [(v, 6, 65536)])
        devices = decode_one(v, "n", annos, capacity)
        got = ascend_codec.network_ids(devices)
        assert got == (None if want is None else {d.id: w for d, w in zip(devices, want, strict=True)}), name


async def test_vendor_node_runs_bound_pods_and_releases_the_lock(apiserver):
    store = apiserver.store
    node = node_obj("npu-1", 0, registered=False)
    node["metadata"]["annotations"][codec.NODE_LOCK_ANNOTATION] = "2026-11-25T03:00:00Z,default,p"
    node["metadata"]["annotations"]["cambricon.com/dsmlu.lock"] = "2026-11-25T03:00:00Z"
    store.create("nodes", "", node)
    pod = pod_obj("p", gpus=0)
    pod["spec"]["nodeName"] = "npu-1"
    store.create("pods", "default", pod)
    client = await client_for(apiserver.kubeconfig)
    stop = asyncio.Event()
    runner = VendorPodRunner(client, "npu-1", own_locks=("cambricon.com/dsmlu.lock",))
    task = asyncio.create_task(runner.run(stop))
    try:
        await eventually(lambda: (store.get("pods", "default", "p").get("status") or {}).get("phase") == "Running")
        p = store.get("pods", "default", "p")
        assert p["metadata"]["annotations"][codec.BIND_PHASE_ANNOTATION] == "success"
        left = store.get("nodes", "", "npu-1")["metadata"].get("annotations", {})
        assert codec.NODE_LOCK_ANNOTATION not in left and "cambricon.com/dsmlu.lock" not in left
    finally:
        stop.set()
        await task
        await client.close()


def test_every_vendor_row_registers_a_simulated_node_the_scheduler_reads_back():
    """`--sim-gpus 2x<row>` for every row of the table: the node carries what that vendor's
    plugin writes (annotation or capacity) and the scheduler's decoder finds two devices (Neuron:
    two devices of two cores; Kunlunxin, MetaX GPU, Enflame GCU: cards counted by capacity)."""
    for v in TABLE.others:
        annos, capacity = vendor_registration("sim-n", 1, [(v, 2, 16384)])
        devices = decode_one(v, "sim-n", annos, capacity)
        assert len(devices) == 2, v.name
        assert all(d.vendor == v.name and d.health for d in devices), v.name
