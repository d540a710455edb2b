"""The `hami.io/node-handshake` protocol of HAMi v2.10, without HAMi's GET+PATCH storm.

HAMi's register loop (spec scheduler.md §2.1, §7.2) GETs and PATCHes every node whose handshake
is not `Requesting_...` on every 15 s cycle, and patches nodes that never registered a GPU. Here:
* the decision (`judge`) is a pure function of the cached node, the time and what we saw last;
* writes are merge patches carrying the cached resourceVersion (a 409 just means the node moved
  on; the next node event re-judges it), sent only when the value must change;
* nodes without `hami.io/node-nvidia-register` are never patched;
* an unhealthy node is cleaned once (handshake removed, devices dropped) and not re-requested
  until its registration or allocatable count changes: in steady state, zero requests per node;
* only the leader writes when `--leader-elect` is on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hami.device import codec
from hami.device.request import quantity_value
from hami.kube.client import ApiError, KubeClient
from hami.kube.lanes import background
from hami.obs.log import get_logger

log = get_logger(__name__)

HANDSHAKE_KEY = codec.HANDSHAKE_ANNOTATION
REGISTER_KEY = codec.REGISTER_ANNOTATION
REQUESTING = "Requesting"
WINDOW_S = 60.0


def format_requesting(now: float) -> str:
    """`Requesting_2026-08-21 06:20:39` in the scheduler's local time zone (Go time.DateTime)."""
    return codec.encode_handshake_requesting(now, None)


def parse_requesting(value: str) -> float | None:
    """The stamp of a `Requesting_<local time>` value, or None when there is none to parse."""
    return codec.decode_handshake(value, None).timestamp


@dataclass(frozen=True, slots=True)
class Seen:
    """What the handshaker remembers per node (HAMi's ReportedGPUNum / ReportedRegisterAnnos)."""

    allocatable: int = -1
    register: str | None = None
    cleaned: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    healthy: bool
    write: str | None = None  # "request" -> write Requesting_<now>; "clean" -> remove the key
    changed: bool = False
    key: str = HANDSHAKE_KEY  # the handshake annotation (one per vendor)
    # The time from which the same node may be judged otherwise (the Requesting window ends);
    # None: only a change of the node or of what we saw can change the verdict.
    until: float | None = None


def gpu_allocatable(node: dict, resource: str = "nvidia.com/gpu") -> int:
    """Quantity.Value() of the node's allocatable `resource` (CheckHealth's `qty.Value() > 0`):
    "1k", "2e3" and "500m" read as Go does; absent or unparsable reads 0."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    n = quantity_value(str(value)) if value is not None else None
    return n if n is not None else 0


def judge(node: dict, now: float, seen: Seen, resource: str = "nvidia.com/gpu",
          register_key: str = REGISTER_KEY, handshake_key: str = HANDSHAKE_KEY) -> Verdict:
    """HAMi's CheckHealth + NVIDIA wrapper as a pure decision (spec §2.1); other vendors use the
    same protocol under their own keys (util.CheckHealth with `hami.io/node-handshake-<vendor>`)."""
    annos = (node.get("metadata") or {}).get("annotations") or {}
    register = annos.get(register_key)
    if register is None:
        return Verdict(healthy=False, key=handshake_key)  # not a HAMi node: never written
    alloc = gpu_allocatable(node, resource)
    value = annos.get(handshake_key, "")
    until = None
    if REQUESTING in value:
        stamp = parse_requesting(value)
        if stamp is None or now < stamp + WINDOW_S or alloc > 0:
            healthy = True
            if stamp is not None and alloc <= 0:
                until = stamp + WINDOW_S
        else:
            healthy = False
        write = None
    elif seen.cleaned and seen.register == register and seen.allocatable == alloc:
        # We removed it because the node was dead; nothing changed since: stay quiet.
        return Verdict(healthy=False, key=handshake_key)
    else:
        healthy, write = True, "request"
    if alloc == 0 and seen.allocatable > 0:
        healthy = False
    changed = alloc != seen.allocatable or register != seen.register
    if not healthy and write is None and handshake_key in annos:
        write = "clean"
    return Verdict(healthy=healthy, write=write, changed=changed, key=handshake_key, until=until)


class Handshaker:
    """Applies `judge` to cached nodes and performs the (rare) writes."""

    def __init__(self, client: KubeClient | None, *, resource: str = "nvidia.com/gpu",
                 clock=time.time, is_leader=lambda: True, register_key: str = REGISTER_KEY,
                 handshake_key: str = HANDSHAKE_KEY):
        self.client = client
        self.resource = resource
        self.register_key = register_key
        self.handshake_key = handshake_key
        self.clock = clock
        self.is_leader = is_leader
        self.seen: dict[str, Seen] = {}
        # node -> time from which judging it again may give another verdict: a write is pending
        # (it may have failed), what we saw just changed, or its Requesting window ends. Only
        # these nodes are re-judged by the periodic recheck; a steady node costs nothing.
        self.due: dict[str, float] = {}
        self.writes = 0
        self.conflicts = 0

    def forget(self, name: str) -> None:
        self.seen.pop(name, None)
        self.due.pop(name, None)

    def due_nodes(self, now: float) -> list[str]:
        """Nodes whose verdict may differ from the last one at `now` (allocates nothing when none)."""
        if not self.due:
            return []
        return [name for name, at in self.due.items() if at <= now]

    def evaluate(self, node: dict) -> Verdict:
        name = (node.get("metadata") or {}).get("name", "")
        seen = self.seen.get(name, Seen())
        now = self.clock()
        verdict = judge(node, now, seen, self.resource, self.register_key, self.handshake_key)
        annos = (node.get("metadata") or {}).get("annotations") or {}
        new = Seen(
            allocatable=gpu_allocatable(node, self.resource),
            register=annos.get(self.register_key),
            cleaned=seen.cleaned and verdict.write is None and not verdict.healthy,
        )
        self.seen[name] = new
        if verdict.write is not None or (new != seen and self._differs(node, now, new, verdict)):
            self.due[name] = now
        elif verdict.until is not None:
            self.due[name] = verdict.until
        else:
            self.due.pop(name, None)
        return verdict

    def _differs(self, node: dict, now: float, seen: Seen, verdict: Verdict) -> bool:
        """Whether judging the node again, with what we just saw, would decide otherwise (then the
        next recheck must; on first sight it usually would not, so a new node costs one judge)."""
        again = judge(node, now, seen, self.resource, self.register_key, self.handshake_key)
        return (again.healthy, again.write) != (verdict.healthy, verdict.write)

    async def apply(self, node: dict, verdict: Verdict) -> None:
        if verdict.write is None or self.client is None or not self.is_leader():
            return
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        value = format_requesting(self.clock()) if verdict.write == "request" else None
        patch = {"metadata": {"annotations": {self.handshake_key: value},
                              "resourceVersion": meta.get("resourceVersion", "")}}
        try:
            with background():  # never delays a /bind's lock or binding
                await self.client.patch_node(name, patch)
            self.writes += 1
            if verdict.write == "clean":
                s = self.seen.get(name, Seen())
                self.seen[name] = Seen(s.allocatable, s.register, cleaned=True)
                self.due[name] = self.clock()
                log.warning("Node GPU handshake expired, devices dropped", node=name)
            else:
                log.v(4).info("Requested node handshake", node=name, value=value)
        except ApiError as exc:
            if exc.conflict:
                self.conflicts += 1
                return  # the newer node will arrive through the watch and be judged again
            if not exc.not_found:
                log.warning("Handshake patch failed", node=name, error=str(exc))
