"""Simulated nodes of any vendor in the table, registered as that vendor's HAMi device plugin would.

Our node agent is NVIDIA-only; other vendors' nodes run the vendor's own HAMi device plugin. The
embedded cluster plays that plugin's part for them:

* `--sim-gpus` names a vendor instead of an NVIDIA model: `2xAscend910B3:65536`, `2xMLU:24576`,
  `4xDCU:16384` (a table row's name, or a unique-enough prefix: `Ascend910B` is the first 910B row
  of the table, Ascend910B2). `;` separates per-node groups, given to the nodes in turn:
  `2xNVIDIA A100-SXM4-40GB:40960;2xAscend910B3:65536` makes gpu-node-1 NVIDIA, gpu-node-2 Ascend,
  gpu-node-3 NVIDIA, ...; a group may mix vendors (a node with both).
* Registration (`vendor_registration`, pure): Ascend writes `hami.io/node-register-<commonWord>`
  (JSON, as NVIDIA's), one device per card with `count` = vNPUs of its smallest template (910
  chips with their super-pod `custominfo.NetworkID`, as the plugin writes it), and the
  `huawei.com/<commonWord>` capacity; Cambricon writes nothing but capacity (`mlu.smlu.vcore` 100 a
  card, `mlu.smlu.vmemory` in 256 MiB units, `cambricon.com/mlu`); Hygon writes the legacy colon
  form under `hami.io/node-dcu-register` and `hygon.com/dcunum`.
* Pods bound to a vendor-only node (`VendorPodRunner`) go Running with `hami.io/bind-phase:
  success`, and the node lock is released, as the vendor plugin does after Allocate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import orjson

from hami.device import codec
from hami.device.codec import metax as metax_codec
from hami.device.model import DeviceInfo
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import Vendor, VendorTable
from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.obs.log import get_logger
from hami.sim.kubelet.queuewait import STOPPED, next_or_stop

log = get_logger(__name__)


def vendor_for_model(model: str, table: VendorTable) -> Vendor | None:
    """The non-NVIDIA row `model` names (exactly, else as a prefix, in table order); None: NVIDIA."""
    exact = table.get(model)
    if exact is not None and not HOOKS[exact.hook].nvidia:
        return exact
    for v in table.others:
        if v.name.startswith(model):
            return v
    return None


def _count_per_card(v: Vendor) -> int:
    if v.templates and v.memory_allocatable:
        return max(1, v.memory_allocatable // min(t.memory for t in v.templates))
    return HOOKS[v.hook].sim_shares_per_card


def vendor_registration(node: str, node_index: int, shapes: Sequence[tuple[Vendor, int, int]]) -> tuple[dict, dict]:
    """(annotations, capacity) a node with `shapes` = (vendor, cards, memory MiB) registers."""
    annos: dict[str, str] = {}
    capacity: dict[str, str] = {}
    for v, cards, memory in shapes:
        if v.register_source == "capacity":
            cores = int(capacity.get(v.core_resource, "0")) + v.cores_per_card * cards
            units = int(capacity.get(v.memory_resource, "0")) + memory // v.memory_unit * cards
            if v.core_resource:  # Kunlunxin counts whole cards only
                capacity[v.core_resource] = str(cores)
            if v.memory_resource:  # AWS Neuron and Kunlunxin have none
                capacity[v.memory_resource] = str(units)
            capacity[v.count_resource] = str(int(capacity.get(v.count_resource, "0")) + cards)
            continue
        if v.register_format == "enflame-drs":  # Enflame's plugin: the DRS capacity JSON (6 slices a card)
            annos[v.register_key] = orjson.dumps({
                "devices": [{"index": str(i), "minor": str(i), "capacity": DRS_SLICES} for i in range(cards)],
                "profiles": dict(DRS_PROFILES)}).decode()
            capacity[v.count_resource] = str(cards * DRS_SLICES)
            continue
        count = _count_per_card(v)
        devices = [DeviceInfo(id=f"{v.name}-{node_index:04x}-{i:04x}", count=count, devmem=memory, devcore=100,
                              type=v.name, index=i, numa=0, mode="", health=True) for i in range(cards)]
        if v.register_format == "metax":  # MetaX sGPU: its own JSON, uuids as the plugin names cards
            devices = [replace(d, id=f"GPU-{d.id}", count=16, devcore=100, health=True) for d in devices]
            annos[v.register_key] = metax_codec.encode_sdevices(devices)
            capacity[v.count_resource] = str(cards * 16)
        elif v.register_format == "legacy":
            annos[v.register_key] = codec.encode_node_devices_legacy(devices)
            capacity[v.count_resource] = str(cards * count)
        else:
            if v.node_score == "network":  # the Ascend plugin's getDeviceNetworkID: NPUs 4+ on network 1
                devices = [replace(d, custom_info=f'{{"NetworkID":{network_id(v, d.index)}}}') for d in devices]
            annos[v.register_key] = codec.encode_node_devices(devices)
            capacity[v.count_resource] = str(cards)
    return annos, capacity


# An Enflame S60's DRS profiles as HAMi's tests register them (pkg/device/enflame/device_test.go).
DRS_SLICES = 6
DRS_PROFILES = (("1g.6gb", "0"), ("3g.20gb", "1"), ("6g.40gb", "2"))


def network_id(v: Vendor, index: int) -> int:
    """The NetworkID HAMi's Ascend device plugin registers for NPU `index` of a 910 chip
    (ascend-device-plugin internal/server/register.go): 0 for every 910C NPU (all modules share
    HCCS), else 0 for the first four NPUs and 1 from the fifth on."""
    return 0 if v.name == "Ascend910C" or index <= 3 else 1


class VendorPodRunner:
    """The kubelet + vendor device plugin of a node without NVIDIA GPUs: bound pods start."""

    def __init__(self, client: KubeClient, node: str, lock_key: str = codec.NODE_LOCK_ANNOTATION,
                 own_locks: tuple[str, ...] = ()):
        self.client = client
        self.node = node
        self.lock_key = lock_key
        self.own_locks = own_locks  # vendors' own lock annotations (Cambricon's), released after start
        self.started: set[str] = set()
        self._queue: asyncio.Queue[dict] = asyncio.Queue()
        self.pods = Informer(client, "pods", field_selector=f"spec.nodeName={node}", handler=self._on_pod)

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        if new is None:
            self.started.discard(((old or {}).get("metadata") or {}).get("uid", ""))
            return
        if (new.get("status") or {}).get("phase", "Pending") == "Pending" and new["metadata"].get("uid") not in \
                self.started:
            self.started.add(new["metadata"].get("uid", ""))
            self._queue.put_nowait(new)

    async def run(self, stop: asyncio.Event) -> None:
        watch = asyncio.create_task(self.pods.run(stop), name=f"vendor-kubelet-{self.node}")
        try:
            while not stop.is_set():
                item = await next_or_stop(self._queue, stop)
                if item is STOPPED:
                    break
                await self.start_pod(item)
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    async def start_pod(self, pod: dict) -> None:
        meta = pod["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        try:
            await self.client.patch_pod(ns, name,
                                        {"metadata": {"annotations": {codec.BIND_PHASE_ANNOTATION: "success"}}})
            await self._release_lock(ns, name)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            statuses = [{"name": c["name"], "ready": True, "restartCount": 0, "image": c.get("image", ""),
                         "imageID": "", "containerID": f"sim://{meta.get('uid')}-{c['name']}", "started": True,
                         "state": {"running": {"startedAt": now}}}
                        for c in (pod.get("spec") or {}).get("containers") or []]
            await self.client.request(
                "patch", "pods/status", "PATCH", resource_path("pods", ns, name, "status"),
                body={"status": {"phase": "Running", "hostIP": "127.0.0.1", "startTime": now,
                                 "containerStatuses": statuses}},
                content_type="application/merge-patch+json")
            log.info("Pod running", pod=f"{ns}/{name}", node=self.node, plugin="vendor")
        except ApiError as exc:
            log.warning("Could not start pod on a vendor node", pod=f"{ns}/{name}", node=self.node, error=str(exc))

    async def _release_lock(self, ns: str, name: str) -> None:
        node = await self.client.get_node(self.node)
        annos = (node.get("metadata") or {}).get("annotations") or {}
        drop = {k: None for k in self.own_locks if k in annos}
        value = annos.get(self.lock_key)
        if value is not None and value.endswith(codec.node_lock_owner_suffix(ns, name)):
            drop[self.lock_key] = None
        if drop:
            await self.client.patch_node(self.node, {"metadata": {"annotations": drop}})
