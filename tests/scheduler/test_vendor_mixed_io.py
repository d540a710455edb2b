"""A mixed cluster through the real extender and the embedded API server: NVIDIA, Ascend 910B3
(register annotation + its own handshake), Cambricon MLU (capacity only), a node with both NVIDIA
and Ascend, and a node whose Ascend registration is malformed.

An NVIDIA pod never lands on an Ascend card and the reverse, with HAMi's FailedNodes reasons; a pod
asking for two vendors fits only where both are (elsewhere NodeInsufficientDevice, HAMi's answer);
the malformed node alone is unregistered, its error naming the annotation key; vendor allocations
are written under the vendor's keys and counted back from them."""

from __future__ import annotations

import base64
import time

import orjson
import pytest

from hami.device import codec
from hami.device.codec import ascend as ascend_codec
from hami.device.model import DeviceInfo
from tests.kube.helpers import eventually, node_obj, pod_obj
from tests.kube.scheduler_env import requesting_now, running_env

ASC = "Ascend910B3"
ASC_REGISTER = f"hami.io/node-register-{ASC}"


def ascend_register(node: str, n: int) -> str:
    return codec.encode_node_devices(
        DeviceInfo(id=f"{node}-npu-{i}", count=4, devmem=65536, devcore=100, type=ASC, index=i, health=True)
        for i in range(n))


def ascend_node(name: str, n: int = 2, *, nvidia: int = 0, register: str | None = None) -> dict:
    obj = node_obj(name, nvidia, handshake=requesting_now() if nvidia else None, registered=bool(nvidia))
    obj["metadata"]["annotations"][ASC_REGISTER] = register if register is not None else ascend_register(name, n)
    obj["status"]["allocatable"][f"huawei.com/{ASC}"] = str(n)
    obj["status"]["capacity"][f"huawei.com/{ASC}"] = str(n)
    return obj


def mlu_node(name: str, cards: int = 2) -> dict:
    obj = node_obj(name, 0, registered=False)
    obj["status"]["capacity"].update({"cambricon.com/mlu.smlu.vcore": str(100 * cards),
                                      "cambricon.com/mlu.smlu.vmemory": str(64 * cards),
                                      "cambricon.com/mlu": str(cards)})
    return obj


def mthreads_node(name: str, cards: int = 2) -> dict:
    obj = node_obj(name, 0, registered=False)
    obj["status"]["capacity"].update({"mthreads.com/sgpu-core": str(16 * cards),
                                      "mthreads.com/sgpu-memory": str(96 * cards)})
    return obj


def vendor_pod(name: str, limits: dict, annotations: dict | None = None) -> dict:
    pod = pod_obj(name, gpus=0, annotations=annotations)
    pod["spec"]["containers"][0]["resources"]["limits"] = dict(limits)
    return pod


NODES = ["nv", "asc", "mlu", "mix", "bad"]


@pytest.fixture
async def env(apiserver):
    nodes = [node_obj("nv", 2, handshake=requesting_now()), ascend_node("asc"), mlu_node("mlu"),
             ascend_node("mix", 1, nvidia=1), ascend_node("bad", register='[{"id":"x","count":"four"}]'),
             mthreads_node("mt")]
    async with running_env(apiserver, nodes) as e:
        await eventually(lambda: {"nv", "asc", "mlu", "mix"} <= set(e.sched.state.index.nodes))
        yield e


async def test_malformed_vendor_registration_marks_only_that_node_naming_the_key(env):
    state = env.sched.state
    assert "bad" not in state.index.nodes
    assert state.registered["bad"].error.startswith(ASC_REGISTER + ": ")
    pod = env.create_pod(vendor_pod("a0", {f"huawei.com/{ASC}": "1"}))
    out = await env.filter(pod, NODES)
    assert out["Error"] == "" and out["NodeNames"] in (["asc"], ["mix"])


async def test_nvidia_pod_never_lands_on_ascend_or_mlu_cards(env):
    for i in range(3):
        pod = env.create_pod(pod_obj(f"g{i}", gpus=1, cores=100))
        out = await env.filter(pod, NODES)
        assert out["NodeNames"] in (["nv"], ["mix"]), out
        annos = env.placement("default", f"g{i}")
        [[dev], []] = codec.decode_pod_devices(annos[codec.ALLOCATED_ANNOTATION])
        assert dev.type == "NVIDIA" and "npu" not in dev.uuid and "mlu" not in dev.uuid
        assert not any(k.startswith("hami.io/Ascend") or k.startswith("huawei.com/") for k in annos)
    pod = env.create_pod(pod_obj("g9", gpus=1, cores=100))
    out = await env.filter(pod, NODES)
    assert out["NodeNames"] is None
    assert out["FailedNodes"] == {
        "nv": "2/2 CardInsufficientMemory", "mix": "1/1 CardInsufficientMemory",
        "asc": "NodeInsufficientDevice", "mlu": "NodeInsufficientDevice", "bad": "node unregistered",
    }


async def test_ascend_pod_lands_on_an_ascend_card_with_its_template(env):
    # A pod that skipped the webhook: HAMi v2.10.0's fit books the memory as asked (no template
    # rounding, commit 7a9fbb76); the runtime info names the template holding it, with memory.
    pod = env.create_pod(vendor_pod("a1", {f"huawei.com/{ASC}": "1", f"huawei.com/{ASC}-memory": "12000"}))
    out = await env.filter(pod, ["nv", "asc", "mlu"])
    assert out["NodeNames"] == ["asc"]
    annos = env.placement("default", "a1")
    [[dev], []] = codec.decode_pod_devices(annos[f"hami.io/{ASC}-devices-allocated"])
    assert dev.type == ASC and dev.uuid.startswith("asc-npu-") and dev.usedmem == 12000
    assert annos[f"hami.io/{ASC}-devices-to-allocate"] == annos[f"hami.io/{ASC}-devices-allocated"]
    assert annos[f"huawei.com/{ASC}"] == f'[{{"UUID":"{dev.uuid}","temp":"vir05_1c_16g","memory":12000}}]'
    assert codec.ALLOCATED_ANNOTATION not in annos
    usage = env.sched.state.index.node("asc").by_id[dev.uuid]
    assert (usage.used, usage.usedmem) == (1, 12000)
    # Too many cards: HAMi's reasons per node.
    big = env.create_pod(vendor_pod("a2", {f"huawei.com/{ASC}": "3"}))
    out = await env.filter(big, NODES)
    assert out["FailedNodes"] == {"nv": "NodeInsufficientDevice", "asc": "NodeInsufficientDevice",
                                  "mlu": "NodeInsufficientDevice", "mix": "NodeInsufficientDevice",
                                  "bad": "node unregistered"}


async def test_mlu_pod_pairs_memory_with_cores(env):
    pod = env.create_pod(vendor_pod("m1", {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vmemory": "8",
                                           "cambricon.com/mlu.smlu.vcore": "30"}))
    out = await env.filter(pod, NODES)
    assert out["NodeNames"] == ["mlu"]
    annos = env.placement("default", "m1")
    [[dev], []] = codec.decode_pod_devices(annos["hami.io/cambricon-mlu-devices-allocated"])
    assert (dev.type, dev.usedmem, dev.usedcores) == ("MLU", 2048, 30)
    idx = int(dev.uuid.rsplit("-", 1)[1])
    assert annos["CAMBRICON_DSMLU_PROFILE"] == f"{idx}_30_8"
    assert annos["CAMBRICON_DSMLU_ASSIGNED"] == "false"


async def test_pod_asking_for_two_vendors_fits_only_where_both_are(env):
    limits = {"nvidia.com/gpu": "1", f"huawei.com/{ASC}": "1"}
    pod = env.create_pod(vendor_pod("two", limits))
    out = await env.filter(pod, ["nv", "asc", "mlu", "bad"])
    assert out["NodeNames"] is None
    assert out["FailedNodes"] == {"nv": "NodeInsufficientDevice", "asc": "NodeInsufficientDevice",
                                  "mlu": "NodeInsufficientDevice", "bad": "node unregistered"}
    pod2 = env.create_pod(vendor_pod("two2", limits))
    out = await env.filter(pod2, NODES)
    assert out["NodeNames"] == ["mix"]
    annos = env.placement("default", "two2")
    [[nv], []] = codec.decode_pod_devices(annos[codec.ALLOCATED_ANNOTATION])
    [[npu], []] = codec.decode_pod_devices(annos[f"hami.io/{ASC}-devices-allocated"])
    assert (nv.type, npu.type) == ("NVIDIA", ASC)
    # HAMi v2.10 places such a pod (pkg/scheduler/score.go fitInDevices fits each vendor's request
    # in turn; its webhook refuses no mix): /bind writes both vendors' devices.
    assert (await env.bind(pod2, "mix"))["Error"] == ""
    written = env.pod("default", "two2")["metadata"]["annotations"]
    assert written[codec.ALLOCATED_ANNOTATION] == annos[codec.ALLOCATED_ANNOTATION]
    assert written[f"hami.io/{ASC}-devices-allocated"] == annos[f"hami.io/{ASC}-devices-allocated"]


async def test_webhook_admits_a_pod_asking_for_two_vendors_as_hami_v210(env):
    """HAMi v2.10's MutateAdmission runs every vendor's hook on each container and refuses no mix
    (pkg/scheduler/webhook.go): the pod goes to the scheduler, each vendor's rules applied."""
    pod = vendor_pod("mixed", {"nvidia.com/gpu": "1", f"huawei.com/{ASC}": "1",
                               f"huawei.com/{ASC}-memory": "10000"})
    pod["spec"]["schedulerName"] = ""
    resp = await _webhook(env, pod, "default")
    assert resp["allowed"] is True
    ops = orjson.loads(base64.b64decode(resp["patch"]))
    assert [o["value"] for o in ops if o["path"] == "/spec/schedulerName"] == ["hami-scheduler"]
    assert any(o["value"] == "16384" for o in ops if "Ascend910B3-memory" in o["path"]) or any(
        isinstance(o["value"], dict) and o["value"].get(f"huawei.com/{ASC}-memory") == "16384" for o in ops)


async def test_vendor_allocations_on_pods_are_counted_from_their_keys(env):
    text = "asc-npu-0,Ascend910B3,32768,0:;"
    pod = vendor_pod("placed", {f"huawei.com/{ASC}": "1"},
                     annotations={"hami.io/vgpu-node": "asc", f"hami.io/{ASC}-devices-allocated": text})
    pod["spec"]["nodeName"] = "asc"  # bound where its placement says (an unbound claim is not counted)
    env.create_pod(pod)
    state = env.sched.state
    await eventually(lambda: state.index.node("asc").by_id["asc-npu-0"].usedmem == 32768)
    assert state.index.node("asc").by_id["asc-npu-0"].used == 1


async def _webhook(env, pod: dict, ns: str) -> dict:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "namespace": ns, "operation": "CREATE", "object": pod}}
    async with env.http.post(env.sched.url + "/webhook", data=orjson.dumps(review)) as r:
        return (await r.json())["response"]


async def test_webhook_recognises_vendor_pods_and_keeps_each_vendor_quota(env):
    store = env.store
    store.create("namespaces", "", {"metadata": {"name": "q"}})
    store.create("resourcequotas", "q", {"metadata": {"name": "npu", "namespace": "q"},
                                         "spec": {"hard": {f"limits.huawei.com/{ASC}-memory": "20000"}}})
    index = env.sched.state.index
    await eventually(lambda: index.vendor_quota_view("q", ASC) is not None)
    limits = {f"huawei.com/{ASC}": "1", f"huawei.com/{ASC}-memory": "16384"}
    first = vendor_pod("n1", limits)
    first["metadata"]["namespace"] = "q"
    first["spec"]["schedulerName"] = ""
    resp = await _webhook(env, first, "q")
    assert resp["allowed"] is True
    ops = orjson.loads(base64.b64decode(resp["patch"]))
    assert [o["value"] for o in ops if o["path"] == "/spec/schedulerName"] == ["hami-scheduler"]
    first["spec"]["schedulerName"] = "hami-scheduler"
    pod = env.store.create("pods", "q", first).obj
    assert (await env.filter(pod, ["asc"]))["NodeNames"] == ["asc"]
    await eventually(lambda: index.quota_used("q").get(f"huawei.com/{ASC}-memory") == (16384, 20000))
    # NVIDIA's quota resources are untouched by the Ascend pod.
    assert "nvidia.com/gpumem" not in index.quota_used("q")
    second = vendor_pod("n2", limits)
    second["metadata"]["namespace"] = "q"
    resp = await _webhook(env, second, "q")
    assert resp["allowed"] is False and resp["status"]["message"] == "exceeding resource quota"


async def test_allocation_metrics_carry_the_device_type(env):
    pod = env.create_pod(vendor_pod("mt", {f"huawei.com/{ASC}": "1", f"huawei.com/{ASC}-memory": "8000"}))
    assert (await env.filter(pod, ["asc"]))["NodeNames"] == ["asc"]
    assert (await env.bind(pod, "asc"))["Error"] == ""  # the placement is written at bind
    await eventually(lambda: env.sched.state.uid_keys.get(pod["metadata"]["uid"]))
    async with env.http.get(f"http://127.0.0.1:{env.sched.metrics_port}/metrics") as r:
        text = await r.text()
    vmem = [ln for ln in text.splitlines() if ln.startswith("hami_vgpu_memory_allocated_bytes{") and 'pod="mt"' in ln]
    assert len(vmem) == 1 and f'device_type="{ASC}"' in vmem[0]
    assert float(vmem[0].rsplit(" ", 1)[1]) == 8000 * 2**20  # as asked: v2.10.0 books no template
    limit = [ln for ln in text.splitlines() if ln.startswith("hami_gpu_memory_limit_bytes{") and 'node="mlu"' in ln]
    assert len(limit) == 2 and all('device_type="MLU"' in ln for ln in limit)


async def test_mthreads_pod_keeps_all_containers_on_one_card(env):
    pod = vendor_pod("mt1", {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8", "mthreads.com/sgpu-core": "4"})
    pod["spec"]["containers"].append({"name": "c1", "image": "x", "resources": {"limits": {
        "mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8", "mthreads.com/sgpu-core": "4"}}})
    pod = env.create_pod(pod)
    out = await env.filter(pod, ["mt", "asc"])
    assert out["NodeNames"] == ["mt"], out
    annos = env.placement("default", "mt1")
    [[a], [b], []] = codec.decode_pod_devices(annos["hami.io/mthreads-vgpu-devices-allocated"])
    assert a.uuid == b.uuid and (a.usedmem, a.usedcores) == (4096, 4)
    assert annos["mthreads.com/gpu-index"] == a.uuid.rsplit("-", 1)[1]
    assert annos["mthreads.com/predicate-node"] == "mt"
    assert "hami.io/mthreads-vgpu-devices-to-allocate" not in annos  # HAMi writes only the allocated key


async def test_each_vendor_handshakes_under_its_own_key(env):
    """HAMi's protocol per vendor key: first sight writes Requesting_ under
    hami.io/node-handshake-Ascend910B3 (not NVIDIA's key); a stale one with no allocatable cards
    drops only that vendor's devices and cleans only its key."""
    key = f"hami.io/node-handshake-{ASC}"

    def annos(name):
        return env.store.get("nodes", "", name)["metadata"].get("annotations") or {}

    await eventually(lambda: annos("asc").get(key, "").startswith("Requesting_"))
    assert "hami.io/node-handshake" not in annos("asc")  # no NVIDIA registration, no NVIDIA handshake
    stale = codec.encode_handshake_requesting(time.time() - 600, None)
    node = ascend_node("old")
    node["metadata"]["annotations"][key] = stale
    node["status"]["allocatable"][f"huawei.com/{ASC}"] = "0"
    env.store.create("nodes", "", node)
    state = env.sched.state
    await eventually(lambda: "old" in state.registered)
    await eventually(lambda: key not in annos("old"))
    assert "old" not in state.index.nodes
    # The mixed node keeps its NVIDIA card when only its Ascend handshake goes stale.
    mix = env.store.get("nodes", "", "mix")
    mix["status"]["allocatable"][f"huawei.com/{ASC}"] = "0"
    env.store.update("nodes", "", "mix", mix, subresource="status")
    mix = env.store.get("nodes", "", "mix")
    mix["metadata"]["annotations"][key] = stale
    env.store.update("nodes", "", "mix", mix)
    await eventually(lambda: [d.vendor for d in state.index.node("mix").devices] == ["NVIDIA"])


async def test_bind_takes_each_vendors_own_node_lock(env):
    """HAMi's per-vendor LockNode: Ascend (like NVIDIA) locks hami.io/mutex.lock, its plugin
    releases it; Cambricon locks `cambricon.com/dsmlu.lock` (RFC3339, 2 minutes, its plugin
    releases it) and never hami.io/mutex.lock; a second MLU bind within 2 minutes is refused with
    HAMi's text, an expired lock is taken over."""
    def annos(name):
        return env.store.get("nodes", "", name)["metadata"].get("annotations") or {}

    mlu = env.create_pod(vendor_pod("lm", {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vcore": "10"}))
    assert (await env.filter(mlu, ["mlu"]))["NodeNames"] == ["mlu"]
    assert (await env.bind(env.pod("default", "lm"), "mlu"))["Error"] == ""
    assert codec.NODE_LOCK_ANNOTATION not in annos("mlu")
    taken = codec.parse_rfc3339(annos("mlu")["cambricon.com/dsmlu.lock"])
    assert abs(taken - time.time()) < 5
    state = env.sched.state
    await eventually(lambda: "cambricon.com/dsmlu.lock" in (state.node("mlu")["metadata"].get("annotations") or {}))
    again = env.create_pod(vendor_pod("lm2", {"cambricon.com/mlu": "1", "cambricon.com/mlu.smlu.vcore": "10"}))
    assert (await env.filter(again, ["mlu"]))["NodeNames"] == ["mlu"]
    assert (await env.bind(env.pod("default", "lm2"), "mlu"))["Error"] == "node mlu has been locked within 2 minutes"
    node = env.store.get("nodes", "", "mlu")
    node["metadata"]["annotations"]["cambricon.com/dsmlu.lock"] = codec.format_rfc3339(time.time() - 3600)
    env.store.update("nodes", "", "mlu", node)
    await eventually(lambda: codec.parse_rfc3339(
        state.node("mlu")["metadata"]["annotations"]["cambricon.com/dsmlu.lock"]) < time.time() - 3000)
    assert (await env.bind(env.pod("default", "lm2"), "mlu"))["Error"] == ""
    assert codec.parse_rfc3339(annos("mlu")["cambricon.com/dsmlu.lock"]) > time.time() - 5
    npu = env.create_pod(vendor_pod("la", {f"huawei.com/{ASC}": "1"}))
    assert (await env.filter(npu, ["asc"]))["NodeNames"] == ["asc"]
    assert (await env.bind(env.pod("default", "la"), "asc"))["Error"] == ""
    lock = env.store.get("nodes", "", "asc")["metadata"]["annotations"][codec.NODE_LOCK_ANNOTATION]
    assert lock.endswith(",default,la")


async def test_hami_core_ascend_pod_goes_to_a_hami_core_node_with_memory_and_cores(apiserver):
    """HAMi v2.10 vNPU modes through the extender: the node's `hami-vnpu-core: "true"` lets a
    `huawei.com/vnpu-mode: hami-core` pod in (every card 100 cores), the other node answers
    ModeNotFit; the runtime info carries memory and cores, not a template."""
    soft = ascend_node("soft")
    soft["metadata"]["annotations"]["hami-vnpu-core"] = "true"
    async with running_env(apiserver, [ascend_node("hard"), soft]) as e:
        await eventually(lambda: {"hard", "soft"} <= set(e.sched.state.index.nodes))
        limits = {f"huawei.com/{ASC}": "1", f"huawei.com/{ASC}-memory": "10000", f"huawei.com/{ASC}-core": "30"}
        refused = e.create_pod(vendor_pod("hc0", limits, {"huawei.com/vnpu-mode": "hami-core"}))
        out = await e.filter(refused, ["hard"])
        assert out["NodeNames"] is None and out["FailedNodes"] == {"hard": "1/2 ModeNotFit"}
        pod = e.create_pod(vendor_pod("hc", limits, {"huawei.com/vnpu-mode": "hami-core"}))
        out = await e.filter(pod, ["hard", "soft"])
        assert out["NodeNames"] == ["soft"]
        annos = e.placement("default", "hc")
        [[dev], []] = codec.decode_pod_devices(annos[f"hami.io/{ASC}-devices-allocated"])
        assert (dev.usedmem, dev.usedcores) == (10000, 30)
        assert ascend_codec.decode_runtime_info(annos[f"huawei.com/{ASC}"], full=True) == ((dev.uuid, "", 10000, 30),)


def neuron_node(name: str, devices: int, cores_per_device: int, instance_type: str) -> dict:
    obj = node_obj(name, 0, registered=False)
    obj["metadata"].setdefault("labels", {})["node.kubernetes.io/instance-type"] = instance_type
    obj["status"]["capacity"].update({"aws.amazon.com/neuron": str(devices),
                                      "aws.amazon.com/neuroncore": str(devices * cores_per_device)})
    return obj


async def test_aws_neuron_cores_and_device_groups_through_the_extender(apiserver):
    """AWS Neuron from node capacity: a NeuronCore request takes one bit of a device's mask and
    names the core id; a second core pod shares the device; two devices are no group off a ring
    (NumaNotFit) while a ring (Inferentia) node takes any two neighbours."""
    async with running_env(apiserver, [neuron_node("trn", 2, 2, "trn1.32xlarge"),
                                       neuron_node("inf", 4, 2, "inf2.24xlarge")]) as e:
        await eventually(lambda: {"trn", "inf"} <= set(e.sched.state.index.nodes))
        ids = []
        for i in range(2):
            pod = e.create_pod(vendor_pod(f"c{i}", {"aws.amazon.com/neuroncore": "1"}))
            out = await e.filter(pod, ["trn"])
            assert out["NodeNames"] == ["trn"], out
            annos = e.placement("default", f"c{i}")
            assert annos["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"
            ids.append(annos["AWS_NEURON_IDS"])
        assert ids == ["2", "3"]  # the last device first (walked from the end), its cores 0 then 1
        usage = e.sched.state.index.node("trn").by_id["trn-AWSNeuron-1"]
        assert (usage.used, usage.usedcores) == (2, 3)
        pair = e.create_pod(vendor_pod("pair", {"aws.amazon.com/neuron": "2"}))
        out = await e.filter(pair, ["trn"])
        assert out["NodeNames"] is None and out["FailedNodes"] == {"trn": "1/2 NumaNotFit"}
        out = await e.filter(pair, ["inf"])
        assert out["NodeNames"] == ["inf"]
        annos = e.placement("default", "pair")
        assert annos["AWS_NEURON_IDS"] == "0,1" and "NEURON_RESOURCE_TYPE" not in annos


async def test_kunlunxin_xpus_fill_a_wing_before_crossing_the_board(apiserver):
    """Kunlunxin XPUs from capacity through the extender: two 2-card pods fill the left wing
    (cards 0-1, then 2-3, snugly), a third gets the right wing; every card is whole, and a 3-card
    pod never fits (HAMi's NumaNotFit over the board)."""
    node = node_obj("xpu", 0, registered=False)
    node["status"]["capacity"]["kunlunxin.com/xpu"] = "8"
    async with running_env(apiserver, [node]) as e:
        await eventually(lambda: "xpu" in e.sched.state.index.nodes)
        got = []
        for i in range(3):
            pod = e.create_pod(vendor_pod(f"x{i}", {"kunlunxin.com/xpu": "2"}))
            out = await e.filter(pod, ["xpu"])
            assert out["NodeNames"] == ["xpu"], out
            got.append(e.placement("default", f"x{i}")["BAIDU_COM_DEVICE_IDX"])
        assert got == ["0,1", "2,3", "4,5"]
        three = e.create_pod(vendor_pod("x3", {"kunlunxin.com/xpu": "3"}))
        out = await e.filter(three, ["xpu"])
        assert out["NodeNames"] is None and out["FailedNodes"] == {"xpu": "1/8 NumaNotFit"}


async def test_metax_sgpu_and_exclusive_gpu_through_the_extender(apiserver):
    """MetaX: an sGPU pod lands on a card whose registered QoS policy matches and gets MetaX's
    per-container JSON; once the card is used, a pod of another policy is CardQosPolicyMismatch;
    an exclusive GPU pod gets a whole card from capacity."""
    sgpu = node_obj("sgpu", 0, registered=False)
    sgpu["metadata"]["annotations"]["metax-tech.com/node-gpu-devices"] = (
        '[{"uuid":"GPU-a","totalDevCount":16,"totalCompute":100,"totalVRam":32768,"healthy":true,'
        '"qosPolicy":"burst-share"}]')
    gpu = node_obj("gpu", 0, registered=False)
    gpu["status"]["capacity"]["metax-tech.com/gpu"] = "2"
    async with running_env(apiserver, [sgpu, gpu]) as e:
        await eventually(lambda: {"sgpu", "gpu"} <= set(e.sched.state.index.nodes))
        limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "8", "metax-tech.com/vcore": "30"}
        first = e.create_pod(vendor_pod("s0", limits, {"metax-tech.com/sgpu-qos-policy": "burst-share"}))
        out = await e.filter(first, ["sgpu"])
        assert out["NodeNames"] == ["sgpu"], out
        annos = e.placement("default", "s0")
        assert annos["metax-tech.com/gpu-devices-allocated"] == '[[{"uuid":"GPU-a","compute":30,"vRam":8192}]]'
        other = e.create_pod(vendor_pod("s1", limits, {"metax-tech.com/sgpu-qos-policy": "fixed-share"}))
        out = await e.filter(other, ["sgpu"])
        assert out["NodeNames"] is None and out["FailedNodes"] == {"sgpu": "1/1 CardQosPolicyMismatch"}
        whole = e.create_pod(vendor_pod("g0", {"metax-tech.com/gpu": "1"}))
        out = await e.filter(whole, ["gpu", "sgpu"])
        assert out["NodeNames"] == ["gpu"]
        [[dev], []] = codec.decode_pod_devices(e.placement("default", "g0")["hami.io/metax-gpu-devices-allocated"])
        assert (dev.type, dev.usedmem, dev.usedcores) == ("Metax-GPU", 65536, 100)


async def test_full_nodes_filter_reads_every_vendors_registration_of_nodes_the_cache_does_not_know(apiserver):
    """Full-Nodes /filter (Nodes in the body): a node the cache has never seen is decoded as the
    node watch would, other vendors included (an Ascend annotation, Kunlunxin capacity); a
    malformed vendor registration makes that node unregistered only."""
    async with running_env(apiserver, [node_obj("nv", 1, handshake=requesting_now())]) as e:
        await eventually(lambda: "nv" in e.sched.state.index.nodes)
        outside = [ascend_node("asc-x"), node_obj("xpu-x", 0, registered=False),
                   ascend_node("bad-x", register='[{"id":"x","count":"four"}]')]
        outside[1]["status"]["capacity"]["kunlunxin.com/xpu"] = "8"
        nodes = {"items": outside}
        pod = e.create_pod(vendor_pod("fa", {f"huawei.com/{ASC}": "1"}))
        out = await e.filter(pod, nodes=nodes)
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["asc-x"]
        xpod = e.create_pod(vendor_pod("fx", {"kunlunxin.com/xpu": "4"}))
        out = await e.filter(xpod, nodes=nodes)
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["xpu-x"]
        three = e.create_pod(vendor_pod("f3", {"kunlunxin.com/xpu": "3"}))
        out = await e.filter(three, nodes=nodes)
        assert out["Nodes"] is None
        assert out["FailedNodes"] == {"xpu-x": "1/8 NumaNotFit", "asc-x": "NodeInsufficientDevice",
                                      "bad-x": "node unregistered"}


def network_node(name: str, networks: list[int]) -> dict:
    """An Ascend 910B3 node registered as the HAMi Ascend device plugin writes it, with each NPU's
    super-pod NetworkID in its custominfo."""
    text = codec.encode_node_devices(
        DeviceInfo(id=f"{name}-npu-{i}", count=4, devmem=65536, devcore=100, type=ASC, index=i, health=True,
                   custom_info=f'{{"NetworkID":{nid}}}') for i, nid in enumerate(networks))
    return ascend_node(name, len(networks), register=text)


async def test_ascend_pod_takes_the_node_and_npus_of_one_super_pod_network(apiserver):
    """Both nodes fit 3 NPUs and score the same on usage (`split` comes first); HAMi's Ascend
    ScoreNode adds 10 x the share of the pod's NPUs on one network, so the pod goes to `one`,
    whose NPUs share a network, and on `split` it would have taken 2 + 1."""
    async with running_env(apiserver, [network_node("split", [0, 0, 1, 1]), network_node("one", [2, 2, 2, 2])]) as e:
        await eventually(lambda: {"split", "one"} <= set(e.sched.state.index.nodes))
        assert e.sched.state.index.node("one").networks == {f"one-npu-{i}": 2 for i in range(4)}
        pod = e.create_pod(vendor_pod("net3", {f"huawei.com/{ASC}": "3"}))
        out = await e.filter(pod, ["split", "one"])
        assert out["NodeNames"] == ["one"], out
        annos = e.placement("default", "net3")
        [devs, []] = codec.decode_pod_devices(annos[f"hami.io/{ASC}-devices-allocated"])
        assert len(devs) == 3 and all(d.uuid.startswith("one-npu-") for d in devs)


async def test_metax_app_classes_keep_online_and_normal_pods_on_separate_cards(apiserver):
    """MetaX sGPU app classes (pkg/device/metax/sdevice.go checkAppClass) through the extender and
    the pod watch: a normal pod on one card sends an online pod to the other card; a second normal
    pod may not join the online card, and an offline pod fits neither (the online card refuses
    offline pods, the normal card classed ones): HAMi's CardAppClassMismatch."""
    sgpu = node_obj("sgpu", 0, registered=False)
    sgpu["metadata"]["annotations"]["metax-tech.com/node-gpu-devices"] = (
        '[{"uuid":"GPU-a","totalDevCount":16,"totalCompute":100,"totalVRam":32768,"healthy":true},'
        '{"uuid":"GPU-b","totalDevCount":16,"totalCompute":100,"totalVRam":32768,"healthy":true}]')
    limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "10"}
    app = "metax-tech.com/sgpu-app-class"
    async with running_env(apiserver, [sgpu]) as e:
        await eventually(lambda: "sgpu" in e.sched.state.index.nodes)

        async def place(name: str, annotations: dict) -> dict:
            return await e.filter(e.create_pod(vendor_pod(name, limits, annotations)), ["sgpu"])

        def card(name: str) -> str:
            [[dev], []] = codec.decode_pod_devices(e.placement("default", name)["hami.io/metax-sgpu-devices-allocated"])
            return dev.uuid

        assert (await place("n0", {}))["NodeNames"] == ["sgpu"]
        assert (await place("on0", {app: "online"}))["NodeNames"] == ["sgpu"]
        assert card("on0") != card("n0")
        assert (await place("n1", {}))["NodeNames"] == ["sgpu"]
        assert card("n1") == card("n0")
        out = await place("off0", {app: "offline"})
        assert out["NodeNames"] is None and out["FailedNodes"] == {"sgpu": "2/2 CardAppClassMismatch"}
        node = e.sched.state.index.node("sgpu")
        await eventually(lambda: node.app_classes == {card("on0"): [1, 0]})


async def test_topology_aware_metax_pod_keeps_metalink_zones_whole(apiserver):
    """MetaX MetaLink through the extender: the register's linkZone is kept; a topology-aware pod
    taking 2 whole cards scores 10 x its links minus the links the idle cards lose (score.go,
    sdevice.go scoreExclusiveDevices): on `mixed` (zones 1,1,2,2) it takes a zone whole and loses
    nothing (100), on `one` (all zone 1) it breaks links (60); both score the same on usage and
    `one` comes first, so the MetaLink term decides. Within the node the cards share a zone."""
    def sgpu_node(name: str, zones: list[int]) -> dict:
        obj = node_obj(name, 0, registered=False)
        obj["metadata"]["annotations"]["metax-tech.com/node-gpu-devices"] = "[" + ",".join(
            f'{{"uuid":"{name}-{i}","totalDevCount":16,"totalCompute":100,"totalVRam":32768,"healthy":true,'
            f'"linkZone":{z}}}' for i, z in enumerate(zones)) + "]"
        return obj

    async with running_env(apiserver, [sgpu_node("one", [1, 1, 1, 1]), sgpu_node("mixed", [1, 1, 2, 2])]) as e:
        await eventually(lambda: {"one", "mixed"} <= set(e.sched.state.index.nodes))
        assert e.sched.state.index.node("mixed").link_zones == {"mixed-0": 1, "mixed-1": 1, "mixed-2": 2, "mixed-3": 2}
        limits = {"metax-tech.com/sgpu": "2", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "100"}
        pod = e.create_pod(vendor_pod("tw", limits, {"metax-tech.com/sgpu-topology-aware": "true"}))
        out = await e.filter(pod, ["one", "mixed"])
        assert out["NodeNames"] == ["mixed"], out
        [devs, []] = codec.decode_pod_devices(e.placement("default", "tw")["hami.io/metax-sgpu-devices-allocated"])
        assert sorted(d.uuid for d in devs) in (["mixed-0", "mixed-1"], ["mixed-2", "mixed-3"])


async def test_metax_card_keeps_the_qos_policy_it_switches_to_until_it_registers_it(apiserver):
    """HAMi's JitteryQosCache through the extender and the node watch: an idle card registered
    burst-share takes a best-effort pod (any policy on an idle card) and switches to best-effort;
    until the plugin reports that, a burst-share pod is CardQosPolicyMismatch although the card
    still registers burst-share; once it registers best-effort the cache entry is gone."""
    def sgpu_node(qos: str) -> dict:
        obj = node_obj("jq", 0, registered=False)
        obj["metadata"]["annotations"]["metax-tech.com/node-gpu-devices"] = (
            '[{"uuid":"GPU-j","totalDevCount":16,"totalCompute":100,"totalVRam":32768,"healthy":true,'
            f'"qosPolicy":"{qos}"}}]')
        return obj

    limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "20"}
    qos = "metax-tech.com/sgpu-qos-policy"
    async with running_env(apiserver, [sgpu_node("burst-share")]) as e:
        index = e.sched.state.index
        await eventually(lambda: "jq" in index.nodes)
        out = await e.filter(e.create_pod(vendor_pod("be", limits, {qos: "best-effort"})), ["jq"])
        assert out["NodeNames"] == ["jq"]
        assert index.qos_expected == {"GPU-j": "best-effort"}
        out = await e.filter(e.create_pod(vendor_pod("bs", limits, {qos: "burst-share"})), ["jq"])
        assert out["NodeNames"] is None and out["FailedNodes"] == {"jq": "1/1 CardQosPolicyMismatch"}
        node = e.store.get("nodes", "", "jq")
        node["metadata"]["annotations"] = sgpu_node("best-effort")["metadata"]["annotations"]
        e.store.update("nodes", "", "jq", node)
        await eventually(lambda: index.qos_expected == {})
        out = await e.filter(e.create_pod(vendor_pod("be2", limits, {qos: "best-effort"})), ["jq"])
        assert out["NodeNames"] == ["jq"]
