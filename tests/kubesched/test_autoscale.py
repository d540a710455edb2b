"""Cluster Autoscaler's decisions (hami.kubesched.autoscale) and the node-group flag's parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.kubesched import intree
from hami.kubesched.autoscale import (
    NodeGroup,
    best_option,
    estimate,
    removal_blocker,
    scale_up_options,
    template_refusal,
)
from hami.sim.apiserver.nodestatus import resource_errors
from hami.sim.autoscaler import parse_node_group, parse_node_groups
from hami.sim.cluster import SimSpecError

MEM = "nvidia.com/gpumem"


def node(name, gpumem=None, gpus=10, taints=(), labels=None):
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    if gpumem is not None:
        alloc[MEM] = str(gpumem)
    return {"metadata": {"name": name, "labels": {"gpu": "on", **(labels or {})}},
            "spec": {"taints": list(taints)} if taints else {}, "status": {"allocatable": alloc}}


def pod(name, mem, *, node_name="", owner=True, annotations=None, labels=None, tolerations=None, selector=None):
    meta = {"name": name, "namespace": "t", "annotations": annotations or {}, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "u", "controller": True}]
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", MEM: str(mem)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = tolerations
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def group(name="pool", gpumem=40960, lo=0, hi=3, **kw):
    return NodeGroup(name, lo, hi, node(f"{name}-template", gpumem, **kw))


def test_template_refusals_name_the_in_tree_reason():
    assert template_refusal(pod("p", 1000), group(gpumem=None)) == f"Insufficient {MEM}"
    assert template_refusal(pod("p", 50000), group()) == f"Insufficient {MEM}"
    assert template_refusal(pod("p", 1000), group()) is None
    tainted = group(taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}])
    assert template_refusal(pod("p", 1000), tainted) == "node(s) had untolerated taint {gpu: a100}"
    tol = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert template_refusal(pod("p", 1000, tolerations=tol), tainted) is None
    assert template_refusal(pod("p", 1000, selector={"zone": "b"}), group()) == \
        "node(s) didn't match Pod's node affinity/selector"


def test_estimate_packs_first_fit_largest_first_within_max():
    pods = [pod(f"p{i}", m) for i, m in enumerate([30000, 30000, 10000, 10000, 5000])]
    opt = estimate(pods, group(), size=0)
    # 30000+10000 | 30000+10000 | 5000 (first fit after largest first)
    assert opt.nodes == 3 and len(opt.placed) == 5 and not opt.refused
    capped = estimate(pods, group(hi=2), size=1)
    assert capped.nodes == 1 and capped.placed == ("t/p0", "t/p2")  # 40000 of 40960: 5000 more is too much
    assert set(capped.refused.values()) == {"node group pool is at its max size 2"}
    assert estimate(pods, group(gpumem=None), size=0).nodes == 0


def test_the_option_placing_most_pods_wins_then_fewest_nodes():
    pods = [pod("a", 30000), pod("b", 30000)]
    small, big = group("small", gpumem=40960), group("big", gpumem=81920)
    options = scale_up_options(pods, [small, big], {})
    assert [(o.group, o.nodes) for o in options] == [("big", 1), ("small", 2)]
    assert best_option(options).group == "big"
    assert best_option(scale_up_options(pods, [group(gpumem=None)], {})) is None


def test_removal_needs_every_pod_to_fit_elsewhere_by_the_in_tree_filters():
    nodes = [node("a", 40960), node("b", 40960)]
    on = {"a": [pod("x", 30000, node_name="a")], "b": [pod("y", 20000, node_name="b")]}
    assert removal_blocker("a", nodes, on, [], []) == "pod t/x fits no other node by the in-tree filters"
    assert removal_blocker("b", nodes, on, [], []) == "pod t/y fits no other node by the in-tree filters"
    on["a"] = [pod("x", 10000, node_name="a")]
    assert removal_blocker("b", nodes, on, [], []) is None
    # the node's pods are placed one after the other: two that each fit, together do not
    on["b"] = [pod("y", 20000, node_name="b"), pod("z", 20000, node_name="b")]
    assert removal_blocker("b", nodes, on, [], []) == "pod t/z fits no other node by the in-tree filters"
    # no reported capacity anywhere: nothing with gpumem can move
    bare = [node("a"), node("b")]
    assert "fits no other node" in removal_blocker("b", bare, {"b": [pod("y", 1, node_name="b")]}, [], [])
    # an empty node (DaemonSet pods aside) may always go
    ds = pod("d", 1, node_name="b")
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "m", "uid": "u", "controller": True}]
    assert removal_blocker("b", bare, {"b": [ds]}, [], []) is None


def test_removal_respects_controllers_safe_to_evict_and_pdbs():
    nodes = [node("a", 81920), node("b", 81920)]
    y = pod("y", 1000, node_name="b", labels={"app": "y"})
    assert removal_blocker("b", nodes, {"b": [pod("y", 1000, node_name="b", owner=False)]}, [], []) == \
        "pod t/y is not replicated (no controller would recreate it)"
    keep = pod("y", 1000, node_name="b", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
    assert "safe-to-evict=false" in removal_blocker("b", nodes, {"b": [keep]}, [], [])
    budget = {"metadata": {"name": "y-pdb", "namespace": "t"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "y"}}}}
    assert removal_blocker("b", nodes, {"b": [y]}, [budget], [y]) == \
        "pod t/y: not enough pod disruption budget (y-pdb) to move it"
    assert removal_blocker("b", nodes, {"b": [y]}, [{**budget, "spec": {**budget["spec"], "minAvailable": 0}}],
                           [y]) is None
    # a node on its way out takes no pod
    assert removal_blocker("b", nodes, {"b": [y]}, [], [], leaving=["a"]) == \
        "pod t/y fits no other node by the in-tree filters"


def test_node_group_flag_parses_and_names_what_is_wrong():
    g = parse_node_group("pool:0:2:1xNVIDIA A100-SXM4-40GB:40960")
    assert (g.name, g.min_size, g.max_size) == ("pool", 0, 2)
    assert [(s.count, s.model, s.memory_mib) for s in g.gpus] == [(1, "NVIDIA A100-SXM4-40GB", 40960)]
    assert parse_node_group("t4:1:1:2xNVIDIA T4:15360,1xNVIDIA L4:23034").gpus[1].model == "NVIDIA L4"
    for bad, text in [("pool:0:2", "not NAME:MIN:MAX:GPUS"), ("Pool:0:2:1xT4:1", "lowercase DNS label"),
                      ("p:a:2:1xT4:1", "whole numbers"), ("p:3:2:1xT4:1", "MIN <= MAX"),
                      ("p:0:0:1xT4:1", "1 <= MAX"), ("p:0:99:1xT4:1", "MAX <= 64"),
                      ("p:0:2:T4", "is not COUNTxMODEL:MEMORY_MIB")]:
        with pytest.raises(SimSpecError, match=text) as err:
            parse_node_group(bad)
        assert repr(bad) in str(err.value)
    with pytest.raises(SimSpecError, match="given twice"):
        parse_node_groups(["p:0:1:1xT4:1", "p:0:2:1xT4:1"])


# ---------------------------------------------------------------------------- properties

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=3),
                     max_leaves=12)


@given(st.text(max_size=60))
def test_any_node_group_text_parses_or_is_refused_naming_the_flag(text):
    try:
        g = parse_node_group(text)
    except SimSpecError as exc:
        assert str(exc).startswith("--sim-node-group")
        return
    assert 0 <= g.min_size <= g.max_size <= 64 and g.gpus


@given(st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), st.integers(0, 64), st.integers(0, 64),
       st.lists(st.tuples(st.integers(1, 8), st.sampled_from(["NVIDIA A100-SXM4-40GB", "NVIDIA T4"]),
                          st.integers(1, 200000)), min_size=1, max_size=3))
def test_node_group_round_trips(name, a, b, shapes):
    lo, hi = sorted((a, b))
    hi = max(hi, 1)
    text = f"{name}:{lo}:{hi}:" + ",".join(f"{n}x{m}:{mem}" for n, m, mem in shapes)
    g = parse_node_group(text)
    assert (g.name, g.min_size, g.max_size) == (name, lo, hi)
    assert [(s.count, s.model, s.memory_mib) for s in g.gpus] == shapes


@given(_json)
def test_hostile_pod_shapes_ask_nothing_instead_of_crashing(spec):
    got = intree.extended_requests({"spec": spec})
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in got.items())
    pod_shape = {"spec": {"containers": [{"name": "c", "resources": spec}]}}
    assert isinstance(intree.extended_requests(pod_shape), dict)


@given(st.dictionaries(st.text(max_size=20), _json, max_size=4))
def test_node_quantity_validation_answers_every_shape(values):
    errors = resource_errors({"status": {"capacity": values}})
    assert all(f.startswith("status.capacity[") for f, _ in errors)
    # whole non-negative numbers under qualified names are always accepted
    assert resource_errors({"status": {"allocatable": {"example.com/x": "7", "cpu": "1500m", "pods": "110"}}}) == []
