"""The object store behind the embedded API server (hami.sim.apiserver.store), without HTTP.

Covers: seed namespaces; generateName; no-op updates keep the resourceVersion; delete
preconditions (uid, resourceVersion) and the deleted object's final version; namespace deletion
removes what it holds; the watch window (resume inside it, 410 below it, compact(), shrinking it);
replay in commit order; a watcher's bounded buffer drops it and frees it; end_watchers; the
spec.nodeName index (property, hypothesis): LIST and watch by node always agree with a brute-force
reading of the same history, whichever pods are created, bound, moved by status or deleted.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.sim.apiserver.selectors import matches, parse_field_selector
from hami.sim.apiserver.store import ApiError, Store

MERGE = "application/merge-patch+json"


def pod(name: str, node: str = "") -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def drain(w) -> list[tuple[str, str]]:
    out = []
    for line in w.take():
        ev = orjson.loads(line)
        out.append((ev["type"], ev["object"]["metadata"]["name"]))
    return out


def test_seed_namespaces_exist():
    s = Store()
    assert {e.obj["metadata"]["name"] for e in s.iter_entries("namespaces")} >= {"default", "kube-system"}


def test_generate_name_and_no_op_update():
    s = Store()
    e = s.create("configmaps", "default", {"metadata": {"generateName": "cm-"}, "data": {"a": "1"}})
    name = e.obj["metadata"]["name"]
    assert name.startswith("cm-") and len(name) > 3
    again = s.patch("configmaps", "default", name, b'{"data":{"a":"1"}}', MERGE)
    assert again.rv == e.rv
    changed = s.patch("configmaps", "default", name, b'{"data":{"a":"2"}}', MERGE)
    assert int(changed.rv) == int(e.rv) + 1


def test_create_does_not_keep_callers_dict():
    s = Store()
    body = {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    s.create("configmaps", "default", body)
    body["data"]["a"] = "mutated"
    assert s.get("configmaps", "default", "cm")["data"]["a"] == "1"


def test_delete_preconditions_and_final_version():
    s = Store()
    e = s.create("nodes", "", {"metadata": {"name": "n1"}})
    with pytest.raises(ApiError) as exc:
        s.delete("nodes", "", "n1", uid="other")
    assert exc.value.code == 409
    with pytest.raises(ApiError) as exc:
        s.delete("nodes", "", "n1", resource_version="1")
    assert exc.value.code == 409
    gone = s.delete("nodes", "", "n1", uid=e.obj["metadata"]["uid"], resource_version=e.rv)
    assert int(gone.rv) == s.rv > int(e.rv)
    with pytest.raises(ApiError) as exc:
        s.get("nodes", "", "n1")
    assert exc.value.code == 404


def test_system_namespaces_cannot_be_deleted():
    with pytest.raises(ApiError) as exc:
        Store().delete("namespaces", "", "default")
    assert exc.value.code == 403 and exc.value.reason == "Forbidden"


def test_deleting_a_namespace_deletes_its_objects():
    s = Store()
    s.create("namespaces", "", {"metadata": {"name": "ml"}})
    s.create("pods", "ml", pod("p"))
    s.create("configmaps", "ml", {"metadata": {"name": "cm"}})
    w = s.watch("pods", resource_version=str(s.rv))
    s.delete("namespaces", "", "ml")
    assert s.list("pods", "ml")[1] == [] and s.list("configmaps", "ml")[1] == []
    assert drain(w) == [("DELETED", "p")]


def test_watch_window_resume_and_410():
    s = Store(watch_window=3)
    start = s.rv
    for i in range(3):
        s.create("nodes", "", {"metadata": {"name": f"n{i}"}})
    w = s.watch("nodes", resource_version=str(start))
    assert drain(w) == [("ADDED", "n0"), ("ADDED", "n1"), ("ADDED", "n2")]
    s.create("nodes", "", {"metadata": {"name": "n3"}})
    with pytest.raises(ApiError) as exc:
        s.watch("nodes", resource_version=str(start))
    assert exc.value.code == 410 and exc.value.reason == "Expired"
    assert drain(s.watch("nodes", resource_version=str(start + 1))) == [("ADDED", "n1"), ("ADDED", "n2"), ("ADDED",
                                                                                                           "n3")]
    s.compact()
    with pytest.raises(ApiError):
        s.watch("nodes", resource_version=str(s.rv - 1))
    assert drain(s.watch("nodes", resource_version=str(s.rv))) == []


def test_shrinking_the_window_forgets_old_events():
    s = Store(watch_window=100)
    start = s.rv
    for i in range(10):
        s.create("nodes", "", {"metadata": {"name": f"n{i}"}})
    s.set_watch_window(2)
    with pytest.raises(ApiError):
        s.watch("nodes", resource_version=str(start))
    assert [n for _, n in drain(s.watch("nodes", resource_version=str(s.rv - 2)))] == ["n8", "n9"]


def test_bad_resource_version_is_400():
    with pytest.raises(ApiError) as exc:
        Store().watch("nodes", resource_version="abc")
    assert exc.value.code == 400


def test_full_buffer_drops_the_watcher_and_frees_it():
    s = Store()
    w = s.watch("nodes", resource_version=str(s.rv), max_lines=3)
    dropped = []
    w.on_drop = lambda: dropped.append(True)
    for i in range(5):
        s.create("nodes", "", {"metadata": {"name": f"n{i}"}})
    assert w.dropped and dropped == [True] and len(w.lines) == 0 and s.watchers() == []


def test_end_watchers_finishes_cleanly():
    s = Store()
    w = s.watch("nodes")
    assert s.end_watchers() == 1
    assert w.ended and not w.dropped and s.watchers() == []


OPS = st.lists(st.tuples(st.sampled_from(["create", "bind", "move", "delete", "phase"]),
                         st.integers(0, 5), st.sampled_from(["", "n1", "n2"])), max_size=40)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_node_index_agrees_with_brute_force(ops):
    s = Store()
    watchers = {node: s.watch("pods", fields=parse_field_selector(f"spec.nodeName={node}"),
                              resource_version=str(s.rv)) for node in ("", "n1", "n2")}
    seen: dict[str, dict[str, str]] = {node: {} for node in watchers}
    for op, i, node in ops:
        name = f"p{i}"
        exists = name in {e.obj["metadata"]["name"] for e in s.iter_entries("pods", "default")}
        if op == "create" and not exists:
            s.create("pods", "default", pod(name, node))
        elif op == "bind" and exists and not node == "":
            try:
                s.bind("default", name, {"target": {"name": node}})
            except ApiError:
                pass
        elif op == "move" and exists:  # a status-only change must not move it between nodes
            s.patch("pods", "default", name, orjson.dumps({"spec": {"nodeName": node or None}}), MERGE,
                    subresource="status")
        elif op == "phase" and exists:
            s.patch("pods", "default", name, b'{"status":{"phase":"Running"}}', MERGE, subresource="status")
        elif op == "delete" and exists:
            s.delete("pods", "default", name)
        for n, w in watchers.items():
            for t, pname in drain(w):
                if t == "DELETED":
                    seen[n].pop(pname, None)
                else:
                    seen[n][pname] = t
    for node, w in watchers.items():
        sel = parse_field_selector(f"spec.nodeName={node}")
        brute = [e.obj["metadata"]["name"] for e in s.iter_entries("pods") if matches((), sel, e.obj)]
        indexed = [e.obj["metadata"]["name"] for e in s.list("pods", "", (), sel)[1]]
        assert indexed == brute
        assert sorted(seen[node]) == sorted(brute)
        assert not w.dropped


def test_byte_budget_drops_a_watcher_with_few_large_events():
    s = Store(watch_buffer_bytes=50_000)
    w = s.watch("configmaps", resource_version=str(s.rv))
    s.create("configmaps", "default", {"metadata": {"name": "small"}})
    assert not w.dropped
    w.take()  # a client that reads keeps its budget
    for i in range(3):
        s.create("configmaps", "default", {"metadata": {"name": f"big{i}"}, "data": {"k": "x" * 20_000}})
    assert w.dropped and "buffer full" in w.drop_reason


def test_pod_updates_are_judged_by_the_pods_rows_hooks():
    """kube-apiserver's pod update rules come from the pods row (validate, prepare_update), as every
    resource's checks come from its own row: a changed priority is 422 FieldValueForbidden, a body
    without the priority keeps the stored one, and the status subresource is not judged on its spec."""
    from hami.sim.apiserver import podupdate, validation
    from hami.sim.apiserver.resources import RESOURCES

    row = next(r for r in RESOURCES.values() if r.key == "pods")
    assert (row.validate, row.prepare_update) == (validation.pod_update, podupdate.prepare_update)
    s = Store()
    created = s.create("pods", "default", {"metadata": {"name": "p"},
                                           "spec": {"containers": [{"name": "c", "image": "i"}], "priority": 5}})
    with pytest.raises(ApiError) as exc:
        s.patch("pods", "default", "p", b'{"spec":{"priority":100}}', MERGE)
    cause = exc.value.details["causes"][0]
    assert exc.value.code == 422 and cause["reason"] == "FieldValueForbidden" and cause["field"] == "spec"
    spec = {k: v for k, v in created.obj["spec"].items() if k != "priority"}  # no priority: the stored one kept
    body = {**created.obj, "spec": {**spec, "containers": [{"name": "c", "image": "j"}]}}
    assert s.update("pods", "default", "p", body).obj["spec"]["priority"] == 5
    status = s.patch("pods", "default", "p", b'{"status":{"phase":"Running"}}', MERGE, subresource="status")
    assert status.obj["status"]["phase"] == "Running"
