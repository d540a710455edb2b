"""Server-side Table rendering for kubectl (hami.sim.apiserver.tables), pure.

Covers: Kubernetes' HumanDuration steps; node rows (Ready/NotReady/SchedulingDisabled, roles,
version); pod rows (ready count, waiting reason over phase, Terminating, restarts, node);
event rows; includeObject None/Metadata/Object; unknown resources fall back to Name and Age.
"""

from __future__ import annotations

import calendar
import time

import pytest

from hami.sim.apiserver.tables import human_duration, table, wants_table

NOW = calendar.timegm(time.strptime("2026-11-22T12:00:00", "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (150, "2m30s"), (600, "10m"), (10799, "179m"),
    (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"),
    (50 * 3600, "2d2h"), (8 * 86400, "8d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def meta(name: str, **kw) -> dict:
    return {"name": name, "creationTimestamp": "2026-11-22T11:55:00Z", **kw}


def test_node_rows():
    nodes = [
        {"metadata": meta("a", labels={"node-role.kubernetes.io/control-plane": ""}),
         "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.31.0"}}},
        {"metadata": meta("b"), "spec": {"unschedulable": True},
         "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        {"metadata": meta("c")},
    ]
    t = table("nodes", nodes, 7, now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Status", "Roles", "Age", "Version"]
    assert [r["cells"] for r in t["rows"]] == [
        ["a", "Ready", "control-plane", "5m", "v1.31.0"],
        ["b", "NotReady,SchedulingDisabled", "<none>", "5m", ""],
        ["c", "Unknown", "<none>", "5m", ""],
    ]
    assert t["metadata"]["resourceVersion"] == "7"
    assert t["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_pod_rows():
    pods = [
        {"metadata": meta("p"), "spec": {"containers": [{}, {}], "nodeName": "n1"},
         "status": {"phase": "Running", "podIP": "10.0.0.1",
                    "containerStatuses": [{"ready": True, "restartCount": 2},
                                          {"ready": False, "restartCount": 1,
                                           "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}},
        {"metadata": meta("q", deletionTimestamp="2026-11-22T11:59:00Z"), "spec": {"containers": [{}]},
         "status": {"phase": "Running"}},
    ]
    rows = [r["cells"] for r in table("pods", pods, 1, include_object="None", now=NOW)["rows"]]
    assert rows[0] == ["p", "1/2", "CrashLoopBackOff", 3, "5m", "10.0.0.1", "n1", "<none>"]
    assert rows[1][2] == "Terminating"


def test_event_rows_and_full_objects():
    ev = {"metadata": meta("e"), "type": "Warning", "reason": "FilteringFailed", "message": "m",
          "lastTimestamp": "2026-11-22T11:59:00Z", "involvedObject": {"kind": "Pod", "name": "p"}}
    t = table("events", [ev], 1, include_object="Object", now=NOW)
    assert t["rows"][0]["cells"] == ["60s", "Warning", "FilteringFailed", "pod/p", "m"]
    assert t["rows"][0]["object"] is ev


def test_other_resources_get_name_and_age():
    t = table("configmaps", [{"metadata": meta("cm")}], 1, now=NOW)
    assert t["rows"][0]["cells"] == ["cm", "5m"]


def test_wants_table_reads_the_accept_header():
    assert wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not wants_table("application/json")
