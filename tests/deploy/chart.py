"""Render deploy/helm/hami with Helm's own Go template engine (helm-python-sdk, offline) and split
the output into Kubernetes objects. Shared by the deploy tests."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "hami"
PROD_VALUES = CHART / "ci" / "prod-values.yaml"
DEV_VALUES = CHART / "ci" / "dev-values.yaml"
RELEASE, NAMESPACE = "hami", "hami-system"


def with_pushed_image(values: dict | None) -> dict:
    """The tests render the chart's default image name as if it were pushed (image.pushed=true), unless
    they set image.pushed themselves: the placeholder guard has its own tests."""
    values = dict(values or {})
    values["image"] = {"pushed": True, **(values.get("image") or {})}
    return values


def render_files(values: dict | None = None) -> dict[str, str]:
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(with_pushed_image(values), name=RELEASE, namespace=NAMESPACE)


def objects(values: dict | None = None) -> list[dict]:
    docs: list[dict] = []
    for name, text in sorted(render_files(values).items()):
        if not name.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("metadata", {}).setdefault("annotations", None)
                if doc["metadata"]["annotations"] is None:
                    del doc["metadata"]["annotations"]
                docs.append(doc)
    return docs


@functools.cache
def _cached(which: str) -> tuple[dict, ...]:
    values = {} if which == "default" else yaml.safe_load((CHART / "ci" / f"{which}-values.yaml").read_text())
    return tuple(objects(values))


def rendered(which: str) -> list[dict]:
    """Objects of the chart rendered with `default`, `prod` or `dev` values (cached per session)."""
    import copy

    return copy.deepcopy(list(_cached(which)))


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict], kind: str, cname: str) -> dict:
    for d in find(docs, kind):
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] == cname:
                return c
    raise AssertionError(f"no container {cname} in any {kind}")
