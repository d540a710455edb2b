"""The extender's /prioritize and /preempt verbs (kube-scheduler's node other than HAMi's best, under
--extender-prioritize, is placed by /bind through the Placer).

Wire format: k8s.io/kube-scheduler/extender/v1 (spec protocols.md): `ExtenderArgs` in, a
`HostPriorityList` out for /prioritize; `ExtenderPreemptionArgs` in, `ExtenderPreemptionResult`
(`NodeNameToMetaVictims`) out for /preempt. A body of the wrong shape is answered HTTP 400 with
`{"Error": ...}` naming the field, never a 500: neither result type has an Error field, so
kube-scheduler reads the status code (and logs the body), as it would a 200 it cannot decode. Scores:
hami.scheduler.placement.prioritize; victims: hami.scheduler.preemption.victims; PDBs: hami.kubesched.pdb over the PDB
informer.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hami.kube.informer import Informer
from hami.kubesched import pdb as pdbmod
from hami.obs.log import get_logger
from hami.scheduler.placement import fit as fitmod
from hami.scheduler.placement.prioritize import scale_scores
from hami.scheduler.placer import Placer
from hami.scheduler.preemption.victims import select_victims

log = get_logger(__name__)


class ShapeError(ValueError):
    pass


def _kind(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "bool", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__)


def _want(field: str, want: str, value: Any) -> ShapeError:
    return ShapeError(f"{field}: expected {want}, got {_kind(value)}")


def _load(body: bytes, what: str) -> dict:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ShapeError(f"{what}: {exc}") from None
    if not isinstance(doc, dict):
        raise _want(what, "an object", doc)
    return {k.lower(): v for k, v in doc.items()}


def _pod_of(args: dict, what: str) -> dict:
    pod = args.get("pod")
    if not isinstance(pod, dict):
        raise _want(f"{what}: Pod", "an object", pod)
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _want(f"{what}: Pod.metadata", "an object", meta)
    return pod


def victims_arg(args: dict) -> dict[str, list[str]]:
    """node -> victim UIDs, from NodeNameToMetaVictims or NodeNameToVictims."""
    what = "extender preemption args"
    out: dict[str, list[str]] = {}
    for field, full in (("NodeNameToMetaVictims", False), ("NodeNameToVictims", True)):
        value = args.get(field.lower())
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _want(f"{what}: {field}", "an object", value)
        for node, victims in value.items():
            if not isinstance(victims, dict):
                raise _want(f"{what}: {field}.{node}", "an object", victims)
            pods = victims.get("Pods", victims.get("pods"))
            if pods is not None and not isinstance(pods, list):
                raise _want(f"{what}: {field}.{node}.Pods", "an array", pods)
            n = victims.get("NumPDBViolations", 0)
            if not isinstance(n, int) or isinstance(n, bool):
                raise _want(f"{what}: {field}.{node}.NumPDBViolations", "an integer", n)
            uids = []
            for i, p in enumerate(pods or ()):
                if not isinstance(p, dict):
                    raise _want(f"{what}: {field}.{node}.Pods[{i}]", "an object", p)
                uid = ((p.get("metadata") or {}).get("uid") if full else p.get("UID", p.get("uid")))
                if not isinstance(uid, str):
                    path = "metadata.uid" if full else "UID"
                    raise _want(f"{what}: {field}.{node}.Pods[{i}].{path}", "a string", uid)
                uids.append(uid)
            out.setdefault(node, []).extend(uids)
        if out:
            break
    return out


def _node_names(items: Any) -> list[str]:
    """The names of ExtenderArgs.Nodes.items, each item checked to be a Node object."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise _want("extender args: Nodes.items", "an array", items)
    names = []
    for i, node in enumerate(items):
        meta = node.get("metadata") if isinstance(node, dict) else None
        if not isinstance(meta, dict):
            raise _want(f"extender args: Nodes.items[{i}]" + (".metadata" if isinstance(node, dict) else ""),
                        "an object", meta if isinstance(node, dict) else node)
        names.append(meta.get("name", ""))
    return names


def _answer(result: list | dict) -> web.Response:
    """200 with the result, or 400 with `{"Error": ...}` for a request of the wrong shape."""
    bad = isinstance(result, dict) and "Error" in result
    return web.Response(body=orjson.dumps(result), content_type="application/json", status=400 if bad else 200)


def may_go(pod: dict | None, preemptor_priority: int, node: str) -> bool:
    """A pod preemption may evict: bound to the node (kube-scheduler refuses a victim its cache
    does not hold there), lower priority than the preemptor and not already terminating."""
    return (pod is not None and (pod.get("spec") or {}).get("nodeName") == node
            and pod_priority(pod) < preemptor_priority and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def start_time(pod: dict | None) -> str:
    return ((pod or {}).get("status") or {}).get("startTime") or "9999"


class ExtraVerbs:
    """/prioritize and /preempt over HTTP; the pod's request and the usage come from the Placer."""

    def __init__(self, placer: Placer, pdbs: Informer | None = None):
        self.placer = placer
        self.state = placer.state
        self.pdbs = pdbs

    def mount(self, app: web.Application) -> None:
        app.router.add_post("/prioritize", self._h_prioritize)
        app.router.add_post("/preempt", self._h_preempt)

    async def _h_prioritize(self, request: web.Request) -> web.Response:
        return _answer(self.prioritize(await request.read()))

    async def _h_preempt(self, request: web.Request) -> web.Response:
        return _answer(self.preempt(await request.read()))

    # ------------------------------------------------------------------ shared

    def _request(self, pod: dict) -> fitmod.PodRequest | None | str:
        """The pod's PodRequest, None when it asks for no HAMi device, or an error text."""
        return self.placer.request_of(pod)

    # ------------------------------------------------------------------ /prioritize

    def prioritize(self, body: bytes) -> list | dict:
        try:
            args = _load(body, "extender args")
            pod = _pod_of(args, "extender args")
            names = args.get("nodenames")
            if names is None and isinstance(args.get("nodes"), dict):
                names = _node_names(args["nodes"].get("items"))
            if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                raise _want("extender args: NodeNames", "an array of strings", names)
        except ShapeError as exc:
            return {"Error": str(exc)}
        preq = self._request(pod)
        if isinstance(preq, str):
            return {"Error": preq}
        if preq is None:
            if self.placer.serves_claims(pod):  # --dra: pods with claims by GPU fill
                return self.placer.claim_scores(pod, names)
            return [{"Host": n, "Score": 0} for n in names]
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        fits = self.placer.fits_without(uid, names, preq)
        return scale_scores({r.node: r.score for r in fits}, names, preq.node_policy)

    # ------------------------------------------------------------------ /preempt

    def preempt(self, body: bytes) -> dict:
        try:
            args = _load(body, "extender preemption args")
            pod = _pod_of(args, "extender preemption args")
            candidates = victims_arg(args)
        except ShapeError as exc:
            return {"Error": str(exc)}
        preq = self._request(pod)
        if isinstance(preq, str):
            return {"Error": preq}
        state = self.state
        index = state.index
        pdbs = list(self.pdbs.store.values()) if self.pdbs is not None else []
        all_pods = list(state.pods.store.values()) if state.pods is not None else []
        if preq is None:  # not ours to judge: kube-scheduler's candidates stand, their PDB violations counted
            by_uid = {(p.get("metadata") or {}).get("uid"): p for p in all_pods}
            return {"NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": len(
                pdbmod.victims_violating([by_uid[u] for u in uids if u in by_uid], pdbs, all_pods)[0])}
                for n, uids in candidates.items() if uids}}
        meta = pod.get("metadata") or {}
        own = meta.get("uid") or ""
        prio = pod_priority(pod)
        out = {}
        for node, uids in sorted(candidates.items()):
            usage = index.node(node)
            reg = state.registered.get(node)
            if usage is None or reg is None:
                continue
            if not uids:
                continue
            pods = {u: state.pod_by_uid(u) for u in uids}
            on_node = {u: rec for u in index.pods_on(node) if u != own and (rec := index.pod(u)) is not None}
            for u in on_node:
                if u not in pods and may_go(p := state.pod_by_uid(u), prio, node):
                    pods[u] = p
            by_importance = sorted(pods, key=lambda u: (-pod_priority(pods[u]), start_time(pods[u])))
            asked = set(uids)  # a set: 100,000 victims must not cost 10^10 list scans on the loop
            ordered = [u for u in by_importance if u in asked]
            extra = [u for u in by_importance if u not in asked]
            violating_pods, _ = pdbmod.victims_violating([pods[u] for u in ordered + extra if pods[u]], pdbs,
                                                         all_pods)
            violating = {(p.get("metadata") or {}).get("uid") for p in violating_pods}
            picked = select_victims(state.nvidia, node, reg.devices, usage.cordoned, on_node, ordered,
                                    violating, preq, extra)
            if picked is None:
                continue  # even with every lower-priority pod gone the GPUs do not fit
            victims, n_pdb = picked
            if not victims:  # the GPUs fit already: kube-scheduler's in-tree victims stand
                victims = list(uids)
                n_pdb = len(pdbmod.victims_violating([pods[u] for u in uids if pods[u]], pdbs, all_pods)[0])
            out[node] = {"Pods": [{"UID": u} for u in victims], "NumPDBViolations": n_pdb}
        log.v(3).info("Preemption answered", pod=f"{meta.get('namespace')}/{meta.get('name')}",
                      candidates=len(candidates), nodes=len(out))
        return {"NodeNameToMetaVictims": out}


def pod_priority(pod: dict | None) -> int:
    value = ((pod or {}).get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0
