"""Golden whatif scenarios on small snapshots, through the scheduler's own fit/score/webhook code.

Covers: spread strands memory that binpack uses (fragmentation); a deviceSplitCount change fits
more pods; a ResourceQuota blocks pods (at admission and in the fit) and raising it unblocks them;
memory scaling re-registers cards from their physical memory; added, removed and cordoned
nodes/GPUs; finished pods replayed for as long as they ran (waiting pods take their cards when they
leave); nodeSelector; required node affinity (In, NotIn, Exists, Gt, matchFields); required pod (anti-)affinity and
DoNotSchedule topology spread (kube-scheduler's in-tree plugins, hami.kubesched.intree); NodeResourcesFit on
cpu, memory and pod count where nodes report allocatable; the snapshot's pending pods are queued; arrival orders and
seeds are deterministic; the diff against the baseline.
"""

from __future__ import annotations

from hami.whatif.cluster import parse_snapshot
from hami.whatif.engine import ADMISSION_DENIED, NO_CANDIDATE_NODE, run_plan
from hami.whatif.report import diff, render_text, to_json
from hami.whatif.scenario import parse_plan, parse_plan_text
from tests.whatif import snap


def run(doc: dict, plan_yaml: str):
    return run_plan(parse_snapshot(doc, "snap.json"), parse_plan_text(plan_yaml, "plan.yaml"))


def by_name(results):
    return {r.scenario: r for r in results}


def test_spread_strands_memory_that_binpack_uses():
    doc = snap.listing(snap.node("a"), snap.node("b"))
    res = by_name(run(doc, """
workloads:
  - {name: small, count: 2, memory: 20000}
  - {name: big, count: 1, memory: 40000}
scenarios:
  - {name: spread, changes: {nodeSchedulerPolicy: spread}}
"""))
    base, spread = res["baseline"], res["spread"]
    assert [(o.pod, o.node) for o in base.outcomes] == [
        ("default/small-0", "a"), ("default/small-1", "a"), ("default/big-0", "b")]
    assert base.totals()["stranded_mem"] == 0
    assert [(o.pod, o.node) for o in spread.outcomes] == [
        ("default/small-0", "a"), ("default/small-1", "b"), ("default/big-0", "")]
    assert spread.pending_reasons() == {"CardInsufficientMemory": 1}
    # Each card keeps 20960 MiB free, too small for the pending 40000 MiB pod: stranded.
    assert spread.totals()["stranded_mem"] == 2 * (40960 - 20000)
    d = diff(base, spread)
    assert d["newlyPending"] == ["default/big-0"] and d["totals"]["placed"] == -1


def test_split_count_change_fits_more_pods():
    doc = snap.listing(snap.node("a", count=2), snap.device_config(split=2))
    res = by_name(run(doc, """
workloads: [{name: p, count: 4, memory: 1000}]
scenarios:
  - {name: split-4, changes: {deviceSplitCount: 4}}
"""))
    assert res["baseline"].placed == 2 and res["baseline"].pending == 2
    assert res["baseline"].pending_reasons() == {"CardTimeSlicingExhausted": 2}
    assert res["split-4"].placed == 4 and res["split-4"].pending == 0
    # A full card (no slot left) strands what memory it has left.
    assert res["baseline"].totals()["stranded_mem"] == 40960 - 2000


def test_quota_blocks_at_admission_and_raising_it_unblocks():
    doc = snap.listing(snap.node("a"), snap.quota("ml", mem=10000))
    res = by_name(run(doc, """
workloads: [{name: p, namespace: ml, count: 3, memory: 4000}]
scenarios:
  - {name: more-quota, changes: {quotas: [{namespace: ml, memory: 20000}]}}
"""))
    base = res["baseline"]
    assert [o.node for o in base.outcomes] == ["a", "a", ""]
    assert base.outcomes[2].reasons == (ADMISSION_DENIED,)
    assert base.outcomes[2].message == "exceeding resource quota"
    assert res["more-quota"].placed == 3


def test_quota_blocks_an_admitted_pending_pod_in_the_fit():
    # Already admitted (it is in the snapshot, pending): the fit's quota check refuses it.
    doc = snap.listing(snap.node("a"), snap.quota("ml", mem=6000),
                       snap.pod("run", "ml", mem=4000, node="a"),
                       snap.pod("wait", "ml", mem=4000, created="2026-11-24T01:00:00Z"))
    base = run(doc, "{}")[0]
    assert [(o.pod, o.node, o.reasons) for o in base.outcomes] == [("ml/wait", "", ("ResourceQuotaNotFit",))]


def test_memory_scaling_reregisters_cards_from_physical_memory():
    doc = snap.listing(snap.node("a", mem=40960))
    res = by_name(run(doc, """
workloads: [{name: p, count: 3, memory: 20000}]
scenarios:
  - {name: overcommit, changes: {deviceMemoryScaling: 1.5}}
"""))
    assert res["baseline"].placed == 2
    over = res["overcommit"]
    assert over.placed == 3
    card = over.nodes[0].cards[0]
    assert (card.mem, card.physical_mem) == (61440, 40960)


def test_added_removed_and_cordoned_nodes():
    doc = snap.listing(snap.node("old"), snap.node("keep", gpus=2),
                       snap.pod("running", mem=30000, node="old"))
    res = by_name(run(doc, """
workloads: [{name: p, count: 2, memory: 30000}]
scenarios:
  - name: swap
    changes:
      removeNodes: ["old"]
      addNodes: [{name: h100, count: 1, gpus: 1, type: NVIDIA-H100, memory: 81920}]
      cordonGPUs: ["keep/1"]
"""))
    assert res["baseline"].placed == 2  # the two new pods, on keep's two cards
    swap = res["swap"]
    names = {n.name for n in swap.nodes}
    assert names == {"keep", "h100-0"}
    # The pod that ran on the removed node is queued again, first.
    assert swap.outcomes[0].pod == "default/running" and swap.outcomes[0].node
    placed = {o.pod: o.node for o in swap.outcomes}
    assert sorted(placed.values()) == ["h100-0", "h100-0", "keep"]
    assert "GPU-keep-1" not in "".join(o.devices for o in swap.outcomes)


def test_node_selector_and_cordoned_node_leave_no_candidate():
    doc = snap.listing(snap.node("a", labels={"pool": "x"}))
    res = by_name(run(doc, """
workloads:
  - {name: p, count: 1, memory: 1000, nodeSelector: {pool: y}}
  - {name: q, count: 1, memory: 1000, nodeSelector: {pool: x}}
scenarios:
  - {name: cordon, changes: {nodes: [{name: "a*", cordon: true}]}}
"""))
    assert [(o.node, o.reasons) for o in res["baseline"].outcomes] == [("", (NO_CANDIDATE_NODE,)), ("a", ())]
    assert res["cordon"].placed == 0


def _affine(expressions: list | None = None, fields: list | None = None) -> dict:
    term = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"spec": {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}}


def test_required_node_affinity_narrows_the_candidates():
    doc = snap.listing(snap.node("a", labels={"zone": "east", "size": "8"}),
                       snap.node("b", labels={"zone": "west", "size": "4"}), snap.node("c"))
    plan = parse_plan({"workloads": [
        {"name": "west", "count": 2, "pod": _affine([{"key": "zone", "operator": "In", "values": ["west"]}])},
        {"name": "notwest", "count": 1, "pod": _affine([{"key": "zone", "operator": "NotIn", "values": ["west"]},
                                                         {"key": "zone", "operator": "Exists"}])},
        {"name": "big", "count": 1, "pod": _affine([{"key": "size", "operator": "Gt", "values": ["5"]}])},
        {"name": "named", "count": 1, "pod": _affine(fields=[{"key": "metadata.name", "operator": "In",
                                                              "values": ["c"]}])},
        {"name": "nowhere", "count": 1, "pod": _affine([{"key": "zone", "operator": "In", "values": ["north"]}])},
    ]}, "plan.yaml")
    result = run_plan(parse_snapshot(doc, "snap.json"), plan)[0]
    assert [(o.pod, o.node, o.reasons) for o in result.outcomes] == [
        ("default/west-0", "b", ()), ("default/west-1", "b", ()), ("default/notwest-0", "a", ()),
        ("default/big-0", "a", ()), ("default/named-0", "c", ()), ("default/nowhere-0", "", (NO_CANDIDATE_NODE,))]


def _labelled(app: str, spec: dict) -> dict:
    return {"metadata": {"labels": {"app": app}}, "spec": {**spec, "containers": [{
        "name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}}


def _term(app: str, key: str) -> dict:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def test_pod_affinity_anti_affinity_and_topology_spread_steer_the_replay():
    host = "kubernetes.io/hostname"
    nodes = [snap.node(n, gpus=2, labels={host: n, "zone": z}) for n, z in (("a", "x"), ("b", "x"), ("c", "y"))]
    db = snap.pod("db", node="c")
    db["metadata"]["labels"] = {"app": "db"}
    plan = parse_plan({"workloads": [
        # One per node: the fourth finds no node left.
        {"name": "web", "count": 4, "pod": _labelled("web", {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term("web", host)]}}})},
        # Next to the database's zone only (binpack alone would pick a, the fullest).
        {"name": "cache", "count": 2, "pod": _labelled("cache", {"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term("db", "zone")]}}})},
        # At most one more in a zone than in the other: binpack alone would put all four on one node.
        {"name": "spread", "count": 4, "pod": _labelled("spread", {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}}}]})},
    ]}, "plan.yaml")
    result = run_plan(parse_snapshot(snap.listing(*nodes, db), "snap.json"), plan)[0]
    got = {o.pod.split("/")[1]: o for o in result.outcomes}
    assert sorted(got[f"web-{i}"].node for i in range(3)) == ["a", "b", "c"]
    assert got["web-3"].node == "" and got["web-3"].reasons == (NO_CANDIDATE_NODE,)
    assert {got["cache-0"].node, got["cache-1"].node} == {"c"}
    zones = [{"a": "x", "b": "x", "c": "y"}[got[f"spread-{i}"].node] for i in range(4)]
    assert sorted(zones) == ["x", "x", "y", "y"]


def test_an_unreadable_pod_affinity_is_an_invalid_pod_not_a_crash():
    plan = parse_plan({"workloads": [
        {"name": "first", "count": 1, "pod": _labelled("first", {})},
        {"name": "odd", "count": 1, "pod": _labelled("odd", {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "labelSelector": "x"}]}}})},
        {"name": "after", "count": 1, "pod": _labelled("after", {})}]}, "plan.yaml")
    result = run_plan(parse_snapshot(snap.listing(snap.node("a", labels={"zone": "x"})), "snap.json"), plan)[0]
    first, odd, after = result.outcomes
    assert odd.node == "" and odd.reasons == ("InvalidPod",) and "spec.affinity" in odd.message
    assert first.node == after.node == "a"


def test_node_resources_fit_counts_cpu_and_pods_before_the_gpu_fit():
    a = snap.node("a", gpus=2)
    a["status"]["allocatable"].update({"cpu": "2", "pods": "3"})
    b = snap.node("b", gpus=2)
    b["status"]["allocatable"].update({"cpu": "4", "memory": "8Gi"})
    web = snap.pod("web", node="a", mem=1000)  # any pod bound there counts, GPU or not
    web["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1500m"}

    def cpu_pod(cpu: str, memory: str | None = None) -> dict:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "cpu": cpu}
        if memory:
            limits["memory"] = memory
        return {"spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}

    plan = parse_plan({"workloads": [
        {"name": "small", "count": 2, "pod": cpu_pod("250m")},  # a (binpack) while its cpu lasts: 1.5 + 0.25 + 0.25
        {"name": "more", "count": 1, "pod": cpu_pod("100m")},  # a has 3 pods: Too many pods -> b
        {"name": "huge", "count": 1, "pod": cpu_pod("1", "16Gi")},  # no node has the memory
    ]}, "plan.yaml")
    result = run_plan(parse_snapshot(snap.listing(a, b, web), "snap.json"), plan)[0]
    assert [(o.pod, o.node) for o in result.outcomes] == [
        ("default/small-0", "a"), ("default/small-1", "a"), ("default/more-0", "b"), ("default/huge-0", "")]
    # a: 3 pods and its cpu taken (it reports no memory, so memory is not checked there); b: memory.
    assert result.outcomes[-1].reasons == ("Insufficient cpu", "Insufficient memory", "Too many pods")


def _finished(pod: dict, start: str, end: str) -> dict:
    pod["status"] = {"phase": "Succeeded", "startTime": start,
                     "containerStatuses": [{"name": "main",
                                            "state": {"terminated": {"exitCode": 0, "finishedAt": end}}}]}
    return pod


def _window(ran_until: str):
    doc = snap.listing(
        snap.node("a", count=1),
        _finished(snap.pod("first", node="a", created="2026-11-24T00:00:00Z"), "2026-11-24T00:00:05Z", ran_until),
        snap.pod("second", node="a", created="2026-11-24T00:05:00Z"),
        snap.pod("third", created="2026-11-24T00:20:00Z"))
    return run(doc, "workloads: [{replay: {}}]")[0]


def test_finished_pods_replay_for_as_long_as_they_ran():
    # first held the only slot for 10 minutes: second waits for it, then takes the slot; third,
    # created at 00:20, finds it taken.
    short = _window("2026-11-24T00:10:05Z")
    assert [(o.pod, o.node) for o in short.outcomes] == [
        ("default/first", "a"), ("default/second", "a"), ("default/third", "")]
    assert short.pending_reasons() == {"CardTimeSlicingExhausted": 1}
    # Had first run for an hour, the slot would still be taken when second and third arrive.
    long = _window("2026-11-24T01:00:05Z")
    assert [(o.pod, o.node) for o in long.outcomes] == [
        ("default/first", "a"), ("default/second", ""), ("default/third", "")]


def test_snapshot_pending_pods_are_queued_in_creation_order():
    doc = snap.listing(snap.node("a", count=1),
                       snap.pod("late", created="2026-11-24T02:00:00Z"),
                       snap.pod("early", created="2026-11-24T01:00:00Z"))
    base = run(doc, "{}")[0]
    assert [(o.pod, bool(o.node)) for o in base.outcomes] == [("default/early", True), ("default/late", False)]


def test_arrival_orders_are_deterministic_for_a_seed():
    doc = snap.listing(*(snap.node(f"n{i}", gpus=2) for i in range(3)))
    plan = """
seed: SEED
arrival: shuffled
workloads:
  - {name: a, count: 5, memory: 9000}
  - {name: b, count: 5, memory: 30000}
"""
    def order(seed):
        return [(o.pod, o.node, o.devices) for o in run(doc, plan.replace("SEED", str(seed)))[0].outcomes]
    assert order(1) == order(1)
    assert [p for p, _, _ in order(1)] != [p for p, _, _ in order(2)]
    inter = run(doc, plan.replace("SEED", "0").replace("shuffled", "interleaved"))[0]
    assert [o.pod for o in inter.outcomes][:4] == ["default/a-0", "default/b-0", "default/a-1", "default/b-1"]


def test_gpu_policy_and_scoring_weights_reach_the_fit():
    doc = snap.listing(snap.node("a", gpus=2))
    res = by_name(run(doc, """
workloads: [{name: p, count: 2, memory: 1000}]
scenarios:
  - {name: gpu-binpack, changes: {gpuSchedulerPolicy: binpack, scoringWeights: "slot=1,core=1,memory=3"}}
"""))
    spread_cards = {o.devices.split(",")[0] for o in res["baseline"].outcomes}
    binpack_cards = {o.devices.split(",")[0] for o in res["gpu-binpack"].outcomes}
    assert len(spread_cards) == 2 and len(binpack_cards) == 1
    assert res["gpu-binpack"].gpu_policy == "binpack"


def test_text_and_json_reports_carry_the_numbers():
    doc = snap.listing(snap.node("a"), snap.node("b"))
    results = run(doc, """
workloads: [{name: s, count: 2, memory: 20000}, {name: b, count: 1, memory: 40000}]
scenarios: [{name: spread, changes: {nodeSchedulerPolicy: spread}}]
""")
    text = render_text(results)
    assert "== scenario spread: nodeSchedulerPolicy=spread" in text
    assert "CardInsufficientMemory" in text and "== diff against baseline" in text
    doc_json = to_json(results)
    spread = doc_json["scenarios"][1]
    assert spread["totals"]["pending"] == 1 and spread["diff"]["newlyPending"] == ["default/b-0"]
    assert spread["pods"][2] == {"pod": "default/b-0", "node": None, "devices": None,
                                 "reasons": ["CardInsufficientMemory"], "message": spread["pods"][2]["message"]}
    assert len(spread["nodes"]) == 2 and spread["nodes"][0]["gpus"][0]["memUsed"] == 20000


def test_side_by_side_columns_per_scenario():
    doc = snap.listing(snap.node("a"), snap.node("b"))
    text = render_text(run(doc, """
workloads: [{name: s, count: 2, memory: 20000}, {name: b, count: 1, memory: 40000}]
scenarios: [{name: spread, changes: {nodeSchedulerPolicy: spread}}]
"""))
    block = text.split("== side by side\n")[1].split("\n\n")[0].splitlines()
    assert block[0].split() == ["baseline", "spread"]
    assert block[1].split() == ["pods", "placed", "3", "2"]
    assert block[2].split() == ["pods", "pending", "0", "1"]


def test_per_node_changes_apply_only_to_matching_nodes():
    doc = snap.listing(snap.node("pool-a-0", count=1), snap.node("pool-b-0", count=1))
    res = by_name(run(doc, """
workloads: [{name: p, count: 4, memory: 1000}]
scenarios:
  - {name: a-split, changes: {nodes: [{name: "pool-a-*", deviceSplitCount: 3}]}}
"""))
    assert res["baseline"].placed == 2
    split = res["a-split"]
    assert split.placed == 4
    assert {n.name: n.cards[0].slots for n in split.nodes} == {"pool-a-0": 3, "pool-b-0": 1}


def test_replay_window_and_namespace_pick_the_pods_to_replay():
    doc = snap.listing(
        snap.node("a", gpus=2),
        snap.pod("old", "ml", mem=30000, node="a", card=0, created="2026-11-23T00:00:00Z"),
        snap.pod("new", "ml", mem=30000, node="a", card=1, created="2026-11-24T12:00:00Z"),
        snap.pod("other", "web", mem=5000, node="a", card=1, created="2026-11-24T12:00:00Z"))
    res = run(doc, """
workloads: [{replay: {since: "2026-11-24T00:00:00Z", namespace: ml}}]
""")[0]
    # Only ml/new is replayed; ml/old and web/other keep their cards, so it lands where it was.
    assert [(o.pod, o.node) for o in res.outcomes] == [("ml/new", "a")]
    assert res.nodes[0].cards[1].mem_used == 35000


def test_split_count_is_read_from_the_registration_without_a_device_config():
    # Registered with 4 slots per card, no device config in the snapshot: setting 10 still changes it.
    doc = snap.listing(snap.node("a", count=4))
    cluster = parse_snapshot(doc, "s.json")
    assert cluster.nodes["a"].settings.split_count == 4
    res = by_name(run(doc, """
workloads: [{name: p, count: 6, memory: 1000}]
scenarios: [{name: ten, changes: {deviceSplitCount: 10}}]
"""))
    assert (res["baseline"].placed, res["ten"].placed) == (4, 6)


def test_hami_managed_cluster_snapshot_as_it_is():
    """Annotation texts as HAMi v2.10 writes them (spec node.md / scheduler.md), JSON and legacy registers."""
    json_register = (
        '[{"id":"GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111","count":10,"devmem":40960,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true},{"id":"GPU-91ab03c4-77de-4c0a-8b21-'
        '222222222222","index":1,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","numa":1,'
        '"mode":"hami-core","health":true}]')
    legacy_register = ("GPU-aaa,10,40960,100,NVIDIA A100-SXM4-40GB,0,true,0,hami-core:"
                       "GPU-bbb,10,40960,100,NVIDIA A100-SXM4-40GB,1,true,1,hami-core:")
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": reg, "hami.io/node-handshake": "Reported 2026-11-24 10:00:00"}}}
        for name, reg in (("gpu-json", json_register), ("gpu-legacy", legacy_register))]
    running = snap.pod("train", mem=30000)
    running["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "gpu-legacy", "hami.io/vgpu-time": "1763978400", "hami.io/bind-phase": "success",
        "hami.io/vgpu-devices-allocated": "GPU-aaa,NVIDIA,30000,50:;",
        "hami.io/vgpu-devices-to-allocate": ";"}
    running["spec"]["nodeName"] = "gpu-legacy"
    cluster = parse_snapshot(snap.listing(*nodes, running), "hami.json")
    assert cluster.warnings == ()
    assert [len(cluster.nodes[n].devices) for n in ("gpu-json", "gpu-legacy")] == [2, 2]
    base = run(snap.listing(*nodes, running), "workloads: [{name: p, count: 4, memory: 20000}]")[0]
    assert base.placed == 4
    card = next(c for n in base.nodes for c in n.cards if c.uuid == "GPU-aaa")
    assert (card.mem_used, card.cores_used) == (30000, 50)  # the running pod still holds its share


def test_taints_keep_pods_without_a_toleration_away():
    tainted = snap.node("gpu")
    tainted["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                  {"key": "soft", "effect": "PreferNoSchedule"}]}
    plain = snap.pod("plain", mem=1000)
    exact = snap.pod("exact", mem=1000)
    exact["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]
    wrong = snap.pod("wrong", mem=1000)
    wrong["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}]
    anything = snap.pod("anything", mem=1000)
    anything["spec"]["tolerations"] = [{"operator": "Exists"}]
    base = run(snap.listing(tainted, plain, exact, wrong, anything), "{}")[0]
    assert {o.pod: (o.node, o.reasons) for o in base.outcomes} == {
        "default/plain": ("", (NO_CANDIDATE_NODE,)), "default/exact": ("gpu", ()),
        "default/wrong": ("", (NO_CANDIDATE_NODE,)), "default/anything": ("gpu", ())}


def test_fragmentation_counts_free_memory_on_shared_cards_only():
    doc = snap.listing(snap.node("a", gpus=2), snap.node("b", gpus=2))
    base = run(doc, "workloads: [{name: p, count: 1, memory: 10960}]")[0]
    nodes = {n.name: n for n in base.nodes}
    assert base.outcomes[0].node == "a"  # equal scores: the first name
    assert nodes["b"].fragmentation == 0.0
    assert (nodes["a"].partial_free, nodes["a"].free_mem) == (30000, 70960)
    assert base.totals()["fragmentation"] == round(30000 / (70960 + 81920), 4)
