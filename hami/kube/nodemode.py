"""Which path hands out a node's GPUs: the device plugin or DRA, never both (HAMi's rule).

Both would share one GPU's memory without knowing of each other. A node is marked with the label
`hami.io/gpu-mode` = `device-plugin` (the node agent) or `dra` (`hami --role dra`); each role marks
its node at start and refuses to start where the other's mark is. The DRA role also refuses a node
that carries `hami.io/node-nvidia-register` without a mark: a device plugin (HAMi's, or an older
hami) registered its GPUs. The label lets the chart's DaemonSets keep to their own nodes.

Migrating a node: drain it, stop the old DaemonSet there, then
`kubectl label node N hami.io/gpu-mode-` (and, from device-plugin to DRA,
`kubectl annotate node N hami.io/node-nvidia-register-`). `hami doctor nodes` says this per node.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.device import codec
from hami.kube.client import ApiError
from hami.kube.lanes import background
from hami.obs.log import get_logger

log = get_logger(__name__)

LABEL = codec.GPU_MODE_LABEL
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
MODES = (DEVICE_PLUGIN, DRA)


class NodeModeConflict(RuntimeError):
    """The node is served by the other path; the message says how to migrate it."""


def conflict(node: Mapping, mode: str) -> str | None:
    """Why `mode` must not serve `node` (None: it may). Pure."""
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    have = (meta.get("labels") or {}).get(LABEL)
    if have == mode:
        return None
    if have in MODES:
        return (f"node {name} is served in {have} mode (label {LABEL}={have}); {mode} mode must not serve "
                f"the same node. To migrate: drain it, stop the {have} DaemonSet there, then "
                f"`kubectl label node {name} {LABEL}-`" +
                (f" and `kubectl annotate node {name} {codec.REGISTER_ANNOTATION}-`" if have == DEVICE_PLUGIN else ""))
    if mode == DRA and codec.REGISTER_ANNOTATION in (meta.get("annotations") or {}):
        return (f"node {name} carries {codec.REGISTER_ANNOTATION}: a device plugin registered its GPUs, and DRA "
                f"mode must not serve the same node. If no device plugin runs there any more: "
                f"`kubectl annotate node {name} {codec.REGISTER_ANNOTATION}-`")
    return None


async def claim_node(client, node_name: str, mode: str, attempts: int = 3) -> dict | None:
    """Refuse (NodeModeConflict) or mark the node for `mode`; returns the Node (None if absent).
    The mark is written with the read's resourceVersion as precondition, so of two modes starting
    at once one gets 409, reads again and sees the other's mark."""
    for attempt in range(attempts):
        try:
            node = await client.get_node(node_name)
        except ApiError as exc:
            if exc.not_found:
                log.warning("Node not found: its GPU mode is not marked", node=node_name, mode=mode)
                return None
            raise
        why = conflict(node, mode)
        if why is not None:
            raise NodeModeConflict(why)
        meta = node.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL) == mode:
            return node
        try:
            with background():
                node = await client.patch_node(
                    node_name, {"metadata": {"labels": {LABEL: mode}, "resourceVersion": meta.get("resourceVersion")}})
        except ApiError as exc:
            if exc.status == 409 and attempt + 1 < attempts:
                continue
            raise
        log.info("Node marked for its GPU mode", node=node_name, label=f"{LABEL}={mode}")
        return node
    return None
