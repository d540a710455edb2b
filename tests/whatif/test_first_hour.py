"""whatif as a new user meets it on the demo.

Covers: nodes a scenario adds register what the nodes they copy registered (split count of the
same-type nodes, else the cluster's), unless the scenario or a node config says otherwise; the HTML
report names its columns with units, says that placed/pending count replayed pods only, puts one
heat-map tick on each card (none between cards), keeps legends off the bars, and says when no change
helps; the report, screenshotted in headless Chromium, shows the unit headers; (the snapshot of hami's own embedded
cluster is in tests/e2e/test_embedded.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hami.whatif import html
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import apply_changes, run_plan
from hami.whatif.scenario import parse_plan_text
from tests.tools import chromium
from tests.whatif import snap


def _added(cluster, text: str):
    plan = parse_plan_text(text, "p.yaml")
    nodes, _ = apply_changes(cluster, plan.scenarios[-1].changes)
    return {n: v for n, v in nodes.items() if n.startswith("new-")}


def test_added_nodes_inherit_the_split_count_the_copied_nodes_registered():
    # The device config says 10; the real nodes registered 2 (the issue's live check).
    cluster = parse_snapshot(snap.listing(snap.node("a", count=2), snap.node("b", count=2),
                                          snap.device_config(split=10)), "s.json")
    added = _added(cluster, f"scenarios: [{{name: more, changes: {{addNodes: [{{name: new, count: 2, gpus: 4, "
                            f"type: '{snap.MODEL}', memory: 40960}}]}}}}]")
    assert set(added) == {"new-0", "new-1"}
    assert all(d.count == 2 for n in added.values() for d in n.devices)
    other_type = _added(cluster, "scenarios: [{name: more, changes: {addNodes: [{name: new, type: OTHER}]}}]")
    assert all(d.count == 2 for n in other_type.values() for d in n.devices)  # no same type: the cluster's
    explicit = _added(cluster, "scenarios: [{name: more, changes: {addNodes: [{name: new, deviceSplitCount: 7}]}}]")
    assert all(d.count == 7 for n in explicit.values() for d in n.devices)
    global_knob = _added(cluster, "scenarios: [{name: more, changes: {deviceSplitCount: 4, addNodes: [{name: new}]}}]")
    assert all(d.count == 4 for n in global_knob.values() for d in n.devices)


def test_html_report_names_units_explains_placed_and_ticks_each_card():
    cluster = parse_snapshot(snap.listing(*(snap.node(f"n{i}", gpus=3) for i in range(2)),
                                          snap.pod("run", mem=4000, node="n0")), "s.json")
    results = run_plan(cluster, parse_plan_text("workloads: [{name: s, count: 2, memory: 9000}]", "p.yaml"))
    page = html.render(results)
    assert "<th>memory allocated (MiB)</th>" in page and "<th>stranded memory (MiB)</th>" in page
    assert "<th>mem_allocated</th>" not in page
    assert "pods already running keep their cards" in page
    fig = html.heatmap_figure(results[0])
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == [0, 1, 2]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]


def test_html_suggestions_say_when_no_change_helps():
    from hami.whatif.engine import SchedulerDefaults
    from hami.whatif.suggest import suggest

    cluster = parse_snapshot(snap.listing(snap.node("a"), snap.pod("wait", mem=900000)), "s.json")
    plan = parse_plan_text("{}", "p.yaml")
    results = run_plan(cluster, plan)
    page = html.render(results, suggestions=suggest(cluster, plan, SchedulerDefaults(), baseline=results[0]))
    assert "No change places more pods than the baseline" in page


def test_legends_sit_outside_the_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar(["a"], [1], label="placed")
    html.legend_outside(ax)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the axes: it cannot cover a bar
    plt.close(fig)


def test_report_screenshot_shows_the_unit_headers(tmp_path):
    cluster = parse_snapshot(snap.listing(*(snap.node(f"n{i}", gpus=2) for i in range(3))), "s.json")
    page = html.render(run_plan(cluster, parse_plan_text("workloads: [{name: s, count: 4, memory: 9000}]", "p.yaml")))
    report = tmp_path / "report.html"
    report.write_text(page)
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "memory allocated (MiB)" in proc.stdout and "replayed pods placed" in proc.stdout


def test_the_report_without_matplotlib_keeps_its_tables_and_says_how_to_get_the_charts():
    """scripts/demo installs the runtime dependencies only, and README runs `hami whatif --suggest --html`
    right after it: without the `report` extra the page has every table and a note instead of charts.
    A child interpreter where importing matplotlib fails (nothing in this process is patched)."""
    child = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from hami.whatif import html\n"
        "from hami.whatif.cluster import parse_snapshot\n"
        "from hami.whatif.engine import run_plan\n"
        "from hami.whatif.scenario import parse_plan_text\n"
        "from tests.whatif import snap\n"
        "cluster = parse_snapshot(snap.listing(*(snap.node(f'n{i}', gpus=2) for i in range(3))), 's.json')\n"
        "print(html.render(run_plan(cluster, parse_plan_text("
        "'workloads: [{name: s, count: 4, memory: 9000}]', 'p.yaml'))))\n")
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = proc.stdout
    assert html.NO_CHARTS.replace("'", "&#x27;") in page and "<table>" in page and "<img" not in page
    assert "data:image/png" in html.render(run_plan(
        parse_snapshot(snap.listing(snap.node("n0", gpus=2)), "s.json"),
        parse_plan_text("workloads: [{name: s, count: 1, memory: 9000}]", "p.yaml")))  # with it: the charts
