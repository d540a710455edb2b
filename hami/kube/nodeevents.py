"""Warning Events about a Node, deduplicated the way HAMi's device plugin does it.

HAMi (`pkg/util/util.go` EmitNodeWarningEvent) turns node-level hardware trouble that used to reach only
the log, such as asymmetric NVLink data (`AsymmetricGPUP2PLink`), into a Warning Event in namespace
`default` about the Node, source component `hami-device-plugin`. Before writing, it lists the Events of
that node and reason; when the newest one was seen within the dedup window it bumps that Event's count,
lastTimestamp and message instead of creating another. We do the same, on the background lane, and
never raise: an event that cannot be written is logged and the caller goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC

from hami.device.codec.timestamps import format_rfc3339, kube_time
from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import background
from hami.obs.log import get_logger

log = get_logger(__name__)

SOURCE_COMPONENT = "hami-device-plugin"
EVENT_NAMESPACE = "default"
DEDUP_WINDOW_S = 3600.0
REASON_ASYMMETRIC_P2P = "AsymmetricGPUP2PLink"


def newest_matching(events: list[dict], node: str, uid: str, reason: str) -> dict | None:
    """The most recently seen Event about `node` with `reason`. The field selector already narrows
    the list; checking again here keeps this right against a server that ignores it."""
    newest, newest_ts = None, float("-inf")
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if obj.get("kind") != "Node" or obj.get("name") != node or ev.get("reason") != reason:
            continue
        if uid and obj.get("uid") not in (None, "", uid):
            continue
        ts = kube_time(ev.get("lastTimestamp")) or float("-inf")
        if newest is None or ts > newest_ts:
            newest, newest_ts = ev, ts
    return newest


async def emit_node_warning(client: KubeClient | None, node: dict, reason: str, message: str, *,
                            dedup_window_s: float = DEDUP_WINDOW_S,
                            clock: Callable[[], float] = time.time) -> str:
    """Write (or bump) the Warning Event; returns "created", "updated" or "failed"."""
    meta = node.get("metadata") or {}
    name, uid = meta.get("name", ""), meta.get("uid", "")
    if client is None or not name:
        return "failed"
    now = clock()
    with background():
        try:
            selector = f"involvedObject.kind=Node,involvedObject.name={name},reason={reason}"
            if uid:
                selector += f",involvedObject.uid={uid}"
            existing: list[dict] = []
            try:
                existing = (await client.list("events", EVENT_NAMESPACE, field_selector=selector)).get("items") or []
            except ApiError as exc:
                log.warning("Could not list node events; creating a new one", node=name, reason=reason, error=str(exc))
            latest = newest_matching(existing, name, uid, reason)
            seen = kube_time((latest or {}).get("lastTimestamp"))
            if latest is not None and seen is not None and now - seen <= dedup_window_s:
                await client.patch_event(EVENT_NAMESPACE, latest["metadata"]["name"], {
                    "count": int(latest.get("count") or 1) + 1, "lastTimestamp": format_rfc3339(now, UTC),
                    "message": message})
                return "updated"
            stamp = format_rfc3339(now, UTC)
            await client.create_event(EVENT_NAMESPACE, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{name}-", "namespace": EVENT_NAMESPACE},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid},
                "reason": reason, "message": message, "type": "Warning", "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": SOURCE_COMPONENT, "host": name},
                "reportingComponent": SOURCE_COMPONENT, "reportingInstance": name,
            })
            return "created"
        except ApiError as exc:
            log.warning("Could not write node event", node=name, reason=reason, error=str(exc))
            return "failed"


def asymmetric_link_message(gpu_a: str, gpu_b: str) -> str:
    return (f"asymmetric P2P link data for GPU pair {gpu_a} <-> {gpu_b}: the pair is scored 0 for topology-aware "
            "placement (possible NVLink hardware or driver issue)")
