"""Server-side `Table` rendering (`Accept: application/json;as=Table`) for `kubectl get`. Pure.

Columns follow the real server's printers for nodes, pods, events and namespaces; any other
resource gets Name and Age. Without a Table kubectl still works but prints only NAME and AGE.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable
from typing import Any


def human_duration(seconds: float) -> str:
    """Kubernetes' HumanDuration: 45s, 5m30s, 3h, 2d4h, 400d, 3y."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if d < 365 * 8:
        return f"{y}y{d % 365}d" if d % 365 else f"{y}y"
    return f"{y}y"


def _age(ts: str | None, now: float) -> str:
    if not ts:
        return "<unknown>"
    try:
        t = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return "<unknown>"
    return human_duration(now - t)


def _col(name: str, type_: str = "string", fmt: str = "", priority: int = 0) -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": name, "priority": priority}


def _node_row(o: dict, now: float) -> list:
    conds = {c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or []}
    ready = conds.get("Ready")
    status = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if (o.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = (o.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    version = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    age = _age(o["metadata"].get("creationTimestamp"), now)
    return [o["metadata"]["name"], status, ",".join(roles) or "<none>", age, version]


def _pod_row(o: dict, now: float) -> list:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        state = c.get("state") or {}
        for key in ("waiting", "terminated"):
            if (state.get(key) or {}).get("reason"):
                reason = state[key]["reason"]
    if o["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [o["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", reason, restarts,
            _age(o["metadata"].get("creationTimestamp"), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>"]


def _event_row(o: dict, now: float) -> list:
    inv = o.get("involvedObject") or o.get("regarding") or {}
    last = o.get("lastTimestamp") or o.get("eventTime") or (o.get("metadata") or {}).get("creationTimestamp")
    return [_age(last, now), o.get("type", ""), o.get("reason", ""),
            f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}", o.get("message") or o.get("note") or ""]


_LAYOUTS: dict[str, tuple[list[dict], Any]] = {
    "nodes": ([_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version")], _node_row),
    "pods": ([_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "integer"), _col("Age"),
              _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1)], _pod_row),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event_row),
    "events.events.k8s.io": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
                             _event_row),
    "namespaces": ([_col("Name", fmt="name"), _col("Status"), _col("Age")],
                   lambda o, now: [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""),
                                   _age(o["metadata"].get("creationTimestamp"), now)]),
}
def _claim_row(o: dict, now: float) -> list:
    status = o.get("status") or {}
    state = [s for s, on in (("allocated", status.get("allocation")), ("reserved", status.get("reservedFor"))) if on]
    return [o["metadata"]["name"], ",".join(state) or "pending", _age(o["metadata"].get("creationTimestamp"), now)]


def _slice_row(o: dict, now: float) -> list:
    spec = o.get("spec") or {}
    return [o["metadata"]["name"], spec.get("nodeName") or "<none>", spec.get("driver", ""),
            (spec.get("pool") or {}).get("name", ""), _age(o["metadata"].get("creationTimestamp"), now)]


_LAYOUTS["resourceclaims.resource.k8s.io"] = ([_col("Name", fmt="name"), _col("State"), _col("Age")], _claim_row)
_LAYOUTS["resourceslices.resource.k8s.io"] = ([_col("Name", fmt="name"), _col("Node"), _col("Driver"),
                                               _col("Pool"), _col("Age")], _slice_row)
_DEFAULT = ([_col("Name", fmt="name"), _col("Age")],
            lambda o, now: [o["metadata"]["name"], _age(o["metadata"].get("creationTimestamp"), now)])


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def table(resource_key: str, objs: Iterable[dict], rv: int, include_object: str = "Metadata", *,
          now: float) -> dict:
    """A meta.k8s.io/v1 Table of `objs` as of unix time `now` (ages); rows carry the object per
    `include_object` (None/Metadata/Object)."""
    cols, row_of = _LAYOUTS.get(resource_key, _DEFAULT)
    rows = []
    for o in objs:
        row: dict[str, Any] = {"cells": row_of(o, now)}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o.get("metadata") or {}}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": cols, "rows": rows}
