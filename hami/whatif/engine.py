"""Replay a snapshot through the scheduler's own pure code, one scenario at a time (pure, no I/O).

For each pod, in arrival order, exactly what the running scheduler does with it, in process:
the admission webhook (`hami.scheduler.admission.webhook.mutate_pod`: defaulting and the ResourceQuota
check), the device requests (`hami.device.request.pod_requests`), the pod's fit options and
policies (`hami.scheduler.placement.fit.pod_request`, quota view from the `UsageIndex`), the node choice
(`hami.scheduler.placement.score.select_node`: HAMi's fit and node order), and the bookkeeping of a placed
pod (`UsageIndex.add_pod`). What kube-scheduler does before the extender is reduced to what
decides GPU placement: unschedulable (cordoned) nodes, `nodeSelector` labels, required node affinity
and NoSchedule/NoExecute taints the pod does not tolerate are filtered out, then required pod
(anti-)affinity, DoNotSchedule topology spread (`hami.kubesched.intree`, the embedded loop's plugins) and
NodeResourcesFit where nodes report allocatable (checked on each node the walk reaches);
candidates are passed in name order, so ties go to the first name, as in the extender.

Scenario changes act on the snapshot before the replay: a new deviceSplitCount /
deviceMemoryScaling / deviceCoreScaling re-registers each card the way the node agent would
(`DeviceSettings.devmem`/`devcore` on the card's physical memory), nodes are added or removed
(pods on removed nodes are queued again), GPUs cordoned, quotas set, policies and scoring weights
changed. Deterministic: arrival order and names depend only on the plan and its seed.

A replay window's finished pods come back for as long as they ran (run_scenario): the replayed
pods' creation times are the clock, a finished pod leaves its cards that long after it was placed,
and pods that did not fit are tried again when some have left.
"""

from __future__ import annotations

import copy
import heapq
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from hami.device import codec
from hami.device import request as devrequest
from hami.device.model import PERCENTAGE_UNSET, DeviceInfo
from hami.device.nodeconfig import DeviceSettings, resolve_node_config, settings_for_node
from hami.dra.slices import build_slice, devices_for
from hami.gpu.backend import GpuInfo
from hami.scheduler.admission import webhook as webhookmod
from hami.scheduler.placement import fit as fitmod
from hami.scheduler.placement import messages
from hami.scheduler.placement import score as scoremod
from hami.scheduler.placement.policy import PolicyError
from hami.scheduler.placement.usage import NodeUsage, UsageIndex

from .cluster import TERMINAL, Cluster, NodeInfo, PodInfo, epoch, holds_devices
from .draplace import DeviceFill, DraReplay, uses_claims
from .kubefilter import KubeFilter
from .picker import Picker
from .scenario import AddNodes, Changes, Plan, Scenario, Workload

# Pending reasons that are not HAMi fit codes (the step that refused the pod).
ADMISSION_DENIED = "AdmissionDenied"
NO_CANDIDATE_NODE = "NoCandidateNode"  # kube-scheduler left no node (cordoned, nodeSelector, taints)
INVALID_POD = "InvalidPod"

HAMI_ANNOTATIONS = (
    codec.VGPU_NODE_ANNOTATION, codec.VGPU_TIME_ANNOTATION, codec.TO_ALLOCATE_ANNOTATION,
    codec.ALLOCATED_ANNOTATION, codec.MIG_ALLOCATIONS_ANNOTATION, codec.BIND_PHASE_ANNOTATION,
    codec.BIND_TIME_ANNOTATION,
)


@dataclass(frozen=True, slots=True)
class SchedulerDefaults:
    """The scheduler flags a replay runs with (the baseline's; a scenario may change the policies)."""

    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one queued pod."""

    pod: str  # namespace/name
    node: str = ""  # "" = pending
    devices: str = ""  # hami.io/vgpu-devices-allocated as the scheduler would write it
    reasons: tuple[str, ...] = ()  # pending: codes, most frequent first
    message: str = ""


@dataclass(frozen=True, slots=True)
class CardStats:
    uuid: str
    type: str
    slots: int
    slots_used: int
    mem: int  # registered (scaled) MiB
    mem_used: int
    physical_mem: int
    cores: int
    cores_used: int
    usable: bool  # healthy and not cordoned
    stranded_mem: int


@dataclass(frozen=True, slots=True)
class NodeStats:
    name: str
    cards: tuple[CardStats, ...]
    free_mem: int
    largest_free: int
    partial_free: int  # free memory on cards already shared (some allocation, a slot left)
    fragmentation: float  # partial_free / free_mem: how much of the free memory is in pieces

    @property
    def gpus_used(self) -> int:
        return sum(1 for c in self.cards if c.slots_used > 0)


@dataclass(frozen=True, slots=True)
class Result:
    scenario: str
    changes: Changes
    outcomes: tuple[Outcome, ...]
    nodes: tuple[NodeStats, ...]
    node_policy: str
    gpu_policy: str

    @property
    def placed(self) -> int:
        return sum(1 for o in self.outcomes if o.node)

    @property
    def pending(self) -> int:
        return sum(1 for o in self.outcomes if not o.node)

    def pending_reasons(self) -> dict[str, int]:
        """Reason code -> pending pods whose placement failed with it (a pod counts under each)."""
        out: dict[str, int] = {}
        for o in self.outcomes:
            if not o.node:
                for r in o.reasons:
                    out[r] = out.get(r, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def totals(self) -> dict[str, float]:
        cards = [c for n in self.nodes for c in n.cards]
        free = sum(n.free_mem for n in self.nodes)
        return {
            "placed": self.placed,
            "pending": self.pending,
            "nodes": len(self.nodes),
            "gpus": len(cards),
            "gpus_used": sum(1 for c in cards if c.slots_used > 0),
            "mem_physical": sum(c.physical_mem for c in cards),
            "mem_registered": sum(c.mem for c in cards),
            "mem_allocated": sum(c.mem_used for c in cards),
            "cores_physical": 100 * len(cards),
            "cores_allocated": sum(c.cores_used for c in cards),
            "stranded_mem": sum(c.stranded_mem for c in cards),
            "fragmentation": round(sum(n.partial_free for n in self.nodes) / free, 4) if free else 0.0,
        }


# --------------------------------------------------------------------------- changes


def _settings_change(base: DeviceSettings, split: int | None, mem: float | None, core: float | None) -> DeviceSettings:
    changes = {}
    if split is not None:
        changes["split_count"] = split
    if mem is not None:
        changes["memory_scaling"] = mem
    if core is not None:
        changes["core_scaling"] = core
    return replace(base, **changes) if changes else base


def _reregister(node: NodeInfo, new: DeviceSettings, split: bool, mem: bool, core: bool) -> NodeInfo:
    """The node's cards as its agent would register them with `new` settings; only the knobs the
    scenario sets (`split`, `mem`, `core`) are re-derived, the rest stays as registered."""
    if not (split or mem or core):
        return node
    devices = []
    for d, phys in zip(node.devices, node.physical_mem, strict=True):
        if d.mode == "mig":
            devices.append(d)
            continue
        devices.append(replace(
            d,
            count=new.split_count if split else d.count,
            devmem=new.devmem(phys) if mem else d.devmem,
            devcore=new.devcore() if core else d.devcore,
        ))
    return replace(node, devices=tuple(devices), settings=new)


def _added_node_settings(cluster: Cluster, add, name: str) -> DeviceSettings:
    """What an added node registers before the scenario's own knobs: what the nodes it copies registered.

    The nodes it copies are those with cards of its type, else every node; among them the most common
    registration wins (a node config naming the new node comes first, as on a real cluster). The device
    config's defaults apply only to a cluster without nodes.
    """
    if resolve_node_config(cluster.node_configs, name) is not None:
        return settings_for_node(cluster.nvidia, cluster.node_configs, name)
    same_type = [n for n in cluster.nodes.values() if any(d.type == add.type for d in n.devices)]
    pool = same_type or list(cluster.nodes.values())
    if not pool:
        return settings_for_node(cluster.nvidia, cluster.node_configs, name)
    return Counter(n.settings for n in pool).most_common(1)[0][0]


def _added_node(cluster: Cluster, changes: Changes, add: AddNodes, name: str) -> NodeInfo:
    """A node a scenario adds: registered by HAMi's device plugin, or (mode dra) publishing the
    ResourceSlice hami's DRA plugin would publish for its cards (hami.dra.slices), with the scenario's
    split count and scalings, so claim pods can land there."""
    settings = _settings_change(_added_node_settings(cluster, add, name), add.split_count or changes.split_count,
                                changes.memory_scaling, changes.core_scaling)
    labels = dict(add.labels)
    if add.mode == "dra" or (not add.mode and cluster.nodes and all(n.dra for n in cluster.nodes.values())):
        gpus = [GpuInfo(f"GPU-whatif-{name}-{j}", j, add.type, add.memory, minor=j) for j in range(add.gpus)]
        obj = {"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}
        return NodeInfo(name, (), (), settings, labels=labels, obj=obj,
                        slices=(build_slice(name, devices_for(gpus, settings), 1),))
    devices = tuple(
        DeviceInfo(id=f"GPU-whatif-{name}-{j}", count=settings.split_count, devmem=settings.devmem(add.memory),
                   devcore=settings.devcore(), type=add.type, index=j, numa=0, mode="hami-core", health=True)
        for j in range(add.gpus)
    )
    return NodeInfo(name, devices, (add.memory,) * add.gpus, settings, labels=labels)


def apply_changes(cluster: Cluster, changes: Changes) -> tuple[dict[str, NodeInfo], list[str]]:
    """The nodes after `changes`, and the names of removed nodes (their pods are queued again)."""
    nodes: dict[str, NodeInfo] = {}
    removed: list[str] = []
    for name, node in cluster.nodes.items():
        if any(fnmatchcase(name, pat) for pat in changes.remove_nodes):
            removed.append(name)
            continue
        new = _settings_change(node.settings, changes.split_count, changes.memory_scaling, changes.core_scaling)
        knobs = [changes.split_count is not None, changes.memory_scaling is not None, changes.core_scaling is not None]
        unschedulable = node.unschedulable
        for nc in changes.nodes:
            if fnmatchcase(name, nc.name):
                new = _settings_change(new, nc.split_count, nc.memory_scaling, nc.core_scaling)
                knobs = [knobs[0] or nc.split_count is not None, knobs[1] or nc.memory_scaling is not None,
                         knobs[2] or nc.core_scaling is not None]
                if nc.cordon is not None:
                    unschedulable = nc.cordon
        node = _reregister(node, new, *knobs)
        if unschedulable != node.unschedulable:
            node = replace(node, unschedulable=unschedulable)
        nodes[name] = node
    for add in changes.add_nodes:
        for i in range(add.count):
            name = f"{add.name}-{i}"
            nodes[name] = _added_node(cluster, changes, add, name)
    for target in changes.cordon_gpus:
        node_name, sep, idx = target.partition("/")
        for name, node in nodes.items():
            if sep:
                if name == node_name:
                    ids = [d.id for d in node.devices if str(d.index) == idx]
                else:
                    continue
            else:
                ids = [d.id for d in node.devices if d.id == target]
            if ids:
                nodes[name] = replace(node, cordoned=node.cordoned | frozenset(ids))
    return nodes, removed


# --------------------------------------------------------------------------- queue


def _stripped(pod: PodInfo) -> dict:
    """The pod as it was created: no placement annotations, not bound, no status.

    Only the maps edited here (or by `Replayer.place`) are copied; the rest is shared with the
    snapshot, read-only: the webhook works on its own deep copy."""
    obj = dict(pod.obj)
    obj.pop("status", None)
    meta = obj["metadata"] = dict(obj.get("metadata") or {})
    annos = meta["annotations"] = dict(meta.get("annotations") or {})
    for key in HAMI_ANNOTATIONS:
        annos.pop(key, None)
    if meta.get("labels"):
        labels = meta["labels"] = dict(meta["labels"])
        labels.pop(codec.VGPU_NODE_ANNOTATION, None)
    spec = obj["spec"] = dict(obj.get("spec") or {})
    spec.pop("nodeName", None)
    return obj


def _generate(w: Workload, nvidia, defaults: SchedulerDefaults) -> list[dict]:
    pods = []
    for i in range(w.count):
        name = f"{w.name}-{i}"
        if w.pod is not None:
            pod = copy.deepcopy(w.pod)
        else:
            limits = {nvidia.resource_count_name: str(w.gpus)}
            if w.memory is not None:
                limits[nvidia.resource_memory_name] = str(w.memory)
            if w.memory_percentage is not None:
                limits[nvidia.resource_memory_percentage_name] = str(w.memory_percentage)
            if w.cores is not None:
                limits[nvidia.resource_core_name] = str(w.cores)
            pod = {"spec": {"containers": [{"name": "main", "image": "whatif", "resources": {"limits": limits}}]}}
            if w.node_selector:
                pod["spec"]["nodeSelector"] = dict(w.node_selector)
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        meta = pod.setdefault("metadata", {})
        meta["name"] = name
        meta["namespace"] = w.namespace
        meta["uid"] = f"whatif-{w.namespace}-{name}"
        if w.annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **dict(w.annotations)}
        pods.append(pod)
    return pods


@dataclass(slots=True)
class _Queued:
    pod: dict
    admit: bool  # run the admission webhook (a new pod); snapshot pods were admitted already
    at: float | None = None  # replayed pods: creation time (Unix seconds), the replay's clock
    ran_for: float | None = None  # replayed finished pods: seconds it held its devices, then leaves


def build_queue(cluster: Cluster, scenario: Scenario, plan: Plan, removed: Sequence[str],
                defaults: SchedulerDefaults) -> tuple[list[_Queued], set[str]]:
    """Pods to schedule, in arrival order, and the uids of snapshot pods taken off the cluster."""
    replays = [w.replay for w in scenario.workloads if w.replay is not None]
    taken: set[str] = set()
    first: list[_Queued] = []
    removed_set = set(removed)
    live = sorted((p for p in cluster.pods if p.phase not in TERMINAL),
                  key=lambda p: (p.created, p.name, p.namespace))  # same second: by name
    # Finished pods HAMi had placed, with their run time: a replay window brings them back for as
    # long as they ran (they arrive, hold their devices, leave).
    timed = sorted((p for p in cluster.pods if p.phase in TERMINAL and p.placed_on and p.ran_for is not None),
                   key=lambda p: (p.created, p.name, p.namespace))

    def pending(p: PodInfo) -> bool:  # HAMi's pods; pods with claims whoever schedules them
        return not p.node and not p.bound_node and (p.scheduler_name == defaults.scheduler_name or p.dra)

    def in_window(p: PodInfo, rp) -> bool:
        return ((not rp.namespace or p.namespace == rp.namespace) and (not rp.since or p.created >= rp.since)
                and (not rp.until or p.created < rp.until))

    for p in live:
        if p.placed_on and p.placed_on in removed_set:
            taken.add(p.uid)
            first.append(_Queued(_stripped(p), False))
        elif plan.include_pending and pending(p) and not any(in_window(p, rp) for rp in replays):
            first.append(_Queued(_stripped(p), False))
    groups: list[list[_Queued]] = []
    for w in scenario.workloads:
        if w.replay is not None:
            # The window's pods, placed or pending, replayed at their creation time from scratch.
            group = []
            for p in sorted(live + [p for p in timed if in_window(p, w.replay)],
                            key=lambda p: (p.created, p.name, p.namespace)):
                if p.uid not in taken and (p.placed_on or pending(p)) and in_window(p, w.replay):
                    taken.add(p.uid)
                    group.append(_Queued(_stripped(p), True, epoch(p.created), p.ran_for))
            groups.append(group)
        else:
            groups.append([_Queued(p, True) for p in _generate(w, cluster.nvidia, defaults)])
    if plan.arrival == "interleaved":
        rest = [g[i] for i in range(max((len(g) for g in groups), default=0)) for g in groups if i < len(g)]
    else:
        rest = [q for g in groups for q in g]
        if plan.arrival == "shuffled":
            random.Random(plan.seed).shuffle(rest)
    return first + rest, taken


# --------------------------------------------------------------------------- replay


def _reason_codes(failed: dict[str, str], parsed_texts: dict[str, dict[str, int]]) -> tuple[str, ...]:
    """Codes of every node's reason, most frequent first; `parsed_texts` caches parse_reason
    (a replay meets the same few texts on many nodes)."""
    counts: dict[str, int] = {}
    for text in failed.values():
        parsed = parsed_texts.get(text)
        if parsed is None:
            # HAMi's "N/M Code" items, else kube-scheduler's comma-separated reasons (NodeResourcesFit)
            parsed = parsed_texts[text] = fitmod.parse_reason(text) or dict.fromkeys(text.split(", "), 1)
        for code, n in parsed.items():
            counts[code] = counts.get(code, 0) + n
    return tuple(k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class Replayer:
    """One scenario's cluster: the UsageIndex plus the nodes as changed; `place(pod)` schedules one."""

    def __init__(self, cluster: Cluster, nodes: dict[str, NodeInfo], defaults: SchedulerDefaults,
                 changes: Changes, taken: set[str], kept_order: bool = True):
        self.cluster = cluster
        self.nodes = nodes
        self.defaults = defaults
        self.changes = changes
        self.nvidia = cluster.nvidia
        self.node_policy = changes.node_policy or defaults.node_policy
        self.gpu_policy = changes.gpu_policy or defaults.gpu_policy
        self.webhook = webhookmod.WebhookSettings(defaults.scheduler_name, defaults.force_overwrite_default_scheduler,
                                                  self.nvidia)
        self.index = UsageIndex(self.nvidia)
        for name in sorted(nodes):
            n = nodes[name]
            self.index.set_node(name, n.devices, n.cordoned, n.pair_scores)
        for q in cluster.quotas:
            self.index.set_quota(q.namespace, q.name, q.hard)
        for qc in changes.quotas:
            hard = {}
            if qc.memory is not None:
                hard[f"limits.{self.nvidia.resource_memory_name}"] = qc.memory
            if qc.cores is not None:
                hard[f"limits.{self.nvidia.resource_core_name}"] = qc.cores
            self.index.set_quota(qc.namespace, "whatif-quota", hard)
        for p in cluster.pods:
            if holds_devices(p) and p.uid not in taken and p.node in nodes:
                self.index.add_pod(p.uid, p.node, p.devices, namespace=p.namespace, num_init=p.num_init,
                                   init_released=p.init_released, mig=p.mig)
        self.kube = KubeFilter(nodes, cluster.pods, taken)  # what kube-scheduler filters first
        # pods with claims: the DRA allocator over the snapshot's slices and claims (draplace.py)
        added = tuple(s for info in nodes.values() for s in info.slices)  # a scenario's added DRA nodes
        self.dra = DraReplay(replace(cluster.dra, slices=tuple(cluster.dra.slices) + added) if added else cluster.dra,
                             {n: info.obj for n, info in nodes.items()}, taken, self.node_policy)
        self.schedulable = self.kube.schedulable
        # kept_order: select_node's answer from the scheduler's kept node order with the fit's
        # refusals remembered (picker.py); False calls score.select_node per pod (the reference).
        self.picker = Picker(self.index) if kept_order else None
        self._parsed_reasons: dict[str, dict[str, int]] = {}

    def candidates(self, pod: dict) -> list[str]:
        """What kube-scheduler would pass the extender: schedulable, nodeSelector and taints allow."""
        return self.kube.candidates(pod)[0]

    def place(self, pod: dict, admit: bool = True) -> Outcome | None:
        """Schedule one pod; None when it asks for no HAMi device (not the extender's business)."""
        if admit:
            admitted = self.admit(pod)
            if not isinstance(admitted, dict):
                return admitted
            pod = admitted
        return self.schedule(pod)

    def admit(self, pod: dict) -> dict | Outcome | None:
        """The admission webhook: the pod as admitted, an Outcome when refused, None when it is
        not this scheduler's pod."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        key = f"{ns}/{meta.get('name', '')}"
        if uses_claims(pod):  # kube-scheduler's pod: HAMi's device-plugin webhook has nothing to add
            return pod
        if self.changes.scoring_weights:
            annos = meta.setdefault("annotations", {})
            annos.setdefault(codec.SCORING_WEIGHTS_ANNOTATION, self.changes.scoring_weights)
        try:
            decision = webhookmod.mutate_pod(pod, self.webhook, quota=self.index.quota_view, namespace=ns)
        except webhookmod.WebhookError as exc:
            return Outcome(key, reasons=(INVALID_POD,), message=str(exc))
        if not decision.allowed:
            return Outcome(key, reasons=(ADMISSION_DENIED,), message=decision.message)
        if decision.pod is not None:
            pod = decision.pod
        if (pod.get("spec") or {}).get("schedulerName") != self.defaults.scheduler_name:
            return None
        return pod

    def schedule(self, pod: dict) -> Outcome | None:
        """/filter's choice for an admitted pod, recorded as /bind would; None: no HAMi device."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        key = f"{ns}/{meta.get('name', '')}"
        uid = meta.get("uid") or key
        if uses_claims(pod):
            return self.schedule_claims(pod, key, uid)
        if self.changes.scoring_weights:
            annos = meta.setdefault("annotations", {})
            annos.setdefault(codec.SCORING_WEIGHTS_ANNOTATION, self.changes.scoring_weights)
        try:
            requests = devrequest.pod_requests(pod, self.nvidia)
        except ValueError as exc:
            return Outcome(key, reasons=(INVALID_POD,), message=str(exc))
        if not any(r is not None and r.nums > 0 for r in requests):
            return None
        num_init = len((pod.get("spec") or {}).get("initContainers") or [])
        annos = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            preq = fitmod.pod_request(requests, num_init, annos, gpu_policy=self.gpu_policy,
                                      node_policy=self.node_policy, namespace=ns, quota=self.index.quota_view(ns))
        except PolicyError as exc:
            return Outcome(key, reasons=(INVALID_POD,), message=str(exc))
        kube = self.kube
        got = self._candidate_nodes(pod, key)
        if isinstance(got, Outcome):
            return got
        names, names_key = got
        screen = screen_key = None
        want = kube.requests(pod)
        if want is not None:
            screen_key = tuple(sorted(want.items()))

            def screen(name: str, want: dict[str, int] = want) -> str | None:
                return kube.refuse(name, want)

        if self.picker is not None:
            sel = self.picker.select(preq, names, names_key, screen, screen_key)
        elif screen is not None:
            refused = {n: r for n in names if (r := screen(n)) is not None}
            sel = scoremod.select_node(self.index.nodes, [n for n in names if n not in refused], preq)
            if sel.node is None:
                sel.failed_nodes = {**refused, **sel.failed_nodes}
        else:
            sel = scoremod.select_node(self.index.nodes, names, preq)
        if sel.node is None:
            return Outcome(key, reasons=_reason_codes(sel.failed_nodes, self._parsed_reasons),
                           message=messages.no_available_node_message(len(names)))
        self.index.add_pod(uid, sel.node, sel.devices, namespace=ns, num_init=num_init,
                           mig=tuple((u, pl) for _, _, u, _, pl in sel.mig))
        kube.placed(uid, sel.node, pod, want)
        return Outcome(key, node=sel.node, devices=codec.encode_pod_devices(sel.devices))

    def _candidate_nodes(self, pod: dict, key: str) -> tuple[list[str], object] | Outcome:
        """The nodes kube-scheduler's in-tree filters leave the pod, with the key their list is memoised
        under (None: the pod's own list); an Outcome when none is left or the pod cannot be read."""
        kube = self.kube
        names, names_key = kube.candidates(pod)
        if names and kube.wants_pod_filter(pod):
            try:
                names = kube.pod_filter(pod, names)
            except (TypeError, AttributeError, KeyError, ValueError) as exc:
                return Outcome(key, reasons=(INVALID_POD,),
                               message=f"spec.affinity or spec.topologySpreadConstraints cannot be read: {exc!r}")
            names_key = None  # this pod's own list
        if not names:
            return Outcome(key, reasons=(NO_CANDIDATE_NODE,), message="no schedulable node matches the pod")
        return names, names_key

    def schedule_claims(self, pod: dict, key: str, uid: str) -> Outcome:
        """A pod with claims: kube-scheduler's in-tree filters, then its DynamicResources filter and
        the extender's node policy by GPU fill (draplace.py)."""
        kube = self.kube
        got = self._candidate_nodes(pod, key)
        if isinstance(got, Outcome):
            return got
        names, _ = got
        want = kube.requests(pod)
        got = self.dra.place(pod, names, None if want is None else lambda name: kube.refuse(name, want))
        if got.problem is not None:
            return Outcome(key, reasons=(got.problem[0],), message=got.problem[1])
        if not got.node:
            return Outcome(key, reasons=_reason_codes(dict(got.failed), self._parsed_reasons),
                           message=messages.no_available_node_message(len(names)))
        kube.placed(uid, got.node, pod, want)
        return Outcome(key, node=got.node, devices=got.devices)

    def remove(self, uid: str) -> bool:
        """A replayed pod left (finished): its devices and its place on the node are free."""
        self.kube.left(uid)
        freed = self.dra.left(uid)
        return self.index.remove_pod(uid) or freed

    def stats(self, pending_mem: int) -> tuple[NodeStats, ...]:
        """Per node and card fill after the replay; `pending_mem`: smallest pending MiB ask (0 = none)."""
        out = []
        for name in sorted(self.index.nodes):
            if self.nodes[name].dra:
                out.append(_dra_node_stats(name, self.dra.devices_of(name), pending_mem))
            else:
                out.append(_node_stats(self.index.nodes[name], self.nodes[name], pending_mem))
        return tuple(out)


def _node_stats(usage: NodeUsage, info: NodeInfo, pending_mem: int) -> NodeStats:
    phys = dict(zip((d.id for d in info.devices), info.physical_mem, strict=True))
    cards = []
    frees = []
    partial = 0
    for d in usage.devices:
        usable = d.health and d.id not in usage.cordoned
        free = max(0, d.totalmem - d.usedmem)
        full = d.used >= d.count or d.usedcores >= d.totalcore
        stranded = free if usable and free and (full or (pending_mem and free < pending_mem)) else 0
        if usable and not full and free:
            frees.append(free)
            if d.used:
                partial += free
        cards.append(CardStats(d.id, d.type, d.count, d.used, d.totalmem, d.usedmem, phys.get(d.id, d.totalmem),
                               d.totalcore, d.usedcores, usable, stranded))
    total = sum(frees)
    largest = max(frees, default=0)
    frag = round(partial / total, 4) if total else 0.0
    return NodeStats(usage.name, tuple(cards), total, largest, partial, frag)


def _dra_node_stats(name: str, devices: Sequence[DeviceFill], pending_mem: int) -> NodeStats:
    """A DRA node's GPUs from its ResourceSlices and the claims allocated on them (draplace.py)."""
    cards, frees, partial = [], [], 0
    for d in devices:
        free = max(0, d.mem - d.mem_used)
        full = d.slots_used >= d.slots or (d.cores and d.cores_used >= d.cores)
        stranded = free if d.usable and free and (full or (pending_mem and free < pending_mem)) else 0
        if d.usable and not full and free:
            frees.append(free)
            if d.slots_used:
                partial += free
        cards.append(CardStats(d.name, d.type, d.slots, d.slots_used, d.mem, d.mem_used, d.mem, d.cores,
                               d.cores_used, d.usable, stranded))
    total = sum(frees)
    return NodeStats(name, tuple(cards), total, max(frees, default=0), partial,
                     round(partial / total, 4) if total else 0.0)


def _smallest_pending_mem(replayer: Replayer, pending: list[dict]) -> int:
    smallest = 0
    for pod in pending:
        try:
            reqs = devrequest.pod_requests(pod, replayer.nvidia)
        except ValueError:
            continue
        for r in reqs:
            if r is not None and r.nums > 0 and r.memreq > 0 and r.mempercentagereq == PERCENTAGE_UNSET:
                smallest = r.memreq if not smallest else min(smallest, r.memreq)
    return smallest


def run_scenario(cluster: Cluster, scenario: Scenario, plan: Plan,
                 defaults: SchedulerDefaults = SchedulerDefaults(), kept_order: bool = True) -> Result:
    """Place the scenario's queue in order. Replayed pods carry their creation time: it is the
    replay's clock. A replayed finished pod leaves `ran_for` seconds after it was placed; when pods
    have left by the next arrival, the pods waiting so far are tried again in queue order (as the
    scheduler's queue retries them when capacity frees) before that arrival."""
    nodes, removed = apply_changes(cluster, scenario.changes)
    queue, taken = build_queue(cluster, scenario, plan, removed, defaults)
    rp = Replayer(cluster, nodes, defaults, scenario.changes, taken, kept_order)
    outcomes: list[Outcome] = []
    waiting: list[tuple[int, _Queued, dict]] = []  # (outcome index, queued, admitted pod)
    leaving: list[tuple[float, int, str]] = []  # (time, sequence, uid) of placed finished pods
    refused: list[dict] = []  # refused at admission or invalid: pending, never tried again
    now: float | None = None

    def placed(q: _Queued, pod: dict, o: Outcome) -> None:
        if q.ran_for is not None and now is not None:
            uid = (pod.get("metadata") or {}).get("uid") or o.pod
            heapq.heappush(leaving, (now + q.ran_for, len(outcomes) + len(leaving), uid))

    for q in queue:
        if q.at is not None:
            now = q.at if now is None else max(now, q.at)
            freed = False
            while leaving and leaving[0][0] <= now:
                freed |= rp.remove(heapq.heappop(leaving)[2])
            if freed and waiting:
                still = []
                for idx, wq, pod in waiting:
                    o = rp.schedule(pod)
                    if o is not None and o.node:
                        outcomes[idx] = o
                        placed(wq, pod, o)
                    else:
                        still.append((idx, wq, pod))
                waiting = still
        pod = q.pod
        if q.admit:
            admitted = rp.admit(pod)
            if not isinstance(admitted, dict):
                if admitted is not None:
                    outcomes.append(admitted)
                    refused.append(pod)
                continue
            pod = admitted
        o = rp.schedule(pod)
        if o is None:
            continue
        outcomes.append(o)
        if o.node:
            placed(q, pod, o)
        elif o.reasons != (INVALID_POD,):
            waiting.append((len(outcomes) - 1, q, pod))
        else:
            refused.append(pod)
    pending_pods = refused + [pod for _, _, pod in waiting]
    return Result(scenario.name, scenario.changes, tuple(outcomes), rp.stats(_smallest_pending_mem(rp, pending_pods)),
                  rp.node_policy, rp.gpu_policy)


def run_plan(cluster: Cluster, plan: Plan, defaults: SchedulerDefaults = SchedulerDefaults(),
             progress: Callable[[str], None] | None = None) -> list[Result]:
    """Every scenario of the plan, baseline first."""
    out = []
    for s in plan.scenarios:
        if progress is not None:
            progress(s.name)
        out.append(run_scenario(cluster, s, plan, defaults))
    return out
