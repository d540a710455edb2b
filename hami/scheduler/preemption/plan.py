"""Which pods the GPU preemption controller evicts for a pending pod (pure: values in, a plan out).

kube-scheduler never preempts for a pod short only of GPU shares (docs/kube-scheduler.md), so the
controller (hami.scheduler.preemption.controller) does, with kube-scheduler's own rules:

* Who may preempt: a pod whose last /filter failed, on at least one node, for GPU-share reasons only
  (`share_only`: memory, cores, slots, exclusivity, NUMA, MIG geometry; never a type or UUID
  mismatch, an unhealthy or cordoned card, a quota), whose `preemptionPolicy` is not Never. Priority
  and policy are read as kube-scheduler reads them (`spec.priority`, filled by the Priority admission
  from the PriorityClass; where it is missing, the class named, then the global default).
* Who may go, per node (`node_plan`): pods bound there, strictly lower priority, using HAMi devices
  there, not terminating and not already another preemptor's victim. Pods already leaving (and the
  other preemptors' victims) count as gone; the other preemptors' holds count as used.
* Which of them: `hami.scheduler.preemption.victims.select_victims`, kube-scheduler's `SelectVictimsOnNode` with
  HAMi's fit in place of the in-tree filters: every candidate off, then put back most important
  first, PDB-violating ones first (`filterPodsWithPDBViolation`), keeping off only those the fit
  needs. The set is inclusion-minimal.
* Which node (`choose`): `pickOneNodeForPreemption`: fewest PDB violations, then the lowest
  highest-victim priority, the lowest priority sum, the fewest victims, the latest earliest-start among the
  highest-priority victims; name order last.

`plan(...)` returns a `Plan` (the node, the victims, and the devices the preemptor gets there once
they are gone: what the controller holds for it) or a `Refusal` naming why there is none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

import hami.scheduler.placement.fit as m
from hami.device.model import DeviceInfo, NvidiaConfig
from hami.kubesched.pdb import victims_violating
from hami.scheduler.placement.fit import PodRequest, try_pod
from hami.scheduler.placement.usage import PodRecord, UsageIndex
from hami.scheduler.preemption.victims import select_victims

_NONE: Mapping = MappingProxyType({})  # read-only default
NEVER = "Never"
PREEMPT_LOWER = "PreemptLowerPriority"

SHARE_REASONS = frozenset({
    m.CARD_INSUFFICIENT_MEMORY, m.CARD_INSUFFICIENT_CORE, m.CARD_TIME_SLICING_EXHAUSTED,
    m.CARD_COMPUTE_UNITS_EXHAUSTED, m.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, m.NODE_INSUFFICIENT_DEVICE,
    m.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, m.NUMA_NOT_FIT, m.CARD_MIG_TOPOLOGY_INFEASIBLE, m.NODE_UNFIT_POD,
})

# Why no plan (doctor quotes these).
NO_SHARE_FAILURE = "its last filter failed for reasons other than GPU shares"
POLICY_NEVER = "preemptionPolicy: Never"
NO_LOWER = "no lower-priority pod uses GPUs on the nodes it was refused"
NO_SET_HELPS = "evicting every lower-priority pod on those nodes still leaves too few GPU shares"


def reason_keys(text: str) -> set[str]:
    keys = set(m.parse_reason(text))
    return keys or {text.strip()}


def share_only(text: str) -> bool:
    """A /filter FailedNodes text whose every reason is a GPU-share shortage eviction can fix."""
    return reason_keys(text) <= SHARE_REASONS


def _spec(pod: Mapping) -> Mapping:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _class(pod: Mapping, classes: Mapping[str, Mapping]) -> Mapping | None:
    name = _spec(pod).get("priorityClassName")
    if isinstance(name, str) and name:
        return classes.get(name)
    defaults = [c for c in classes.values() if c.get("globalDefault") is True and isinstance(c.get("value"), int)]
    return min(defaults, key=lambda c: c["value"]) if defaults else None


def priority_of(pod: Mapping | None, classes: Mapping[str, Mapping] = _NONE) -> int:
    """corev1helpers.PodPriority: spec.priority; a pod admitted without it, its class's value."""
    value = _spec(pod or {}).get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    pc = _class(pod or {}, classes)
    value = (pc or {}).get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def policy_of(pod: Mapping, classes: Mapping[str, Mapping] = _NONE) -> str:
    value = _spec(pod).get("preemptionPolicy")
    if isinstance(value, str) and value:
        return value
    return str((_class(pod, classes) or {}).get("preemptionPolicy") or PREEMPT_LOWER)


def _start(pod: Mapping) -> str:
    status = pod.get("status")
    return str((status if isinstance(status, Mapping) else {}).get("startTime") or "")


def _terminating(pod: Mapping) -> bool:
    meta = pod.get("metadata")
    return bool((meta if isinstance(meta, Mapping) else {}).get("deletionTimestamp"))


@dataclass(frozen=True)
class NodeFacts:
    """One node as the controller's cache shows it."""

    name: str
    devices: Sequence[DeviceInfo]
    cordoned: Iterable[str]
    on_node: Mapping[str, PodRecord]     # uid -> what the usage index counts there (holds included)
    pods: Mapping[str, Mapping]          # uid -> the pod object of each record that is a bound pod


@dataclass(frozen=True)
class Plan:
    node: str
    victims: tuple[str, ...]             # uids, most important first
    pdb_violations: int
    victim_priorities: tuple[int, ...]
    devices: tuple                       # PodDevices the preemptor takes once the victims are gone
    mig: tuple = ()                      # its MIG placements, (GPU uuid, placement) as the usage index keeps them


@dataclass(frozen=True)
class Refusal:
    reason: str


def node_plan(nvidia: NvidiaConfig, facts: NodeFacts, request: PodRequest, priority: int,
              pdbs: Sequence[Mapping], all_pods: Iterable[Mapping], taken: frozenset[str] = frozenset(),
              classes: Mapping[str, Mapping] = _NONE) -> Plan | Refusal:
    """The victims on one node, or why none. `taken`: uids another preemptor already evicts."""
    leaving = {u for u, p in facts.pods.items() if _terminating(p)} | (set(taken) & set(facts.on_node))
    staying = {u: r for u, r in facts.on_node.items() if u not in leaving}
    movable = [u for u in staying if u in facts.pods and priority_of(facts.pods[u], classes) < priority]
    if not movable:
        return Refusal(NO_LOWER)
    movable.sort(key=lambda u: (-priority_of(facts.pods[u], classes), _start(facts.pods[u]), u))
    violating_pods, _ = victims_violating([facts.pods[u] for u in movable], pdbs, all_pods)
    violating = {id(p) for p in violating_pods}
    violating_uids = {u for u in movable if id(facts.pods[u]) in violating}
    picked = select_victims(nvidia, facts.name, facts.devices, facts.cordoned, staying, movable,
                            violating_uids, request)
    if picked is None:
        return Refusal(NO_SET_HELPS)
    victims, n_violating = picked
    victims.sort(key=movable.index)
    devices = room_after(nvidia, facts, staying, set(victims), request)
    if devices is None:  # select_victims said it fits; only a quota ledger difference gets here
        return Refusal(NO_SET_HELPS)
    return Plan(facts.name, tuple(victims), n_violating,
                tuple(priority_of(facts.pods[u], classes) for u in victims), devices[0], devices[1])


def room_after(nvidia: NvidiaConfig, facts: NodeFacts, staying: Mapping[str, PodRecord], gone: set[str],
               request: PodRequest) -> tuple | None:
    """(devices, mig) the preemptor fits on once `gone` leave; None when it does not."""
    index = UsageIndex(nvidia)
    index.set_node(facts.name, facts.devices, facts.cordoned)
    for uid, rec in staying.items():
        if uid not in gone:
            index.add_pod(uid, facts.name, rec.devices, namespace=rec.namespace, num_init=rec.num_init,
                          init_released=rec.init_released, mig=rec.mig, app_class=rec.app_class)
    usage = index.node(facts.name)
    # quota was judged by select_victims with the victims' shares credited back
    r = try_pod(usage, replace(request, options=replace(request.options, quota=None))) if usage else "no node"
    if r.__class__ is str:
        return None
    # the usage index counts MIG placements as (GPU uuid, placement), as /filter adds them
    return tuple(r[0]), tuple((u, pl) for _, _, u, _, pl in r[1])


def _rank(p: Plan, start_of: Mapping[str, str]):
    top = max(p.victim_priorities, default=-(2 ** 31))
    # GetEarliestPodStartTime of the highest-priority victims: the node where it is latest wins
    earliest = min((start_of.get(u, "") for u, pr in zip(p.victims, p.victim_priorities, strict=True) if pr == top),
                   default="")
    inverted = tuple(-ord(ch) for ch in earliest) + (1,)  # (1,): a longer string sorts later
    return (p.pdb_violations, top, sum(pr + 2 ** 31 for pr in p.victim_priorities), len(p.victims), inverted, p.node)


def choose(plans: Sequence[Plan], start_of: Mapping[str, str] = _NONE) -> Plan | None:
    """pickOneNodeForPreemption over the nodes that have a plan."""
    return min(plans, key=lambda p: _rank(p, start_of), default=None)


def plan(nvidia: NvidiaConfig, preemptor: Mapping, request: PodRequest, failed: Mapping[str, str],
         nodes: Mapping[str, NodeFacts], pdbs: Sequence[Mapping], all_pods: Sequence[Mapping],
         taken: frozenset[str] = frozenset(), classes: Mapping[str, Mapping] = _NONE
         ) -> Plan | Refusal:
    """The whole decision for one pending pod whose /filter failed with `failed` ({node: reason})."""
    if policy_of(preemptor, classes) == NEVER:
        return Refusal(POLICY_NEVER)
    candidates = sorted(n for n, reason in failed.items() if share_only(reason) and n in nodes)
    if not candidates:
        return Refusal(NO_SHARE_FAILURE)
    priority = priority_of(preemptor, classes)
    plans, refusals = [], []
    for name in candidates:
        got = node_plan(nvidia, nodes[name], request, priority, pdbs, all_pods, taken, classes)
        (plans if isinstance(got, Plan) else refusals).append(got)
    start_of = {u: _start(p) for f in nodes.values() for u, p in f.pods.items()}
    best = choose(plans, start_of)
    if best is not None:
        return best
    return Refusal(NO_SET_HELPS if any(r.reason == NO_SET_HELPS for r in refusals) else NO_LOWER)
