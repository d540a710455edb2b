"""The embedded kube-scheduler's placed-pod view kept from the watch equals a full rebuild of it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.kubesched import intree
from hami.sim.snapshot import PlacedPods, assigned_active, pod_key

NODES = ("n0", "n1", "n2")
ANTI = {"podAntiAffinity": {intree.REQUIRED: [{"labelSelector": {"matchLabels": {"app": "x"}},
                                                 "topologyKey": "kubernetes.io/hostname"}]}}


def pod(name: str, node: str | None, phase: str, nominated: str | None, anti: bool, rv: int) -> dict:
    spec: dict = {"containers": []}
    if node:
        spec["nodeName"] = node
    if anti:
        spec["affinity"] = ANTI
    status: dict = {"phase": phase}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}, "spec": spec,
            "status": status}


def rebuild(store: dict[str, dict]) -> tuple[dict, list, list]:
    """What the loop computed from every pod each cycle before the view was kept."""
    pods_on: dict[str, list[dict]] = {}
    nominated = []
    for p in store.values():
        spec = p.get("spec") or {}
        if spec.get("nodeName"):
            if assigned_active(p):
                pods_on.setdefault(spec["nodeName"], []).append(p)
            continue
        if (p.get("status") or {}).get("nominatedNodeName"):
            nominated.append(p)
    return pods_on, intree.anti_affinity_holders(pods_on), nominated


event = st.tuples(
    st.sampled_from(["a", "b", "c", "d", "e", "f"]),  # pod name
    st.sampled_from(["upsert", "delete"]),
    st.sampled_from((None,) + NODES),  # nodeName
    st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    st.sampled_from((None,) + NODES),  # nominatedNodeName
    st.booleans(),  # required anti-affinity
)


@settings(max_examples=200, deadline=None)
@given(st.lists(event, max_size=40), st.integers(min_value=1, max_value=6))
def test_the_kept_view_equals_a_rebuild_after_any_events(events, every):
    store: dict[str, dict] = {}  # the informer's store: an update keeps a key's place
    placed = PlacedPods()
    for i, (name, kind, node, phase, nominated, anti) in enumerate(events):
        key = f"ns/{name}"
        old = store.get(key)
        if kind == "delete":
            if old is None:
                continue
            del store[key]
            placed.event(old, None)
        else:
            new = pod(name, node, phase, nominated, anti, i)
            store[key] = new
            placed.event(old, new)
        if i % every == 0:  # the view is read between some events, not all
            pods_on, holders, nominees = rebuild(store)
            assert placed.pods_on() == pods_on
            assert sorted((pod_key(p), n) for p, n in placed.holders()) == sorted((pod_key(p), n) for p, n in holders)
            assert placed.nominated() == nominees
    pods_on, holders, nominees = rebuild(store)
    assert placed.pods_on() == pods_on
    assert sorted((pod_key(p), n) for p, n in placed.holders()) == sorted((pod_key(p), n) for p, n in holders)
    assert placed.nominated() == nominees


def test_a_read_view_is_not_changed_by_later_events():
    placed = PlacedPods()
    a = pod("a", "n0", "Running", None, False, 1)
    placed.event(None, a)
    view = placed.pods_on()
    placed.event(None, pod("b", "n0", "Running", None, False, 2))
    placed.event(a, None)
    assert [pod_key(p) for p in view["n0"]] == ["ns/a"]
    assert [pod_key(p) for p in placed.pods_on()["n0"]] == ["ns/b"]
