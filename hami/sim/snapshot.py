"""The embedded kube-scheduler's view of placed pods, kept from the pod watch (no I/O).

Upstream's scheduler cache keeps NodeInfo per node and `UpdateSnapshot` copies only the nodes whose
generation moved since the last cycle, so a cycle's cost does not grow with the pods already
placed. Rebuilt from every pod in the informer each cycle instead, the embedded loop's view cost
O(pods) per cycle: quadratic over a 5,000-pod burst, and most of the benchmark process's CPU
(docs/performance.md, "Bursts at scale"). `PlacedPods` is fed every pod event and gives, per
cycle, what a full rebuild over the informer's store gives: the assigned, unfinished pods per node
(each node's in the order the watch first delivered them, the store's order), the unbound pods
nominated to a node, and the placed pods with required anti-affinity; only the nodes that changed
are rebuilt (tests/sim/test_snapshot.py compares it with the full rebuild after random events).
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.kubesched import intree


def assigned_active(pod: Mapping | None) -> bool:
    """Bound to a node and not finished: counted on that node by the in-tree filters."""
    if not pod or not (pod.get("spec") or {}).get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_key(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class PlacedPods:
    """Assigned pods per node and nominated pods, from the pod informer's events."""

    __slots__ = ("_order", "_seq", "_node_of", "_nominated", "_lists", "_holders", "_dirty")

    def __init__(self) -> None:
        # key -> arrival number of every pod the watch holds: the order a full rebuild walking the
        # informer's store meets them in (an update keeps a key's place, a re-add goes last).
        self._order: dict[str, int] = {}
        self._seq = 0
        self._node_of: dict[str, dict[str, dict]] = {}  # node -> key -> assigned active pod
        self._nominated: dict[str, dict] = {}  # key -> unbound pod with status.nominatedNodeName
        self._lists: dict[str, list[dict]] = {}  # node -> its pods in store order (rebuilt when dirty)
        self._holders: dict[str, list[tuple[Mapping, str]]] = {}  # node -> its required anti-affinity pods
        self._dirty: set[str] = set()

    def event(self, old: dict | None, new: dict | None) -> None:
        """An informer event (ADDED: old None; DELETED: new None)."""
        obj = new if new is not None else old
        if obj is None:
            return
        key = pod_key(obj)
        if new is None:
            self._order.pop(key, None)
        elif key not in self._order:
            self._seq += 1
            self._order[key] = self._seq
        if old is not None and assigned_active(old):
            node = old["spec"]["nodeName"]
            placed = self._node_of.get(node)
            if placed is not None and placed.pop(key, None) is not None:
                self._dirty.add(node)
        self._nominated.pop(key, None)
        if new is None:
            return
        spec = new.get("spec") or {}
        if spec.get("nodeName"):
            if assigned_active(new):
                node = spec["nodeName"]
                self._node_of.setdefault(node, {})[key] = new
                self._dirty.add(node)
        elif (new.get("status") or {}).get("nominatedNodeName"):
            self._nominated[key] = new

    def pods_on(self) -> dict[str, list[dict]]:
        """node -> its assigned, unfinished pods (a fresh dict; the lists are shared: read only)."""
        self._refresh()
        return dict(self._lists)

    def holders(self) -> list[tuple[Mapping, str]]:
        """intree.anti_affinity_holders of pods_on(), in the same order."""
        self._refresh()
        return [h for hs in self._holders.values() for h in hs]

    def nominated(self) -> list[dict]:
        """Unbound pods with a nominated node, in store order."""
        order = self._order
        return sorted(self._nominated.values(), key=lambda p: order.get(pod_key(p), 0))

    def _refresh(self) -> None:
        if not self._dirty:
            return
        order = self._order
        for node in self._dirty:
            placed = self._node_of.get(node)
            if not placed:
                self._node_of.pop(node, None)
                self._lists.pop(node, None)
                self._holders.pop(node, None)
                continue
            pods = sorted(placed.values(), key=lambda p: order.get(pod_key(p), 0))
            self._lists[node] = pods
            held = intree.anti_affinity_holders({node: pods})
            if held:
                self._holders[node] = held
            else:
                self._holders.pop(node, None)
        self._dirty.clear()
