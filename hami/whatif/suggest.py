"""Suggest mode: try one knob at a time, then pairs, and report which change places the most pods (pure).

Knobs: deviceSplitCount, deviceMemoryScaling, deviceCoreScaling, the node policy and the GPU policy. Each candidate
is a full replay of the baseline's workloads (engine.run_scenario). Then pairs: every pair of
capacity knobs (split count, memory scaling, core scaling) raised above the current settings, searched
so that a pair whose halves place nothing alone is still found (`_capacity_pairs`: one replay when no pair can beat the
singles), and each policy paired with the best setting of every other knob; a pair is kept only when it places more
pods than either of its halves alone (some pods need two things at once: a free slot and more memory). Candidates are
ranked by pods placed, then by less stranded memory, then by fewer GPUs used, a single change before a pair; each comes
with its trade-off: the risk the knobs themselves carry (memory over-commit, more pods per card) and what it costs in
GPUs used, stranded memory and fragmentation against the baseline.

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
CORE_SCALINGS = (1.0, 1.5, 2.0)


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


def _current(cluster: Cluster) -> tuple[int, float, float]:
    """The most common registered split count, memory scaling and core scaling (the device config's
    when the cluster has no nodes)."""
    def mode(attr: str, default):
        seen = Counter(getattr(n.settings, attr) for n in cluster.nodes.values())
        return seen.most_common(1)[0][0] if seen else default

    return (mode("split_count", cluster.nvidia.device_split_count),
            mode("memory_scaling", cluster.nvidia.device_memory_scaling),
            mode("core_scaling", cluster.nvidia.device_core_scaling))


def candidates(cluster: Cluster, defaults: SchedulerDefaults) -> list[tuple[str, Changes]]:
    split, scaling, core = _current(cluster)
    out = [(f"deviceSplitCount {split} -> {s}", Changes(split_count=s)) for s in SPLIT_COUNTS if s != split]
    out += [(f"deviceMemoryScaling {scaling:g} -> {m:g}", Changes(memory_scaling=m))
            for m in MEMORY_SCALINGS if m != scaling]
    out += [(f"deviceCoreScaling {core:g} -> {c:g}", Changes(core_scaling=c)) for c in CORE_SCALINGS if c != core]
    other_node = "spread" if defaults.node_policy == "binpack" else "binpack"
    other_gpu = "binpack" if defaults.gpu_policy == "spread" else "spread"
    out.append((f"nodeSchedulerPolicy {defaults.node_policy} -> {other_node}", Changes(node_policy=other_node)))
    out.append((f"gpuSchedulerPolicy {defaults.gpu_policy} -> {other_gpu}", Changes(gpu_policy=other_gpu)))
    return out


KNOBS = ("split_count", "memory_scaling", "core_scaling", "node_policy", "gpu_policy")
# Knobs that only ever add room when raised (more slots, memory, cores per card), with their labels.
CAPACITY = (("split_count", "deviceSplitCount", SPLIT_COUNTS),
            ("memory_scaling", "deviceMemoryScaling", MEMORY_SCALINGS),
            ("core_scaling", "deviceCoreScaling", CORE_SCALINGS))


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
    split, scaling, core = _current(cluster)
    if changes.split_count is not None:
        if changes.split_count > split:
            return f"up to {changes.split_count} pods share a card (was {split}): more contention for its cores"
        return f"at most {changes.split_count} pods per card (was {split}): fewer small pods fit"
    if changes.memory_scaling is not None:
        if changes.memory_scaling > 1.0:
            return (f"over-commits GPU memory x{changes.memory_scaling:g}: pods that use what they asked for "
                    "can run out of memory")
        return "no memory over-commit"
    if changes.core_scaling is not None:
        if changes.core_scaling > 1.0:
            return (f"over-commits GPU cores x{changes.core_scaling:g}: a card promises more compute than it has, "
                    "so pods run slower than their gpucores when all are busy")
        return "no core over-commit"
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

    singles = [attempt(label, changes) for label, changes in candidates(cluster, defaults)]
    # Stable: among equals, the candidate listed first (the smaller step) wins.
    singles.sort(key=_rank)
    found = list(singles)
    best: dict[str, Suggestion] = {}
    for sug in singles:
        best.setdefault(_knob(sug.changes), sug)
    by_label = {s.label: s for s in singles}
    found += _capacity_pairs(cluster, by_label, attempt)
    # The policies change where pods go, not how much room there is: each is paired with the best
    # setting of every other knob.
    heads = list(best.values())
    for i, a in enumerate(heads):
        for b in heads[i + 1:]:
            if {_knob(a.changes), _knob(b.changes)} <= {k for k, _, _ in CAPACITY}:
                continue  # two capacity knobs: searched in full by _capacity_pairs
            both = combine(a.changes, b.changes)
            if both is None:
                continue
            pair = attempt(f"{a.label} + {b.label}", both)
            if pair.result.placed > max(a.result.placed, b.result.placed):
                found.append(pair)
    found.sort(key=_rank)
    return found[:limit]


def _capacity_pairs(cluster: Cluster, singles: dict[str, Suggestion], attempt) -> list[Suggestion]:
    """Every pair of raised capacity knobs that places more than either half, found without missing one.

    Some pods need two things at once (a free slot and more memory, or memory and cores), so both
    halves can place nothing alone; pairing only each knob's best single setting misses those. Raising
    a capacity knob never takes room away, so for two knobs the pair of their largest settings bounds
    every pair: when it places no more than the best single change, no pair of those knobs can, and the
    search of that pair stops after one replay. Otherwise each setting of the second knob is walked up
    the first knob's settings, smallest first, until the bound is reached (a larger one cannot place
    more); a pair is kept when it places more than both its halves and no smaller kept pair places as many.
    """
    current = dict(zip(("split_count", "memory_scaling", "core_scaling"), _current(cluster), strict=True))
    best_single = max((x.result.placed for x in singles.values()), default=0)
    out: list[Suggestion] = []
    for i, (ka, name_a, values_a) in enumerate(CAPACITY):
        for kb, name_b, values_b in CAPACITY[i + 1:]:
            out += _pair_grid(ka, name_a, [v for v in values_a if v > current[ka]], current[ka],
                              kb, name_b, [v for v in values_b if v > current[kb]], current[kb],
                              singles, best_single, attempt)
    return out


def _pair_grid(ka, name_a, values_a, cur_a, kb, name_b, values_b, cur_b, singles, best_single, attempt):
    if not values_a or not values_b:
        return []

    def labels(a, b) -> tuple[str, str]:
        return f"{name_a} {cur_a:g} -> {a:g}", f"{name_b} {cur_b:g} -> {b:g}"

    def pair(a, b) -> Suggestion:
        la, lb = labels(a, b)
        return attempt(f"{la} + {lb}", Changes(**{ka: a, kb: b}))

    top = pair(values_a[-1], values_b[-1])
    if top.result.placed <= best_single:
        return []
    kept: list[Suggestion] = []
    for b in values_b:
        for a in values_a:
            p = top if (a, b) == (values_a[-1], values_b[-1]) else pair(a, b)
            ha, hb = (singles.get(x) for x in labels(a, b))
            halves = max(ha.result.placed if ha else 0, hb.result.placed if hb else 0)
            dominated = any(getattr(q.changes, ka) <= a and getattr(q.changes, kb) <= b
                            and q.result.placed >= p.result.placed for q in kept)
            if p.result.placed > halves and not dominated:
                kept.append(p)
            if p.result.placed >= top.result.placed:
                break
    return kept


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
    tries += [(wording(label), alone, c) for label, c in candidates(cluster, defaults)]
    for text, probe, changes in tries:
        if placed(probe, changes):
            return text
    return None


def wording(label: str) -> str:
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
