"""The UI's pages as HTML strings. Pure: views in, text out.

Every value that came from the cluster (names, annotations, event messages, reasons) is user input and
goes through `e()` (html.escape, quotes included) exactly once, here. Charts are inline SVG drawn by the
server (no JS library, no network): a bar is two rectangles, so a page is readable with scripts off and
prints as it shows. The one script (served as /static/ui.js, so the pages' Content-Security-Policy allows
no inline script) sorts tables on a header click and reloads the page every 10 s when the "auto-refresh"
box is ticked (kept in localStorage); it reads and writes nothing else.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from hami.ui.draview import DraDevice
from hami.ui.view import MIB, Card, ClusterView, NodeView

CSS = """body{font-family:system-ui,sans-serif;margin:0;color:#212121;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .grow{flex:1}
main{padding:16px 20px}h1{font-size:22px;margin:4px 0 12px}h2{font-size:17px;margin:20px 0 8px}
table{border-collapse:collapse;margin:6px 0 14px;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right;vertical-align:top}th{background:#eceff1;cursor:pointer;user-select:none}
td.l,th.l,div.l{text-align:left}.bad{color:#b71c1c;font-weight:600}.ok{color:#2e7d32}.muted{color:#757575}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #ddd;padding:8px 12px;
min-width:170px}.card b{font-size:20px;display:block}footer{padding:8px 20px;color:#757575;font-size:12px}
pre{background:#fff;border:1px solid #ddd;padding:8px;white-space:pre-wrap}"""

SCRIPT = """(function(){
var box=document.getElementById('autorefresh');
if(box){box.checked=localStorage.getItem('hami-ui-refresh')==='1';
box.addEventListener('change',function(){localStorage.setItem('hami-ui-refresh',box.checked?'1':'0');});
setInterval(function(){if(box.checked)location.reload();},10000);}
document.querySelectorAll('table.sortable th').forEach(function(th,i){th.addEventListener('click',function(){
var t=th.closest('table'),rows=Array.prototype.slice.call(t.querySelectorAll('tr')).slice(1);
var asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
rows.sort(function(a,b){var x=a.children[i].dataset.v||a.children[i].textContent,
y=b.children[i].dataset.v||b.children[i].textContent,nx=parseFloat(x),ny=parseFloat(y);
var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
rows.forEach(function(r){t.appendChild(r);});});});})();"""


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def q(value: str) -> str:
    """A path segment: names are DNS labels on a real cluster, but the page never trusts that."""
    return quote(str(value), safe="")


def mib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f} GiB" if n >= 10240 else f"{int(n)} MiB"


def pct(a: float, b: float) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"


def bar(parts: Sequence[tuple[float, str, str]], total: float, width: int = 160, label: str = "") -> str:
    """An inline SVG bar: (value, colour, title) segments of `total`."""
    x, rects = 0.0, []
    for value, colour, title in parts:
        w = 0.0 if total <= 0 else max(0.0, min(width - x, width * value / total))
        rects.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="12" fill="{colour}">'
                     f'<title>{e(title)}</title></rect>')
        x += w
    return (f'<svg class="bar" width="{width}" height="12" role="img" aria-label="{e(label)}">'
            f'<rect width="{width}" height="12" fill="#e0e0e0"></rect>{"".join(rects)}</svg>')


def page(title: str, body: str, *, sources: Sequence[str] = (), errors: Sequence[str] = (), generated: str = "") -> str:
    foot = []
    if sources:
        foot.append("live figures from " + ", ".join(e(s) for s in sources))
    foot += [f'<span class="bad">{e(x)}</span>' for x in errors]
    if generated:
        foot.append(f"generated {e(generated)}")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width'><title>{e(title)} - hami</title>"
            f"<style>{CSS}</style></head><body><header><a href='/'>hami</a><a href='/'>Cluster</a>"
            "<a href='/quotas'>Quotas</a><a href='/whatif'>What-if</a><span class='grow'></span>"
            "<label><input type='checkbox' id='autorefresh'> auto-refresh</label></header>"
            f"<main><h1>{e(title)}</h1>{body}</main><footer>{' · '.join(foot)}</footer>"
            "<script src='/static/ui.js'></script></body></html>")


def table(head: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1, cls: str = "sortable") -> str:
    """Cells are HTML already (escaped by the caller); the first `left` columns align left."""
    ths = "".join(f'<th class="{"l" if i < left else ""}">{e(h)}</th>' for i, h in enumerate(head))
    trs = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r))
                  + "</tr>" for r in rows)
    return f'<table class="{cls}"><tr>{ths}</tr>{trs}</table>'


def _pod_link(ns: str, name: str) -> str:
    return f'<a href="/pod/{q(ns)}/{q(name)}">{e(ns)}/{e(name)}</a>'


def _status(healthy: bool, problems: Sequence[str]) -> str:
    if healthy:
        return '<span class="ok">ok</span>'
    return '<span class="bad">UNHEALTHY</span> ' + e("; ".join(problems))


def dra_section(devices: Sequence[DraDevice], pod_links: bool = True) -> str:
    """The GPUs published as DRA devices (ResourceSlices) and what the claims consume of each."""
    if not devices:
        return ""
    rows = []
    for d in devices:
        rows.append((f'<a href="/node/{q(d.node)}">{e(d.node)}</a>', e(d.name), e(d.uuid), e(d.model),
                     f"{mib(d.memory_allocated // MIB)} / {mib(d.memory_bytes // MIB)} "
                     + bar([(d.memory_allocated, "#1565c0", "consumed")], d.memory_bytes, 100, "memory"),
                     f"{d.cores_allocated} / {d.cores}", str(len(d.shares))))
        for s in d.shares:
            ns = s.claim.split("/", 1)[0]
            pods = ", ".join(_pod_link(ns, p) for p in s.pods) or "-"
            rows.append(("", "&nbsp;&nbsp;claim " + e(s.claim), pods, "", mib(s.memory_bytes // MIB), str(s.cores), ""))
    return ("<h2>DRA devices (ResourceSlices) and their claims</h2>"
            + table(["node", "device", "UUID / pods", "model", "memory consumed / capacity", "cores", "claims"],
                    rows, left=4, cls=""))


class NodeRows:
    """Each node's row of the cluster page, kept for the next render while the node's cards are the same
    objects (view.ViewMemo keeps them while nothing they are built from changed) and its health verdict
    is the same: a render after a change formats the changed nodes' rows only."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[tuple, bool, tuple[str, ...], tuple[str, ...]]] = {}
        self.built = 0  # rows formatted (not found kept), for tests and diagnostics

    def rows(self, nodes: Sequence[NodeView]) -> list[tuple[str, ...]]:
        old, new, out = self._rows, {}, []
        for n in nodes:
            problems = tuple(n.health.problems)
            hit = old.get(n.name)
            if hit is None or hit[0] is not n.cards or hit[1] != n.health.healthy or hit[2] != problems:
                hit = (n.cards, n.health.healthy, problems, _node_row(n))
                self.built += 1
            new[n.name] = hit
            out.append(hit[3])
        self._rows = new  # the nodes gone are let go
        return out


def _node_row(n: NodeView) -> tuple[str, ...]:
    reg = sum(c.mem for c in n.cards)
    alloc = sum(c.mem_allocated for c in n.cards)
    used = [c.used_bytes for c in n.cards if c.used_bytes is not None]
    return (f'<a href="/node/{q(n.name)}">{e(n.name)}</a>', str(len(n.cards)),
            f'<span data-v="{alloc}">{mib(alloc)} / {mib(reg)}</span> '
            + bar([(alloc, "#1565c0", "allocated")], reg, 100, "memory"),
            f"{sum(c.cores_allocated for c in n.cards)}% / {sum(c.cores for c in n.cards)}%",
            str(sum(len(c.slices) for c in n.cards)),
            mib(sum(used) // MIB) if used else "-", _status(n.health.healthy, n.health.problems))


def cluster_page(v: ClusterView, dra: Sequence[DraDevice] = (), node_rows: NodeRows | None = None, **foot) -> str:
    """The cluster page; `node_rows`: the last render's node rows to reuse (None: every row formatted)."""
    t = v.totals()
    cards = [
        ("GPU nodes", str(t["nodes"]), ""),
        ("GPUs", str(t["gpus"]), ", ".join(f"{e(m)}: {c}" for m, (_, c) in v.models.items())),
        ("GPU memory allocated", f"{mib(t['mem_allocated'])} of {mib(t['mem_registered'])}",
         bar([(t["mem_allocated"], "#1565c0", "allocated")], t["mem_registered"], label="memory allocated")),
        ("GPU cores allocated", f"{t['cores_allocated']}% of {t['cores_registered']}%",
         bar([(t["cores_allocated"], "#6a1b9a", "allocated")], t["cores_registered"], label="cores allocated")),
        ("used of allocated", f"{mib(t['mem_used'])} of {mib(t['mem_allocated_measured'])}",
         bar([(t["mem_used"], "#2e7d32", "used")], t["mem_allocated_measured"], label="memory used of allocated")
         + f"<br><span class='muted'>{t['measured_slices']} of {t['slices']} slices measured</span>"),
        ("pending GPU pods", str(t["pending"]), ""),
    ]
    summary = "<div class='cards'>" + "".join(
        f"<div class='card' data-figure='{e(k)}'>{e(k)}<b>{val}</b>{extra}</div>" for k, val, extra in cards) + "</div>"
    models = table(["model", "nodes", "GPUs"], [(e(m), str(n), str(c)) for m, (n, c) in v.models.items()])
    rows = (node_rows if node_rows is not None else NodeRows()).rows(v.nodes)
    nodes = table(["node", "GPUs", "memory allocated / registered", "cores", "slices", "used", "status"], rows)
    by_reason = table(["reason", "pods"], [(e(k), str(c)) for k, c in v.pending_by_reason().items()])
    pending = table(["pod", "reasons"], [(_pod_link(p.namespace, p.name), e(", ".join(p.reasons) or "-"))
                                         for p in v.pending[:500]])
    more = f"<p class='muted'>{len(v.pending) - 500} more not listed</p>" if len(v.pending) > 500 else ""
    body = (summary + "<h2>GPUs by model</h2>" + models + "<h2>Nodes</h2>" + nodes + dra_section(dra)
            + "<h2>Pending GPU pods by reason</h2>" + by_reason + pending + more)
    return page("GPU cluster", body, **foot)


def _card_rows(c: Card) -> list[tuple[str, ...]]:
    head = (f"{c.index}", e(c.uuid), e(c.model), f"{mib(c.mem_allocated)} / {mib(c.mem)} "
            + bar([(c.mem_allocated, "#1565c0", "allocated")], c.mem, 100, "memory"),
            f"{c.cores_allocated}% / {c.cores}%", f"{len(c.slices)} / {c.slots}",
            "-" if c.temperature_c is None else f"{c.temperature_c:.0f} C",
            "-" if c.power_w is None else f"{c.power_w:.0f} W",
            '<span class="ok">healthy</span>' if c.healthy else '<span class="bad">unhealthy</span>')
    rows = [head]
    if c.mig_slices:
        rows.append(("", "MIG layout", "", mig_layout(c), "", "", "", "", ""))
    for s in c.slices:
        used = "-" if s.used_bytes is None else mib(s.used_bytes // MIB)
        rows.append(("", "&nbsp;&nbsp;" + _pod_link(s.namespace, s.pod) + f" container {s.container}", "",
                     f"{mib(s.mem)} (used {used}) "
                     + bar([(s.used_bytes or 0, "#2e7d32", "used")], s.mem * MIB, 100, "used of limit"),
                     f"{s.cores}%", "", "", "", ""))
    return rows


def mig_layout(c: Card, slot: int = 34) -> str:
    """The card's compute slices left to right, each MIG instance a block over the slices it takes."""
    width = c.mig_slices * slot
    parts = [f'<rect x="{i * slot}" y="0" width="{slot - 2}" height="26" fill="#e0e0e0"><title>slice {i}: free'
             f'</title></rect>' for i in range(c.mig_slices)]
    for start, size, profile, pod in c.mig_instances:
        parts.append(f'<rect x="{start * slot}" y="0" width="{size * slot - 2}" height="26" fill="#00838f">'
                     f'<title>{e(profile)} -> {e(pod)} (slices {start}..{start + size - 1})</title></rect>'
                     f'<text x="{start * slot + 4}" y="17" font-size="11" fill="#fff">{e(profile)}</text>')
    return f'<svg width="{width}" height="26" role="img" aria-label="MIG layout">{"".join(parts)}</svg>'


def node_page(n: NodeView, dra: Sequence[DraDevice] = (), **foot) -> str:
    h = n.health
    facts = table(["register", "HAMi-core", "handshake", "handshake age", "lock holder", "lock age",
                   "schedulable GPUs", "status"],
                  [(e(h.register), e(h.hami_core), e(h.handshake),
                    "-" if h.handshake_age is None else f"{int(h.handshake_age)}s", e(h.lock_holder),
                    "-" if h.lock_age is None else f"{int(h.lock_age)}s", str(h.schedulable_gpus),
                    _status(h.healthy, h.problems))], left=3, cls="")
    rows = [r for c in n.cards for r in _card_rows(c)]
    cards = table(["card", "UUID / slice", "model", "memory", "cores", "slots", "temp", "power", "health"],
                  rows, left=3, cls="")
    mig = ("<h2>MIG instances</h2><pre>" + e("\n".join(n.mig)) + "</pre>") if n.mig else ""
    vendors = ("<h2>Other vendors</h2><pre>" + e("\n".join(h.vendors)) + "</pre>") if h.vendors else ""
    return page(f"node {n.name}", "<h2>Node lock and handshake</h2>" + facts + "<h2>Cards and their slices</h2>"
                + cards + dra_section(dra) + mig + vendors, **foot)


def pod_page(pod: Mapping, slices: Sequence[tuple[Card, Any]], events: Sequence[Mapping],
             diagnosis: Any = None, requested: Mapping[str, str] | None = None, **foot) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    facts = table(["phase", "node", "scheduler"], [(e(status.get("phase", "Pending")), e(spec.get("nodeName") or "-"),
                                                   e(spec.get("schedulerName") or "-"))], left=3, cls="")
    req = table(["resource", "asked"], [(e(k), e(v)) for k, v in (requested or {}).items()], cls="")
    rows = []
    for card, s in slices:
        used = None if s.used_bytes is None else s.used_bytes // MIB
        rows.append((f'<a href="/node/{q(card.node)}">{e(card.node)}</a> card {card.index}', e(card.uuid),
                     str(s.container), mib(s.mem), "-" if used is None else mib(used),
                     bar([(s.used_bytes or 0, "#2e7d32", "used")], s.mem * MIB, 120, "used of limit"), f"{s.cores}%"))
    where = (table(["card", "UUID", "container", "limit", "used", "used of limit", "cores"], rows, left=2, cls="")
             if rows else "<p class='muted'>no GPU slice held</p>")
    ev_rows = [(e(ev.get("type", "")), e(ev.get("reason", "")), e(ev.get("message", "")))
               for ev in events]
    why = table(["type", "reason", "message (the filter's per-node reasons)"], ev_rows, left=3, cls="") \
        if ev_rows else "<p class='muted'>no events</p>"
    doctor = ""
    if diagnosis is not None:
        ev = "".join(f"<li>{e(x)}</li>" for x in diagnosis.evidence)
        # the GPU mode the webhook gave it and why (--dra), among what the doctor read
        mode = "".join(f"<p>{e(x)}</p>" for x in diagnosis.setup if x.startswith("GPU mode "))
        doctor = (f"<h2>hami doctor pod</h2>{mode}<p><b>{e(diagnosis.leaf)}</b>: {e(diagnosis.summary)}</p>"
                  f"<ul>{ev}</ul><p>fix: {e(diagnosis.fix)}</p>")
    return page(f"pod {ns}/{name}", facts + "<h2>Request</h2>" + req + "<h2>Where it went</h2>" + where
                + doctor + "<h2>Why (events)</h2>" + why, **foot)


def quotas_page(rows: Sequence[tuple[str, str, str, str, str, str]], **foot) -> str:
    body = table(["namespace", "quota", "GPU memory used", "GPU memory limit", "GPU cores used", "GPU cores limit"],
                 [tuple(e(x) for x in r) for r in rows], left=2) if rows else \
        "<p class='muted'>no ResourceQuota limits GPU memory or cores</p>"
    return page("GPU quotas", body, **foot)


def whatif_page(result: Mapping | None, *, running: bool, wait: float, form_token: str = "", **foot) -> str:
    form = ("<form method='post' action='/whatif'>"
            f"<input type='hidden' name='form_token' value='{e(form_token)}'><button type='submit'"
            + (" disabled" if running or wait > 0 else "")
            + ">Run hami whatif --suggest on the live cluster</button> "
            + (f"<span class='muted'>next run possible in {wait:.0f} s</span>" if wait > 0 else "")
            + ("<span class='muted'>running...</span>" if running else "") + "</form>")
    if not result:
        return page("What-if", form + "<p class='muted'>no run yet</p>", **foot)
    if result.get("error"):
        return page("What-if", form + f"<p class='bad'>{e(result['error'])}</p>", **foot)
    sugg = result.get("suggestions") or []
    base = result.get("baseline") or {}
    verdict = ("<p>No change places more pods than the baseline; the closest:</p>"
               if not sugg or sugg[0]["gained"] <= 0 else "")
    top = max([base.get("placed", 0) + base.get("pending", 0)] + [s["placed"] + s.get("pending", 0) for s in sugg]
              + [1])
    bars = table(["scenario", "replayed pods placed / pending"], [
        (e(label), bar([(placed, "#2e7d32", "placed"), (pending, "#c62828", "pending")], top, 220, "pods")
         + f" {placed} / {pending}")
        for label, placed, pending in [("baseline", base.get("placed", 0), base.get("pending", 0))]
        + [(s["change"], s["placed"], s.get("pending", 0)) for s in sugg]], cls="")
    rows = [(e(s["change"]), str(s["placed"]), f"{s['gained']:+d}", f"<div class='l'>{e(s['tradeoff'])}</div>")
            for s in sugg]
    scen = [("baseline", base.get("memory"))] + [(s["change"], s.get("memory")) for s in sugg]
    mem_top = max([sum(m) for _, m in scen if m] + [1])
    memory = table(["scenario", "GPU memory: allocated / stranded / free (MiB)"], [
        (e(label), bar([(m[0], "#1565c0", "allocated"), (m[1], "#ef6c00", "stranded"), (m[2], "#b0bec5", "free")],
                       mem_top, 220, "memory") + f" {m[0]} / {m[1]} / {m[2]}")
        for label, m in scen if m], cls="")
    maps = "".join(f"<h2>{e(label)}: memory allocated per card</h2>" + heatmap(grid)
                   for label, grid in result.get("heatmaps") or [])
    body = (form + f"<p class='muted'>run at {e(result.get('at', ''))} in {result.get('seconds', 0):.1f} s; "
            "placed and pending count the replayed pending pods</p>" + verdict + bars + memory
            + table(["change", "replayed pods placed", "gained (pods)", "trade-off"], rows, left=1) + maps)
    return page("What-if", body, **foot)


def heatmap(grid: Sequence[tuple[str, Sequence[float | None]]], cell: int = 18) -> str:
    """Rows = nodes, columns = card index, colour = memory fill (grey: cordoned or unhealthy), as the report."""
    if not grid:
        return ""
    width = max(len(cards) for _, cards in grid)
    label_w = 150
    parts = [f'<text x="{label_w + i * cell + 4}" y="11" font-size="10">{i}</text>' for i in range(width)]
    for r, (name, cards) in enumerate(grid):
        y = 14 + r * cell
        parts.append(f'<text x="0" y="{y + 12}" font-size="10">{e(name[:24])}</text>')
        for i, fill in enumerate(cards):
            colour = "#9e9e9e" if fill is None else _blue(fill)
            tip = "not usable" if fill is None else f"{fill * 100:.0f}% of memory allocated"
            parts.append(f'<rect x="{label_w + i * cell}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                         f'fill="{colour}"><title>{e(name)} card {i}: {tip}</title></rect>')
    return (f'<svg width="{label_w + width * cell + 4}" height="{16 + len(grid) * cell}" role="img" '
            f'aria-label="card fill heat map">{"".join(parts)}</svg>')


def _blue(fill: float) -> str:
    f = max(0.0, min(1.0, fill))
    return f"rgb({int(227 - 214 * f)},{int(242 - 171 * f)},{int(253 - 92 * f)})"


def not_found(what: str, **foot) -> str:
    return page("not found", f"<p>{e(what)} is not in the cluster.</p>", **foot)
