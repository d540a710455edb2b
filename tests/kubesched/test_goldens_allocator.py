"""Kubernetes' own structured-allocator test cases, ported as data (tests/data/kubesched/allocator.yaml),
against hami.kubesched.allocator: for each upstream case, hami gives upstream's answer — the same
results (request, device, admin access, tolerations, shares and consumed capacity, binding
conditions, node selector, config) in any claim order, no solution, or a refusal where upstream
errors. The shorthand is described at the top of the YAML file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched.allocator import Allocator, Usage, inventory
from hami.kubesched.cel import to_quantity

CASES = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "allocator.yaml").read_text())["cases"]
SHARE = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"  # upstream's fixedShareID
RANGE = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}


def _q(v) -> str:
    return str(v)


def _attr(v) -> dict:
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, str) and v.startswith("v:"):
        return {"version": v[2:]}
    return {"string": v}


def _device(d) -> dict:
    if isinstance(d, str):
        return {"name": d}
    out = {k: v for k, v in d.items() if k not in ("capacity", "range", "validValues", "multi", "counters", "attrs")}
    caps = {c: {"value": _q(v)} for c, v in (d.get("capacity") or {}).items()}
    for c, v in (d.get("range") or {}).items():
        caps[c] = {"value": _q(v), "requestPolicy": RANGE}
    for c, (value, default, *more) in (d.get("validValues") or {}).items():
        caps[c] = {"value": _q(value), "requestPolicy": {"default": _q(default),
                                                          "validValues": [_q(default), *map(_q, more)]}}
    if caps:
        out["capacity"] = caps
    if d.get("multi"):
        out["allowMultipleAllocations"] = True
    if d.get("counters"):
        out["consumesCounters"] = [{"counterSet": s, "counters": {c: {"value": _q(v)} for c, v in cs.items()}}
                                   for s, cs in d["counters"].items()]
    if d.get("attrs"):
        out["attributes"] = {k: _attr(v) for k, v in d["attrs"].items()}
    return out


def _slice(s) -> dict:
    spec = {"driver": s["driver"], "pool": {"name": s["pool"], "generation": s.get("generation", 1),
                                            "resourceSliceCount": s.get("count", 1)}}
    if s.get("perDevice"):
        spec["perDeviceNodeSelection"] = True
    elif "node" in s:
        spec["nodeName"] = s["node"]
    elif s.get("allNodes"):
        spec["allNodes"] = True
    elif "selector" in s:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": k, "operator": "In", "values": v} for k, v in s["selector"].items()]}]}
    elif "field" in s:
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [s["field"]]}]}]}
    devices = s.get("devices") or []
    if isinstance(devices, dict):
        devices = [f"device-{i}" for i in range(devices["count"])]
    if devices or "counterSets" not in s:
        spec["devices"] = [_device(d) for d in devices]
    if s.get("counterSets"):
        spec["sharedCounters"] = [{"name": n, "counters": {c: {"value": _q(v)} for c, v in cs.items()}}
                                  for n, cs in s["counterSets"].items()]
    return {"metadata": {"name": s["name"]}, "spec": spec}


def _class(name, v) -> dict:
    v = {"driver": v} if isinstance(v, str) else v
    expr = v.get("expression") or f'device.driver == "{v["driver"]}"'
    if "multi" in v:
        expr += f" && device.allowMultipleAllocations == {str(v['multi']).lower()}"
    spec = {"selectors": [{"cel": {"expression": expr}}]}
    if v.get("config"):
        spec["config"] = [{"opaque": {"driver": v["driver"], "parameters": {v["config"]: v["config"] + "Value"}}}]
    return {"metadata": {"name": name}, "spec": spec}


def _one(r) -> dict:
    out = {"deviceClassName": r["class"], "allocationMode": r.get("mode", "ExactCount")}
    if out["allocationMode"] == "ExactCount":
        out["count"] = r.get("count", 1)
    if r.get("admin"):
        out["adminAccess"] = True
    for k in ("tolerations",):
        if r.get(k):
            out[k] = r[k]
    if r.get("selectors"):
        out["selectors"] = [{"cel": {"expression": e}} for e in r["selectors"]]
    if "rawSelectors" in r:  # a selector of a kind this allocator does not know
        out["selectors"] = r["rawSelectors"]
    if "capacity" in r:
        out["capacity"] = {"requests": {c: _q(v) for c, v in r["capacity"].items()}}
    return out


def _claim(c, i: int) -> dict:
    reqs = []
    for r in c["requests"]:
        if "firstAvailable" in r:
            reqs.append({"name": r["name"], "firstAvailable": [{"name": s["name"], **_one(s)}
                                                               for s in r["firstAvailable"]]})
        else:
            reqs.append({"name": r["name"], "exactly": _one(r)})
    devices = {"requests": reqs}
    for k in ("constraints", "config"):
        if c.get(k):
            devices[k] = c[k]
    # Upstream's claims have no namespace and two may share a name; hami keys claims by
    # namespace/name, so each gets a namespace of its own.
    return {"metadata": {"name": c["name"], "namespace": f"ns{i}"}, "spec": {"devices": devices}}


def _expected_result(r, node: str) -> dict:
    devices = r["devices"]
    if isinstance(devices, dict):  # {request: [driver/pool, first index, how many]}
        devices = [[req, f"{dp}/device-{i}"] for req, (dp, first, n) in devices.items() for i in range(first, first
                                                                                                       + n)]
    out = []
    for entry in devices:
        req, where, *extra = entry
        driver, pool, device = where.split("/")
        res = {"request": req, "driver": driver, "pool": pool, "device": device}
        for k, v in (extra[0] if extra else {}).items():
            res[k] = SHARE if (k == "shareID" and v == "fixed") else v
        out.append(res)
    sel = r.get("nodeSelector", node)
    return {"devices": out, "nodeSelector": sel, "config": r.get("config")}


def _selector_key(sel) -> object:
    if sel is None:
        return None
    terms = []
    for t in sel.get("nodeSelectorTerms") or []:
        terms.append(tuple(sorted((kind, r["key"], r["operator"], tuple(sorted(r.get("values") or [])))
                                  for kind in ("matchExpressions", "matchFields") for r in t.get(kind) or [])))
    return tuple(sorted(terms))


def _local(node: str) -> dict:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def _by_value(results: list[dict]) -> list[dict]:
    """consumedCapacity compared as quantities ("4Gi" and "4294967296" are one amount)."""
    return [{**r, "consumedCapacity": {k: to_quantity(v) for k, v in r["consumedCapacity"].items()}}
            if "consumedCapacity" in r else r for r in results]


def _matches(got: dict, want: dict) -> bool:
    results = sorted(_by_value(got["devices"]["results"]), key=repr)
    if results != sorted(_by_value(want["devices"]), key=repr):
        return False
    sel = want["nodeSelector"]
    if sel != "any":
        sel = _local(sel) if isinstance(sel, str) else sel
        if _selector_key(got.get("nodeSelector")) != _selector_key(sel):
            return False
    if want["config"] is not None and got["devices"].get("config") != want["config"]:
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_upstream_allocator_case(case):
    node_spec = case.get("node") or {"name": "node-1", "region": "region-1"}
    node = {"metadata": {"name": node_spec["name"], "labels": {"region": node_spec["region"], "planet": "earth"}}}
    usage = Usage()
    usage.exclusive.update(tuple(k.split("/")) for k in case.get("allocated") or [])
    for k, caps in (case.get("allocatedCapacity") or {}).items():
        usage.add_allocation({"devices": {"results": [dict(zip(("driver", "pool", "device"), k.split("/"), strict=True),
                                                           shareID="x", consumedCapacity={c: _q(v) for c, v in
                                                                                          caps.items()})]}})
    classes = {n: _class(n, v) for n, v in (case.get("classes") or {}).items()}
    claims = [_claim(c, i) for i, c in enumerate(case["claims"])]
    inv = inventory([_slice(s) for s in case.get("slices") or []])
    out = Allocator(new_share_id=lambda: SHARE).allocate(claims, node, inv, usage, classes)
    expect = case["expect"]
    if "steps" in expect:  # upstream's count of allocateOne invocations: the same search, step for step
        assert out.steps == expect["steps"]
    if "results" not in expect:
        assert not out.ok, f"upstream: {expect}; hami allocated {out.allocations}"
        return
    assert out.ok, out.reason
    got = [out.allocations[f"ns{i}/{c['name']}"] for i, c in enumerate(case["claims"])]
    wanted = [_expected_result(r, node_spec["name"]) for r in expect["results"]]
    assert len(got) == len(wanted)
    unmatched = list(got)
    for w in wanted:
        hit = next((g for g in unmatched if _matches(g, w)), None)
        assert hit is not None, f"no allocation matches {w}; got {got}"
        unmatched.remove(hit)
