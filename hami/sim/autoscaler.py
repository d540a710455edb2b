"""A Cluster Autoscaler stand-in for the embedded cluster (`--sim-node-group`).

This is a test fixture, like the embedded kube-scheduler loop (hami.sim.kubescheduler): it plays the
part of kubernetes/autoscaler's cluster-autoscaler so the embedded cluster can show what Cluster
Autoscaler does with GPU-share pods, and it is not something to run in a cluster. Its decisions are
hami.kubesched.autoscale's (in-tree filters only, never the extender); this module does the I/O:

* every `scan_interval`: the pending pods kube-scheduler marked `PodScheduled=False/Unschedulable`
  that fit no existing or upcoming node by the in-tree filters are packed onto each group's
  template node; the best group grows by the nodes the estimate asks for (a `TriggeredScaleUp`
  Event on each pod it places), and a pod no group can take gets `NotTriggerScaleUp` saying why;
* a group's node is the template while it is upcoming (added, and its allocatable not yet carrying
  the template's extended resources), so one pending pod adds one node, not one per scan;
* a group's node that `removal_blocker` lets go, above the group's min size and older than
  `delay_after_add`, is unneeded; once unneeded for `unneeded_seconds` it is tainted
  `ToBeDeletedByClusterAutoscaler`, its pods are evicted (Eviction API: PodDisruptionBudgets are
  checked by the API server) and, empty, it is removed. A refused eviction untaints it;
* what it decided is in the ConfigMap `kube-system/cluster-autoscaler-status` (as Cluster Autoscaler
  keeps one): each group's size and limits, and why each group node stays (`scaleDown.blockers`).

Templates are CA's: a copy of one of the group's nodes when it has one (what the node's agent and
kubelet report, so without `--report-node-capacity` no `nvidia.com/gpumem`), else the group's declared
template (`declared_template`: the figures an operator puts in the cloud's node-template tags, which
are the agent's own only when the agent reports them).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from hami.kube.client import ApiError, KubeClient
from hami.kube.events import NORMAL, EventRecorder
from hami.kube.informer import Informer
from hami.kubesched import autoscale, intree
from hami.obs.log import get_logger
from hami.sim.cluster import GpuShape, SimSpecError, parse_sim_gpus

log = get_logger(__name__)

TO_BE_DELETED = autoscale.TO_BE_DELETED
STATUS_CONFIGMAP = ("kube-system", "cluster-autoscaler-status")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
MAX_GROUP_SIZE = 64


@dataclass(frozen=True)
class NodeGroupSpec:
    name: str
    min_size: int
    max_size: int
    gpus: tuple[GpuShape, ...]


def parse_node_group(text: str) -> NodeGroupSpec:
    """`NAME:MIN:MAX:GPUS`, GPUS in --sim-gpus' syntax (pure); SimSpecError names what is wrong."""
    parts = text.split(":", 3)
    if len(parts) != 4:
        raise SimSpecError(f"--sim-node-group {text!r}: not NAME:MIN:MAX:GPUS")
    name, lo, hi, gpus = (p.strip() for p in parts)
    if not _NAME.match(name):
        raise SimSpecError(f"--sim-node-group {text!r}: name {name!r} is not a lowercase DNS label of at most 42 "
                           "characters (its nodes are named NAME-N)")
    if not (lo.isdigit() and hi.isdigit()):
        raise SimSpecError(f"--sim-node-group {text!r}: MIN and MAX must be whole numbers, got {lo!r} and {hi!r}")
    low, high = int(lo), int(hi)
    if low > high or high < 1 or high > MAX_GROUP_SIZE:
        raise SimSpecError(f"--sim-node-group {text!r}: want 0 <= MIN <= MAX, 1 <= MAX <= {MAX_GROUP_SIZE}")
    try:
        shapes = parse_sim_gpus(gpus)
    except SimSpecError as exc:
        raise SimSpecError(f"--sim-node-group {text!r}: {exc}") from None
    return NodeGroupSpec(name, low, high, tuple(shapes))


def parse_node_groups(texts: Sequence[str]) -> list[NodeGroupSpec]:
    groups = [parse_node_group(t) for t in texts]
    seen: set[str] = set()
    for g in groups:
        if g.name in seen:
            raise SimSpecError(f"--sim-node-group: the name {g.name!r} is given twice")
        seen.add(g.name)
    return groups


def declared_template(group: NodeGroupSpec, cfg) -> dict:
    """The group's template before it has a node: labels, cpu/memory/pods, `nvidia.com/gpu` (the
    instance type's GPUs x split count), and gpumem/gpucores as the agent will report them, when it
    reports them (the operator's node-template tags; docs/autoscaling.md)."""
    from hami.agent.capacity import node_capacity
    from hami.agent.register import build_devices
    from hami.device.nodeconfig import settings_for_node
    from hami.gpu.backend import GpuInfo
    from hami.sim.cluster import node_object

    name = f"{group.name}-template"
    node = node_object(name, 0)
    node["metadata"]["labels"][autoscale.GROUP_LABEL] = group.name
    settings = settings_for_node(cfg.nvidia, cfg.node_configs, name)
    infos = [GpuInfo(uuid=f"template-{i}", index=i, name=s.model, memory_total_mib=s.memory_mib)
             for i, s in enumerate(s for s in group.gpus for _ in range(s.count))]
    extra = {cfg.nvidia.resource_count_name: str(settings.split_count * len(infos))}
    if cfg.agent.report_node_capacity:
        extra.update(node_capacity(build_devices(infos, settings), cfg.nvidia.resource_memory_name,
                                   cfg.nvidia.resource_core_name))
    for field in ("capacity", "allocatable"):
        node["status"][field].update(extra)
    return node


class ClusterAutoscaler:
    """The loop. `provider` adds and removes nodes (hami.sim.cluster.EmbeddedCluster)."""

    def __init__(self, client: KubeClient, groups: Sequence[NodeGroupSpec], provider, *,
                 declared: Callable[[NodeGroupSpec], dict], scan_interval: float = 1.0,
                 unneeded_seconds: float = 30.0, delay_after_add: float = 10.0,
                 upcoming_timeout: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.groups = {g.name: g for g in groups}
        self.provider = provider
        self.declared = declared
        self.scan_interval = scan_interval
        self.unneeded_seconds = unneeded_seconds
        self.delay_after_add = delay_after_add
        self.upcoming_timeout = upcoming_timeout
        self.clock = clock
        self.nodes = Informer(client, "nodes")
        self.pods = Informer(client, "pods")
        self.pdbs = Informer(client, "poddisruptionbudgets")
        self.events = EventRecorder(client, "cluster-autoscaler")
        self.req = intree.Requests()
        self.added_at: dict[str, float] = {}  # node -> when this loop added it
        self.unneeded_since: dict[str, float] = {}
        self.blockers: dict[str, str] = {}  # node -> why it stays (the last scan's answer)
        self.scale_ups: list[tuple[str, int]] = []  # (group, nodes) in order
        self.removed: list[str] = []
        self._noticed: dict[str, str] = {}  # pod -> the last event message it got
        self._status_text = ""
        self._last_error = ""

    # ------------------------------------------------------------------ views

    def group_nodes(self, group: str) -> list[dict]:
        return sorted((n for n in self.nodes.store.values()
                       if ((n.get("metadata") or {}).get("labels") or {}).get(autoscale.GROUP_LABEL) == group),
                      key=lambda n: n["metadata"]["name"])

    def template(self, group: NodeGroupSpec) -> dict:
        settled = [n for n in self.group_nodes(group.name) if not self._upcoming(n, group)]
        return autoscale.template_from_node(settled[0], group.name) if settled else self.declared(group)

    def _upcoming(self, node: Mapping, group: NodeGroupSpec) -> bool:
        name = node["metadata"]["name"]
        added = self.added_at.get(name)
        if added is None or self.clock() - added > self.upcoming_timeout:
            return False
        want = set(intree.extended_allocatable(self.declared(group)))
        return not want <= set(intree.extended_allocatable(node))

    def node_groups(self) -> list[autoscale.NodeGroup]:
        return [autoscale.NodeGroup(g.name, g.min_size, g.max_size, self.template(g)) for g in self.groups.values()]

    def _pods_on(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for p in self.pods.store.values():
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                out.setdefault(node, []).append(p)
        return out

    def pending(self) -> list[dict]:
        """Pods kube-scheduler found no node for (PodScheduled False, reason Unschedulable)."""
        out = []
        for p in self.pods.store.values():
            if (p.get("spec") or {}).get("nodeName") or (p.get("metadata") or {}).get("deletionTimestamp"):
                continue
            conds = (p.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
                   for c in conds):
                out.append(p)
        return sorted(out, key=autoscale.pod_key)

    # ------------------------------------------------------------------ scale-up

    async def start_min_nodes(self) -> None:
        """The cloud starts each group at its min size."""
        for g in self.groups.values():
            for _ in range(g.min_size):
                await self._add(g)

    async def _add(self, group: NodeGroupSpec) -> str:
        taken = {(n.get("metadata") or {}).get("name") for n in self.nodes.store.values()} | set(self.added_at)
        i = 1
        while f"{group.name}-{i}" in taken:
            i += 1
        name = f"{group.name}-{i}"
        self.added_at[name] = self.clock()
        await self.provider.add_node(name, list(group.gpus), {autoscale.GROUP_LABEL: group.name})
        log.info("Node group scaled up", group=group.name, node=name)
        return name

    async def scale_up(self) -> None:
        pending = self.pending()
        if not pending:
            return
        pods_on = self._pods_on()
        view = []
        for n in self.nodes.store.values():
            group = self.groups.get(((n.get("metadata") or {}).get("labels") or {}).get(autoscale.GROUP_LABEL, ""))
            if group is not None and self._upcoming(n, group):
                view.append({**self.template(group), "metadata": {**n["metadata"]}})  # the template stands in
            elif not ((n.get("spec") or {}).get("unschedulable")):
                view.append(n)
        rest = []
        for pod in pending:
            target = autoscale.fits_existing(pod, view, pods_on, self.req)
            if target is None:
                rest.append(pod)
            else:  # CA leaves it to the scheduler: it fits a node as the in-tree filters see it
                pods_on.setdefault(target, []).append(pod)
        if not rest:
            return
        groups = self.node_groups()
        sizes = {g: len(self.group_nodes(g)) for g in self.groups}
        options = autoscale.scale_up_options(rest, groups, sizes, self.req)
        best = autoscale.best_option(options)
        by_pod = {autoscale.pod_key(p): p for p in rest}
        if best is not None:
            group = self.groups[best.group]
            before = sizes[best.group]
            for _ in range(best.nodes):
                await self._add(group)
            self.scale_ups.append((best.group, best.nodes))
            text = f"pod triggered scale-up: [{{{best.group} {before}->{before + best.nodes} (max: {group.max_size})}}]"
            for key in best.placed:
                self._notice(by_pod[key], "TriggeredScaleUp", text)
        placed = set(best.placed) if best else set()
        for key, pod in by_pod.items():
            if key in placed:
                continue
            reasons = sorted({o.refused.get(key, "") for o in options} - {""})
            self._notice(pod, "NotTriggerScaleUp",
                         "pod didn't trigger scale-up: " + ("; ".join(reasons) or "no node group"))

    def _notice(self, pod: dict, reason: str, message: str) -> None:
        key = autoscale.pod_key(pod)
        if self._noticed.get(key) != message:
            self._noticed[key] = message
            self.events.record(pod, NORMAL, reason, message)

    # ------------------------------------------------------------------ scale-down

    async def scale_down(self) -> None:
        now = self.clock()
        nodes = [n for n in self.nodes.store.values()]
        pods_on = self._pods_on()
        pdbs = list(self.pdbs.store.values())
        all_pods = list(self.pods.store.values())
        leaving = {n["metadata"]["name"] for n in nodes if _tainted(n)}
        for group in self.groups.values():
            members = self.group_nodes(group.name)
            size = len(members)
            for node in members:
                name = node["metadata"]["name"]
                if name in leaving:
                    await self._drain(name, node, pods_on.get(name, []))
                    continue
                if size <= group.min_size:
                    self.blockers[name] = f"node group {group.name} is at its min size {group.min_size}"
                    self.unneeded_since.pop(name, None)
                    continue
                if now - self.added_at.get(name, -1e9) < self.delay_after_add:
                    self.blockers[name] = "added too recently"
                    continue
                why = autoscale.removal_blocker(name, nodes, pods_on, pdbs, all_pods, self.req, leaving)
                if why is not None:
                    self.blockers[name] = why
                    self.unneeded_since.pop(name, None)
                    continue
                self.blockers.pop(name, None)
                since = self.unneeded_since.setdefault(name, now)
                if now - since >= self.unneeded_seconds:
                    log.info("Node unneeded, draining", group=group.name, node=name,
                             pods=len(autoscale.counted_pods(pods_on.get(name, []))))
                    await self._taint(name, node, True)
                    leaving.add(name)
                    size -= 1
                    await self._drain(name, node, pods_on.get(name, []))

    async def _drain(self, name: str, node: dict, pods: list[dict]) -> None:
        moving = autoscale.counted_pods(pods)
        if not moving:
            await self.provider.remove_node(name)
            self.added_at.pop(name, None)
            self.unneeded_since.pop(name, None)
            self.removed.append(name)
            log.info("Node group scaled down", node=name)
            return
        for pod in moving:
            meta = pod["metadata"]
            try:
                await self.client.evict_pod(meta.get("namespace", ""), meta["name"], meta.get("uid", ""))
            except ApiError as exc:
                if exc.status == 404:
                    continue
                log.info("Eviction refused, node kept", node=name, pod=autoscale.pod_key(pod), error=str(exc)[:200])
                self.blockers[name] = f"eviction of {autoscale.pod_key(pod)} refused: {exc.status}"
                self.unneeded_since.pop(name, None)
                await self._taint(name, node, False)
                return

    async def _taint(self, name: str, node: dict, on: bool) -> None:
        taints = [t for t in ((node.get("spec") or {}).get("taints") or []) if t.get("key") != TO_BE_DELETED]
        if on:
            taints.append({"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"})
        with contextlib.suppress(ApiError):
            await self.client.patch_node(name, {"spec": {"taints": taints}})

    def status(self) -> dict:
        members = {g: [n["metadata"]["name"] for n in self.group_nodes(g)] for g in self.groups}
        return {
            "nodeGroups": [{"name": g.name, "minSize": g.min_size, "maxSize": g.max_size, "nodes": members[g.name]}
                           for g in self.groups.values()],
            "scaleUp": [{"group": g, "nodes": n} for g, n in self.scale_ups],
            "scaleDown": {"blockers": {n: why for n, why in sorted(self.blockers.items())
                                       if any(n in m for m in members.values())},
                          "unneeded": sorted(self.unneeded_since), "removed": list(self.removed)},
        }

    async def publish_status(self) -> None:
        text = yaml.safe_dump(self.status(), sort_keys=False)
        if text == self._status_text:
            return
        ns, name = STATUS_CONFIGMAP
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
                "data": {"status": text}}
        try:
            await self.client.replace("configmaps", name, body, ns)
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.client.create("configmaps", body, ns)
        self._status_text = text

    # ------------------------------------------------------------------ run

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(i.run(stop), name=f"cluster-autoscaler-{i.kind}")
                 for i in (self.nodes, self.pods, self.pdbs)]
        tasks.append(asyncio.create_task(self.events.run(stop), name="cluster-autoscaler-events"))
        try:
            for i in (self.nodes, self.pods, self.pdbs):
                await i.wait_synced(30)
            while not stop.is_set():
                try:
                    await self.scale_up()
                    await self.scale_down()
                    await self.publish_status()
                    self._last_error = ""
                except Exception as exc:  # noqa: BLE001 - a bad object or a failed write: the next scan retries
                    error = str(exc)[:300] or type(exc).__name__
                    if error != self._last_error:  # once per distinct failure, not once per scan
                        log.warning("Cluster autoscaler scan failed, retrying", error=error)
                    self._last_error = error
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.scan_interval)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _tainted(node: Mapping) -> bool:
    return any(t.get("key") == TO_BE_DELETED for t in ((node.get("spec") or {}).get("taints") or []))
