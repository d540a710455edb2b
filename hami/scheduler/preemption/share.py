"""GPU preemption across scheduler replicas: the holds every replica honours, the failures every replica sees.

With `scheduler.replicas > 1` each hami-scheduler pod has its own kube-scheduler sidecar, and the
kube-schedulers elect their leader independently of hami's Lease. The replica serving /filter may
not be the one running the preemption controller, so neither the failure nor the hold may live only
in one replica's memory:

- **Holds** are published on the Node (`hami.io/gpu-preemption-holds`, a JSON object: preemptor UID
  -> {pod, devices in HAMi's pod-devices form, until (unix seconds), victims}). Only the controller
  writes it, and tenants cannot write Nodes, so a pod creator cannot forge a hold (a pod annotation or
  `status.nominatedNodeName`, which kube-scheduler's own preemption also sets, could not tell ours from
  theirs). Every replica's `HoldMirror` counts each valid hold in its usage index under the
  preemptor's UID, exactly as the controller's own hold is counted: /filter drops a pod's own record
  before fitting it, so only the preemptor may use the room. A hold stops counting when its
  preemptor is placed, deleted or terminating, or when `until` passes (a leader killed before it
  could take its holds back leaves them for at most the hold timeout).
- **Failures**: kube-scheduler writes the extender's failure reasons into the pod's PodScheduled
  condition (FitError: `0/N nodes are available: <count> <reason>, ...`), on whichever replica served
  it. `failed_on_shares` reads that message; the leader then fits the pod itself on every node (the
  extender's own fit, `Placer.share_failures`) to learn where it failed on shares only.

`decode_holds` is pure; a malformed annotation is no hold (logged once per text).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import orjson

from hami.device import codec
from hami.obs.log import get_logger
from hami.scheduler.preemption import plan as gpupreempt

log = get_logger(__name__)

HOLDS_ANNOTATION = "hami.io/gpu-preemption-holds"


@dataclass(frozen=True)
class SharedHold:
    uid: str
    node: str
    namespace: str
    name: str
    devices: tuple
    until: float
    victims: Mapping[str, str]


def encode_hold(namespace: str, name: str, devices, until: float, victims: Mapping[str, str]) -> dict:
    return {"pod": f"{namespace}/{name}", "devices": codec.encode_pod_devices(devices), "until": round(until, 3),
            "victims": dict(victims)}


def decode_holds(node: str, text: object) -> dict[str, SharedHold]:
    """The holds a node's annotation publishes; a malformed entry is skipped, a malformed text is none."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError:
        _bad(node, text)
        return {}
    if not isinstance(raw, dict):
        _bad(node, text)
        return {}
    out = {}
    for uid, entry in raw.items():
        try:
            ns, _, name = entry["pod"].partition("/")
            until = entry["until"]
            victims = entry.get("victims") or {}
            if not (ns and name and isinstance(until, int | float) and not isinstance(until, bool)
                    and isinstance(victims, dict)):
                raise ValueError("fields")
            devices = codec.decode_pod_devices(entry["devices"], field=HOLDS_ANNOTATION)
        except (KeyError, TypeError, AttributeError, ValueError, codec.CodecError):
            _bad(node, text)
            continue
        out[uid] = SharedHold(uid, node, ns, name, devices, float(until),
                              {str(k): str(v) for k, v in victims.items()})
    return out


_warned: set[str] = set()


def _bad(node: str, text: str) -> None:
    if text not in _warned and len(_warned) < 256:
        _warned.add(text)
        log.warning("Malformed GPU preemption hold annotation ignored", node=node, annotation=HOLDS_ANNOTATION,
                    text=text[:200])


def failed_on_shares(pod: Mapping) -> bool:
    """kube-scheduler's PodScheduled=False condition names a HAMi GPU-share reason (some node failed on shares)."""
    for cond in ((pod.get("status") or {}).get("conditions") or []):
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = cond.get("message")
            return isinstance(message, str) and any(r in message for r in gpupreempt.SHARE_REASONS)
    return False


class HoldMirror:
    """Counts the holds published on Nodes in this replica's usage index (every replica, leader or not)."""

    def __init__(self, state, own: Callable[[], Mapping[str, object]], wall: Callable[[], float] = time.time,
                 retired: Callable[[], Mapping[str, object]] = dict):
        self.state = state
        self.own = own              # the controller's own holds and /filter's placements (counted already)
        self.wall = wall
        self.retired = retired      # uid -> until of holds this replica ended (its Node may show them a moment)
        self.mirrored: dict[str, SharedHold] = {}

    def published(self) -> dict[str, SharedHold]:
        out: dict[str, SharedHold] = {}
        nodes = self.state.nodes
        for node in (nodes.store.values() if nodes is not None else ()):
            meta = node.get("metadata") or {}
            text = (meta.get("annotations") or {}).get(HOLDS_ANNOTATION)
            if text:
                out.update(decode_holds(meta.get("name", ""), text))
        return out

    def _valid(self, hold: SharedHold) -> bool:
        if self.wall() >= hold.until:
            return False
        pod = self.state.pod(hold.namespace, hold.name)
        if pod is None:
            return False
        meta = pod.get("metadata") or {}
        return meta.get("uid") in (None, hold.uid) and not meta.get("deletionTimestamp") \
            and not (pod.get("spec") or {}).get("nodeName") \
            and not (meta.get("annotations") or {}).get(codec.VGPU_NODE_ANNOTATION)

    def sync(self) -> None:
        own, retired = self.own(), self.retired()
        wanted = {u: h for u, h in self.published().items()
                  if u not in own and retired.get(u) != h.until and self._valid(h)}
        index = self.state.index
        for uid, hold in list(self.mirrored.items()):
            if uid not in wanted:
                del self.mirrored[uid]
                rec = index.pod(uid)
                if rec is not None and uid not in own and not self._placed(uid, hold):
                    index.remove_pod(uid)
                    self.state.placement_dropped(hold.node, hold.namespace)
        for uid, hold in wanted.items():
            self.mirrored[uid] = hold
            if index.pod(uid) is None:
                self.apply(uid)

    def _placed(self, uid: str, hold: SharedHold) -> bool:
        pod = self.state.pod(hold.namespace, hold.name) or {}
        return bool((pod.get("spec") or {}).get("nodeName")
                    or ((pod.get("metadata") or {}).get("annotations") or {}).get(codec.VGPU_NODE_ANNOTATION))

    def apply(self, uid: str) -> bool:
        """Count the mirrored hold for `uid` (again: /filter dropped the preemptor's own record and failed)."""
        hold = self.mirrored.get(uid)
        if hold is None:
            return False
        self.state.index.add_pod(uid, hold.node, hold.devices, namespace=hold.namespace)
        return True
