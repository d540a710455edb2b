"""`hami whatif --scale-up`: how many nodes of which group would place the pending pods, as Cluster
Autoscaler counts them (in-tree filters on a copy of the group's node) and as HAMi's replay does."""

from __future__ import annotations

import json
import subprocess
import sys

from hami.whatif.cluster import parse_snapshot
from hami.whatif.scaleup import render_scale_up, scale_up
from tests.whatif.snap import listing, node, pod

GROUP = "node.hami.io/node-group"


def reporting(n: dict, group: str, gpumem: int | None) -> dict:
    n["metadata"]["labels"][GROUP] = group
    if gpumem is not None:
        n["status"]["allocatable"]["nvidia.com/gpumem"] = str(gpumem)
    return n


def full_pool(gpumem: int | None = 81920) -> list[dict]:
    """pool-1: two 40 GiB GPUs, each taken whole by a running pod; three pending 2-GPU pods of 30000 MiB."""
    return [reporting(node("pool-1", gpus=2), "pool", gpumem),
            pod("r0", gpus=1, mem=40960, node="pool-1", card=0), pod("r1", gpus=1, mem=40960, node="pool-1", card=1),
            *[pod(f"p{i}", gpus=2, mem=30000) for i in range(3)]]


def test_cluster_autoscaler_counts_per_gpu_memory_once_so_it_asks_for_fewer_nodes_than_hami_needs():
    report = scale_up(parse_snapshot(listing(*full_pool()), "snap"))
    assert report.pending == 3 and report.on_existing == ()
    (a,) = report.answers
    assert (a.group, a.template, a.size) == (f"{GROUP}=pool", "pool-1", 1)
    # in-tree: 30000 of 81920 each -> two pods per template node; HAMi: 30000 on each of two GPUs -> one
    assert (a.ca_nodes, a.ca_placed) == (2, 3)
    assert (a.hami_nodes, a.hami_placed) == (3, 3)
    assert report.chosen == f"{GROUP}=pool"
    text = render_scale_up(report)
    assert "Cluster Autoscaler adds 2 node(s) for 3 pod(s); HAMi needs 3 node(s) for 3 pod(s)" in text
    assert "scales up again" in text


def test_without_reported_memory_no_template_fits_and_nothing_is_chosen():
    report = scale_up(parse_snapshot(listing(*full_pool(gpumem=None)), "snap"))
    (a,) = report.answers
    assert (a.ca_nodes, a.ca_placed) == (0, 0)
    assert a.ca_refused == {"Insufficient nvidia.com/gpumem": 3}
    assert (a.hami_nodes, a.hami_placed) == (3, 3)  # the extender would use the nodes; CA never adds them
    assert report.chosen is None
    assert "3 pod(s) fit no template: Insufficient nvidia.com/gpumem" in render_scale_up(report)


def test_a_pod_with_room_on_an_existing_node_in_tree_is_left_to_the_scheduler():
    # one 2-GPU pod of 40960 on pool-1: in-tree 40960 of 81920 used, so a 30000 x 2 pod "fits"
    items = [reporting(node("pool-1", gpus=2), "pool", 81920), pod("r", gpus=2, mem=40960, node="pool-1"),
             pod("p", gpus=2, mem=30000)]
    report = scale_up(parse_snapshot(listing(*items), "snap"))
    assert report.on_existing == ("default/p",)
    assert report.answers[0].ca_nodes == 0 and report.chosen is None


def test_the_best_group_places_most_pods_then_needs_fewest_nodes():
    items = [*full_pool(), reporting(node("big-1", gpus=2, mem=81920), "big", 163840),
             pod("b0", gpus=1, mem=81920, node="big-1", card=0), pod("b1", gpus=1, mem=81920, node="big-1", card=1)]
    report = scale_up(parse_snapshot(listing(*items), "snap"))
    by = {a.group: a for a in report.answers}
    assert by[f"{GROUP}=big"].ca_nodes == 1 and by[f"{GROUP}=big"].hami_nodes == 2
    assert report.chosen == f"{GROUP}=big"


def test_cli_answers_in_json(tmp_path):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(listing(*full_pool())))
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", "whatif", "--snapshot", str(path), "--scale-up",
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)["scaleUp"]
    assert doc["chosen"] == f"{GROUP}=pool"
    assert doc["groups"][0]["clusterAutoscaler"] == {"nodes": 2, "pods": 3, "refused": {}}
    assert doc["groups"][0]["hami"] == {"nodes": 3, "pods": 3}
