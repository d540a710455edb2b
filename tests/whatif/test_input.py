"""Bad and unusual whatif input: malformed snapshots and scenarios are refused naming the file, the
path in it and the field; unknown annotations from a newer HAMi are read with a warning; the CLI
(`hami whatif --snapshot ... --scenario ... --format json`) exits 2 with that message on stderr.
Property tests: any document makes the parsers raise their one error type or succeed; any node
affinity shape in a pod spec gets a verdict from the replay's node filter.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.cli.main import main
from hami.device import codec
from hami.kubesched.nodeaffinity import REQUIRED, term_matches
from hami.whatif.cluster import SnapshotError, node_affinity_ok, parse_snapshot
from hami.whatif.scenario import ScenarioError, parse_plan, parse_plan_text
from tests.whatif import snap


def test_bad_register_annotation_names_file_path_and_field():
    node = snap.node("a")
    node["metadata"]["annotations"][codec.REGISTER_ANNOTATION] = "[{\"id\": 5}]"
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(snap.listing(snap.node("ok"), node), "cluster.json")
    text = str(err.value)
    assert text.startswith("cluster.json: items[1].metadata.annotations['hami.io/node-nvidia-register']: ")
    assert "node a" in text


def test_bad_pod_allocation_and_shapes_are_named():
    pod = snap.pod("p", node="a")
    pod["metadata"]["annotations"][codec.ALLOCATED_ANNOTATION] = "not,a,device"
    with pytest.raises(SnapshotError,
                       match=r"s.json: items\[1\].metadata.annotations\['hami.io/vgpu-devices-allocated'\]"):
        parse_snapshot(snap.listing(snap.node("a"), pod), "s.json")
    bad = snap.pod("p")
    bad["metadata"]["annotations"] = ["x"]
    with pytest.raises(SnapshotError, match=r"s.json: items\[0\].metadata.annotations: expected an object of strings"):
        parse_snapshot(snap.listing(bad), "s.json")
    with pytest.raises(SnapshotError, match=r"s.json: items: expected an array"):
        parse_snapshot({"kind": "List", "items": {}}, "s.json")
    q = snap.quota("ml", mem=1)
    q["spec"]["hard"]["limits.nvidia.com/gpumem"] = "lots"
    with pytest.raises(SnapshotError, match=r"items\[0\].spec.hard\['limits.nvidia.com/gpumem'\]: not a quantity"):
        parse_snapshot(snap.listing(q), "s.json")


def test_unknown_annotations_from_a_newer_hami_warn_and_are_read():
    node = snap.node("a", extra={"hami.io/node-future-feature": "x"})
    pod = snap.pod("p", node="a", annotations={"hami.io/future": "1"})
    cluster = parse_snapshot(snap.listing(node, pod), "s.json")
    assert set(cluster.nodes) == {"a"} and cluster.pods[0].node == "a"
    assert cluster.warnings == (
        "unknown annotation hami.io/future on pod default/p (from a newer HAMi?): ignored",
        "unknown annotation hami.io/node-future-feature on node a (from a newer HAMi?): ignored",
    )


def test_scenario_errors_name_the_path_and_field():
    cases = {
        "scenarios: [{name: x, changes: {deviceSplitCount: four}}]":
            "plan.yaml: scenarios[0].changes.deviceSplitCount: expected an integer, got 'four'",
        "scenarios: [{name: x, changes: {nodeSchedulerPolicy: random}}]":
            "plan.yaml: scenarios[0].changes.nodeSchedulerPolicy: expected one of binpack, spread, got 'random'",
        "workloads: [{name: w, count: 2, memory: 10, memoryPercentage: 5}]":
            "plan.yaml: workloads[0].memoryPercentage: give memory or memoryPercentage, not both",
        "scenarios: [{name: x, changes: {splitCount: 2}}]":
            "plan.yaml: scenarios[0].changes.splitCount: unknown field",
        "scenarios: [{name: x, changes: {scoringWeights: 'slot=1'}}]":
            "plan.yaml: scenarios[0].changes.scoringWeights: invalid hami.io/device-scoring-weights",
        "workloads: [{pod: {spec: {}}}]": "plan.yaml: workloads[0].pod.spec.containers: expected a non-empty list",
        "scenarios: [{name: a}, {name: a}]": "plan.yaml: scenarios[1].name: duplicate scenario name 'a'",
        "workloads: [{name: w\n": "plan.yaml: line ",
        "scenarios: [{name: x, changes: {addNodes: [{name: n, mode: mig}]}}]":
            "plan.yaml: scenarios[0].changes.addNodes[0].mode: expected one of dra, device-plugin, got 'mig'",
    }
    for text, expected in cases.items():
        with pytest.raises(ScenarioError) as err:
            parse_plan_text(text, "plan.yaml")
        assert str(err.value).startswith(expected), (text, str(err.value))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["kind", "items", "metadata", "name", "annotations", "spec", "containers", "count",
                         "workloads", "scenarios", "changes", "deviceSplitCount", "memory", "replay", "nodes",
                         "hard", "status", "hami.io/node-nvidia-register", "namespace"]), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_parsers_raise_only_their_error_type(doc):
    for parse, error in ((parse_snapshot, SnapshotError), (parse_plan, ScenarioError)):
        try:
            parse(doc, "f")
        except error as exc:
            assert str(exc).startswith("f: ")


def test_cli_json_output_and_exit_code_for_bad_input(tmp_path, capsys):
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snap.listing(snap.node("a"), snap.pod("wait", mem=50000))))
    plan = tmp_path / "plan.yaml"
    plan.write_text("workloads: [{name: w, count: 2, memory: 15000}]\n"
                    "scenarios: [{name: scaled, changes: {deviceMemoryScaling: 2}}]\n")
    assert main(["whatif", "--snapshot", str(snapshot), "--scenario", str(plan), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    base, scaled = out["scenarios"]
    assert (base["totals"]["placed"], base["totals"]["pending"]) == (2, 1)
    assert (scaled["totals"]["placed"], scaled["totals"]["pending"]) == (3, 0)
    assert scaled["diff"]["newlyPlaced"] == ["default/wait"]
    plan.write_text("scenarios: [{name: x, changes: {deviceMemoryScaling: -1}}]\n")
    assert main(["whatif", "--snapshot", str(snapshot), "--scenario", str(plan)]) == 2
    err = capsys.readouterr().err
    assert f"{plan}: scenarios[0].changes.deviceMemoryScaling: expected a number > 0, got -1" in err
    snapshot.write_text('{"kind": "List", "items": [')
    assert main(["whatif", "--snapshot", str(snapshot)]) == 2
    assert f"{snapshot}: line 1 column" in capsys.readouterr().err


def test_cli_unreadable_cluster_or_output_exits_2(tmp_path, capsys):
    missing = tmp_path / "no-kubeconfig"
    assert main(["whatif", "--kubeconfig", str(missing)]) == 2
    assert "hami whatif: error: cannot read the cluster:" in capsys.readouterr().err
    assert main(["whatif", "snapshot"]) == 2
    assert "snapshot needs -o FILE" in capsys.readouterr().err


_leaf = st.none() | st.integers(-3, 9) | st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt",
                                                          "zone", "a", "5", "metadata.name"])
_junk = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_leaf.filter(
    lambda x: isinstance(x, str)), inner, max_size=2), max_leaves=4)
_expr = st.dictionaries(st.sampled_from(["key", "operator", "values"]), _junk, max_size=3) | _junk
_term = st.dictionaries(st.sampled_from(["matchExpressions", "matchFields"]), st.lists(_expr, max_size=3) | _junk,
                        max_size=2) | _junk
_spec = st.builds(lambda terms: {"affinity": {"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}},
    st.lists(_term, max_size=3) | _junk)


@settings(max_examples=300, deadline=None)
@given(_spec | st.dictionaries(st.just("affinity"), _junk))
def test_any_node_affinity_shape_is_a_verdict_not_a_crash(spec):
    # A snapshot's pod spec is read as it is: whatever its affinity holds, the filter answers, and
    # only a list of terms with a well-formed matching term lets a node through.
    labels = {"zone": "a", "5": "7"}
    verdict = node_affinity_ok(spec, "n", labels)
    assert isinstance(verdict, bool)
    terms = spec
    for key in ("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"):
        terms = terms.get(key) if isinstance(terms, dict) else None
    if not isinstance(terms, list) or not terms:
        assert verdict is True
    else:
        assert verdict is any(term_matches(t, labels, "n") for t in terms)


def test_pods_with_dra_claims_need_the_snapshot_s_resource_slices():
    """A snapshot of nodes and pods only: the pods with claims are named, and they stay pending in the
    replay for want of devices; with a ResourceSlice in the snapshot the note goes."""
    p = snap.pod("trainer")
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "hami-gpu-0"}]
    cluster = parse_snapshot(snap.listing(snap.node("a"), p, snap.pod("plain")), "cluster.json")
    (note,) = [w for w in cluster.warnings if "DRA" in w]
    assert note.startswith("1 pod(s) use DRA claims (default/trainer) but the snapshot has no ResourceSlices")
    assert "resourceslices,resourceclaims,resourceclaimtemplates,deviceclasses" in note
    assert not [w for w in parse_snapshot(snap.listing(snap.node("a")), "x").warnings if "DRA" in w]
    sl = {"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {
        "driver": "gpu.hami.io", "nodeName": "a", "pool": {"name": "a", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0"}]}}
    with_slices = parse_snapshot(snap.listing(snap.node("a"), p, sl), "x")
    assert not [w for w in with_slices.warnings if "DRA" in w] and len(with_slices.dra.slices) == 1


def test_pending_pods_that_outrank_placed_ones_are_named_as_not_preempted_for():
    """whatif has no preemption scenario and says so when it would matter."""
    low = snap.pod("batch", node="a")
    low["spec"]["priority"] = 0
    high = snap.pod("inference")
    high["spec"]["priority"] = 1000
    cluster = parse_snapshot(snap.listing(snap.node("a"), low, high), "cluster.json")
    (note,) = [w for w in cluster.warnings if "preemption" in w]
    assert note.startswith("1 pending pod(s) outrank placed pods (default/inference): whatif has no preemption")
    equal = snap.pod("peer")
    equal["spec"]["priority"] = 0
    assert not [w for w in parse_snapshot(snap.listing(snap.node("a"), low, equal), "x").warnings if "preemption" in w]
