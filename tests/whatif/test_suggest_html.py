"""Suggest mode and the HTML report.

Covers: suggest ranks single changes by pods placed and finds the split count that fits the
pending pods, with its trade-off; a pair of knobs is offered when only both together place a pod; `single_change_fits`
names the one change that would place a pending pod (split count, uncordon, quota) or None; the CLI's --suggest and
--html; the report is self-contained (no external URL, plots as data: PNGs) and renders in headless Chromium: the
screenshot shows the plots' colours.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
from matplotlib import image as mpimg

from hami.cli.main import main
from hami.whatif import html
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import SchedulerDefaults, run_plan
from hami.whatif.scenario import parse_plan_text
from hami.whatif.suggest import single_change_fits, suggest
from tests.tools import chromium
from tests.whatif import snap


def _split_cluster():
    return parse_snapshot(snap.listing(snap.node("a", count=2), snap.device_config(split=2)), "s.json")


def test_suggest_finds_the_split_count_that_places_the_pending_pods():
    cluster = _split_cluster()
    plan = parse_plan_text("workloads: [{name: p, count: 4, memory: 1000}]", "p.yaml")
    best = suggest(cluster, plan, SchedulerDefaults())
    assert best[0].result.placed == 4 and best[0].gained == 2
    assert best[0].label.startswith("deviceSplitCount 2 -> ")
    assert "pods share a card" in best[0].tradeoff and "GPUs used +0" in best[0].tradeoff
    assert [s.result.placed for s in best] == sorted((s.result.placed for s in best), reverse=True)


def test_suggest_pairs_two_knobs_when_a_pod_needs_both():
    # One slot per card and 30000 of 40960 MiB taken: the 20000 MiB pod needs a second slot AND
    # more memory; neither knob alone places it.
    cluster = parse_snapshot(snap.listing(snap.node("a", count=1), snap.device_config(split=1),
                                          snap.pod("run", mem=30000, node="a"), snap.pod("wait", mem=20000)), "s.json")
    plan = parse_plan_text("{}", "p.yaml")
    best = suggest(cluster, plan, SchedulerDefaults())
    assert best[0].label == "deviceSplitCount 1 -> 2 + deviceMemoryScaling 1 -> 1.25"
    assert best[0].gained == 1 and best[0].changes.split_count == 2 and best[0].changes.memory_scaling == 1.25
    assert "pods share a card" in best[0].tradeoff and "over-commits GPU memory x1.25" in best[0].tradeoff
    assert all(s.gained == 0 for s in best[1:]) and all(" + " not in s.label for s in best[1:])


def test_suggest_finds_the_pair_whose_halves_place_nothing_alone():
    # Golden case (checked on the live embedded cluster): two 40960 MiB cards
    # registered with split 2, each full with two 16000 MiB pods (8960 MiB free, no free slot); four
    # 12000 MiB pods wait. More slots alone: 8960 < 12000. More memory alone: no slot. Scaling 1.25
    # frees 19200 MiB per card (one pod each), 1.5 frees 29440 (two each): only "split 4 + scaling 1.5"
    # places all four, and pairing each knob's best single (split 4, scaling 1.25: +2) misses it.
    running = [snap.pod(f"run-{c}-{i}", mem=16000, node="a", card=c) for c in (0, 1) for i in (0, 1)]
    waiting = [snap.pod(f"wait-{i}", mem=12000) for i in range(4)]
    cluster = parse_snapshot(snap.listing(snap.node("a", gpus=2, count=2), snap.device_config(split=2),
                                          *running, *waiting), "s.json")
    best = suggest(cluster, parse_plan_text("{}", "p.yaml"), SchedulerDefaults())
    assert best[0].label == "deviceSplitCount 2 -> 4 + deviceMemoryScaling 1 -> 1.5"
    assert best[0].gained == 4 and best[0].result.placed == 4
    singles = suggest(cluster, parse_plan_text("{}", "p.yaml"), SchedulerDefaults(), limit=50)
    assert all(s.gained == 0 for s in singles if " + " not in s.label)


def test_single_change_that_would_place_a_pending_pod():
    split = parse_snapshot(snap.listing(snap.node("a", count=1), snap.device_config(split=1),
                                        snap.pod("run", mem=1000, node="a"),
                                        snap.pod("wait", mem=1000)), "s.json")
    assert single_change_fits(split, "default", "wait") == "deviceSplitCount were 2"
    cordoned = parse_snapshot(snap.listing(
        snap.node("a", extra={"hami.io/device-cordon": "GPU-a-0"}), snap.pod("wait", mem=1000)), "s.json")
    assert single_change_fits(cordoned, "default", "wait") == "the 1 cordoned GPU(s) were uncordoned"
    quota = parse_snapshot(snap.listing(snap.node("a"), snap.quota("ml", mem=500), snap.pod("wait", "ml", mem=1000)),
                           "s.json")
    assert single_change_fits(quota, "ml", "wait") == "the GPU ResourceQuota of namespace ml were lifted"
    fits = parse_snapshot(snap.listing(snap.node("a"), snap.pod("wait", mem=1000)), "s.json")
    assert single_change_fits(fits, "default", "wait") is None
    hopeless = parse_snapshot(snap.listing(snap.node("a"), snap.pod("wait", mem=900000)), "s.json")
    assert single_change_fits(hopeless, "default", "wait") is None


def test_html_report_is_self_contained_and_renders_in_headless_chromium(tmp_path):
    cluster = parse_snapshot(snap.listing(*(snap.node(f"n{i}", gpus=4) for i in range(6))), "s.json")
    plan = parse_plan_text("""
workloads: [{name: s, count: 30, memory: 12000}, {name: b, count: 6, memory: 39000}]
scenarios: [{name: spread, changes: {nodeSchedulerPolicy: spread, gpuSchedulerPolicy: spread}}]
""", "p.yaml")
    results = run_plan(cluster, plan)
    page = html.render(results, ["a warning"])
    assert "http://" not in page and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 2 + len(results)
    assert "<td>spread</td>" in page and "warning: a warning" in page
    report = tmp_path / "report.html"
    report.write_text(page)
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1600",
         report.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pixels = (mpimg.imread(shot)[:, :, :3] * 255).astype(int)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000

    def present(rgb) -> int:
        return int((np.abs(pixels - np.array(rgb)).sum(axis=2) < 30).sum())

    assert present((0x2E, 0x7D, 0x32)) > 500  # the "placed" bars were drawn
    assert present((0x15, 0x65, 0xC0)) > 500  # the "allocated memory" bars
    assert present((0xEC, 0xEF, 0xF1)) > 200  # the table header background


def test_cli_suggest_and_html(tmp_path, capsys):
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps(snap.listing(snap.node("a", count=2), snap.device_config(split=2),
                                                *(snap.pod(f"w{i}", mem=1000) for i in range(4)))))
    report = tmp_path / "r.html"
    assert main(["whatif", "--snapshot", str(snapshot), "--suggest", "--html", str(report)]) == 0
    out = capsys.readouterr().out
    assert "== suggestions (one change, or two together, most pods placed first)" in out
    assert "deviceSplitCount 2 -> 5" in out  # 4 placed, no card left full
    assert report.read_text().startswith("<!DOCTYPE html>")
    assert main(["whatif", "--snapshot", str(snapshot), "--suggest", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["suggestions"][0]["placed"] == 4 and doc["suggestions"][0]["gained"] == 2


def test_html_lists_the_most_fragmented_nodes():
    cluster = parse_snapshot(snap.listing(snap.node("a", gpus=2)), "s.json")
    plan = parse_plan_text("workloads: [{name: s, count: 2, memory: 10000}]", "p.yaml")
    page = html.render(run_plan(cluster, plan))
    # spread over both cards: all 61920 MiB free sit on shared cards, 30960 MiB the largest block
    assert "<tr><td>a</td><td>1.00</td><td>61920</td><td>30960</td><td>2/2</td></tr>" in page
