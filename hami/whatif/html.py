"""`hami whatif --html FILE`: one self-contained HTML page with the tables and plots.

Plots are drawn with matplotlib (the `report` extra) on the Agg backend and embedded as base64
PNGs, so the file opens anywhere with no network: placed/pending per scenario, GPU memory
allocated/stranded/free per scenario, and for every scenario a heat map of how full each card of
each node is (rows = nodes, columns = cards; grey = cordoned or unhealthy), baseline first so the
"before" and "after" sit one above the other. `render(...)` returns the page; `write_report`
writes it.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from .engine import Result
from .report import _changes_text, diff

MAX_HEATMAP_ROWS = 400
# The scenario table's columns (Result.totals() keys) with their units.
COLUMNS = {
    "placed": "replayed pods placed", "pending": "replayed pods pending", "gpus_used": "GPUs used",
    "gpus": "GPUs", "mem_allocated": "memory allocated (MiB)", "mem_physical": "physical memory (MiB)",
    "cores_allocated": "cores allocated (% of one card)", "stranded_mem": "stranded memory (MiB)",
    "fragmentation": "fragmentation (share of free memory on shared cards)",
}
PLACED_NOTE = ("Placed and pending count the pods this report replays (the snapshot's pending pods and the "
               "scenario's workloads); pods already running keep their cards and are counted in the memory, "
               "cores and GPUs columns.")  # beyond this, nodes are sampled evenly (the picture stays readable)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _pods_plot(results: list[Result]) -> str:
    import matplotlib.pyplot as plt

    names = [r.scenario for r in results]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(names) + 2), 3.2))
    placed = [r.placed for r in results]
    pending = [r.pending for r in results]
    ax.bar(names, placed, color="#2e7d32", label="placed")
    ax.bar(names, pending, bottom=placed, color="#c62828", label="pending")
    ax.set_ylabel("replayed pods")
    ax.set_title("Replayed pods placed and pending")
    legend_outside(ax)
    ax.tick_params(axis="x", labelrotation=20)
    return _png(fig)


def _memory_plot(results: list[Result]) -> str:
    import matplotlib.pyplot as plt

    names = [r.scenario for r in results]
    totals = [r.totals() for r in results]
    alloc = [t["mem_allocated"] / 1024 for t in totals]
    stranded = [t["stranded_mem"] / 1024 for t in totals]
    free = [max(0.0, (t["mem_registered"] - t["mem_allocated"] - t["stranded_mem"]) / 1024) for t in totals]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(names) + 2), 3.2))
    ax.bar(names, alloc, color="#1565c0", label="allocated")
    ax.bar(names, stranded, bottom=alloc, color="#ef6c00", label="stranded")
    ax.bar(names, free, bottom=[a + s for a, s in zip(alloc, stranded, strict=True)], color="#b0bec5", label="free")
    ax.set_ylabel("GiB (registered)")
    ax.set_title("GPU memory")
    legend_outside(ax)
    ax.tick_params(axis="x", labelrotation=20)
    return _png(fig)


def legend_outside(ax) -> None:
    """Right of the plot, so it never covers a bar."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _heatmap(result: Result) -> str:
    return _png(heatmap_figure(result))


def heatmap_figure(result: Result):
    import matplotlib.pyplot as plt
    import numpy as np

    nodes = list(result.nodes)
    if len(nodes) > MAX_HEATMAP_ROWS:
        step = len(nodes) / MAX_HEATMAP_ROWS
        nodes = [nodes[int(i * step)] for i in range(MAX_HEATMAP_ROWS)]
    width = max((len(n.cards) for n in nodes), default=1)
    grid = np.full((max(1, len(nodes)), width), np.nan)
    for i, n in enumerate(nodes):
        for j, c in enumerate(n.cards):
            if c.usable and c.mem:
                grid[i, j] = c.mem_used / c.mem
    cmap = plt.get_cmap("viridis").with_extremes(bad="#9e9e9e")
    fig, ax = plt.subplots(figsize=(max(3.5, 0.5 * width + 2.5), min(12.0, 1.2 + 0.22 * len(nodes))))
    im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xlabel("card index")
    ax.set_xticks(range(width), [str(i) for i in range(width)])  # one tick per card, never between cards
    ax.set_title(f"{result.scenario}: memory allocated per card")
    if len(nodes) <= 40:
        ax.set_yticks(range(len(nodes)), [n.name for n in nodes], fontsize=7)
    else:
        ax.set_ylabel(f"{len(result.nodes)} nodes" + (" (sampled)" if len(result.nodes) > len(nodes) else ""))
    fig.colorbar(im, ax=ax, fraction=0.05, label="fraction of card memory")
    return fig


def _table(rows: list[list[Any]], head: list[str]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table>"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#212121}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#eceff1}td:first-child,td:nth-child(2){text-align:left}
.warn{color:#b71c1c}img{max-width:100%;margin:6px 0}section{margin-bottom:28px}"""


NO_CHARTS = ("charts left out: they need matplotlib, which the runtime install (scripts/demo) leaves out; "
             "pip install 'hami[report]' adds it")


def charts_available() -> bool:
    """Whether matplotlib (the `report` extra) is installed; the tables need nothing more."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")  # no display: draw into memory
    return True


def render(results: list[Result], warnings: tuple[str, ...] | list[str] = (), suggestions: Any = None) -> str:
    charts = charts_available()
    keys = list(COLUMNS)
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>hami whatif report</title>",
             f"<style>{CSS}</style></head><body><h1>hami whatif</h1>"]
    parts += [f"<p class='warn'>warning: {html.escape(w)}</p>" for w in warnings]
    if not charts:
        parts.append(f"<p class='note'>{html.escape(NO_CHARTS)}</p>")
    rows = [[r.scenario, _changes_text(r)] + [r.totals()[k] for k in keys] for r in results]
    parts.append("<section><h2>Scenarios</h2><p class='note'>" + html.escape(PLACED_NOTE) + "</p>"
                 + _table(rows, ["scenario", "changes"] + [COLUMNS[k] for k in keys]) + "</section>")
    if len(results) > 1:
        drows = []
        for r in results[1:]:
            d = diff(results[0], r)
            drows.append([r.scenario] + [d["totals"][k] for k in ("placed", "pending", "gpus_used", "stranded_mem")]
                         + [d["moved"], len(d["newlyPlaced"]), len(d["newlyPending"])])
        parts.append("<section><h2>Against the baseline</h2>" + _table(
            drows, ["scenario", "replayed pods placed (±)", "still pending (±)", "GPUs used (±)",
                    "stranded memory (±MiB)", "pods moved", "newly placed", "newly pending"]) + "</section>")
    if charts:
        parts.append("<section><h2>Pods and memory</h2>" + _img(_pods_plot(results), "pods placed and pending")
                     + _img(_memory_plot(results), "GPU memory allocated, stranded and free") + "</section>")
    for r in results:
        reasons = r.pending_reasons()
        parts.append(f"<section><h2>{html.escape(r.scenario)}</h2><p>{html.escape(_changes_text(r))}; "
                     f"node policy {html.escape(r.node_policy)}, GPU policy {html.escape(r.gpu_policy)}</p>")
        if reasons:
            parts.append(_table([[k, v] for k, v in reasons.items()], ["pending reason", "pods"]))
        frag = sorted((n for n in r.nodes if n.fragmentation > 0), key=lambda n: (-n.fragmentation, n.name))[:10]
        if frag:
            parts.append(_table([[n.name, f"{n.fragmentation:.2f}", n.free_mem, n.largest_free,
                                  f"{n.gpus_used}/{len(n.cards)}"] for n in frag],
                                ["most fragmented node", "fragmentation", "free MiB", "largest free MiB", "GPUs used"]))
        parts.append((_img(_heatmap(r), f"{r.scenario}: card fill heat map") if charts else "") + "</section>")
    if suggestions:
        srows = [[s.label, s.result.placed, s.gained, s.tradeoff] for s in suggestions]
        verdict = ("<p>No change places more pods than the baseline; the closest:</p>"
                   if suggestions[0].gained <= 0 else "")
        parts.append("<section><h2>Suggestions</h2>" + verdict
                     + _table(srows, ["change", "replayed pods placed", "gained (pods)", "trade-off"]) + "</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: str, results: list[Result], warnings=(), suggestions=None) -> None:
    text = render(results, warnings, suggestions)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
