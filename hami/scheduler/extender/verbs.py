"""The extender's /prioritize and /preempt verbs, and the re-placement /bind needs when kube-scheduler
picks a node other than HAMi's best (only with --extender-prioritize).

Wire format: k8s.io/kube-scheduler/extender/v1 (spec protocols.md): `ExtenderArgs` in, a
`HostPriorityList` out for /prioritize; `ExtenderPreemptionArgs` in, `ExtenderPreemptionResult`
(`NodeNameToMetaVictims`) out for /preempt. A body of the wrong shape is answered HTTP 400 with
`{"Error": ...}` naming the field, never a 500: neither result type has an Error field, so
kube-scheduler reads the status code (and logs the body), as it would a 200 it cannot decode. Scores: hami.scheduler.placement.prioritize; victims:
hami.scheduler.preemption.victims; PDBs: hami.kubesched.pdb over the PDB informer.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hami.device import codec
from hami.kube.client import ApiError
from hami.kube.informer import Informer
from hami.kubesched import pdb as pdbmod
from hami.obs.log import get_logger
from hami.scheduler.cache.state import VGPU_NODE
from hami.scheduler.extender.server import Assumed
from hami.scheduler.placement import fit as fitmod
from hami.scheduler.placement import score as scoremod
from hami.scheduler.placement.prioritize import scale_scores
from hami.scheduler.placement.vendorrules import METAX_APP_CLASS
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


def _victims_arg(args: dict) -> dict[str, list[str]]:
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


def _may_go(pod: dict | None, preemptor_priority: int, node: str) -> bool:
    """A pod preemption may evict: bound to the node (kube-scheduler refuses a victim its cache
    does not hold there), lower priority than the preemptor and not already terminating."""
    return (pod is not None and (pod.get("spec") or {}).get("nodeName") == node
            and _priority(pod) < preemptor_priority and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def _start_time(pod: dict | None) -> str:
    return ((pod or {}).get("status") or {}).get("startTime") or "9999"


class ExtraVerbs:
    def __init__(self, ext, pdbs: Informer | None = None):
        self.ext = ext
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
        try:
            requests, num_init = self.ext.requests_fn(pod)
        except ValueError as exc:
            return str(exc)
        if not any(r is not None and r.nums > 0 for r in requests):
            return None
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        return self.ext._pod_request(requests, num_init, meta.get("annotations") or {}, ns,
                                     meta.get("name", ""), self.ext.state.index)

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
            return [{"Host": n, "Score": 0} for n in names]
        index = self.ext.state.index
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        own = index.pod(uid)
        if own is not None:  # score the nodes as they are without this pod's own assumed placement
            index.remove_pod(uid)
        try:
            fits, _ = scoremod.evaluate_nodes(index.nodes, names, preq)
        finally:
            if own is not None:
                index.add_pod(uid, own.node, own.devices, namespace=own.namespace, num_init=own.num_init,
                              init_released=own.init_released, mig=own.mig, app_class=own.app_class)
        return scale_scores({r.node: r.score for r in fits}, names, preq.node_policy)

    # ------------------------------------------------------------------ /preempt

    def preempt(self, body: bytes) -> dict:
        try:
            args = _load(body, "extender preemption args")
            pod = _pod_of(args, "extender preemption args")
            candidates = _victims_arg(args)
        except ShapeError as exc:
            return {"Error": str(exc)}
        preq = self._request(pod)
        if isinstance(preq, str):
            return {"Error": preq}
        state = self.ext.state
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
        prio = _priority(pod)
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
                if u not in pods and _may_go(p := state.pod_by_uid(u), prio, node):
                    pods[u] = p
            by_importance = sorted(pods, key=lambda u: (-_priority(pods[u]), _start_time(pods[u])))
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

    # ------------------------------------------------------------------ /bind on another node

    async def place_on(self, ns: str, name: str, uid: str, node: str) -> str:
        """kube-scheduler chose `node` among the fitting ones; re-place the pod there when /filter
        assumed another. Returns "" or the error for ExtenderBindingResult."""
        ext = self.ext
        assumed = ext.assumed.get(uid)
        pod = ext.state.pod(ns, name)
        # what /filter placed: this replica's memory, else the annotation (another replica, a restart)
        placed = assumed.node if assumed is not None else (
            ((pod or {}).get("metadata") or {}).get("annotations") or {}).get(VGPU_NODE)
        if not placed or placed == node:
            return ""
        if pod is None:
            return f'pods "{name}" not found'
        preq = self._request(pod)
        if not isinstance(preq, fitmod.PodRequest):
            return preq or ""
        index = ext.state.index
        old = index.pod(uid)
        index.remove_pod(uid)
        usage = index.node(node)
        r = fitmod.try_pod(usage, preq) if usage is not None else "node unregistered"
        if r.__class__ is str:
            if old is not None:
                index.add_pod(uid, old.node, old.devices, namespace=old.namespace, num_init=old.num_init,
                              init_released=old.init_released, mig=old.mig, app_class=old.app_class)
            return f"pod {ns}/{name} no longer fits node {node}: {r}"
        devices, mig = r
        now = ext.clock()
        text = codec.encode_pod_devices(devices)
        annotations = {VGPU_NODE: node, codec.VGPU_TIME_ANNOTATION: codec.encode_unix_seconds(now),
                       codec.TO_ALLOCATE_ANNOTATION: text, codec.ALLOCATED_ANNOTATION: text,
                       codec.MIG_ALLOCATIONS_ANNOTATION: codec.encode_mig_allocations(
                           codec.MigAllocation(c, d, u, p, pl) for c, d, u, p, pl in mig) if mig else None}
        num_init = len((pod.get("spec") or {}).get("initContainers") or [])
        index.add_pod(uid, node, devices, namespace=ns, num_init=num_init, mig=tuple((u, pl) for _, _, u, _, pl in mig),
                      app_class=((pod.get("metadata") or {}).get("annotations") or {}).get(METAX_APP_CLASS, ""))
        ext.assumed[uid] = Assumed(node, ns, name, devices, now)
        if ext.client is not None:
            try:
                await ext.client.patch_pod(ns, name, {"metadata": {"annotations": annotations,
                                                                   "labels": {VGPU_NODE: node}}})
            except ApiError as exc:
                index.remove_pod(uid)
                ext.assumed.pop(uid, None)
                return str(exc)
        log.v(3).info("Pod re-placed on kube-scheduler's choice", pod=f"{ns}/{name}", node=node,
                      hami_choice=placed, devices=text)
        return ""


def _priority(pod: dict | None) -> int:
    value = ((pod or {}).get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0
