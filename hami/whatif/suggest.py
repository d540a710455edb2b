"""Suggest mode: try one knob at a time, then pairs, and report which change places the most pods (pure).

Knobs: deviceSplitCount, deviceMemoryScaling, the node policy and the GPU policy. Each candidate
is a full replay of the baseline's workloads (engine.run_scenario). Then the best setting of each
knob is paired with the best of every other knob (at most 6 more replays); a pair is kept only when
it places more pods than either of its halves alone (some pods need two things at once: a free
slot and more memory). Candidates are ranked by pods placed, then by less stranded memory, then by
fewer GPUs used, a single change before a pair; each comes with its trade-off: the risk the knobs
themselves carry (memory over-commit, more pods per card) and what it costs in GPUs used, stranded
memory and fragmentation against the baseline.

`single_change_fits(cluster, pod, defaults)` serves `hami doctor pod`: the first single change
(one knob, or uncordoning the GPUs, or lifting the namespace's quota) under which this one
pending pod would be placed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from .cluster import Cluster
from .engine import Result, SchedulerDefaults, run_scenario
from .scenario import Changes, Plan, QuotaChange, Scenario

SPLIT_COUNTS = (2, 4, 5, 8, 10, 16, 20, 32)
MEMORY_SCALINGS = (1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True, slots=True)
class Suggestion:
    label: str
    changes: Changes
    result: Result
    gained: int  # pods placed minus the baseline's
    tradeoff: str

    def as_dict(self) -> dict:
        t = self.result.totals()
        return {"change": self.label, "placed": t["placed"], "pending": t["pending"], "gained": self.gained,
                "gpusUsed": t["gpus_used"], "strandedMem": t["stranded_mem"], "tradeoff": self.tradeoff}


def _current(cluster: Cluster) -> tuple[int, float]:
    splits = Counter(n.settings.split_count for n in cluster.nodes.values())
    scalings = Counter(n.settings.memory_scaling for n in cluster.nodes.values())
    split = splits.most_common(1)[0][0] if splits else cluster.nvidia.device_split_count
    scaling = scalings.most_common(1)[0][0] if scalings else cluster.nvidia.device_memory_scaling
    return split, scaling


def candidates(cluster: Cluster, defaults: SchedulerDefaults) -> list[tuple[str, Changes]]:
    split, scaling = _current(cluster)
    out = [(f"deviceSplitCount {split} -> {s}", Changes(split_count=s)) for s in SPLIT_COUNTS if s != split]
    out += [(f"deviceMemoryScaling {scaling:g} -> {m:g}", Changes(memory_scaling=m))
            for m in MEMORY_SCALINGS if m != scaling]
    other_node = "spread" if defaults.node_policy == "binpack" else "binpack"
    other_gpu = "binpack" if defaults.gpu_policy == "spread" else "spread"
    out.append((f"nodeSchedulerPolicy {defaults.node_policy} -> {other_node}", Changes(node_policy=other_node)))
    out.append((f"gpuSchedulerPolicy {defaults.gpu_policy} -> {other_gpu}", Changes(gpu_policy=other_gpu)))
    return out


KNOBS = ("split_count", "memory_scaling", "node_policy", "gpu_policy")


def _knob(changes: Changes) -> str:
    return next((k for k in KNOBS if getattr(changes, k) is not None), "")


def combine(a: Changes, b: Changes) -> Changes | None:
    """Both changes at once; None when they set the same knob."""
    merged = {}
    for k in KNOBS:
        va, vb = getattr(a, k), getattr(b, k)
        if va is not None and vb is not None:
            return None
        merged[k] = va if va is not None else vb
    return Changes(**merged)


def _risk(changes: Changes, cluster: Cluster) -> str:
    parts = [_risk_one(replace(Changes(), **{k: getattr(changes, k)}), cluster)
             for k in KNOBS if getattr(changes, k) is not None]
    return "; ".join(p for p in parts if p)


def _risk_one(changes: Changes, cluster: Cluster) -> str:
    split, scaling = _current(cluster)
    if changes.split_count is not None:
        if changes.split_count > split:
            return f"up to {changes.split_count} pods share a card (was {split}): more contention for its cores"
        return f"at most {changes.split_count} pods per card (was {split}): fewer small pods fit"
    if changes.memory_scaling is not None:
        if changes.memory_scaling > 1.0:
            return (f"over-commits GPU memory x{changes.memory_scaling:g}: pods that use what they asked for "
                    "can run out of memory")
        return "no memory over-commit"
    if changes.node_policy is not None:
        return f"nodes filled {'evenly' if changes.node_policy == 'spread' else 'one by one'}"
    if changes.gpu_policy is not None:
        return f"cards filled {'evenly' if changes.gpu_policy == 'spread' else 'one by one'}"
    return ""


def _cost(base: Result, r: Result) -> str:
    b, t = base.totals(), r.totals()
    parts = [f"GPUs used {t['gpus_used'] - b['gpus_used']:+d}",
             f"stranded memory {(t['stranded_mem'] - b['stranded_mem']) / 1024:+.1f} GiB",
             f"fragmentation {t['fragmentation'] - b['fragmentation']:+.2f}"]
    return ", ".join(parts)


def suggest(cluster: Cluster, plan: Plan, defaults: SchedulerDefaults, *, baseline: Result | None = None,
            limit: int = 5) -> list[Suggestion]:
    """The best `limit` single changes, most pods placed first (ties: less stranded memory)."""
    base_scenario = plan.scenarios[0]
    base = baseline or run_scenario(cluster, base_scenario, plan, defaults)
    found = []

    def attempt(label: str, changes: Changes) -> Suggestion:
        r = run_scenario(cluster, Scenario(label, changes, base_scenario.workloads), plan, defaults)
        return Suggestion(label, changes, r, r.placed - base.placed, f"{_risk(changes, cluster)}; {_cost(base, r)}")

    for label, changes in candidates(cluster, defaults):
        found.append(attempt(label, changes))
    # Stable: among equals, the candidate listed first (the smaller step) wins.
    found.sort(key=_rank)
    best: dict[str, Suggestion] = {}
    for sug in found:
        best.setdefault(_knob(sug.changes), sug)
    heads = list(best.values())
    for i, a in enumerate(heads):
        for b in heads[i + 1:]:
            both = combine(a.changes, b.changes)
            if both is None:
                continue
            pair = attempt(f"{a.label} + {b.label}", both)
            if pair.result.placed > max(a.result.placed, b.result.placed):
                found.append(pair)
    found.sort(key=_rank)
    return found[:limit]


def _rank(s: Suggestion) -> tuple:
    t = s.result.totals()
    return -s.result.placed, t["stranded_mem"], t["gpus_used"]


def render_suggestions(suggestions: list[Suggestion]) -> str:
    lines = ["", "== suggestions (one change, or two together, most pods placed first)"]
    if not suggestions:
        lines.append("   no knob to try")
    elif suggestions[0].gained <= 0:
        lines.append("   no change places more pods than the baseline; the closest:")
    for s in suggestions:
        lines.append(f"   {s.label:<40} placed {s.result.placed:>6} ({s.gained:+d})  {s.tradeoff}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- one pending pod


def single_change_fits(cluster: Cluster, namespace: str, name: str,
                       defaults: SchedulerDefaults = SchedulerDefaults()) -> str | None:
    """The first single change under which the snapshot's pending pod `namespace/name` is placed.

    None when it fits as things are, or when no single change helps.
    """
    pod = next((p for p in cluster.pods if p.namespace == namespace and p.name == name), None)
    if pod is None:
        return None
    plan = Plan(scenarios=(), include_pending=True)  # the pod is queued as the snapshot's only pending pod
    alone = _only_pod(cluster, pod)

    def placed(probe: Cluster, changes: Changes) -> bool:
        r = run_scenario(probe, Scenario("probe", changes), plan, defaults)
        return any(o.node for o in r.outcomes)

    if placed(alone, Changes()):
        return None
    tries: list[tuple[str, Cluster, Changes]] = []
    cordoned = sorted({u for n in alone.nodes.values() for u in n.cordoned})
    if cordoned:
        uncordoned = replace(alone, nodes={k: replace(v, cordoned=frozenset()) for k, v in alone.nodes.items()})
        tries.append((f"the {len(cordoned)} cordoned GPU(s) were uncordoned", uncordoned, Changes()))
    if any(q.namespace == namespace for q in cluster.quotas):
        tries.append((f"the GPU ResourceQuota of namespace {namespace} were lifted", alone,
                      Changes(quotas=(QuotaChange(namespace, memory=0, cores=0),))))
    tries += [(_wording(label), alone, c) for label, c in candidates(cluster, defaults)]
    for text, probe, changes in tries:
        if placed(probe, changes):
            return text
    return None


def _wording(label: str) -> str:
    knob, _, change = label.partition(" ")
    value = change.split(" -> ")[-1]
    if knob == "deviceMemoryScaling" and _over_one(value):
        return (f"{knob} were {value} (over-commit: each card would promise {value}x its memory, and pods that "
                "use what they were promised can run out of memory on the card)")
    return f"{knob} were {value}"


def _over_one(value: str) -> bool:
    try:
        return float(value) > 1
    except ValueError:
        return False


def _only_pod(cluster: Cluster, pod) -> Cluster:
    """The cluster with `pod` as its only unplaced pod (others keep their allocations)."""
    return replace(cluster, pods=tuple(p for p in cluster.pods if p.node or p is pod))
