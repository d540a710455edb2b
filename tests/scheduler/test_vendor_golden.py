"""HAMi's vendor test cases, one golden file per vendor (tests/scheduler/data/vendors/<vendor>.json).

Each file names the HAMi test files it was ported from (`hami_tests`) and what it leaves out
(`not_ported`). Sections, all run against the shipped vendor table:

* `register`: a node's annotations/capacity -> that vendor's devices, or the error (naming the key);
* `requests`: a container's limits -> the vendor's ContainerDeviceRequest (None: asks for none);
* `fit`: HAMi's vendor Fit over a device list as given (walked from the end); `{vendor}` in an
  annotation key is the row's name; without a `vendor` the case runs for every row of the family
  (HAMi's TestDevices_Fit runs every Ascend chip);
* `score`: the vendor's ScoreNode term (scheduler.vendorscore) for the pod's devices on a node
  (`node_devices`: the node's devices and their use before the pod; `pod_devices`: per container;
  `policy`: the node scheduler policy, binpack unless named; `node_annotations`: MetaX GPU's
  topology annotations);
* `patch`: the pod annotations written for an allocation;
* `admission`: the mutating webhook on a one-container pod (HAMi MutateAdmission).

A case may carry `row` (changes to the vendor's row, as a device config would make: Ascend's
`superPod` is `module_pairs`), `annotations`/`pod_annotations` (the pod's) and, per device, `mode`
(Ascend: `hami-core` on a node that runs HAMi-core), `custominfo` (Ascend: `{"NetworkID": n}`,
as the device plugin registers it), `online`/`offline` (MetaX: the app-class pods on the card) and
`link_zone` (MetaX: its MetaLink zone); a case's `qos_expected` is MetaX's jittery QoS cache.

Adding a vendor whose rules match an existing hook is a row in config/vendors.yaml plus one file here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hami.config import default_vendor_table
from hami.device.allocation import allocation_annotations
from hami.device.codec import CodecError
from hami.device.codec.ascend import network_ids
from hami.device.codec.cards import node_topology, topology_info
from hami.device.codec.enflame import drs_node
from hami.device.codec.golang import go_json_value
from hami.device.codec.vastai import die_cards
from hami.device.model import ContainerDevice, ContainerDeviceRequest, DeviceInfo
from hami.device.vendorregister import decode_one
from hami.device.vendorrequest import vendor_request
from hami.scheduler.admission.webhook import WebhookSettings, mutate_pod
from hami.scheduler.placement.fit import fit_vendor_devices
from hami.scheduler.placement.usage import DeviceState, NodeUsage
from hami.scheduler.placement.vendorscore import vendor_score

DATA = Path(__file__).parent / "data" / "vendors"
FILES = sorted(DATA.glob("*.json"))
TABLE = default_vendor_table()


def _row(vendor: str, case: dict):
    v = TABLE.get(vendor)
    if "row" not in case:
        return v
    return replace(v, **{k: tuple(x) if isinstance(x, list) else x for k, x in case["row"].items()})


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _cases(section: str):
    out = []
    for path in FILES:
        doc = _load(path)
        family = doc["vendor_family"]
        for case in doc.get(section, ()):
            vendors = [case["vendor"]] if "vendor" in case else [
                v.name for v in TABLE.vendors if v.family == family]
            for name in vendors:
                out.append(pytest.param(name, case, id=f"{path.stem}:{name}:{case['name']}"))
    return out


def test_every_golden_file_names_its_hami_sources_and_a_table_family():
    assert FILES, "no golden files"
    families = {v.family for v in TABLE.vendors}
    for path in FILES:
        doc = _load(path)
        assert doc["hami_tests"], path
        assert doc["vendor_family"] in families, path


@pytest.mark.parametrize(("vendor", "case"), _cases("register"))
def test_register(vendor, case):
    v = TABLE.get(vendor)
    annos, capacity = case.get("annotations", {}), case.get("capacity", {})
    if "error" in case or "error_prefix" in case:
        with pytest.raises(CodecError) as err:
            decode_one(v, case["node"], annos, capacity, case.get("labels"))
        if "error" in case:
            assert str(err.value) == case["error"]
        else:
            assert str(err.value).startswith(case["error_prefix"])
        return
    got = decode_one(v, case["node"], annos, capacity, case.get("labels"))
    want = case["devices"]
    assert len(got) == len(want)
    for d, w in zip(got, want, strict=True):
        assert d.vendor == vendor
        for key, value in w.items():
            assert getattr(d, key) == value, key


@pytest.mark.parametrize(("vendor", "case"), _cases("requests"))
def test_requests(vendor, case):
    requests = {**case["limits"], **case.get("requests_only", {})}
    got = vendor_request({"resources": {"limits": case["limits"], "requests": requests}}, _row(vendor, case))
    if case["want"] is None:
        assert got is None
    else:
        assert got == ContainerDeviceRequest(**case["want"])


@pytest.mark.parametrize(("vendor", "case"), _cases("fit"))
def test_fit(vendor, case):
    v = _row(vendor, case)
    devices = []
    for d in case["devices"]:
        s = DeviceState(id=d["id"], index=d["index"], count=d["count"], totalmem=d["totalmem"],
                        totalcore=d["totalcore"], type=case.get("device_type", vendor), health=d["health"],
                        vendor=vendor, mode=d.get("mode", ""))
        s.used, s.usedmem, s.usedcores = d["used"], d["usedmem"], d["usedcores"]
        devices.append(s)
    r = dict(case["request"])
    r.setdefault("type", vendor)
    annos = {k.replace("{vendor}", vendor): val for k, val in case["annotations"].items()}
    mutex = annos.get("hami.io/gpu-scheduler-policy") == "mutex"
    same = frozenset(case["allocated"]) if "allocated" in case else None  # earlier containers' cards
    fits, chosen, reason = fit_vendor_devices(devices, ContainerDeviceRequest(**r), v, annos, is_mutex=mutex,
                                              same_card=same, networks=_networks(case["devices"]),
                                              app_classes=_app_classes(case["devices"]),
                                              link_zones=_link_zones(case["devices"]),
                                              qos_expected=case.get("qos_expected"), dies=_dies(case["devices"]),
                                              drs=_drs(case["devices"]))
    assert fits is case["fits"]
    assert reason == case["reason"]
    if fits:
        assert [c.uuid for c in chosen] == case["ids"]
        assert all(c.type == vendor for c in chosen)
        if "want_shares" in case:  # (memory MiB, cores) each chosen device books
            assert [[c.usedmem, c.usedcores] for c in chosen] == case["want_shares"]


def _link_zones(devices: list[dict]):
    """MetaX: each card's MetaLink zone (`link_zone`, as its register JSON's linkZone)."""
    return {d["id"]: d["link_zone"] for d in devices if d.get("link_zone")} or None


def _app_classes(devices: list[dict]):
    """MetaX: the online and offline pods on each card (HAMi's DeviceUsage.PodInfos)."""
    return {d["id"]: (d.get("online", 0), d.get("offline", 0)) for d in devices
            if d.get("online") or d.get("offline")}


def _dies(devices: list[dict]):
    """Vastai: each die's DeviceStrategy and card (AIC) as the scheduler reads its custominfo."""
    return die_cards(DeviceInfo(d["id"], 1, 0, 0, "", custom_info=go_json_value(d["custominfo"]))
                     for d in devices if "custominfo" in d)


def _drs(devices: list[dict]):
    """Enflame DRS: the node's profiles and cards as the scheduler reads their custominfo."""
    return drs_node(DeviceInfo(d["id"], 1, 0, 0, "", custom_info=go_json_value(d["custominfo"]))
                    for d in devices if "custominfo" in d)


def _networks(devices: list[dict]):
    """The node's NetworkIDs as the scheduler reads them from each device's registered custominfo."""
    return network_ids(DeviceInfo(d["id"], 1, 0, 0, "", custom_info=go_json_value(d["custominfo"]))
                       for d in devices if "custominfo" in d)


@pytest.mark.parametrize(("vendor", "case"), _cases("score"))
def test_score(vendor, case):
    states = []
    for d in case["node_devices"]:
        s = DeviceState(id=d["id"], index=d["index"], type=d.get("type", vendor), vendor=d.get("vendor", vendor))
        s.used = d.get("used", 0)
        states.append(s)
    node = NodeUsage("n", states, networks=_networks(case["node_devices"]))
    node.app_classes = _app_classes(case["node_devices"])
    node.link_zones = _link_zones(case["node_devices"])
    node.dies = _dies(case["node_devices"])
    topo = case.get("node_annotations", {})  # MetaX GPU: the node's topology annotations
    node.topology = node_topology([DeviceInfo("card", 1, 0, 0, "", custom_info=topology_info(
        topo.get("metax-tech.com/gpu.topology.losses"), topo.get("metax-tech.com/gpu.topology.scores")))])
    pod = tuple(tuple(ContainerDevice(c["uuid"], c.get("type", vendor), 0, c.get("usedcores", 0), c.get("idx", 0))
                      for c in ctr) for ctr in case["pod_devices"])
    row = _row(vendor, case)
    assert row.node_score == case["term"]
    assert vendor_score(node, pod, (row,), case.get("policy", "binpack"), case.get("pod_annotations",
                                                                                   {})) == case["want"]


@pytest.mark.parametrize(("vendor", "case"), _cases("patch"))
def test_patch(vendor, case):
    devices = tuple(tuple(ContainerDevice(**d) for d in ctr) for ctr in case["devices"])
    table = TABLE.with_vendor(_row(vendor, case))
    ctrs = [{"resources": {"limits": lim}} for lim in case.get("containers_limits", ())]
    for ctr, name in zip(ctrs, case.get("container_names", ()), strict=False):
        ctr["name"] = name
    pod = {"metadata": {"annotations": case.get("pod_annotations", {})}, "spec": {"containers": ctrs}}
    drs = _drs(case["node_devices"]) if "node_devices" in case else None  # Enflame DRS: the node's profiles
    assert allocation_annotations(devices, table, case["now"], case.get("node", ""), pod, drs=drs) == case["want"]


@pytest.mark.parametrize(("vendor", "case"), _cases("admission"))
def test_admission(vendor, case):
    """MutateAdmission: the webhook recognises the vendor's resource (the pod goes to our
    scheduler) and applies the vendor's rules, HAMi's errors as admission errors (code 500)."""
    ctr = {"name": "c", "image": "x", "resources": {"limits": dict(case["limits"])}}
    if "requests" in case:
        ctr["resources"]["requests"] = dict(case["requests"])
    meta = {"name": "p", "namespace": "default"}
    if "pod_annotations" in case:
        meta["annotations"] = dict(case["pod_annotations"])
    pod = {"metadata": meta, "spec": {"containers": [ctr]}}
    if "runtime_class" in case:
        pod["spec"]["runtimeClassName"] = case["runtime_class"]
    settings = WebhookSettings(scheduler_name="hami-scheduler", vendors=TABLE.with_vendor(_row(vendor, case)))
    d = mutate_pod(pod, settings)
    assert d.allowed is case["allowed"]
    if not case["allowed"]:
        assert (d.code, d.message) == (case["code"], case["message"])
        return
    spec = d.pod["spec"]
    assert (spec.get("schedulerName") == "hami-scheduler") is case["scheduled"]
    if "want_limits" in case:
        assert spec["containers"][0]["resources"]["limits"] == case["want_limits"]
    if "want_requests" in case:
        assert spec["containers"][0]["resources"]["requests"] == case["want_requests"]
    if "want_pod_annotations" in case:
        assert d.pod["metadata"].get("annotations") == case["want_pod_annotations"]
    if "want_lifecycle" in case:
        assert spec["containers"][0].get("lifecycle") == case["want_lifecycle"]
    if "want_env" in case:
        assert spec["containers"][0].get("env") == case["want_env"]
    if "want_runtime_class" in case:
        assert spec.get("runtimeClassName") == case["want_runtime_class"]
