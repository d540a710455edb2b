"""kube-scheduler's SelectVictimsOnNode (hami.kubesched.preemption), on explicit fit rules."""

from __future__ import annotations

from hami.kubesched.preemption import more_important_first, select_victims_on_node


def pod(name: str, priority: int, start: str = "2026-11-25T10:00:00Z", **labels) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "namespace": "default", "labels": labels},
            "spec": {"priority": priority}, "status": {"startTime": start}}


def room_for(keep: int, potential: list[dict]):
    """The preemptor fits while at most `keep` of the potential victims stay on the node."""
    every = {p["metadata"]["uid"] for p in potential}
    return lambda off: len(every - off) <= keep


def names(pods) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_most_important_pods_are_reprieved_first():
    potential = [pod("c", 1), pod("a", 5), pod("b", 3)]
    assert select_victims_on_node(potential, room_for(1, potential), [], potential) == (
        [pod("b", 3), pod("c", 1)], 0)


def test_equal_priority_the_earlier_start_is_more_important():
    early, late = pod("early", 1, "2026-11-25T09:00:00Z"), pod("late", 1, "2026-11-25T11:00:00Z")
    assert names(more_important_first([late, early])) == ["early", "late"]


def test_pdb_violating_pods_are_reprieved_before_the_others():
    potential = [pod("a", 5), pod("b", 3), pod("c", 1, app="db")]
    pdb = {"metadata": {"name": "db", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}}
    victims, violating = select_victims_on_node(potential, room_for(1, potential), [pdb], potential)
    assert (names(victims), violating) == (["a", "b"], 0)  # c, protected by its budget, stays


def test_no_fit_even_with_every_victim_gone_is_none_and_a_fit_without_eviction_is_empty():
    potential = [pod("a", 1)]
    assert select_victims_on_node(potential, lambda off: False, [], potential) is None
    assert select_victims_on_node(potential, lambda off: True, [], potential) == ([], 0)
