"""Kubernetes' own NodeResourcesFit cases (fit_test.go), ported as data
(tests/data/kubesched/noderesourcesfit.yaml), against hami.kubesched.intree.fit_resources: the
filter's reasons (Too many pods, Insufficient <resource>) for cpu, memory, ephemeral storage,
init containers, overhead and scalar resources (extended, hugepages, kubernetes.io-prefixed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami.kubesched import intree

DATA = yaml.safe_load((Path(__file__).parents[1] / "data" / "kubesched" / "noderesourcesfit.yaml").read_text())
NATIVE = {"cpu": lambda v: f"{v}m", "memory": str, "storage": str}


def _container(spec: dict) -> dict:
    requests = {"cpu": "0m", "memory": "0", "pods": "0", "ephemeral-storage": "0"}
    for k, v in spec.items():
        if k in NATIVE:
            requests["ephemeral-storage" if k == "storage" else k] = NATIVE[k](v)
        else:
            requests[k] = str(v)
    return {"name": "c", "resources": {"requests": requests}}


def _pod(name: str, spec: dict) -> dict:
    out = {"containers": [_container(c) for c in spec.get("containers") or []]}
    if spec.get("init"):
        out["initContainers"] = [_container(c) for c in spec["init"]]
    if spec.get("overhead"):
        out["overhead"] = spec["overhead"]
    return {"metadata": {"name": name, "uid": name}, "spec": out}


def _node(alloc: dict) -> dict:
    return {"metadata": {"name": "node"}, "status": {"allocatable": {
        ("ephemeral-storage" if k == "storage" else k): (f"{v}m" if k == "cpu" else str(v)) for k, v in alloc.items()}}}


CASES = [(c, DATA["node_enough"]) for c in DATA["enough"]] \
    + [(c, DATA["node_not_enough"]) for c in DATA["not_enough"]] \
    + [(c, DATA["node_enough"]) for c in DATA["storage"]]


@pytest.mark.parametrize("case,node", CASES, ids=[c["name"] for c, _ in CASES])
def test_node_resources_fit(case, node):
    existing = [_pod(f"existing-{i}", {"containers": [c]}) for i, c in enumerate(case["existing"])]
    verdict = intree.fit_resources(_pod("pod", case["pod"]), _node(node), existing, intree.Requests(), extended=True,
                                   ignored=frozenset(case.get("ignored") or ()),
                                   ignored_groups=frozenset(case.get("ignoredGroups") or ()))
    assert (list(verdict.reasons) if verdict else []) == case["want"]
    if verdict:
        assert verdict.plugin == "NodeResourcesFit"
