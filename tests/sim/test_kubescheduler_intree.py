"""kube-scheduler's in-tree plugins in the embedded loop (hami.kubesched.intree), pure and against the real extender.

Covers: computePodResourceRequest (sum of containers, at least each init container, overhead, limits
standing for missing requests; property test); NodeResourcesFit's texts (Too many pods, Insufficient
cpu/memory) and the FitError message counting each reason, with no extender call when nothing passes;
a pod nominated to a node (priority at least the pod's) reserves its cpu there against later pods,
while a higher-priority pod ignores the nomination; InterPodAffinity's three texts and the first pod of
a self-affine group; term namespaces (own, listed, namespaceSelector by the namespaces' labels); required anti-affinity
and affinity steering GPU pods between zones through the real /filter; an assigned pod's arrival moves a pod parked by
InterPodAffinity (it then binds); PodTopologySpread DoNotSchedule skew and its missing-label text; score normalisation
of InterPodAffinity, PodTopologySpread, TaintToleration (PreferNoSchedule) and the resource scores.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kubesched import intree
from hami.kubesched.schedqueue import UNSCHEDULABLE
from hami.sim.kubescheduler import KubeSchedulerLoop
from tests.kube.helpers import eventually, pod_obj
from tests.sim._kubesched import gpu_node, merge, running_cluster

ZONE = "topology.kubernetes.io/zone"


def _node(name: str, *, pods: str | None = None, cpu: str = "4", memory: str = "8Gi", labels=None) -> dict:
    alloc = {"cpu": cpu, "memory": memory, **({"pods": pods} if pods else {})}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"allocatable": alloc}}


def _pod(name: str, *, cpu=None, memory=None, labels=None, ns="default", affinity=None, spread=None,
         init=None, limits_only=False) -> dict:
    res = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources = {"limits": res} if limits_only else {"requests": res}
    spec: dict = {"containers": [{"name": "c", "resources": resources}]}
    if affinity:
        spec["affinity"] = affinity
    if spread:
        spec["topologySpreadConstraints"] = spread
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": name, "namespace": ns, "uid": name, "labels": labels or {}}, "spec": spec}


# --------------------------------------------------------------------------- NodeResourcesFit (pure)

@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4000), min_size=1, max_size=4), st.lists(st.integers(0, 8000), max_size=3),
       st.integers(0, 500))
def test_pod_request_is_the_larger_of_the_containers_sum_and_each_init_container_plus_overhead(cs, inits, over):
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": f"{m}m"}}} for m in cs],
                    "initContainers": [{"resources": {"limits": {"cpu": f"{m}m"}}} for m in inits],
                    "overhead": {"cpu": f"{over}m"}}}
    assert intree.pod_requests(pod)["cpu"] == max([sum(cs), *inits]) + over


def test_requests_read_kubernetes_quantities_and_limits_stand_for_missing_requests():
    assert intree.pod_requests(_pod("p", cpu="1.5", memory="1Gi"))["cpu"] == 1500
    assert intree.pod_requests(_pod("p", cpu="250m", memory="1Gi", limits_only=True))["memory"] == 1 << 30
    assert intree.pod_requests(_pod("p"), non_zero=True)["cpu"] == intree.DEFAULT_MILLI_CPU
    assert intree.pod_requests(_pod("p"))["cpu"] == 0


def test_node_resources_fit_names_every_shortage():
    req = intree.Requests()
    node = _node("n", pods="2", cpu="2", memory="1Gi")
    on = [_pod("a", cpu="1500m", memory="512Mi"), _pod("b", cpu="100m")]
    v = intree.fit_resources(_pod("new", cpu="1", memory="600Mi"), node, on, req)
    assert v == intree.Verdict("NodeResourcesFit", ("Too many pods", "Insufficient cpu", "Insufficient memory"))
    assert intree.fit_resources(_pod("small", cpu="400m"), node, on[:1], req) is None
    msg = KubeSchedulerLoop.fit_error_message(2, {
        "n0": ("NodeResourcesFit", ("Insufficient cpu", "Insufficient memory"), False),
        "n1": ("NodeResourcesFit", "Insufficient cpu", False)})
    assert msg == "0/2 nodes are available: 2 Insufficient cpu, 1 Insufficient memory."


# --------------------------------------------------------------------------- InterPodAffinity (pure)

def _term(labels: dict, key: str = ZONE) -> dict:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def test_inter_pod_affinity_texts_and_the_first_pod_of_a_group():
    nodes = {"a": _node("a", labels={ZONE: "z1"}), "b": _node("b", labels={ZONE: "z2"})}
    web = _pod("web", labels={"app": "web"})
    on = {"a": [web]}
    anti = {"podAntiAffinity": {intree.REQUIRED: [_term({"app": "web"})]}}
    assert intree.inter_pod_affinity(_pod("x", affinity=anti), nodes["a"], nodes, on) == intree.Verdict(
        "InterPodAffinity", ("node(s) didn't match pod anti-affinity rules",))
    assert intree.inter_pod_affinity(_pod("x", affinity=anti), nodes["b"], nodes, on) is None
    aff = {"podAffinity": {intree.REQUIRED: [_term({"app": "web"})]}}
    assert intree.inter_pod_affinity(_pod("x", affinity=aff), nodes["b"], nodes, on) == intree.Verdict(
        "InterPodAffinity", ("node(s) didn't match pod affinity rules",), True)
    assert intree.inter_pod_affinity(_pod("x", affinity=aff), nodes["a"], nodes, on) is None
    # existing pods' anti-affinity keeps a matching pod out of their zone
    guard = _pod("guard", labels={"app": "guard"},
                 affinity={"podAntiAffinity": {intree.REQUIRED: [_term({"app": "x"})]}})
    v = intree.inter_pod_affinity(_pod("x", labels={"app": "x"}), nodes["b"], nodes, {"b": [guard]})
    assert v == intree.Verdict("InterPodAffinity", ("node(s) didn't satisfy existing pods anti-affinity rules",))
    # the first pod of a group with affinity to itself may go anywhere; one that does not match its own term may not
    first = _pod("db-0", labels={"app": "db"}, affinity={"podAffinity": {intree.REQUIRED: [_term({"app": "db"})]}})
    assert intree.inter_pod_affinity(first, nodes["b"], nodes, on) is None
    stranger = _pod("s", labels={"app": "s"}, affinity={"podAffinity": {intree.REQUIRED: [_term({"app": "db"})]}})
    assert intree.inter_pod_affinity(stranger, nodes["b"], nodes, on) is not None
    # another namespace does not match a term without namespaces
    assert intree.inter_pod_affinity(_pod("x", affinity=anti, ns="other"), nodes["a"], nodes, on) is None


def test_affinity_term_namespaces_own_listed_or_selected_by_namespace_labels():
    owner = _pod("o", ns="team")
    web_b = _pod("w", labels={"app": "web"}, ns="b")
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
    assert not intree.term_matches(term, owner, web_b)  # only the owner's namespace by default
    assert intree.term_matches({**term, "namespaces": ["b"]}, owner, web_b)
    selected = {**term, "namespaceSelector": {"matchLabels": {"tier": "front"}}}
    assert intree.term_matches(selected, owner, web_b, {"b": {"tier": "front"}})
    assert not intree.term_matches(selected, owner, web_b, {"b": {"tier": "back"}})
    assert not intree.term_matches(selected, owner, web_b)  # labels unknown: not selected
    assert intree.term_matches({**term, "namespaceSelector": {}}, owner, web_b)  # {}: every namespace
    nodes = {"a": _node("a", labels={ZONE: "z1"})}
    anti = {"podAntiAffinity": {intree.REQUIRED: [selected]}}
    assert intree.inter_pod_affinity(_pod("x", affinity=anti, ns="team"), nodes["a"], nodes, {"a": [web_b]},
                                     ns_labels={"b": {"tier": "front"}}) is not None


def test_inter_pod_affinity_scores_are_normalised_between_the_lowest_and_highest():
    nodes = {n: _node(n, labels={ZONE: z}) for n, z in (("a", "z1"), ("b", "z2"), ("c", "z3"))}
    pref = {"podAffinity": {intree.PREFERRED: [{"weight": 10, "podAffinityTerm": _term({"app": "web"})}]},
            "podAntiAffinity": {intree.PREFERRED: [{"weight": 5, "podAffinityTerm": _term({"app": "batch"})}]}}
    on = {"a": [_pod("w", labels={"app": "web"})], "c": [_pod("b", labels={"app": "batch"})]}
    scores = intree.inter_pod_affinity_scores(_pod("x", affinity=pref), list(nodes.values()), nodes, on)
    assert scores == {"a": 100, "b": 33, "c": 0}


# --------------------------------------------------------------------------- PodTopologySpread (pure)

def test_topology_spread_filters_by_skew_and_needs_the_key():
    nodes = [_node("a"), _node("b"), {"metadata": {"name": "nolabel", "labels": {}}, "status": {}}]
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "x"}}}]
    on = {"a": [_pod("x0", labels={"app": "x"})]}
    pod = _pod("x1", labels={"app": "x"}, spread=spread)
    assert intree.topology_spread(pod, nodes[0], nodes, on) == intree.Verdict(
        "PodTopologySpread", ("node(s) didn't match pod topology spread constraints",))
    assert intree.topology_spread(pod, nodes[1], nodes, on) is None
    assert intree.topology_spread(pod, nodes[2], nodes, on) == intree.Verdict(
        "PodTopologySpread", ("node(s) didn't match pod topology spread constraints (missing required label)",), True)
    soft = _pod("x1", labels={"app": "x"}, spread=[dict(spread[0], whenUnsatisfiable="ScheduleAnyway")])
    assert intree.topology_spread(soft, nodes[0], nodes, on) is None
    assert intree.topology_spread_scores(soft, nodes[:2], nodes, on) == {"a": 0, "b": 100}


def test_resource_scores_prefer_the_emptier_and_more_balanced_node():
    req = intree.Requests()
    nodes = [_node("a"), _node("b")]
    scores = intree.resource_scores(_pod("p", cpu="1", memory="1Gi"), nodes, {"a": [_pod("h", cpu="2", memory="1Gi")]},
                                    req)
    assert scores["b"] > scores["a"]


def test_taint_toleration_scores_fewest_intolerable_prefer_no_schedule_taints_best():
    soft = {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}
    nodes = [_node("clean"), {**_node("spot"), "spec": {"taints": [soft]}},
             {**_node("hard"), "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}]
    assert intree.taint_toleration_scores(_pod("p"), nodes) == {"clean": 100, "spot": 0, "hard": 100}
    tolerant = _pod("t")
    tolerant["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    assert intree.taint_toleration_scores(tolerant, nodes) == {"clean": 100, "spot": 100, "hard": 100}


# --------------------------------------------------------------------------- the loop with the real extender

async def test_a_pod_no_node_has_cpu_for_is_refused_in_tree_and_never_reaches_the_extender(apiserver):
    async with running_cluster(apiserver, [gpu_node("n0"), gpu_node("n1")]) as c:
        pod = pod_obj("hungry", mem=1000)
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100"}
        c.create(pod)
        await eventually(lambda: c.where("hungry") == UNSCHEDULABLE, 10)
        cond = [x for x in c.pod("hungry")["status"]["conditions"] if x["type"] == "PodScheduled"][0]
        assert cond["message"] == "0/2 nodes are available: 2 Insufficient cpu."
        assert c.loop.stats.filters == 0


async def test_a_nominated_pod_reserves_its_cpu_against_lower_priority_pods(apiserver):
    async with running_cluster(apiserver, [gpu_node("n0")]) as c:
        nominee = pod_obj("nominee", mem=1000)
        nominee["spec"].update(priority=100, nodeSelector={"wait": "here"})  # stays pending
        nominee["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "60"}
        c.create(nominee)
        merge(c.store, "pods", "default", "nominee", {"status": {"nominatedNodeName": "n0"}}, "status")
        await eventually(lambda: c.where("nominee") == UNSCHEDULABLE, 10)
        later = pod_obj("later", mem=1000)
        later["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10"}
        c.create(later)
        await eventually(lambda: c.where("later") == UNSCHEDULABLE, 10)
        cond = [x for x in c.pod("later")["status"]["conditions"] if x["type"] == "PodScheduled"][0]
        assert cond["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        urgent = pod_obj("urgent", mem=1000)
        urgent["spec"]["priority"] = 200  # higher than the nominee: its reservation does not count
        urgent["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10"}
        c.create(urgent)
        await eventually(lambda: c.node_of("urgent") == "n0", 10)


async def test_pod_anti_affinity_and_affinity_steer_gpu_pods_between_zones(apiserver):
    nodes = [gpu_node("n0", labels={ZONE: "z1"}), gpu_node("n1", labels={ZONE: "z2"})]
    async with running_cluster(apiserver, nodes) as c:
        web = pod_obj("web", gpus=0, labels={"app": "web"})
        web["spec"]["nodeName"] = "n0"
        c.create(web)
        apart = pod_obj("apart", mem=1000)
        apart["spec"]["affinity"] = {"podAntiAffinity": {intree.REQUIRED: [_term({"app": "web"})]}}
        near = pod_obj("near", mem=1000)
        near["spec"]["affinity"] = {"podAffinity": {intree.REQUIRED: [_term({"app": "web"})]}}
        c.create(apart)
        c.create(near)
        await eventually(lambda: c.node_of("apart") == "n1" and c.node_of("near") == "n0", 10)


async def test_an_assigned_pods_arrival_moves_the_pod_parked_by_its_affinity(apiserver):
    async with running_cluster(apiserver, [gpu_node("n0", labels={ZONE: "z1"})]) as c:
        follower = pod_obj("follower", mem=1000, labels={"app": "cache"})
        follower["spec"]["affinity"] = {"podAffinity": {intree.REQUIRED: [_term({"app": "db"})]}}
        c.create(follower)
        await eventually(lambda: c.where("follower") == UNSCHEDULABLE, 10)
        cond = [x for x in c.pod("follower")["status"]["conditions"] if x["type"] == "PodScheduled"][0]
        assert cond["message"] == "0/1 nodes are available: 1 node(s) didn't match pod affinity rules."
        db = pod_obj("db", gpus=0, labels={"app": "db"})
        db["spec"]["nodeName"] = "n0"
        c.create(db)  # AssignedPodAdd: the follower's affinity term matches it (flush is 30 s away)
        await eventually(lambda: c.node_of("follower") == "n0", 5)


async def test_topology_spread_sends_the_second_replica_to_the_other_node(apiserver):
    nodes = [gpu_node(n, labels={"kubernetes.io/hostname": n}) for n in ("n0", "n1")]
    async with running_cluster(apiserver, nodes) as c:
        spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"app": "x"}}}]
        for i in range(2):
            p = pod_obj(f"x{i}", mem=1000, labels={"app": "x"})
            p["spec"]["topologySpreadConstraints"] = spread
            c.create(p)
            await eventually(lambda i=i: c.node_of(f"x{i}"), 10)
        assert {c.node_of("x0"), c.node_of("x1")} == {"n0", "n1"}
