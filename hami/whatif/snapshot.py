"""Snapshot I/O: read one from a file, take one from a live cluster (reads only), save one.

A snapshot file is what `kubectl get nodes,pods,resourcequotas -A -o json` prints; `take` adds
the ConfigMaps that hold HAMi's device config (`device-config.yaml`) and per-node config
(`config.json`), and the DRA objects pods with claims are replayed against (ResourceSlices,
ResourceClaims, ResourceClaimTemplates, DeviceClasses; skipped where the API server does not serve
resource.k8s.io/v1). Decoding is `hami.whatif.cluster.parse_snapshot` (pure).
"""

from __future__ import annotations

from typing import Any

import orjson

from hami.config import KubeSettings
from hami.kube.client import ApiError, KubeClient

from .cluster import DRA_RESOURCES, Cluster, SnapshotError, parse_snapshot

PAGE = 500
CONFIG_KEYS = ("device-config.yaml", "config.json")
KINDS = {"nodes": "Node", "pods": "Pod", "resourcequotas": "ResourceQuota", "configmaps": "ConfigMap",
         "resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
         "resourceclaimtemplates": "ResourceClaimTemplate", "deviceclasses": "DeviceClass"}
DRA_API = "resource.k8s.io/v1"


def read_document(path: str) -> Any:
    """The parsed file: JSON, else YAML; a syntax error names the file and position."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SnapshotError(path, "(file)", exc.strerror or str(exc)) from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if data.lstrip()[:1] in (b"{", b"["):
            raise SnapshotError(path, f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    import yaml

    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "(file)"
        raise SnapshotError(path, where, f"neither JSON nor YAML: {getattr(exc, 'problem', exc)}") from None


def load(path: str) -> Cluster:
    return parse_snapshot(read_document(path), path)


async def _list_all(client: KubeClient, resource: str) -> list[dict]:
    items: list[dict] = []
    token = None
    while True:
        page = await client.list(resource, limit=PAGE, continue_=token)
        for obj in page.get("items") or []:
            obj.setdefault("apiVersion", DRA_API if resource in DRA_RESOURCES else "v1")
            obj.setdefault("kind", KINDS[resource])
            items.append(obj)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


async def take(settings: KubeSettings) -> dict:
    """A snapshot document of the live cluster: GET/LIST only, nothing is written."""
    client = await KubeClient.from_settings(settings)
    try:
        return await take_with(client)
    finally:
        await client.close()


async def take_with(client: KubeClient) -> dict:
    """`take` over a client the caller owns (hami doctor pod)."""
    items: list[dict] = []
    for resource in ("nodes", "pods", "resourcequotas"):
        items += await _list_all(client, resource)
    for cm in await _list_all(client, "configmaps"):
        if any(k in (cm.get("data") or {}) for k in CONFIG_KEYS):
            items.append(cm)
    for resource in DRA_RESOURCES:
        try:
            items += await _list_all(client, resource)
        except ApiError as exc:
            if exc.status not in (403, 404):  # not served (no DRA), or not readable: replayed without
                raise
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def save(doc: dict, path: str) -> None:
    with open(path, "wb") as f:
        f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
