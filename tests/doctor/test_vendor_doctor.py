"""`hami doctor` on other vendors' nodes and pods (pure decision modules, no I/O).

`doctor nodes` shows each vendor's registration and handshake under its own keys, counts its
devices as schedulable, and names the key of a registration that does not decode; `doctor pod`
explains a vendor pod's FilteringFailed in that vendor's words with a fix: no node registers the
vendor, its registration is unreadable, or a reason code (Ascend's vNPU templates, Cambricon's
256 MiB units and default whole-card cores); a pod asking for NVIDIA and another vendor is checked
on both sides and needs one node with both."""

from __future__ import annotations

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.model import DeviceInfo
from hami.doctor.tree import (
    EventFact,
    NodeFacts,
    PodFacts,
    SchedulerFact,
    diagnose_pod,
    node_health,
    render_nodes,
)

TABLE = default_vendor_table()
NOW = 1_800_000_000.0
ASC = "Ascend910B3"


def ascend_node(name: str, cards: int = 2, register: str | None = None, handshake_age: float = 5,
                allocatable: int = 2) -> NodeFacts:
    text = register if register is not None else codec.encode_node_devices(
        DeviceInfo(id=f"{name}-{i}", count=4, devmem=65536, devcore=100, type=ASC, index=i, health=True)
        for i in range(cards))
    annos = {f"hami.io/node-register-{ASC}": text,
             f"hami.io/node-handshake-{ASC}": codec.encode_handshake_requesting(NOW - handshake_age, None)}
    return NodeFacts(name, annos, labels={"gpu": "on"}, allocatable={f"huawei.com/{ASC}": str(allocatable)},
                     capacity={f"huawei.com/{ASC}": str(cards)})


def mlu_node(name: str) -> NodeFacts:
    cap = {"cambricon.com/mlu.smlu.vcore": "200", "cambricon.com/mlu.smlu.vmemory": "96"}
    return NodeFacts(name, {}, labels={"gpu": "on"}, capacity=cap, allocatable=cap)


def test_nodes_table_shows_each_vendor_registration_and_handshake():
    rows = [node_health(n, NOW, vendors=TABLE) for n in (ascend_node("npu"), mlu_node("mlu"))]
    npu, mlu = rows
    assert (npu.healthy, npu.schedulable_gpus, npu.register) == (True, 2, f"- ({ASC})")
    assert npu.vendors[0].startswith(f"{ASC}: register ok (2 devices) (hami.io/node-register-{ASC}); "
                                     f"handshake hami.io/node-handshake-{ASC}=Requesting_")
    assert (mlu.healthy, mlu.schedulable_gpus) == (True, 2)
    assert mlu.vendors == ("MLU: register ok (2 devices) (capacity cambricon.com/mlu.smlu.vcore)",)
    text = render_nodes(rows)
    assert f"npu: {ASC}: register ok" in text and "mlu: MLU: register ok" in text


def test_malformed_vendor_registration_names_the_key_and_stale_handshakes_show():
    bad = node_health(ascend_node("bad", register='[{"id":"x","count":"four"}]'), NOW, vendors=TABLE)
    assert not bad.healthy and bad.schedulable_gpus == 0
    assert bad.problems[0].startswith(f"invalid: hami.io/node-register-{ASC}: json: cannot unmarshal string")
    stale = node_health(ascend_node("old", handshake_age=600, allocatable=0), NOW, vendors=TABLE)
    assert not stale.healthy and stale.schedulable_gpus == 0
    assert any(p.startswith(f"hami.io/node-handshake-{ASC} stale") for p in stale.problems)


def _pod(limits: dict) -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def _facts(pod: dict, nodes, message: str = "no available node, 2 nodes do not meet") -> PodFacts:
    ev = EventFact("FilteringFailed", message, "Warning", "hami-scheduler", NOW - 3)
    return PodFacts(pod, [ev], SchedulerFact(True, "healthz ok"), nodes, now=NOW, vendors=TABLE)


def test_pod_for_an_unregistered_vendor_says_which_plugin_to_run():
    d = diagnose_pod(_facts(_pod({"cambricon.com/mlu": "1"}), [ascend_node("npu")]))
    assert d.leaf == "vendor-not-registered"
    assert d.summary == "no node registers MLU devices"
    assert "cambricon vendor's HAMi device plugin" in d.fix and "NVIDIA-only" in d.fix
    assert "no node has node capacity cambricon.com/mlu.smlu.vcore" in d.evidence


def test_pod_whose_vendor_registration_is_unreadable_points_at_the_key():
    d = diagnose_pod(_facts(_pod({f"huawei.com/{ASC}": "1"}), [ascend_node("bad", register="[")]))
    assert d.leaf == "vendor-register-invalid"
    assert f"hami.io/node-register-{ASC}" in d.fix
    assert d.evidence[-1].startswith(f"node bad: invalid: hami.io/node-register-{ASC}: ")


def test_vendor_reason_codes_are_explained_in_the_vendor_words():
    d = diagnose_pod(_facts(_pod({f"huawei.com/{ASC}": "1", f"huawei.com/{ASC}-memory": "30000"}),
                            [ascend_node("npu")], "1 nodes CardInsufficientMemory(npu)"))
    assert d.leaf == "filtering-failed"
    assert "vir05_1c_16g=16384, vir10_3c_32g=32768" in d.fix and f"huawei.com/{ASC}-memory" in d.fix
    d = diagnose_pod(_facts(_pod({"cambricon.com/mlu": "1"}), [mlu_node("mlu")],
                            "1 nodes ExclusiveDeviceAllocateConflict(mlu)"))
    assert "a container without cambricon.com/mlu.smlu.vcore asks for 100 (a whole card)" in d.fix
    d = diagnose_pod(_facts(_pod({f"huawei.com/{ASC}": "3"}), [ascend_node("npu")]))
    assert d.fix.startswith("NodeInsufficientDevice: the node has fewer Ascend910B3 devices")
    assert f"a container asks for 3 {ASC}, the largest {ASC} node has 2" in d.evidence


def _nvidia_node(name: str, register: bool = True, extra: dict | None = None) -> NodeFacts:
    annos = dict(extra or {})
    if register:
        annos[codec.REGISTER_ANNOTATION] = codec.encode_node_devices(
            [DeviceInfo(id=f"GPU-{name}", count=10, devmem=81920, devcore=100, type="NVIDIA A100", health=True)])
        annos[codec.HANDSHAKE_ANNOTATION] = codec.encode_handshake_requesting(NOW - 5, None)
    return NodeFacts(name, annos, allocatable_gpu=1, capacity_gpu=1, labels={"gpu": "on"})


MIXED = {"nvidia.com/gpu": "1", f"huawei.com/{ASC}": "1"}


def test_pod_asking_nvidia_and_another_vendor_needs_one_node_with_both():
    """No node registers NVIDIA and Ascend together: the pod can never fit as one piece."""
    d = diagnose_pod(_facts(_pod(MIXED), [_nvidia_node("nv"), ascend_node("npu")]))
    assert d.leaf == "vendor-mix-no-node"
    assert "NVIDIA and Ascend910B3" in d.summary and "split the pod" in d.fix
    assert f"no node registers NVIDIA and {ASC} together" in d.evidence


def test_pod_asking_nvidia_and_another_vendor_checks_nvidias_registration_too():
    """The Ascend side is fine, but an NVIDIA node has no registration: that is the finding."""
    mixed = ascend_node("mix")
    mixed = NodeFacts("mix", {**mixed.annotations, **_nvidia_node("mix").annotations}, allocatable_gpu=1,
                      capacity_gpu=1, labels=mixed.labels, capacity=mixed.capacity, allocatable=mixed.allocatable)
    d = diagnose_pod(_facts(_pod(MIXED), [mixed, _nvidia_node("nv2", register=False)]))
    assert d.leaf == "node-register-missing" and "nv2" in " ".join(d.evidence)
    d = diagnose_pod(_facts(_pod(MIXED), [mixed], message="no available node, 1/1 CardInsufficientMemory"))
    assert d.leaf == "filtering-failed"
    assert d.summary == f"no node fits the pod's NVIDIA and {ASC} request"
    assert "for the NVIDIA cards" in d.fix


def test_the_new_vendors_reason_codes_come_with_their_own_fix():
    """Ascend vNPU modes, Neuron/Kunlunxin device groups and MetaX QoS explained in their words."""
    d = diagnose_pod(_facts(_pod({f"huawei.com/{ASC}": "1"}), [ascend_node("npu")], "1 nodes ModeNotFit(npu)"))
    assert "hami-vnpu-core" in d.fix and "huawei.com/vnpu-mode" in d.fix
    neuron = NodeFacts("trn", {}, labels={"gpu": "on"},
                       capacity={"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"},
                       allocatable={"aws.amazon.com/neuron": "2"})
    d = diagnose_pod(_facts(_pod({"aws.amazon.com/neuron": "2"}), [neuron], "1 nodes NumaNotFit(trn)"))
    assert d.leaf == "filtering-failed" and "1, 4, 8 or 16 aws.amazon.com/neuron" in d.fix
    xpu = NodeFacts("xpu", {}, labels={"gpu": "on"}, capacity={"kunlunxin.com/xpu": "8"},
                    allocatable={"kunlunxin.com/xpu": "8"})
    d = diagnose_pod(_facts(_pod({"kunlunxin.com/xpu": "3"}), [xpu], "1 nodes NumaNotFit(xpu)"))
    assert "ask for 1, 2, 4 or 8 kunlunxin.com/xpu" in d.fix
    sgpu = NodeFacts("mx", {"metax-tech.com/node-gpu-devices": '[{"uuid":"GPU-a","totalDevCount":16,'
                                                               '"totalCompute":100,"totalVRam":32768,"healthy":true}]'},
                     labels={"gpu": "on"})
    d = diagnose_pod(_facts(_pod({"metax-tech.com/sgpu": "1"}), [sgpu],
                            "no available node, 1/1 CardQosPolicyMismatch"))
    assert d.fix.startswith("CardQosPolicyMismatch: every used MetaX card runs another QoS policy")
