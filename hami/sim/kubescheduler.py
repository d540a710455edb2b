"""A scheduling loop that plays kube-scheduler (1.31) for the embedded cluster and the tests.

Queue: `hami.kubesched.schedqueue.SchedulingQueue` (activeQ, backoffQ 1 s doubling to 10 s, the
unschedulable pool with its 5-minute flush; see that module for what is modelled and where from).
Informer events feed it as kube-scheduler's `eventhandlers.go` does: a new pending pod is added; an
update of a pending pod goes to `Update` (a parked pod moves when the update is more than status); a
pod that got bound or vanished leaves the queue; an assigned pod's deletion (or its end, which the
scheduler's informer sees as a deletion: it watches `status.phase!=Succeeded,status.phase!=Failed`)
and node changes (`nodeSchedulingPropertiesChange`: labels, taints/unschedulable, conditions,
allocatable, annotations) are move requests.

One scheduling cycle (`schedule_one.go`): the in-tree filters, in the default profile's order
(NodeUnschedulable, TaintToleration for NoSchedule taints and the not-ready condition, NodeAffinity
for nodeSelector and required node affinity, NodeResourcesFit, PodTopologySpread, InterPodAffinity:
the last three in `hami.kubesched.intree`, which says what of them is modelled), each node checked with
the pods nominated to it (priority at least the pod's) and without them, as
`RunFilterPluginsWithNominatedPods` does, from where the last cycle's search stopped and until
numFeasibleNodesToFind nodes passed (`percentage_of_nodes_to_score`, hami.kubesched.nodestoscore; 100, the
chart's setting and the default here, searches every node); then the extender's `filterVerb` with NodeNames
(`nodeCacheCapable: true`), for a pod the extender is interested in (`HTTPExtender.IsInterested`: it
manages no resource, or the pod asks one it manages; otherwise the extender's filter, prioritize,
preempt and bind are skipped and DefaultBinder binds). One feasible node is taken as is; several
are scored: NodeAffinity's preferred terms (normalised to 0..100, weight 2 as in the default profile),
InterPodAffinity and PodTopologySpread (weight 2), NodeResourcesFit's LeastAllocated and BalancedAllocation (weight 1),
TaintToleration's PreferNoSchedule count (weight 3) plus, with a `prioritizeVerb`, the extender's 0..10 scores times its
weight times 10 (MaxNodeScore / MaxExtenderPriority). An assigned pod's arrival or label change moves the parked pods it
could help (`getUnschedulablePodsWithCrossTopologyTerm`: rejected by PodTopologySpread in its namespace, or with
a required affinity term it matches). With queueing hints on, each of these plugins answers its own
hint (`isSchedulableAfterPodChange` / `isSchedulableAfterNodeChange`): see `HINTED_EVENTS`.

When nothing fits, PostFilter runs DefaultPreemption through the extender's `preemptVerb` (when
configured), as `hami.kubesched.preemption` describes: on every node that failed for a resolvable reason,
the lower-priority pods come off, the in-tree filters must then pass, and the pods are put back most
important first (PDB-violating ones first), the ones that cannot go back being the victims. The
extender answers the victims it needs (any pod on the node, as `convertToVictims` reads them); the
node is picked as `pickOneNodeForPreemption` does (fewest PDB violations, lowest highest-victim
priority, lowest priority sum, fewest victims); the victims are deleted and the preemptor's
`status.nominatedNodeName` set. For a pod with claims the dry run also runs the DynamicResources
filter; with `dra_preemption` (KEP-5690, DRA preemption, the 1.37 beta; the embedded `--dra` cluster
turns it on) it runs without an extender preemptVerb and counts the claims only the victims reserve
as released (`DynamicResources.usage_without`); without it, as in 1.36, they stay allocated and a pod
short only of DRA devices finds no victims. When no node is nominated, the DynamicResources
PostFilter deallocates one of the pod's own claims that is allocated, reserved by no other pod, and
kept it off a node. Then the pod gets the PodScheduled=False condition (with
DefaultPreemption's message when it found nothing) and goes back through AddUnschedulableIfNotPresent.

The loop is faithful to kube-scheduler 1.31+ by default. Two divergences remain as switches, each
off unless a test asks for it and says why: `ExtenderConfig.gpu_only_preemption` (a node short only
of GPU shares has no in-tree victims and kube-scheduler drops it, "expected at least one victim pod
on node", so the extender is never asked; the switch hands the extender every lower-priority pod on
such a node instead, counted in `stats.gpu_only_preemptions`) and `extender_parks` (see
hami.kubesched.schedqueue). On a real cluster GPU-only preemption comes from the scheduler's own
controller (`--gpu-preemption`, hami.scheduler.preemption.controller; docs/kube-scheduler.md), and the
tests prove it on this faithful loop. Not modelled: ImageLocality, volume plugins.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import aiohttp
import orjson

from hami.kube.client import ApiError, KubeClient, resource_path
from hami.kube.informer import Informer
from hami.kubesched import intree, nodeaffinity, nodestoscore, preemption, schedconfig, taints
from hami.kubesched import schedqueue as sq
from hami.kubesched.pdb import victims_violating
from hami.kubesched.schedconfig import is_interested
from hami.obs.log import get_logger
from hami.sim.dranominate import ClaimNominations
from hami.sim.dynamicresources import PLUGIN as DRA_PLUGIN
from hami.sim.dynamicresources import DynamicResources
from hami.sim.snapshot import PlacedPods
from hami.sim.snapshot import assigned_active as _assigned_active

log = get_logger(__name__)

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
NODE_AFFINITY_WEIGHT = 2

# The extender replica this cycle talks to; binding tasks inherit it from the cycle that made them.
_replica_url: contextvars.ContextVar[str] = contextvars.ContextVar("extender_replica_url")


@dataclass(frozen=True)
class ExtenderConfig:
    """The `extenders[]` entry of KubeSchedulerConfiguration the loop follows."""

    url: str
    filter_verb: str = "filter"
    bind_verb: str = "bind"
    prioritize_verb: str = ""
    preempt_verb: str = ""
    weight: int = 1
    http_timeout: float = 30.0
    # More replicas of the extender behind one Service: each scheduling cycle (and its binding
    # cycle) talks to one of them, round robin, as a kept-alive connection through a Service does.
    replica_urls: tuple[str, ...] = ()
    # Go's http.Transport as kube-scheduler's extender client leaves it: no cap on connections to a host
    # (MaxConnsPerHost 0), so every request in flight without an idle connection dials its own.
    max_conns_per_host: int = 0
    # Preemption's dry run finds no victims where only extender-managed GPU shares are short (the
    # in-tree filters do not count them), and kube-scheduler then never calls `preempt_verb`.
    # False (the default): exactly kube-scheduler 1.31. True, a divergence only tests ask for: hand the
    # extender every lower-priority pod on such a node instead.
    gpu_only_preemption: bool = False
    # `managedResources[].name`: when any, the extender sees only pods that ask one of them
    # (HTTPExtender.IsInterested); none: every pod of the profile.
    managed_resources: frozenset[str] = frozenset()

    def interested(self, pod: Mapping) -> bool:
        """HTTPExtender.IsInterested (hami.kubesched.schedconfig)."""
        return is_interested(self.managed_resources, pod)

    @classmethod
    def from_entry(cls, entry: schedconfig.ExtenderEntry, url: str = "") -> ExtenderConfig:
        """A KubeSchedulerConfiguration's `extenders[]` entry (`url` in place of its urlPrefix)."""
        return cls(url or entry.url, filter_verb=entry.filter_verb, bind_verb=entry.bind_verb,
                   prioritize_verb=entry.prioritize_verb, preempt_verb=entry.preempt_verb, weight=entry.weight,
                   http_timeout=entry.http_timeout, managed_resources=entry.managed)


@dataclass
class SchedulerStats:
    filters: int = 0
    binds: int = 0
    bound: int = 0
    unschedulable: int = 0
    errors: int = 0
    prioritizes: int = 0
    preemptions: int = 0
    victims: int = 0
    gpu_only_preemptions: int = 0  # preemptions only `gpu_only_preemption` made possible
    nodes_filtered: int = 0  # nodes the in-tree filters processed, summed over cycles
    nodes_to_extender: int = 0  # feasible nodes handed to the extender's filter, summed over cycles
    attempts: dict[str, int] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)  # pod key -> loop clock when bound
    node_of: dict[str, str] = field(default_factory=dict)
    bind_errors: dict[str, int] = field(default_factory=dict)  # extender bind error text -> count
    connection_errors: int = 0  # binds whose connection was refused, reset or closed unanswered


def _pending_for_us(pod: dict, scheduler_name: str) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulerName") != scheduler_name:
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase", "Pending") == "Pending"


def _cross_topology(assigned: dict):
    """getUnschedulablePodsWithCrossTopologyTerm: parked pods an assigned pod's arrival can help."""
    def helps(qp: sq.QueuedPod) -> bool:
        if "PodTopologySpread" in qp.rejectors and intree.namespace_of(qp.pod) == intree.namespace_of(assigned):
            return True
        return any(intree.term_matches(t, qp.pod, assigned)
                   for t in intree.affinity_terms(qp.pod, "podAffinity", intree.REQUIRED))
    return helps


def _key(pod: dict | None) -> str:
    meta = (pod or {}).get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# ---------------------------------------------------------------------- in-tree plugins (pure)

def _ready(node: dict) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def _tolerates(pod: dict, taint: Mapping) -> bool:
    return taints.tolerates((pod.get("spec") or {}).get("tolerations"),
                            (taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""))


def _term_matches(term: Mapping, node: dict) -> bool:
    meta = node.get("metadata") or {}
    return nodeaffinity.term_matches(term, meta.get("labels") or {}, meta.get("name", ""))


def filter_node(pod: dict, node: dict) -> tuple[str, str] | None:
    """The in-tree Filter plugins: None when the node passes, else (plugin, reason)."""
    spec = pod.get("spec") or {}
    if (node.get("spec") or {}).get("unschedulable") and not _tolerates(
            pod, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}):
        return "NodeUnschedulable", "node(s) were unschedulable"
    taints = list((node.get("spec") or {}).get("taints") or [])
    if not _ready(node):
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint):
            return "TaintToleration", f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    meta = node.get("metadata") or {}
    if not nodeaffinity.pod_matches(spec, meta.get("labels") or {}, meta.get("name", "")):
        return "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"
    return None


def _node_affinity_ok(pod: dict, node: dict) -> bool:
    """NodeAffinity alone (nodeSelector, required terms): PodTopologySpread's nodeAffinityPolicy Honor."""
    verdict = filter_node({"spec": {k: v for k, v in (pod.get("spec") or {}).items()
                                    if k in ("nodeSelector", "affinity")} | {"tolerations": [{"operator": "Exists"}]}},
                          {**node, "spec": {}, "status": {}})
    return verdict is None


@dataclass(frozen=True)
class ClusterView:
    nodes: Mapping[str, dict]
    pods_on: dict[str, list[dict]]           # node -> assigned, not finished pods
    nominated: dict[str, list[dict]]         # node -> pods nominated there (priority >= the pod's)
    eligible: list[dict]                     # nodes passing the pod's node affinity / selector
    holders: list                            # (pod, node) of placed pods with required anti-affinity
    ns_labels: dict = field(default_factory=dict)  # namespace -> labels (namespaceSelector)


def _without(view: ClusterView, node: str, off: frozenset[str]) -> ClusterView:
    """The view with the pods `off` taken off `node` (preemption's dry run)."""
    pods_on = dict(view.pods_on)
    pods_on[node] = [p for p in pods_on.get(node, ()) if (p.get("metadata") or {}).get("uid") not in off]
    return replace(view, pods_on=pods_on, holders=intree.anti_affinity_holders(pods_on))


def node_affinity_scores(pod: dict, nodes: list[dict]) -> dict[str, int]:
    """NodeAffinity Score + NormalizeScore: preferred-term weights summed, scaled to 0..100."""
    preferred = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                 .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    raw = {}
    for node in nodes:
        raw[node["metadata"]["name"]] = sum(
            int(p.get("weight") or 0) for p in preferred if _term_matches(p.get("preference") or {}, node))
    top = max(raw.values(), default=0)
    return {n: (s * MAX_NODE_SCORE // top if top else 0) for n, s in raw.items()}


def node_events(old: dict, new: dict) -> list[tuple[str, str]]:
    """nodeSchedulingPropertiesChange: which node update events this change is."""
    out = []
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    ost, nst = old.get("status") or {}, new.get("status") or {}
    if bool(os_.get("unschedulable")) != bool(ns_.get("unschedulable")) or os_.get("taints") != ns_.get("taints"):
        out.append((sq.NODE, sq.UPDATE_TAINT))
    if ost.get("allocatable") != nst.get("allocatable"):
        out.append((sq.NODE, sq.UPDATE_ALLOCATABLE))
    if (om.get("labels") or {}) != (nm.get("labels") or {}):
        out.append((sq.NODE, sq.UPDATE_LABEL))
    strip = [{k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
             for c in ost.get("conditions") or []]
    strip_new = [{k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
                 for c in nst.get("conditions") or []]
    if strip != strip_new:
        out.append((sq.NODE, sq.UPDATE_CONDITION))
        if _ready(old) != _ready(new):  # the node lifecycle controller turns it into a taint change
            out.append((sq.NODE, sq.UPDATE_TAINT))
    if (om.get("annotations") or {}) != (nm.get("annotations") or {}):
        out.append((sq.NODE, sq.UPDATE_ANNOTATION))
    return out


def _transition_hint(plugin: str) -> sq.Hint:
    """The QueueingHint of NodeUnschedulable / TaintToleration / NodeAffinity for node events
    (isSchedulableAfterNodeChange): Queue only when the new node passes this plugin's check and the
    old one (if any) did not; anything else cannot have changed this plugin's verdict."""
    def passes(pod: dict, node: dict | None) -> bool:
        verdict = filter_node(pod, node) if node is not None else (plugin, "")
        return verdict is None or verdict[0] != plugin
    return lambda pod, old, new: new is not None and passes(pod, new) and (old is None or not passes(pod, old))


# PLUGIN_EVENTS with the in-tree hints filled in (used when queueing hints are on).
def _affinity_pod_hint(pod: dict, old: dict | None, new: dict | None) -> bool:
    """InterPodAffinity isSchedulableAfterPodChange: an added/relabelled pod that matches one of the
    pod's required affinity terms; a removed one that matched its anti-affinity terms, or whose own
    anti-affinity matched the pod."""
    if new is not None:
        return any(intree.term_matches(t, pod, new) for t in intree.affinity_terms(pod, "podAffinity", intree.REQUIRED))
    if old is None:
        return False
    def repels(a: dict, b: dict) -> bool:
        return any(intree.term_matches(t, a, b) for t in intree.affinity_terms(a, "podAntiAffinity", intree.REQUIRED))

    return repels(pod, old) or repels(old, pod)


def _spread_pod_hint(pod: dict, old: dict | None, new: dict | None) -> bool:
    """PodTopologySpread isSchedulableAfterPodChange: a pod of the same namespace that one of the
    constraints' selectors matches (before or after the change)."""
    constraints = (pod.get("spec") or {}).get("topologySpreadConstraints") or []
    return any(other is not None and intree.namespace_of(other) == intree.namespace_of(pod)
               and intree.selector_matches(c.get("labelSelector"), intree.labels_of(other))
               for other in (old, new) for c in constraints)


def _spread_node_hint(pod: dict, old: dict | None, new: dict | None) -> bool:
    """PodTopologySpread isSchedulableAfterNodeChange: the node carries every constraint key now
    (added, or a topology label gained or changed)."""
    keys = [c.get("topologyKey") for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []]
    if new is None or not all(k in intree.labels_of(new) for k in keys):
        return False
    return old is None or any(intree.labels_of(old).get(k) != intree.labels_of(new).get(k) for k in keys)


def _resources_pod_hint(pod: dict, old: dict | None, new: dict | None) -> bool:
    """NodeResourcesFit isSchedulableAfterPodChange: a deleted pod that requested something this pod needs."""
    if old is None:
        return False
    want, freed = intree.pod_requests(pod), intree.pod_requests(old)
    return any(want[r] and freed[r] for r in want) or not any(want.values())


def _resources_node_hint(pod: dict, old: dict | None, new: dict | None) -> bool:
    """NodeResourcesFit isSchedulableAfterNodeChange: the (new or grown) node's allocatable fits the pod."""
    if new is None:
        return False
    alloc, want = intree.allocatable(new), intree.pod_requests(pod)
    return all(want[r] <= alloc[r] for r in want if r in alloc)


_POD_HINTS = {"InterPodAffinity": _affinity_pod_hint, "PodTopologySpread": _spread_pod_hint,
              "NodeResourcesFit": _resources_pod_hint}
_NODE_HINTS = {"PodTopologySpread": _spread_node_hint, "NodeResourcesFit": _resources_node_hint,
               "NodeUnschedulable": _transition_hint("NodeUnschedulable"),
               "TaintToleration": _transition_hint("TaintToleration"), "NodeAffinity": _transition_hint("NodeAffinity")}


def _hint(plugin: str, event: tuple[str, str]) -> sq.Hint | None:
    if event[0] == sq.ASSIGNED_POD:
        return _POD_HINTS.get(plugin)
    if event[0] == sq.NODE:
        if plugin == "InterPodAffinity":
            return None  # any node add/label change may open a topology domain: Queue
        return _NODE_HINTS.get(plugin)
    return None


HINTED_EVENTS = {plugin: {ev: _hint(plugin, ev) for ev in evs} for plugin, evs in sq.PLUGIN_EVENTS.items()}


def pick_preemption_node(candidates: Mapping[str, tuple[list[dict], int]]) -> str | None:
    """pickOneNodeForPreemption: fewest PDB violations, then the lowest highest-victim priority,
    the lowest priority sum, the fewest victims; the first in name order after that."""
    def rank(item):
        name, (victims, pdb) = item
        prios = [sq.pod_priority(v) for v in victims]
        return (pdb, max(prios, default=-(2 ** 31)), sum(p + 2 ** 31 for p in prios), len(victims), name)
    best = min(candidates.items(), key=rank, default=None)
    return best[0] if best else None


# ---------------------------------------------------------------------- the loop

class KubeSchedulerLoop:
    def __init__(self, client: KubeClient, extender_url: str | ExtenderConfig, scheduler_name: str,
                 *, http_timeout: float = 30.0, clock=time.monotonic, timings: sq.QueueTimings | None = None,
                 queueing_hints: bool = False, extender_parks: bool = False, dra: DynamicResources | None = None,
                 dra_preemption: bool = False, fit_ignored: frozenset[str] | None = None,
                 fit_ignored_groups: frozenset[str] = frozenset(),
                 percentage_of_nodes_to_score: int = nodestoscore.ALL_NODES):
        self.client = client
        # The profile's percentageOfNodesToScore: 100 (the chart's, the default here) filters every node
        # each cycle; lower, or 0 (kube-scheduler's adaptive default), stops the search at
        # numFeasibleNodesToFind feasible nodes, starting where the last cycle stopped (nodestoscore).
        nodestoscore.check_percentage(percentage_of_nodes_to_score, "percentage_of_nodes_to_score")
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.next_start_node_index = 0
        # NodeResourcesFitArgs.ignoredResources / ignoredResourceGroups of the profile (None: without
        # DRA no extended resource is checked, as if each were an extender's ignoredByScheduler one)
        self.fit_ignored, self.fit_ignored_groups = fit_ignored, fit_ignored_groups
        self.ext = extender_url if isinstance(extender_url, ExtenderConfig) else ExtenderConfig(
            extender_url, http_timeout=http_timeout)
        self.url = self.ext.url.rstrip("/")
        self.scheduler_name = scheduler_name
        self.clock = clock
        self.timings = timings or sq.QueueTimings()
        self.queue = sq.SchedulingQueue(self.timings, queueing_hints=queueing_hints, extender_parks=extender_parks,
                                        plugin_events=HINTED_EVENTS if queueing_hints else sq.PLUGIN_EVENTS)
        self.pods = Informer(client, "pods", handler=self._on_pod)
        self.placed = PlacedPods()  # the cycle's view of placed pods, kept per node (snapshot.py)
        self.nodes = Informer(client, "nodes", handler=self._on_node)
        # KEP-5690 (DRA preemption, beta in 1.37): DefaultPreemption runs without an extender's
        # preemptVerb, and its dry run counts the claims only the victims reserve as released.
        self.dra_preemption = dra_preemption and dra is not None
        # KEP-5690's claim nominations: what a preemption freed is held for its preemptor (dranominate)
        self.nominations = ClaimNominations(dra) if self.dra_preemption else None
        self.pdbs = Informer(client, "poddisruptionbudgets") if self.preempts else None
        self.namespaces = Informer(client, "namespaces")  # InterPodAffinity's namespaceSelector
        self.stats = SchedulerStats()
        self.requests = intree.Requests()
        self._kick = asyncio.Event()
        urls = [self.url] + [u.rstrip("/") for u in self.ext.replica_urls]
        self._replicas = itertools.cycle(urls)
        self._binding: set[asyncio.Task] = set()
        # The DynamicResources plugin (structured parameters); None: claims are not looked at.
        self.dra = dra
        self._gated: dict[str, dict] = {}  # DynamicResources PreEnqueue: pods whose claims do not exist yet
        # pod key -> (claims Reserve assumed, PreBind writes; every claim of the pod, for binding conditions)
        self._prebind: dict[str, tuple[list[dict], list[str]]] = {}
        if dra is not None:
            dra.on_event = self._dra_event

    @property
    def preempts(self) -> bool:
        """DefaultPreemption runs: through the extender's preemptVerb, or in-tree with DRA preemption."""
        return bool(self.ext.preempt_verb) or self.dra_preemption

    # ------------------------------------------------------------------ events (eventhandlers.go)

    def _on_pod(self, etype: str, old: dict | None, new: dict | None) -> None:
        self.placed.event(old, new)
        now = self.clock()
        key = _key(new or old)
        self._gated.pop(key, None)
        if self.nominations is not None and (new is None or (new.get("spec") or {}).get("nodeName")):
            self.nominations.forget(key)  # bound or gone: its nomination ends
        if new is None:  # deleted
            self.queue.delete(key)
            if _assigned_active(old):
                self._move((sq.ASSIGNED_POD, sq.DELETE), now, old, None)
            return
        if _pending_for_us(new, self.scheduler_name):
            if self.dra is not None and self.dra.gated(new):  # PreEnqueue: not queued until its claims exist
                self.queue.delete(key)
                self._gated[key] = new
                return
            if old is None or key not in self.queue.pods:
                self.queue.add(key, new, now)
            else:
                self.queue.update(key, old, new, now)
            self._kick.set()
            return
        self.queue.delete(key)
        if _assigned_active(old) and not _assigned_active(new):  # finished: the informer drops it
            self._move((sq.ASSIGNED_POD, sq.DELETE), now, old, None)
        elif _assigned_active(new) and not _assigned_active(old):  # bound (or added bound): AssignedPodAdded
            self._move((sq.ASSIGNED_POD, sq.ADD), now, old, new, only=_cross_topology(new))
        elif _assigned_active(new) and intree.labels_of(old or {}) != intree.labels_of(new):  # AssignedPodUpdated
            self._move((sq.ASSIGNED_POD, sq.UPDATE), now, old, new, only=_cross_topology(new))

    def _dra_event(self, event: tuple[str, str], old: dict | None, new: dict | None) -> None:
        """A claim, slice or class event: gated pods whose claims now exist are queued; parked ones move."""
        now = self.clock()
        for key, pod in list(self._gated.items()):
            if not self.dra.gated(pod):
                del self._gated[key]
                self.queue.add(key, pod, now)
                self._kick.set()
        self._move(event, now, old, new)

    def _on_node(self, etype: str, old: dict | None, new: dict | None) -> None:
        now = self.clock()
        if new is None:
            return
        events = [(sq.NODE, sq.ADD)] if old is None else node_events(old, new)
        for ev in events:
            self._move(ev, now, old, new)

    def _move(self, event, now, old, new, only=None) -> None:
        if self.queue.move_all(event, now, old, new, only=only):
            self._kick.set()

    # ------------------------------------------------------------------ run

    async def run(self, stop: asyncio.Event) -> None:
        informers = [self.nodes, self.pods, self.namespaces] + ([self.pdbs] if self.pdbs is not None else [])
        informers += self.dra.informers if self.dra is not None else []
        tasks = [asyncio.create_task(i.run(stop), name=f"kube-scheduler:{i.kind}") for i in informers]
        timeout = aiohttp.ClientTimeout(total=self.ext.http_timeout)
        try:
            for i in informers:
                await i.wait_synced()
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.ext.max_conns_per_host)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
                workers = [asyncio.create_task(self._worker(http, stop), name="kube-scheduler:worker"),
                           asyncio.create_task(self._flusher(stop), name="kube-scheduler:flush")]
                await stop.wait()
                for w in workers + list(self._binding):
                    w.cancel()
                await asyncio.gather(*workers, *self._binding, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _flusher(self, stop: asyncio.Event) -> None:
        """The queue's two periodic flushes (run() in scheduling_queue.go)."""
        next_unsched = self.clock() + self.timings.unschedulable_flush_interval
        while not stop.is_set():
            await asyncio.sleep(self.timings.backoff_flush_interval)
            now = self.clock()
            moved = self.queue.flush_backoff(now)
            if now >= next_unsched:
                next_unsched = now + self.timings.unschedulable_flush_interval
                moved += self.queue.flush_unschedulable(now)
            if moved:
                self._kick.set()

    async def _worker(self, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            qp = self.queue.pop(self.clock())
            if qp is None:
                self._kick.clear()
                await self._kick.wait()
                continue
            pod = self.pods.store.get(qp.key, qp.pod)
            if not _pending_for_us(pod, self.scheduler_name):
                self.queue.done(qp.key)
                continue
            qp.pod = pod
            _replica_url.set(next(self._replicas))
            assumed: list[str] = []
            try:
                rejectors = await self.schedule_one(http, pod, on_assumed=assumed.append)
            except Exception as exc:  # keep the loop alive; log once per attempt
                self.stats.errors += 1
                log.warning("Scheduling attempt failed", pod=qp.key, error=str(exc))
                self.queue.add_error(qp, self.clock())
                continue
            if assumed:
                # schedule_one.go: the binding cycle runs on its own goroutine; the next pod is
                # scheduled meanwhile (the extender keeps the assumed placement, as the cache does).
                task = asyncio.create_task(self._binding_cycle(http, qp, pod, assumed[0]),
                                           name=f"kube-scheduler:bind:{qp.key}")
                self._binding.add(task)
                task.add_done_callback(self._binding.discard)
            elif rejectors is None:
                self.queue.done(qp.key)
            else:
                where = self.queue.add_unschedulable(qp, rejectors, self.clock())
                log.v(4).info("Pod requeued", pod=qp.key, queue=where, rejectors=sorted(rejectors))

    # ------------------------------------------------------------------ one cycle

    async def _binding_cycle(self, http: aiohttp.ClientSession, qp: sq.QueuedPod, pod: dict, node: str) -> None:
        try:
            bound = await self._bind(http, pod, node)
        except aiohttp.ClientConnectionError as exc:  # a reset is a failed binding cycle, as in kube-scheduler
            self.stats.errors += 1
            self.stats.connection_errors += 1
            log.warning("Binding cycle failed", pod=qp.key, node=node, error=str(exc) or type(exc).__name__)
            bound = False
        except Exception as exc:  # an HTTP failure is a bind error, as in kube-scheduler
            self.stats.errors += 1
            log.warning("Binding cycle failed", pod=qp.key, node=node, error=str(exc))
            bound = False
        now = self.clock()
        if bound:
            self.queue.done(qp.key)
            return
        # handleBindingCycleError: forgetting the assumed pod is an AssignedPodDelete for the
        # others (the bind error is not a rejection, so it moves them at once), then the pod
        # itself goes through the failure handler: an error, so backoffQ.
        self._move((sq.ASSIGNED_POD, sq.DELETE), now, pod, None)
        self.queue.add_error(qp, now)
        self._kick.set()

    async def _bind(self, http: aiohttp.ClientSession, pod: dict, node: str) -> bool:
        key, meta = _key(pod), pod["metadata"]
        self.stats.binds += 1
        reserved = self._prebind.pop(key, None)
        if reserved:  # DynamicResources PreBind: the claims' status before the binding
            error = await self.dra.prebind(*reserved)
            if error:
                log.v(2).info("Claim reservation failed", pod=key, node=node, error=error)
                return False
        if not self.url or not self.ext.bind_verb or not self.ext.interested(pod):  # DefaultBinder
            try:
                await self.client.bind_pod(meta.get("namespace", "default"), meta["name"], meta.get("uid", ""), node)
            except ApiError as exc:
                log.v(2).info("Bind failed", pod=key, node=node, error=exc.message)
                return False
            self.stats.bound += 1
            self.stats.bound_at[key] = self.clock()
            self.stats.node_of[key] = node
            return True
        bind = await self._post(http, self.ext.bind_verb, {
            "PodName": meta["name"], "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""), "Node": node,
        })
        if bind.get("Error"):
            text = str(bind["Error"])[:80]
            self.stats.bind_errors[text] = self.stats.bind_errors.get(text, 0) + 1
            log.v(2).info("Bind failed", pod=key, node=node, error=bind["Error"])
            return False
        self.stats.bound += 1
        self.stats.bound_at[key] = self.clock()
        self.stats.node_of[key] = node
        log.v(2).info("Pod bound", pod=key, node=node)
        return True

    async def schedule_one(self, http: aiohttp.ClientSession, pod: dict, *,
                           on_assumed=None) -> set[str] | None:
        """One scheduling cycle. None when bound (or, with `on_assumed`, handed the chosen node to bind
        asynchronously); else the rejector plugins (empty: an error)."""
        key = _key(pod)
        self.stats.attempts[key] = self.stats.attempts.get(key, 0) + 1
        names = sorted(self.nodes.store)
        view = self._cluster_view(pod)
        claims, outcomes, usage = None, {}, None
        extended: dict[str, tuple | None] = {}  # node -> the extended-resource claim built for it (KEP-5004)
        if self.dra is not None and self.dra.involves(pod):  # DynamicResources PreFilter
            claims, why = self.dra.prefilter(pod)
            if claims is None:
                self.stats.unschedulable += 1
                await self._mark_unschedulable(pod, why)
                return {DRA_PLUGIN}
            usage = self.dra.usage()
        search = self._search(pod, names, view, (claims, usage, outcomes, extended))
        feasible, statuses = search.feasible, search.rejected  # statuses: node -> (plugin, reason(s), unresolvable)
        calls_extender = bool(self.url) and self.ext.interested(pod)
        chosen: list[str] = [] if calls_extender else feasible
        if feasible and calls_extender:
            self.stats.filters += 1
            self.stats.nodes_to_extender += len(feasible)
            result = await self._post(http, self.ext.filter_verb,
                                      {"Pod": pod, "NodeNames": feasible, "Nodes": None})
            if result.get("Error"):
                await self._mark_unschedulable(pod, f"0/{len(names)} nodes are available: {result['Error']}.")
                return set()
            chosen = [n for n in result.get("NodeNames") or [] if n in feasible]
            for n, msg in (result.get("FailedNodes") or {}).items():
                statuses[n] = (sq.EXTENDER, msg, False)
            for n, msg in (result.get("FailedAndUnresolvableNodes") or {}).items():
                statuses[n] = (sq.EXTENDER, msg, True)
        if not chosen:
            self.stats.unschedulable += 1
            message = self.fit_error_message(len(names), statuses)
            nominated = None
            if self.preempts:
                nominated, why = await self._preempt(http, pod, statuses, claims)
                if nominated:
                    message += f" preemption: nominated node {nominated}."
                elif why:
                    message += f" preemption: {why}"
            if claims is not None and not nominated:  # DynamicResources PostFilter
                failed = [n for n, (plugin, _, _) in statuses.items() if plugin == DRA_PLUGIN]
                stale = self.dra.unavailable_claim(pod, claims, failed)
                if stale is not None:
                    error = await self.dra.deallocate(stale)
                    stale_key = f"{stale['metadata'].get('namespace', '')}/{stale['metadata']['name']}"
                    message += f" {error}." if error else f" deallocated resourceclaim {stale_key}."
            await self._mark_unschedulable(pod, message)
            log.v(2).info("Pod unschedulable", pod=key, message=message)
            return {plugin for plugin, _, _ in statuses.values()}
        node = chosen[0] if len(chosen) == 1 else await self._prioritize(http, pod, chosen)
        if claims is not None:  # DynamicResources Reserve; PreBind writes them in the binding cycle
            ext = extended.get(node)
            self._prebind[key] = (self.dra.reserve(pod, claims + ([ext[0]] if ext else []), outcomes[node], ext),
                                  [f"{c['metadata'].get('namespace', '')}/{c['metadata']['name']}" for c in claims])
        if on_assumed is not None:
            on_assumed(node)
            return None
        return None if await self._bind(http, pod, node) else set()

    def _search(self, pod: dict, names: list[str], view: ClusterView,
                dra_state: tuple) -> nodestoscore.Search[tuple[str, str | tuple[str, ...], bool]]:
        """findNodesThatPassFilters: the in-tree filters, then DynamicResources' for a pod with claims
        (`dra_state`: its claims, the usage, and the per-node outcomes and extended-resource claims this
        fills in), on the nodes from the rotating start until numFeasibleNodesToFind passed."""
        claims, usage, outcomes, extended = dra_state

        def check(name: str):
            node = self.nodes.store[name]
            verdict = self.filter_in_tree(pod, node, view)
            if verdict is None and claims is not None:  # DynamicResources Filter
                node_claims, extended[name] = self.dra.with_extended(pod, claims, node)
                outcome = self.dra.filter(node_claims, node, self._usage_on(name, pod, usage))
                if outcome.ok:
                    outcomes[name] = outcome
                else:
                    verdict = (DRA_PLUGIN, f"cannot allocate all claims: {outcome.reason}", False)
            return verdict

        to_find = nodestoscore.nodes_to_find(self.percentage_of_nodes_to_score, len(names))
        search = nodestoscore.find_feasible(names, self.next_start_node_index, to_find, check)
        self.next_start_node_index = search.next_start
        self.stats.nodes_filtered += search.processed
        return search

    async def _prioritize(self, http: aiohttp.ClientSession, pod: dict, chosen: list[str]) -> str:
        """prioritizeNodes: in-tree scores plus the extender's, weighted; the highest wins."""
        totals = dict.fromkeys(chosen, 0)
        feasible = [self.nodes.store[n] for n in chosen if n in self.nodes.store]
        view = self._cluster_view(pod)
        for n, s in self.in_tree_scores(pod, feasible, view).items():
            totals[n] += s
        if self.ext.prioritize_verb and self.ext.interested(pod):
            self.stats.prioritizes += 1
            scores = await self._post(http, self.ext.prioritize_verb, {"Pod": pod, "NodeNames": chosen, "Nodes": None})
            if isinstance(scores, list):
                for hp in scores:
                    if hp.get("Host") in totals:
                        totals[hp["Host"]] += int(hp.get("Score") or 0) * self.ext.weight * (
                            MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        return max(chosen, key=lambda n: totals[n])  # ties: the extender's order

    # ------------------------------------------------------------------ in-tree plugins

    def _cluster_view(self, pod: dict) -> ClusterView:
        """The snapshot a cycle filters against: assigned pods per node and the nominated pods
        (kept from the pod watch, only changed nodes rebuilt, as upstream's UpdateSnapshot)."""
        placed = self.placed
        pods_on = placed.pods_on()
        nominated: dict[str, list[dict]] = {}
        key, prio = _key(pod), sq.pod_priority(pod)
        for p in placed.nominated():
            nnn = p["status"]["nominatedNodeName"]
            if _key(p) != key and sq.pod_priority(p) >= prio and _pending_for_us(p, self.scheduler_name):
                nominated.setdefault(nnn, []).append(p)
        eligible = [n for n in self.nodes.store.values() if _node_affinity_ok(pod, n)]
        ns_labels = {name: (ns.get("metadata") or {}).get("labels") or {} for name, ns in self.namespaces.store.items()}
        return ClusterView(self.nodes.store, pods_on, nominated, eligible, placed.holders(), ns_labels)

    def filter_in_tree(
        self, pod: dict, node: dict, view: ClusterView,
    ) -> tuple[str, str | tuple[str, ...], bool] | None:
        """The in-tree filters on one node, with its nominated pods and (when any) without them."""
        verdict = filter_node(pod, node)
        if verdict is not None:
            return verdict[0], verdict[1], True
        name = node["metadata"]["name"]
        extra = view.nominated.get(name)
        for with_nominated in ((True, False) if extra else (False,)):
            pods_on, holders = view.pods_on, view.holders
            if with_nominated:
                pods_on = dict(pods_on)
                pods_on[name] = list(pods_on.get(name, ())) + list(extra or ())
                holders = intree.anti_affinity_holders({name: list(extra or ())}) + holders
            v = (intree.fit_resources(pod, node, pods_on.get(name, ()), self.requests, **self._extended_fit(node))
                 or intree.topology_spread(pod, node, view.eligible, pods_on)
                 or intree.inter_pod_affinity(pod, node, view.nodes, pods_on, holders, view.ns_labels))
            if v is not None:
                return v.plugin, (v.reasons[0] if len(v.reasons) == 1 else v.reasons), v.unresolvable
        return None

    def _extended_fit(self, node: dict) -> dict:
        """NodeResourcesFit's extended resources: checked, except the profile's ignored ones
        (`fit_ignored`) and those a DeviceClass maps (KEP-5004) on a node whose allocatable does not list
        them (DynamicResources serves those). Without DRA and without `fit_ignored` none is checked:
        the HAMi loop leaves them to its extender (HAMi's managedResources are ignoredByScheduler)."""
        ignored, groups = self.fit_ignored or frozenset(), self.fit_ignored_groups
        if self.dra is None:
            return {} if self.fit_ignored is None else {"extended": True, "ignored": ignored, "ignored_groups": groups}
        alloc = (node.get("status") or {}).get("allocatable") or {}
        return {"extended": True, "ignored": ignored | frozenset(r for r in self.dra.mapping() if r not in alloc),
                "ignored_groups": groups}

    def in_tree_scores(self, pod: dict, feasible: list[dict], view: ClusterView) -> dict[str, int]:
        """The default profile's scores, weighted and summed, per feasible node."""
        totals = {n["metadata"]["name"]: 0 for n in feasible}
        for scores, weight in (
                (node_affinity_scores(pod, feasible), NODE_AFFINITY_WEIGHT),
                (intree.inter_pod_affinity_scores(pod, feasible, view.nodes, view.pods_on, view.ns_labels), 2),
                (intree.topology_spread_scores(pod, feasible, view.eligible, view.pods_on), 2),
                (intree.resource_scores(pod, feasible, view.pods_on, self.requests), 1),
                (intree.taint_toleration_scores(pod, feasible), 3)):
            for n, s in scores.items():
                totals[n] += s * weight
        return totals

    # ------------------------------------------------------------------ preemption (PostFilter)

    def _fits_without(self, pod: dict, node: dict, view: ClusterView, claims: list[dict] | None):
        """The dry run's filter on one node with some pods off it (their uids): the in-tree filters,
        then, for a pod with claims, the DynamicResources filter, where the victims' claims count as
        released only with DRA preemption (1.36's plugin has no RemovePod: they stay allocated)."""
        name = node["metadata"]["name"]

        def fits(off: frozenset[str]) -> bool:
            if self.filter_in_tree(pod, node, _without(view, name, off)) is not None:
                return False
            if claims is None:
                return True
            return self.dra.filter(claims, node, self.dra.usage_without(off if self.dra_preemption else frozenset())).ok
        return fits

    async def _preempt(self, http: aiohttp.ClientSession, pod: dict,
                       statuses: dict, claims: list[dict] | None = None) -> tuple[str | None, str]:
        """PostFilter (DefaultPreemption): (the nominated node, "") or (None, why it failed). Kept whole: a
        faithful port of kube-scheduler's steps, in their order."""
        spec = pod.get("spec") or {}
        if spec.get("preemptionPolicy") == "Never":
            return None, ""
        if claims is not None and self.nominations is not None and self.nominations.settling(_key(pod)):
            return None, "not eligible due to resource claims still being deallocated on the nominated node."
        prio = sq.pod_priority(pod)
        by_node: dict[str, list[dict]] = {}
        for p in self.pods.store.values():
            n = (p.get("spec") or {}).get("nodeName")
            if n and _assigned_active(p) and sq.pod_priority(p) < prio and not (p.get("metadata") or {}).get(
                    "deletionTimestamp"):
                by_node.setdefault(n, []).append(p)
        pdbs = list(self.pdbs.store.values()) if self.pdbs is not None else []
        all_pods = list(self.pods.store.values())
        view = self._cluster_view(pod)
        meta_victims, gpu_only, node_statuses, errors, picked_on = {}, set(), {}, [], {}
        for node, (_, _, unresolvable) in sorted(statuses.items()):
            potential = by_node.get(node)
            if unresolvable:
                node_statuses[node] = ("DefaultPreemption", "Preemption is not helpful for scheduling", True)
                continue
            if not potential:
                node_statuses[node] = ("DefaultPreemption", "No preemption victims found for incoming pod", True)
                continue
            node_obj = self.nodes.store.get(node)
            picked = None if node_obj is None else preemption.select_victims_on_node(
                potential, self._fits_without(pod, node_obj, view, claims), pdbs, all_pods)
            if picked is None:
                node_statuses[node] = statuses[node]
                continue
            victims, n_violating = picked
            if not victims:
                if not self.ext.gpu_only_preemption:  # DryRunPreemption: len(pods) == 0 is an error
                    errors.append(f'expected at least one victim pod on node "{node}"')
                    continue
                victims = preemption.more_important_first(potential)
                n_violating = len(victims_violating(victims, pdbs, all_pods)[0])
                gpu_only.add(node)
            meta_victims[node] = {"Pods": [{"UID": preemption.uid_of(v)} for v in victims],
                                  "NumPDBViolations": n_violating}
            picked_on[node] = (victims, n_violating)
        if not meta_victims:
            if errors:  # utilerrors.NewAggregate's text
                return None, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            return None, self.fit_error_message(len(node_statuses), node_statuses)
        self.stats.preemptions += 1
        candidates: dict[str, tuple[list[dict], int]] = {}
        if not self.ext.preempt_verb or not self.ext.interested(pod):  # callExtenders skips it then
            candidates = picked_on
            result = {}
        else:
            result = await self._post(http, self.ext.preempt_verb,
                                      {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta_victims})
            if result.get("Error"):
                log.v(2).info("Extender preemption failed", pod=_key(pod), error=result["Error"])
                return None, str(result["Error"])
        for node, mv in (result.get("NodeNameToMetaVictims") or {}).items():
            if node not in meta_victims:
                continue
            # convertToVictims: any pod on that node, not only the ones handed over
            on_node = {preemption.uid_of(p): p for p in view.pods_on.get(node, ())}
            victims = [on_node[m["UID"]] for m in (mv or {}).get("Pods") or [] if m.get("UID") in on_node]
            if victims:
                candidates[node] = (victims, int((mv or {}).get("NumPDBViolations") or 0))
        node = pick_preemption_node(candidates)
        if node is None:
            return None, ""
        if node in gpu_only:
            self.stats.gpu_only_preemptions += 1
        for victim in candidates[node][0]:
            vm = victim["metadata"]
            with contextlib.suppress(ApiError):
                await self.client.delete("pods", vm["name"], vm.get("namespace", "default"))
                self.stats.victims += 1
                log.v(2).info("Preempted pod", victim=_key(victim), preemptor=_key(pod), node=node)
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            await self.client.request(
                "patch", "pods/status", "PATCH",
                resource_path("pods", meta.get("namespace", "default"), meta["name"], "status"),
                body={"status": {"nominatedNodeName": node}}, content_type="application/merge-patch+json")
        self._hold_claims(pod, node, candidates[node][0], claims)
        return node, ""

    def _hold_claims(self, pod: dict, node: str, victims: list[dict], claims: list[dict] | None) -> None:
        """KEP-5690: the preemptor's allocation on its nominated node with its victims' claims released,
        held for it until it is bound (hami.sim.dranominate)."""
        if claims is None or self.nominations is None:
            return
        uids = frozenset(preemption.uid_of(v) for v in victims)
        node_obj = self.nodes.store.get(node)
        outcome = self.dra.filter(claims, node_obj, self.dra.usage_without(uids)) if node_obj is not None else None
        if outcome is not None and outcome.ok:
            self.nominations.nominate(_key(pod), node, sq.pod_priority(pod), claims, outcome, uids)
        else:
            self.nominations.forget(_key(pod))

    def _usage_on(self, node: str, pod: dict, usage):
        """The DRA usage a pod is filtered against on `node`: with what is held there for nominated
        preemptors of at least its priority (KEP-5690)."""
        held = self.nominations.usage_on(node, sq.pod_priority(pod), _key(pod)) if self.nominations else None
        return usage if held is None else held

    # ------------------------------------------------------------------ helpers

    async def _post(self, http: aiohttp.ClientSession, verb: str, body: dict):
        async with http.post(f"{_replica_url.get(self.url)}/{verb}", data=orjson.dumps(body),
                             headers={"Content-Type": "application/json"}, ssl=False) as resp:
            data = await resp.read()
            if resp.status == 400 and data.startswith(b'{"Error"'):
                return orjson.loads(data)  # a refused request: kube-scheduler's extender error, with its text
            if resp.status != 200:
                raise RuntimeError(f"extender /{verb} answered HTTP {resp.status}: {data[:200]!r}")
            return orjson.loads(data) if data else {}

    @staticmethod
    def fit_error_message(total: int, statuses: Mapping[str, tuple[str, str, bool]]) -> str:
        """FitError.Error(): `0/N nodes are available: <count> <reason>, ...` sorted by reason."""
        counts: dict[str, int] = {}
        for _, reason, _ in statuses.values():
            for r in (reason,) if isinstance(reason, str) else reason:  # NodeResourcesFit may give several
                counts[r] = counts.get(r, 0) + 1
        parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
        return f"0/{total} nodes are available: {parts or 'no node fits'}."

    async def _mark_unschedulable(self, pod: dict, message: str) -> None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("message") == message:
                return  # unchanged: kube-scheduler does not rewrite an identical condition
        meta = pod["metadata"]
        patch = {"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }]}}
        try:
            await self.client.request(
                "patch", "pods/status", "PATCH",
                resource_path("pods", meta.get("namespace", "default"), meta["name"], "status"),
                body=patch, content_type="application/strategic-merge-patch+json")
        except ApiError as exc:
            log.v(4).info("Could not record PodScheduled condition", pod=_key(pod), error=str(exc))
