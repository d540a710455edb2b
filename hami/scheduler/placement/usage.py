"""Per-node device usage index, updated incrementally from pod events (pure, no I/O).

HAMi recomputes every node's usage from every cached pod on each /filter
(`getNodesUsage`, scheduler.go:744-863). Here the same numbers are kept current: a pod's
collapsed usage (spec §7.3, `CollapseInitContainerUsage`) is added once when the pod is seen
with `hami.io/vgpu-node` and removed when it is deleted or reaches a terminal phase.

API
---
- `DeviceState`: one GPU with registration data and mutable `used/usedmem/usedcores`
  (Go `DeviceUsage`); `clone()` copies it for a fit attempt.
- `NodeUsage`: `name`, `devices` (list of DeviceState in registration order), `by_id`,
  `cordoned` (frozenset of UUIDs from `hami.io/device-cordon`), `pair_scores`
  (`{uuid: {uuid: score}}` from `hami.io/node-nvidia-score`), `score()` (node score, §6.1,
  float32, cached until usage changes), `snapshot()` (fresh DeviceState copies),
  `fail_summary` (the fit's failure fast-path cache; None after any usage or cordon change).
- `UsageIndex`:
  - `set_node(name, devices, cordoned=(), pair_scores=None)`: register or re-register a node
    from decoded `DeviceInfo`s; usage of pods already known on it is re-applied.
  - `usage_for(name, devices, ...)`: the same, not stored (full-Nodes /filter mode).
  - `remove_node(name)`; `node(name)` -> NodeUsage | None; `nodes` (dict).
  - `add_pod(pod_key, node, pod_devices, *, namespace="", num_init=0, init_released=False)`:
    idempotent (same data again is a no-op; new data replaces the old). `pod_devices` is the
    decoded `hami.io/vgpu-devices-allocated` (init containers first). A pod counts once.
  - `remove_pod(pod_key)`: idempotent; use it for deleted and terminal (Succeeded/Failed) pods.
  - `pod(pod_key)` -> PodRecord | None.
  - quotas: `set_quota(namespace, name, hard)` / `remove_quota(namespace, name)` with the
    ResourceQuota `spec.hard` mapping (ints); `quota_view(namespace)` -> QuotaView | None.
- `init_released(pod)`: every init container of the pod dict exited 0 (usage shrinks to app-only).
- `collapse_usage(containers, num_init)` -> `{uuid: (mem, cores, slots)}` (spec §7.3).
- `QuotaView.fits(mem, cores)`: HAMi `FitQuota` for one namespace.
"""

from __future__ import annotations

import sys
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami.device.codec.ascend import network_ids
from hami.device.codec.cards import node_topology
from hami.device.codec.enflame import DrsNode, drs_node
from hami.device.codec.metax import link_zones
from hami.device.codec.vastai import die_cards
from hami.device.model import (
    NVIDIA,
    ContainerDevice,
    ContainerDevices,
    DeviceInfo,
    MigPlacement,
    MigProfile,
    NvidiaConfig,
)
from hami.scheduler.placement.changelog import ChangeLog
from hami.scheduler.placement.policy import F32_EXACT, F32_PACK, F32_UNPACK, f32
from hami.scheduler.placement.vendorrules import jittery_qos

_TEN = f32(10.0)
_NO_PLACEMENTS: tuple[()] = ()


class DeviceState:
    """A registered device plus what is allocated on it (Go `DeviceUsage`), mutable."""

    __slots__ = (
        "id", "index", "count", "totalmem", "totalcore", "type", "numa", "mode", "health",
        "vendor", "mig_profiles", "used", "usedmem", "usedcores", "mig_in_use", "is_nvidia", "score_memo",
    )

    def __init__(
        self,
        id: str,
        index: int = 0,
        count: int = 10,
        totalmem: int = 0,
        totalcore: int = 100,
        type: str = "NVIDIA",
        numa: int = 0,
        mode: str = "",
        health: bool = True,
        used: int = 0,
        usedmem: int = 0,
        usedcores: int = 0,
        vendor: str = "NVIDIA",
        mig_profiles: tuple[MigProfile, ...] = (),
        mig_in_use: list[MigPlacement] | tuple[()] | None = None,
    ):
        self.id = id
        self.index = index
        self.count = count
        self.totalmem = totalmem
        self.totalcore = totalcore
        self.type = type
        self.numa = numa
        self.mode = mode
        self.health = health
        self.vendor = vendor
        self.mig_profiles = mig_profiles
        self.used = used
        self.usedmem = usedmem
        self.usedcores = usedcores
        # Until a MIG placement is taken here (`hold_mig` makes it a list) every GPU shares one
        # empty tuple: an empty list per GPU is 56 bytes times every GPU of the cluster.
        self.mig_in_use = mig_in_use if mig_in_use is not None else _NO_PLACEMENTS
        self.is_nvidia = "nvidia" in type.lower()
        # fit.device_order's last device score: (weights, used, usedcores, usedmem, score); valid while
        # those match (the score of a device whose type is not the request's depends on nothing else)
        self.score_memo: tuple | None = None

    @classmethod
    def from_info(cls, d: DeviceInfo) -> DeviceState:
        # Interned: the pods placed on this GPU name it with the same string object (add_pod).
        return cls(
            id=sys.intern(d.id), index=d.index, count=d.count, totalmem=d.devmem, totalcore=d.devcore,
            type=sys.intern(d.type), numa=d.numa, mode=sys.intern(d.mode), health=d.health, vendor=d.vendor,
            mig_profiles=d.mig_profiles,
        )

    def hold_mig(self, placement: MigPlacement) -> None:
        """A MIG placement taken on this GPU."""
        if self.mig_in_use.__class__ is not list:
            self.mig_in_use = list(self.mig_in_use)
        self.mig_in_use.append(placement)

    def clone(self) -> DeviceState:
        c = DeviceState.__new__(DeviceState)
        c.id = self.id
        c.index = self.index
        c.count = self.count
        c.totalmem = self.totalmem
        c.totalcore = self.totalcore
        c.type = self.type
        c.numa = self.numa
        c.mode = self.mode
        c.health = self.health
        c.vendor = self.vendor
        c.mig_profiles = self.mig_profiles
        c.used = self.used
        c.usedmem = self.usedmem
        c.usedcores = self.usedcores
        c.mig_in_use = list(self.mig_in_use) if self.mig_in_use.__class__ is list else self.mig_in_use
        c.is_nvidia = self.is_nvidia
        c.score_memo = self.score_memo
        return c

    def __repr__(self) -> str:
        return (
            f"DeviceState({self.id!r}, idx={self.index}, used={self.used}/{self.count}, "
            f"mem={self.usedmem}/{self.totalmem}, cores={self.usedcores}/{self.totalcore}, "
            f"numa={self.numa}, health={self.health})"
        )


def node_score(devices: Iterable[DeviceState]) -> float:
    """HAMi ComputeDefaultScore (§6.1): 10*(Σused/Σcount + Σcores/Σtotalcore + Σmem/Σtotalmem).

    float32 arithmetic as in Go; 0 when any denominator is 0.
    """
    used = cores = mem = total = tcore = tmem = 0
    for d in devices:
        used += d.used
        cores += d.usedcores
        mem += d.usedmem
        total += d.count
        tcore += d.totalcore
        tmem += d.totalmem
    return score_from_sums(used, cores, mem, total, tcore, tmem)


def score_from_sums(used: int, cores: int, mem: int, total: int, tcore: int, tmem: int) -> float:
    if total == 0 or tcore == 0 or tmem == 0:
        return 0.0
    if 0 <= used <= F32_EXACT and 0 <= cores <= F32_EXACT and 0 <= mem <= F32_EXACT \
            and 0 < total <= F32_EXACT and 0 < tcore <= F32_EXACT and 0 < tmem <= F32_EXACT:
        # float32(x) == x for these, and int / int is the correctly rounded quotient: one rounding
        # to float32 per ratio, as Go's float32 division of the exact operands (policy.device_score)
        a = F32_UNPACK(F32_PACK(used / total))[0]
        b = F32_UNPACK(F32_PACK(cores / tcore))[0]
        c = F32_UNPACK(F32_PACK(mem / tmem))[0]
        return F32_UNPACK(F32_PACK(_TEN * F32_UNPACK(F32_PACK(F32_UNPACK(F32_PACK(a + b))[0] + c))[0]))[0]
    a = f32(f32(used) / f32(total))
    b = f32(f32(cores) / f32(tcore))
    c = f32(f32(mem) / f32(tmem))
    return f32(_TEN * f32(f32(a + b) + c))


class NodeUsage:
    """Devices of one node with their current usage.

    `score_value` (node score, §6.1) and the per-policy device orders are cached and refreshed by
    `invalidate()`, which every usage change calls; it also logs the name in the index's
    `changes` (changelog.ChangeLog), which /filter's kept candidate order reads.
    """

    __slots__ = (
        "name", "devices", "by_id", "cordoned", "pair_scores", "score_value", "orders",
        "nvidia_count", "all_nvidia", "request_free", "has_mig", "fail_summary", "changes", "networks",
        "app_classes", "link_zones", "topology", "qos_expected", "dies", "drs",
    )

    def __init__(
        self,
        name: str,
        devices: list[DeviceState],
        cordoned: Iterable[str] = (),
        pair_scores: Mapping[str, Mapping[str, int]] | None = None,
        networks: Mapping[str, int | None] | None = None,
        link_zones: Mapping[str, int] | None = None,
        topology: Mapping[str, str] | None = None,
    ):
        self.name = name
        # Ascend super-pod NetworkIDs by device id (codec.ascend.network_ids); None on other nodes.
        self.networks = networks
        # MetaX sGPU: {card id: [online, offline]} pods on the card (UsageIndex); None until one runs.
        self.app_classes: dict[str, list[int]] | None = None
        # MetaX sGPU MetaLink zones by card id (codec.metax.link_zones); None on other nodes.
        self.link_zones = link_zones
        # MetaX GPU: the node's topology loss / score annotations (codec.cards.node_topology).
        self.topology = topology
        # MetaX sGPU: the index's QoS policies cards are switching to (UsageIndex.expect_qos).
        self.qos_expected: dict[str, str] | None = None
        # Vastai: {die id: (DeviceStrategy, AIC card id)} (codec.vastai.die_cards); None elsewhere.
        self.dies: Mapping[str, tuple[str | None, str | None]] | None = None
        # Enflame DRS: the node's profiles and each card's index and minor (codec.enflame.drs_node).
        self.drs: DrsNode | None = None
        self.devices = devices
        self.by_id = {d.id: d for d in devices}
        self.cordoned = frozenset(cordoned)
        self.pair_scores = pair_scores or {}
        self.nvidia_count = sum(1 for d in devices if d.is_nvidia)
        self.all_nvidia = self.nvidia_count == len(devices)
        # Device scores ignore the request unless a device's type is exactly the request type
        # "NVIDIA" (§6.2); then the sorted order can be cached per policy.
        self.request_free = all(d.type != NVIDIA for d in devices)
        self.has_mig = any(d.mode == "mig" for d in devices)
        self.orders: dict = {}
        # Opaque per-usage summary the fit keeps for its failure fast path (fit._fail_summary);
        # None until first needed, dropped with the orders on every usage change.
        self.fail_summary = None
        self.score_value = node_score(devices)
        # The UsageIndex's ChangeLog once the node is in it: every score change is logged there.
        self.changes: ChangeLog | None = None

    def score(self) -> float:
        return self.score_value

    def invalidate(self) -> None:
        """Usage changed: recompute the node score, drop cached device orders."""
        self.score_value = node_score(self.devices)
        if self.changes is not None:
            self.changes.touch(self.name)
        if self.orders:
            self.orders = {}
        self.fail_summary = None

    def snapshot(self) -> list[DeviceState]:
        return [d.clone() for d in self.devices]


def _count_class(node: NodeUsage, rec, sign: int) -> None:
    """HAMi lists a pod in a card's PodInfos once per container device naming the card; MetaX's
    sGPU fit counts the online and offline pods there (pkg/device/metax/sdevice.go checkAppClass)."""
    counts = node.app_classes
    if counts is None:
        counts = node.app_classes = {}
    slot = 0 if rec.app_class == "online" else 1
    for ctr in rec.devices:
        for cd in ctr:
            c = counts.setdefault(cd.uuid, [0, 0])
            c[slot] += sign
            if c[0] == 0 and c[1] == 0:
                del counts[cd.uuid]


def _interned(cd: ContainerDevice) -> ContainerDevice:
    """The same device slice naming its GPU and type with interned strings: 40,000 pods keep one
    copy of each UUID (shared with the node's DeviceState) instead of one per pod."""
    if cd.__class__ is not ContainerDevice:
        return cd
    uuid, type_ = sys.intern(cd.uuid), sys.intern(cd.type)
    if uuid is cd.uuid and type_ is cd.type:
        return cd
    return ContainerDevice(uuid, type_, cd.usedmem, cd.usedcores, cd.idx)


# --------------------------------------------------------------------------- collapse

def collapse_usage(containers: Sequence[ContainerDevices], num_init: int) -> dict[str, tuple[int, int, int]]:
    """CollapseInitContainerUsage (§7.3): per UUID (mem, cores, slots).

    mem = max(max over init containers, sum over app containers), same for cores;
    slots = max(1 if any init use, number of app-container occurrences, 1).
    Containers with index < num_init are init containers.
    """
    if num_init == 0 and len(containers) == 1 and len(containers[0]) == 1:  # one card, one container
        dev = containers[0][0]
        return {dev.uuid: (max(dev.usedmem, 0), max(dev.usedcores, 0), 1)}
    init: dict[str, list[int]] = {}
    app: dict[str, list[int]] = {}
    for cidx, ctr in enumerate(containers):
        if cidx < num_init:
            for dev in ctr:
                s = init.get(dev.uuid)
                if s is None:
                    init[dev.uuid] = [dev.usedmem, dev.usedcores, 1]
                else:
                    s[0] = max(s[0], dev.usedmem)
                    s[1] = max(s[1], dev.usedcores)
        else:
            for dev in ctr:
                s = app.get(dev.uuid)
                if s is None:
                    app[dev.uuid] = [dev.usedmem, dev.usedcores, 1]
                else:
                    s[0] += dev.usedmem
                    s[1] += dev.usedcores
                    s[2] += 1
    out: dict[str, tuple[int, int, int]] = {}
    for uuid in sorted(set(init) | set(app)):
        i = init.get(uuid, (0, 0, 0))
        a = app.get(uuid, (0, 0, 0))
        out[uuid] = (max(i[0], a[0]), max(i[1], a[1]), max(i[2], a[2], 1))
    return out


def steady_usage(containers: Sequence[ContainerDevices], num_init: int) -> dict[str, tuple[int, int, int]]:
    """Usage once every init container has exited 0: app containers only (§7.1)."""
    return collapse_usage(containers[num_init:], 0)


def init_released(pod: dict) -> bool:
    """True when the pod has init containers and every one terminated with exit code 0."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    n_init = len((pod.get("spec") or {}).get("initContainers") or [])
    if not n_init or len(statuses) < n_init:
        return False
    for st in statuses:
        term = (st.get("state") or {}).get("terminated")
        if not term or term.get("exitCode", 1) != 0:
            return False
    return True


# --------------------------------------------------------------------------- quota

@dataclass(slots=True)
class Quota:
    """One namespace resource: `used` (collapsed usage of its pods) and `limit` (0 = none)."""

    used: int = 0
    limit: int = 0


class QuotaView:
    """HAMi FitQuota for one namespace (`pkg/device/quota.go`)."""

    __slots__ = ("mem", "cores", "memory_factor")

    def __init__(self, mem: Quota | None, cores: Quota | None, memory_factor: int = 1):
        self.mem = mem
        self.cores = cores
        self.memory_factor = memory_factor

    def fits(self, mem: int, cores: int) -> bool:
        q = self.mem
        if q is not None:
            limit = q.limit * self.memory_factor if self.memory_factor > 1 else q.limit
            if limit != 0 and q.used + mem > limit:
                return False
        q = self.cores
        if q is not None and q.limit != 0 and q.used + cores > q.limit:
            return False
        return True


@dataclass(frozen=True, slots=True)
class PodRecord:
    node: str
    namespace: str
    devices: tuple[ContainerDevices, ...]
    num_init: int
    init_released: bool
    mig: tuple[tuple[str, MigPlacement], ...] = ()
    # MetaX sGPU `metax-tech.com/sgpu-app-class` (online / offline; "" for any other pod).
    app_class: str = ""

    @property
    def usage(self) -> tuple[tuple[str, int, int, int], ...]:
        """The collapsed usage, (uuid, mem, cores, slots) sorted by uuid.

        Worked out from `devices` at each read instead of stored: it is read when the pod leaves,
        when its node registers again and by preemption's quota moves, while a stored copy cost two
        tuples per pod for every cached pod.
        """
        devices = self.devices
        if not self.num_init and len(devices) == 1 and len(devices[0]) == 1:  # one card, one container
            dev = devices[0][0]  # (collapse_usage's own first case, without its dict)
            return ((dev.uuid, max(dev.usedmem, 0), max(dev.usedcores, 0), 1),)
        collapsed = (steady_usage if self.init_released else collapse_usage)(devices, self.num_init)
        return tuple([(u, m, c, s) for u, (m, c, s) in collapsed.items()])


APP_CLASSES = ("online", "offline")


class UsageIndex:
    """Nodes, their device usage and the pods that account for it."""

    def __init__(self, nvidia: NvidiaConfig | None = None, vendors=None):
        cfg = nvidia or NvidiaConfig()
        self.mem_resource = cfg.resource_memory_name
        self.core_resource = cfg.resource_core_name
        self.memory_factor = cfg.memory_factor
        # Other vendors (a hami.device.vendors.VendorTable): device type -> (memory, cores)
        # resource their quota counts in, as HAMi's per-device FitQuota.
        self.vendor_resources: dict[str, tuple[str, str]] = {
            v.name: (v.memory_resource, v.core_resource) for v in (vendors.others if vendors is not None else ())}
        self._quota_names = frozenset(
            n for n in (self.mem_resource, self.core_resource,
                        *(r for pair in self.vendor_resources.values() for r in pair)) if n)
        self.nodes: dict[str, NodeUsage] = {}
        # Names whose score, registration or cordon changed, for /filter's kept candidate order (nodeorder.py).
        self.changes = ChangeLog()
        self._pods: dict[str, PodRecord] = {}
        # node -> its pods' keys, a dict used as a set: at 8 keys 272 bytes against a set's 728
        self._pods_by_node: dict[str, dict[str, None]] = {}
        # namespace -> resource name -> quota; quota objects: (namespace, name) -> {resource: limit}
        self._quota: dict[str, dict[str, Quota]] = {}
        self._quota_objects: dict[tuple[str, str], dict[str, int]] = {}
        # MetaX sGPU: card id -> the QoS policy it is switching to (HAMi's JitteryQosCache).
        self.qos_expected: dict[str, str] = {}

    # ---------------------------------------------------------------- nodes

    def node(self, name: str) -> NodeUsage | None:
        return self.nodes.get(name)

    def set_node(
        self,
        name: str,
        devices: Sequence[DeviceInfo],
        cordoned: Iterable[str] = (),
        pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    ) -> NodeUsage:
        node = self.usage_for(name, devices, cordoned, pair_scores)
        self.nodes[name] = node
        node.changes = self.changes
        node.invalidate()
        return node

    def usage_for(
        self,
        name: str,
        devices: Sequence[DeviceInfo],
        cordoned: Iterable[str] = (),
        pair_scores: Mapping[str, Mapping[str, int]] | None = None,
    ) -> NodeUsage:
        """A NodeUsage for `devices` with the known pods on `name` applied, not stored.

        For full-Nodes /filter requests, where the register annotation comes with the request.
        """
        node = NodeUsage(name, [DeviceState.from_info(d) for d in devices], cordoned, pair_scores,
                         network_ids(devices), link_zones(devices), node_topology(devices))
        node.dies = die_cards(devices)
        node.drs = drs_node(devices)
        if self.qos_expected:  # JitteryQosCache.Sync: a card registering the expected QoS is done
            expected = self.qos_expected
            for d in devices:
                if d.id in expected and expected[d.id] == d.mode:
                    del expected[d.id]
            node.qos_expected = self.qos_expected
        for key in self._pods_by_node.get(name, ()):
            rec = self._pods[key]
            self._apply(node, rec.usage, +1, rec.mig)
            if rec.app_class:
                _count_class(node, rec, +1)
        return node

    def set_cordon(self, name: str, cordoned: Iterable[str]) -> None:
        node = self.nodes.get(name)
        if node is not None:
            node.cordoned = frozenset(cordoned)
            node.fail_summary = None
            self.changes.touch(name)  # what a card offers changed (nodeorder's free-memory bounds)

    def remove_node(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is not None:
            node.changes = None
            self.changes.touch(name)

    def expect_qos(self, node: str, devices: Sequence[ContainerDevices], request_qos: str,
                   types: Container[str]) -> None:
        """MetaX sGPU: remember the QoS policy the cards a pod was just given switch to (HAMi's
        addJitteryQos) until their registration shows it (dropped in usage_for)."""
        n = self.nodes.get(node)
        if n is None:
            return
        registered = {d.id: d.mode for d in n.devices if d.type in types}
        got = jittery_qos(request_qos, [cd for ctr in devices for cd in ctr if cd.type in types], registered)
        if got:
            self.qos_expected.update(got)
            n.qos_expected = self.qos_expected
            n.fail_summary = None

    # ---------------------------------------------------------------- pods

    def pod(self, pod_key: str) -> PodRecord | None:
        return self._pods.get(pod_key)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def add_pod(
        self,
        pod_key: str,
        node: str,
        pod_devices: Sequence[ContainerDevices],
        *,
        namespace: str = "",
        num_init: int = 0,
        init_released: bool = False,
        mig: Sequence[tuple[str, MigPlacement]] = (),
        app_class: str = "",
    ) -> bool:
        """Account a pod's devices on `node`; returns False when nothing changed.

        `mig` lists (gpu uuid, placement) pairs from `hami.io/vgpu-mig-allocations`; `app_class`
        the pod's MetaX sGPU app class, counted per card it uses (NodeUsage.app_classes).
        """
        devices = tuple([tuple([_interned(cd) for cd in c]) for c in pod_devices])
        mig = tuple(mig)
        if app_class not in APP_CLASSES:
            app_class = ""
        old = self._pods.get(pod_key)
        if (
            old is not None and old.node == node and old.devices == devices
            and old.num_init == num_init and old.init_released == init_released
            and old.namespace == namespace and old.mig == mig and old.app_class == app_class
        ):
            return False
        if old is not None:
            self.remove_pod(pod_key)
        rec = PodRecord(node, namespace, devices, num_init, init_released, mig, app_class)
        usage = rec.usage
        self._pods[pod_key] = rec
        keys = self._pods_by_node.get(node)
        if keys is None:
            keys = self._pods_by_node[node] = {}
        keys[pod_key] = None
        n = self.nodes.get(node)
        if n is not None:
            self._apply(n, usage, +1, mig)
            if app_class:
                _count_class(n, rec, +1)
        self._quota_add(namespace, usage, +1, devices)
        return True

    def remove_pod(self, pod_key: str) -> bool:
        rec = self._pods.pop(pod_key, None)
        if rec is None:
            return False
        keys = self._pods_by_node.get(rec.node)
        if keys is not None:
            keys.pop(pod_key, None)
            if not keys:
                del self._pods_by_node[rec.node]
        usage = rec.usage
        n = self.nodes.get(rec.node)
        if n is not None:
            self._apply(n, usage, -1, rec.mig)
            if rec.app_class:
                _count_class(n, rec, -1)
        self._quota_add(rec.namespace, usage, -1, rec.devices)
        return True

    def pods_on(self, node: str) -> tuple[str, ...]:
        return tuple(sorted(self._pods_by_node.get(node, ())))

    @staticmethod
    def _apply(node: NodeUsage, usage, sign: int, mig=()) -> None:
        by_id = node.by_id
        for uuid, mem, cores, slots in usage:
            d = by_id.get(uuid)
            if d is None:
                continue
            d.used += sign * max(slots, 1)
            d.usedmem += sign * mem
            d.usedcores += sign * cores
        for uuid, placement in mig:
            d = by_id.get(uuid)
            if d is None:
                continue
            if sign > 0:
                d.hold_mig(placement)
            elif placement in d.mig_in_use:
                d.mig_in_use.remove(placement)
        node.invalidate()

    # ---------------------------------------------------------------- quota

    def _quota_add(self, namespace: str, usage, sign: int, devices=()) -> None:
        if self.vendor_resources:
            vendor_of = {cd.uuid: cd.type for ctr in devices for cd in ctr if cd.type in self.vendor_resources}
            if vendor_of:
                # Each vendor's devices count in that vendor's quota resources.
                for name, (mres, cres) in self.vendor_resources.items():
                    part = [u for u in usage if vendor_of.get(u[0]) == name]
                    if part:
                        self._quota_put(namespace, mres, cres, part, sign)
                usage = [u for u in usage if u[0] not in vendor_of]
        self._quota_put(namespace, self.mem_resource, self.core_resource, usage, sign)

    def _quota_put(self, namespace: str, mem_resource: str, core_resource: str, usage, sign: int) -> None:
        mem = cores = 0
        for u in usage:
            mem += u[1]
            cores += u[2]
        if not mem and not cores:
            return
        ns = self._quota.setdefault(namespace, {})
        for res, val in ((mem_resource, mem), (core_resource, cores)):
            if not res:
                continue
            q = ns.get(res)
            if q is None:
                q = ns[res] = Quota()
            q.used = q.used + val if sign > 0 else max(0, q.used - val)

    def set_quota(self, namespace: str, name: str, hard: Mapping[str, int]) -> None:
        """A ResourceQuota's `spec.hard` (already parsed to ints); only `limits.<mem|core>` count."""
        limits: dict[str, int] = {}
        for key, value in hard.items():
            if not key.startswith("limits."):
                continue
            res = key[len("limits."):]
            if res and res in self._quota_names:
                limits[res] = int(value)
        self._quota_objects[(namespace, name)] = limits
        ns = self._quota.setdefault(namespace, {})
        for res, value in limits.items():
            q = ns.get(res)
            if q is None:
                q = ns[res] = Quota()
            q.limit = value

    def remove_quota(self, namespace: str, name: str) -> None:
        limits = self._quota_objects.pop((namespace, name), None)
        if not limits:
            return
        ns = self._quota.get(namespace, {})
        for res in limits:
            q = ns.get(res)
            if q is not None:
                q.limit = 0

    def quota_view(self, namespace: str) -> QuotaView | None:
        """None when no quota limits this namespace (the fit skips the check)."""
        ns = self._quota.get(namespace)
        if not ns:
            return None
        mem = ns.get(self.mem_resource)
        cores = ns.get(self.core_resource)
        if (mem is None or mem.limit == 0) and (cores is None or cores.limit == 0):
            return None
        return QuotaView(mem, cores, self.memory_factor)

    def vendor_quota_view(self, namespace: str, vendor: str) -> QuotaView | None:
        """`quota_view` for another vendor's memory and cores resources."""
        ns = self._quota.get(namespace)
        pair = self.vendor_resources.get(vendor)
        if not ns or pair is None:
            return None
        mem, cores = ns.get(pair[0]), ns.get(pair[1])
        if (mem is None or mem.limit == 0) and (cores is None or cores.limit == 0):
            return None
        return QuotaView(mem, cores, 1)

    def quota_namespaces(self) -> list[str]:
        """The namespaces with quota usage or limits counted, for metrics."""
        return list(self._quota)

    def quota_used(self, namespace: str) -> dict[str, tuple[int, int]]:
        """resource -> (used, limit), for metrics."""
        return {k: (q.used, q.limit) for k, q in self._quota.get(namespace, {}).items()}
