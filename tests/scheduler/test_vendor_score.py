"""The vendors' node-score terms in the choice of a node (scheduler.vendorscore, score.select_node).

HAMi adds each vendor's ScoreNode to the node score of a fitting node (pkg/scheduler/policy/
node_policy.go OverrideScore). The term depends on the devices chosen, so a pod asking for Ascend
910 NPUs, Kunlunxin XPUs, MetaX GPUs or MetaX sGPU (online or topology-aware pods) is fitted on
every candidate and the best final score wins, even over
a node the usage alone would prefer; every other pod keeps the first-fit walk (`scored` is empty).
"""

from __future__ import annotations

import pytest

from hami.config import default_vendor_table
from hami.device.codec.cards import topology_value
from hami.device.codec.golang import go_json_value
from hami.device.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo
from hami.device.vendorregister import decode_one, registration_signature
from hami.scheduler.placement.fit import pod_request
from hami.scheduler.placement.policy import f32
from hami.scheduler.placement.score import evaluate_nodes, select_node
from hami.scheduler.placement.usage import UsageIndex
from hami.scheduler.placement.vendorrules import jittery_qos

TABLE = default_vendor_table()
ASC = "Ascend910B3"


def npus(node: str, networks: list[int]) -> list[DeviceInfo]:
    return [DeviceInfo(f"{node}-npu-{i}", 4, 65536, 100, ASC, index=i, health=True, vendor=ASC,
                       custom_info=go_json_value({"NetworkID": nid})) for i, nid in enumerate(networks)]


def xpus(node: str, cards: int = 8) -> list[DeviceInfo]:
    return [DeviceInfo(f"{node}-kunlun-{i}", 100, 98304, 100, "kunlun", index=i, numa=int(i >= cards // 2),
                       health=True, vendor="kunlun") for i in range(cards)]


def npu_pod(n: int, policy: str = "binpack"):
    return pod_request([ContainerDeviceRequest(n, ASC, 0, 100, 0)], 0, {}, node_policy=policy, vendors=TABLE)


def test_ascend_pod_goes_where_its_npus_share_a_network_over_a_fuller_node():
    index = UsageIndex()
    index.set_node("split", npus("split", [0, 0, 1, 1, 1]))
    index.set_node("one", npus("one", [0, 0, 0, 0]))
    # A small pod already runs on `split`: binpack prefers that node on usage alone.
    index.add_pod("busy", "split", ((ContainerDevice("split-npu-4", ASC, 1024, 10, 4),),))
    split, one = index.node("split"), index.node("one")
    assert split.score_value > one.score_value
    pod = npu_pod(3)
    assert [v.name for v in pod.scored] == [ASC]
    fits, failed = evaluate_nodes(index.nodes, ["split", "one"], pod)
    assert failed == {}
    by_node = {r.node: r for r in fits}
    # split: 2 of its 3 chosen NPUs on one network (10 x float32(2/3)); one: all 3 (10).
    assert by_node["split"].score == f32(split.score_value + 6.6666669845581055)  # float32, as Go adds
    assert by_node["one"].score == f32(one.score_value + 10.0)
    sel = select_node(index.nodes, ["split", "one"], pod)
    assert sel.node == "one" and sel.score == f32(one.score_value + 10.0) and sel.tried == 2
    assert sorted(cd.uuid for cd in sel.devices[0]) == ["one-npu-1", "one-npu-2", "one-npu-3"]
    # Spread takes the lowest final score: the split node.
    assert select_node(index.nodes, ["split", "one"], npu_pod(3, "spread")).node == "split"


def test_kunlunxin_pod_goes_where_it_fragments_the_board_least():
    """Kunlunxin's Test_ScoreNode rules through the choice: on `half` (cards 0-3 busy) one card
    opens the right wing (term 0), on `one` (card 0 busy) it joins the left wing (term 2000)."""
    index = UsageIndex()
    index.set_node("half", xpus("half"))
    index.set_node("one", xpus("one"))
    index.add_pod("p-half", "half", (tuple(ContainerDevice(f"half-kunlun-{i}", "kunlun", 98304, 100, i)
                                           for i in range(4)),))
    index.add_pod("p-one", "one", ((ContainerDevice("one-kunlun-0", "kunlun", 98304, 100, 0),),))
    half, one = index.node("half"), index.node("one")
    assert half.score_value > one.score_value
    pod = pod_request([ContainerDeviceRequest(1, "kunlun", 0, 100, 0)], 0, {}, node_policy="binpack", vendors=TABLE)
    fits, _ = evaluate_nodes(index.nodes, ["half", "one"], pod)
    by_node = {r.node: r for r in fits}
    assert [cd.idx for cd in by_node["half"].devices[0]] == [4]
    assert [cd.idx for cd in by_node["one"].devices[0]] == [1]
    assert by_node["half"].score == half.score_value
    assert by_node["one"].score == f32(one.score_value + 2000.0)
    assert select_node(index.nodes, ["half", "one"], pod).node == "one"


def test_online_metax_pod_goes_to_the_card_with_fewer_pods_in_its_way():
    """MetaX sGPU's online ScoreNode: a card running 3 offline pods (-300 x 10000) loses to one
    running 1 online pod (-20 x 10000) although binpack prefers the busier node on usage."""
    index = UsageIndex()
    for n in ("off", "on"):
        index.set_node(n, [DeviceInfo(f"{n}-card", 16, 32768, 100, "Metax-SGPU", health=True, vendor="Metax-SGPU")])
    for i in range(3):
        index.add_pod(f"off{i}", "off", ((ContainerDevice("off-card", "Metax-SGPU", 4096, 10, 0),),),
                      app_class="offline")
    index.add_pod("on0", "on", ((ContainerDevice("on-card", "Metax-SGPU", 1024, 0, 0),),), app_class="online")
    assert index.node("off").score_value > index.node("on").score_value
    annos = {"metax-tech.com/sgpu-app-class": "online"}
    pod = pod_request([ContainerDeviceRequest(1, "Metax-SGPU", 1024, 0, 0)], 0, annos, node_policy="binpack",
                      vendors=TABLE)
    assert [v.name for v in pod.scored] == ["Metax-SGPU"]
    by_node = {r.node: r for r in evaluate_nodes(index.nodes, ["off", "on"], pod)[0]}
    assert by_node["off"].score == f32(index.node("off").score_value - 3000000.0)
    assert by_node["on"].score == f32(index.node("on").score_value - 200000.0)
    assert select_node(index.nodes, ["off", "on"], pod).node == "on"
    offline = pod_request([ContainerDeviceRequest(1, "Metax-SGPU", 1024, 0, 0)], 0,
                          {"metax-tech.com/sgpu-app-class": "offline"}, vendors=TABLE)
    assert offline.scored == ()  # only online pods have the term


def test_only_scored_vendors_leave_the_first_fit_walk():
    nvidia = pod_request([ContainerDeviceRequest(1, "NVIDIA", 1000, 101, 0)], 0, {}, vendors=TABLE)
    assert nvidia.scored == ()
    for name in ("Ascend310P", "XPU", "MLU", "Metax-SGPU"):
        assert pod_request([ContainerDeviceRequest(1, name, 0, 100, 0)], 0, {}, vendors=TABLE).scored == (), name
    both = pod_request([(ContainerDeviceRequest(1, "NVIDIA", 1000, 101, 0), ContainerDeviceRequest(1, ASC, 0, 100, 0)),
                        ContainerDeviceRequest(2, "kunlun", 0, 100, 0)], 0, {}, vendors=TABLE)
    assert [v.name for v in both.scored] == [ASC, "kunlun"]


def test_metax_gpu_pod_goes_to_the_node_with_the_lower_topology_loss():
    """MetaX GPU's ScoreNode from node annotations (pkg/device/metax/device.go): binpack adds 2000
    minus the node's `gpu.topology.losses` entry for the cards taken; the annotation reaches the
    usage index through the registration decoder, and changing it re-decodes the node."""
    row = TABLE.get("Metax-GPU")
    index = UsageIndex()
    cap = {"metax-tech.com/gpu": "2"}
    low = {"metax-tech.com/gpu.topology.losses": '{"2":10}'}
    high = {"metax-tech.com/gpu.topology.losses": '{"2":900}'}
    index.set_node("a-high", decode_one(row, "a-high", high, cap))
    index.set_node("b-low", decode_one(row, "b-low", low, cap))
    assert registration_signature(low, cap, TABLE) != registration_signature(high, cap, TABLE)
    pod = pod_request([ContainerDeviceRequest(2, "Metax-GPU", 0, 100, 100)], 0, {}, node_policy="binpack",
                      vendors=TABLE)
    assert [v.name for v in pod.scored] == ["Metax-GPU"]
    by_node = {r.node: r.score for r in evaluate_nodes(index.nodes, ["a-high", "b-low"], pod)[0]}
    assert by_node == {"a-high": 1100.0, "b-low": 1990.0}
    assert select_node(index.nodes, ["a-high", "b-low"], pod).node == "b-low"


def test_add_jittery_qos_and_its_sync():
    """MetaX's JitteryQosCache (pkg/device/metax/qos.go, sdevice.go addJitteryQos; HAMi's
    TestAddJitteryQos): a card given to a pod switches to the pod's QoS policy (none for a whole
    card), remembered where the registration still says otherwise, dropped once it registers it."""
    devs = [ContainerDevice("GPU-123", "Metax-SGPU", 0, 50), ContainerDevice("GPU-456", "Metax-SGPU", 0, 50),
            ContainerDevice("GPU-789", "Metax-SGPU", 0, 100)]
    registered = {"GPU-123": "best-effort", "GPU-456": "burst-share", "GPU-789": "best-effort"}
    assert jittery_qos("best-effort", devs, registered) == {"GPU-456": "best-effort", "GPU-789": ""}

    def card(qos: str) -> DeviceInfo:
        return DeviceInfo("GPU-456", 16, 32768, 100, "Metax-SGPU", mode=qos, health=True, vendor="Metax-SGPU")

    index = UsageIndex()
    index.set_node("n", [card("burst-share")])
    index.expect_qos("n", ((devs[1],),), "best-effort", {"Metax-SGPU"})
    assert index.node("n").qos_expected == {"GPU-456": "best-effort"}
    index.set_node("n", [card("burst-share")])  # re-registered, not switched yet: kept
    assert index.qos_expected == {"GPU-456": "best-effort"} and index.node("n").qos_expected == index.qos_expected
    index.set_node("n", [card("best-effort")])  # the plugin reports the switch: done
    assert index.qos_expected == {}


@pytest.mark.parametrize(("cache", "want"), [
    ({"GPU-123": "fixed-share", "GPU-789": "burst-share"}, {"GPU-123": "fixed-share", "GPU-789": "burst-share"}),
    ({"GPU-123": "best-effort", "GPU-789": "burst-share"}, {"GPU-789": "burst-share"}),
    ({"GPU-123": "best-effort", "GPU-789": "best-effort"}, {}),
], ids=["no sync", "sync one", "sync all"])
def test_jittery_qos_cache_sync(cache, want):
    """HAMi's TestJitteryQosCacheSync (qos_test.go): a node registering its cards (all best-effort
    here) drops exactly the entries that expected that policy."""
    index = UsageIndex()
    index.qos_expected.update(cache)
    index.set_node("n", [DeviceInfo(u, 16, 32768, 100, "Metax-SGPU", mode="best-effort", health=True,
                                    vendor="Metax-SGPU") for u in ("GPU-123", "GPU-456", "GPU-789")])
    assert index.qos_expected == want


_ANNOS = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


@pytest.mark.parametrize(("cards", "value"), [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930),
                                              (8, 1240), (9, 0)])
def test_parse_metax_annos(cards, value):
    """HAMi's TestParseMetaxAnnos (device_test.go): the topology annotation's entry for a card
    count (a missing one is 0)."""
    assert topology_value(_ANNOS, cards) == value
