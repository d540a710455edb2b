"""`hami whatif --timing`: scenarios scheduled through the embedded API server, the real scheduler
(webhook called on CREATE, /filter and /bind over HTTP, node locks) and the kube-scheduler 1.31 loop.

Covers: the CLI's JSON and text output per scenario; every pod the in-process replay places is bound
and the one too big for any card is parked unschedulable after its attempt; the webhook's quota
check refuses at creation what the replay counts as AdmissionDenied; pods are created in the
replay's arrival order (the seed's); the running pods of the snapshot keep their cards (a full node
takes nothing); a burst of creates with the node side's Allocate delay still binds every pod,
reported in arrival order; per-pod queue waits and
creation -> bound times are reported for every pod; nodes keep their allocatable cpu, memory and pod
count for kube-scheduler's resource fit; bad flag values are refused.
"""

from __future__ import annotations

import asyncio
import json

import yaml

from hami.cli.main import main
from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import run_scenario
from hami.whatif.scenario import parse_plan
from hami.whatif.timing import node_object, percentile, run_timed
from tests.whatif import snap

PLAN = {
    "seed": 3, "arrival": "shuffled",
    "workloads": [{"name": "w", "count": 8, "memory": 10000, "cores": 20},
                  {"name": "big", "count": 1, "memory": 90000},
                  {"name": "qq", "namespace": "q", "count": 2, "memory": 8000}],
    "scenarios": [{"name": "spread", "changes": {"nodeSchedulerPolicy": "spread"}}],
}


def _snapshot() -> dict:
    # "full" has one card, its one slot taken by a running pod: nothing more fits there.
    return snap.listing(snap.node("a", gpus=2), snap.node("b", gpus=2), snap.node("full", gpus=1, count=1),
                        snap.pod("run-1", node="full", mem=1000), snap.quota("q", mem=10000))


async def test_timing_schedules_every_scenario_through_the_live_pieces(tmp_path, cli_out):
    (tmp_path / "snap.json").write_text(json.dumps(_snapshot()))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    argv = ["whatif", "--snapshot", str(tmp_path / "snap.json"), "--scenario", str(tmp_path / "plan.yaml"),
            "--timing", "--timing-limit", "60", "--format", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    doc = json.loads(cli_out.readouterr().out)
    assert [t["scenario"] for t in doc["timing"]] == ["baseline", "spread"]
    for scenario, timing in zip(doc["scenarios"], doc["timing"], strict=True):
        pods = {p["pod"]: p for p in scenario["pods"]}
        denied = [k for k, p in pods.items() if p["reasons"] == ["AdmissionDenied"]]
        assert denied == ["q/qq-1"] or denied == ["q/qq-0"]
        assert timing["denied"] == 1 and timing["pods"] == len(pods) - 1
        # Created in the replay's (seeded) arrival order, denied pod left out.
        assert list(timing["nodes"]) == [k for k in pods if k not in denied]
        placed = [k for k, p in pods.items() if p["node"]]
        assert timing["bound"] == len(placed) == 9 and timing["replayPlaced"] == 9
        assert {k for k, n in timing["nodes"].items() if n} == set(placed)
        assert timing["nodes"]["default/big-0"] == "" and timing["unschedulable"] == 1
        assert "full" not in timing["nodes"].values()
        assert not timing["timedOut"] and timing["unfinished"] == 0
        assert timing["attempts"] >= timing["pods"] and 0 <= timing["sameNodeAsReplay"] <= 9
        assert timing["makespanSeconds"] > 0 and timing["podsPerSecond"] > 0
        assert timing["queueWaitSeconds"]["p50"] <= timing["queueWaitSeconds"]["p99"]


async def test_a_burst_with_allocate_delay_still_binds_every_pod_in_arrival_order():
    cluster = parse_snapshot(snap.listing(snap.node("only", gpus=1)), "snap.json")
    plan = parse_plan({"workloads": [{"name": "p", "count": 4, "memory": 1000}]}, "plan.yaml")
    replay = run_scenario(cluster, plan.scenarios[0], plan)
    t = await run_timed(cluster, plan.scenarios[0], plan, replay=replay, limit=60, allocate_delay=0.05, creators=4)
    # Four creates at once, the node locked for 50 ms per bind: each pod waits for the lock.
    assert t.bound == 4 and t.same_as_replay == 4 and set(t.nodes.values()) == {"only"}
    assert list(t.nodes) == [f"default/p-{i}" for i in range(4)]
    assert len(t.wait) == 4 and len(t.to_bound) == 4
    assert percentile(t.to_bound, 50) <= percentile(t.to_bound, 99) <= t.makespan + 1e-9


def test_percentile_is_nearest_rank():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([5.0], 99) == 5.0


async def test_bad_timing_flags_are_refused(tmp_path, cli_out):
    (tmp_path / "snap.json").write_text(json.dumps(_snapshot()))
    argv = ["whatif", "--snapshot", str(tmp_path / "snap.json"), "--timing", "--timing-limit", "0"]
    assert await asyncio.to_thread(main, argv) == 2
    assert "--timing-limit must be > 0" in cli_out.readouterr().err


def test_nodes_keep_their_allocatable_for_kube_schedulers_resource_fit():
    n = snap.node("a")
    n["status"]["allocatable"].update({"cpu": "3500m", "memory": "8Gi", "pods": "110"})
    info = parse_snapshot(snap.listing(n), "snap.json").nodes["a"]
    alloc = node_object(info)["status"]["allocatable"]
    assert alloc == {"nvidia.com/gpu": "10", "cpu": "3500m", "memory": str(8 * 2**30), "pods": "110"}
