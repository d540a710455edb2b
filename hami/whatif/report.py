"""What whatif prints: one table per scenario, the diff against the baseline, or JSON (pure).

`to_json(results)` is the machine form (every pod's outcome, every node's cards);
`render_text(results)` the terminal form: placed/pending, pending reasons with HAMi's codes,
GPUs used, memory and cores allocated against physical, stranded memory, the most fragmented
nodes, then one line per scenario of differences from the baseline.
"""

from __future__ import annotations

from typing import Any

from .engine import Result

TOP_NODES = 5


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.1f} GiB"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _changes_text(result: Result) -> str:
    c = result.changes
    parts = []
    for label, value in (("deviceSplitCount", c.split_count), ("deviceMemoryScaling", c.memory_scaling),
                         ("deviceCoreScaling", c.core_scaling), ("nodeSchedulerPolicy", c.node_policy),
                         ("gpuSchedulerPolicy", c.gpu_policy), ("scoringWeights", c.scoring_weights)):
        if value is not None:
            parts.append(f"{label}={value}")
    if c.nodes:
        parts.append(f"{len(c.nodes)} per-node change(s)")
    for a in c.add_nodes:
        parts.append(f"+{a.count} node(s) {a.name} ({a.gpus}x {a.type})")
    if c.remove_nodes:
        parts.append("-nodes " + ",".join(c.remove_nodes))
    if c.cordon_gpus:
        parts.append(f"cordon {len(c.cordon_gpus)} GPU(s)")
    for q in c.quotas:
        parts.append(f"quota {q.namespace} mem={q.memory} cores={q.cores}")
    return "; ".join(parts) or "no change"


def result_dict(result: Result, baseline: Result | None = None) -> dict[str, Any]:
    totals = result.totals()
    out: dict[str, Any] = {
        "scenario": result.scenario,
        "changes": _changes_text(result),
        "nodeSchedulerPolicy": result.node_policy,
        "gpuSchedulerPolicy": result.gpu_policy,
        "totals": totals,
        "pendingReasons": result.pending_reasons(),
        "pods": [
            {"pod": o.pod, "node": o.node or None, "devices": o.devices or None,
             "reasons": list(o.reasons), "message": o.message}
            for o in result.outcomes
        ],
        "nodes": [
            {"name": n.name, "freeMem": n.free_mem, "largestFree": n.largest_free, "partialFree": n.partial_free,
             "fragmentation": n.fragmentation,
             "gpus": [{"uuid": c.uuid, "type": c.type, "slots": c.slots, "slotsUsed": c.slots_used, "mem": c.mem,
                       "memUsed": c.mem_used, "physicalMem": c.physical_mem, "cores": c.cores,
                       "coresUsed": c.cores_used, "usable": c.usable, "strandedMem": c.stranded_mem}
                      for c in n.cards]}
            for n in result.nodes
        ],
    }
    if baseline is not None and baseline is not result:
        out["diff"] = diff(baseline, result)
    return out


def diff(baseline: Result, result: Result) -> dict[str, Any]:
    """Totals minus the baseline's, and the pods whose fate changed."""
    b, r = baseline.totals(), result.totals()
    deltas = {k: round(r[k] - b[k], 4) for k in r if isinstance(r[k], (int, float))}
    before = {o.pod: o.node for o in baseline.outcomes}
    newly_placed = sorted(o.pod for o in result.outcomes if o.node and not before.get(o.pod))
    newly_pending = sorted(o.pod for o in result.outcomes if not o.node and before.get(o.pod))
    moved = sum(1 for o in result.outcomes if o.node and before.get(o.pod) and before[o.pod] != o.node)
    return {"totals": deltas, "newlyPlaced": newly_placed, "newlyPending": newly_pending, "moved": moved}


def to_json(results: list[Result], warnings: list[str] | tuple[str, ...] = (), suggestions: Any = None) -> dict:
    base = results[0] if results else None
    out: dict[str, Any] = {"warnings": list(warnings), "scenarios": [result_dict(r, base) for r in results]}
    if suggestions is not None:
        out["suggestions"] = suggestions
    return out


def render_result(result: Result) -> list[str]:
    t = result.totals()
    lines = [f"== scenario {result.scenario}: {_changes_text(result)}",
             f"   policies: node {result.node_policy}, gpu {result.gpu_policy}"]
    rows = [
        ("pods placed", f"{t['placed']} (of the replayed pending pods and workloads; running pods keep their cards)"),
        ("pods pending", f"{t['pending']}"),
        ("nodes / GPUs", f"{t['nodes']} / {t['gpus']}"),
        ("GPUs used", f"{t['gpus_used']} ({_pct(t['gpus_used'], t['gpus'])})"),
        ("memory allocated", f"{_gib(t['mem_allocated'])} of {_gib(t['mem_physical'])} physical "
                             f"({_pct(t['mem_allocated'], t['mem_physical'])}; "
                             f"registered {_gib(t['mem_registered'])})"),
        ("cores allocated", f"{t['cores_allocated']}% of {t['cores_physical']}% physical "
                            f"({_pct(t['cores_allocated'], t['cores_physical'])})"),
        ("stranded memory",
         f"{_gib(t['stranded_mem'])} ({_pct(t['stranded_mem'], t['mem_registered'])} of registered)"),
        ("fragmentation", f"{t['fragmentation']:.2f} of the free memory is on cards already shared"),
    ]
    width = max(len(k) for k, _ in rows)
    lines += [f"   {k:<{width}}  {v}" for k, v in rows]
    reasons = result.pending_reasons()
    if reasons:
        lines.append("   pending reasons (pods):")
        lines += [f"     {code:<40} {n}" for code, n in reasons.items()]
    frag = sorted((n for n in result.nodes if n.fragmentation > 0), key=lambda n: (-n.fragmentation, n.name))
    if frag:
        lines.append("   most fragmented nodes (share of free memory on cards already shared):")
        lines.append(f"     {'node':<24} {'frag':>5} {'free':>12} {'largest':>12}  GPUs used")
        for n in frag[:TOP_NODES]:
            lines.append(f"     {n.name:<24} {n.fragmentation:>5.2f} {_gib(n.free_mem):>12} {_gib(n.largest_free):>12}"
                         f"  {n.gpus_used}/{len(n.cards)}")
    return lines


def render_diff(results: list[Result]) -> list[str]:
    if len(results) < 2:
        return []
    base = results[0]
    keys = ("placed", "pending", "gpus_used", "mem_allocated", "stranded_mem", "fragmentation")
    head = f"{'scenario':<24}" + "".join(f"{k:>15}" for k in keys) + f"{'moved':>8}"
    lines = ["== diff against baseline", head]
    for r in results[1:]:
        d = diff(base, r)
        cells = []
        for k in keys:
            v = d["totals"][k]
            cells.append(f"{v:>+15.2f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):>+15d}")
        lines.append(f"{r.scenario:<24}" + "".join(cells) + f"{d['moved']:>8}")
    return lines


def render_side_by_side(results: list[Result]) -> list[str]:
    """One column per scenario, one row per total: the comparison at a glance."""
    if len(results) < 2:
        return []
    rows = [("pods placed", "placed", str), ("pods pending", "pending", str), ("GPUs used", "gpus_used", str),
            ("memory allocated", "mem_allocated", _gib), ("stranded memory", "stranded_mem", _gib),
            ("cores allocated %", "cores_allocated", str), ("fragmentation", "fragmentation", lambda v: f"{v:.2f}")]
    totals = [r.totals() for r in results]
    width = max(14, *(len(r.scenario) + 2 for r in results))
    lines = ["== side by side", f"{'':<20}" + "".join(f"{r.scenario:>{width}}" for r in results)]
    for label, key, fmt in rows:
        lines.append(f"{label:<20}" + "".join(f"{fmt(t[key]):>{width}}" for t in totals))
    return lines + [""]


def render_text(results: list[Result], warnings: list[str] | tuple[str, ...] = ()) -> str:
    lines = [f"warning: {w}" for w in warnings]
    for r in results:
        lines += render_result(r)
        lines.append("")
    lines += render_side_by_side(results)
    lines += render_diff(results)
    return "\n".join(lines).rstrip() + "\n"
