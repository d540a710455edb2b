"""What the scheduler's watch caches keep of each pod and node (pure, no I/O).

The informers store these projections (`Informer(transform=...)`), not the objects as listed:
at 40,000 pods the full dicts were most of the scheduler's memory, and most of a real pod
(managedFields, env, volumes, probes, container statuses) is never read again. Each field kept
below has a reader; a new reader of another field must add it here (tests/scheduler/test_project.py
lists them).

Pods keep
  metadata: name, namespace, uid, resourceVersion, labels (PDB selectors), annotations (HAMi's
            placement, bind phase, use/nouse filters, every vendor's keys), deletionTimestamp
  spec:     nodeName, schedulerName, priority (/preempt order), schedulingGroup (gang binds),
            resourceClaims (--dra: the templates a pod references, hami.dra.templates),
            containers and initContainers as {name, resources} (the device requests); of a pod
            without nodeName also priorityClassName, preemptionPolicy, nodeSelector, affinity, tolerations
            (GPU preemption), and its metadata.creationTimestamp (the missed-webhook watcher waits on it
            from the cache instead of reading the pod from the API)
  status:   phase, startTime (/preempt order), initContainerStatuses as {name, state.terminated.exitCode},
            resourceClaimStatuses (--dra: a quota reservation counts until the pod's claims exist);
            of a pod without nodeName also nominatedNodeName and a PodScheduled=False condition
            {type, status, message} (GPU preemption on every replica)
Nodes keep
  metadata: name, uid, resourceVersion, labels, annotations (registrations, handshakes, locks,
            cordons, pair scores of every vendor)
  spec:     taints, unschedulable (GPU preemption's refit)
  status:   capacity, allocatable (handshake counts, vendors registered by capacity)

Identical parts (the containers of one ReplicaSet, equal label sets, a status that is only a
phase) are stored once through `Shared`, and the short strings many objects repeat (namespace,
node names, scheduler name, phase, the placement node and bind phase) are interned. Cached objects
are never mutated (the informer contract), which is what makes sharing safe.
"""

from __future__ import annotations

import sys

import orjson

from hami.device import codec

_POD_META = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp")
_POD_SPEC = ("nodeName", "schedulerName", "priority", "schedulingGroup", "resourceClaims")
# Kept of pending pods only (few at a time): what GPU preemption reads on every replica (preempt_share).
_PENDING_SPEC = ("priorityClassName", "preemptionPolicy", "nodeSelector", "affinity", "tolerations")
_NODE_META = ("name", "uid", "resourceVersion", "labels", "annotations")
_NODE_STATUS = ("capacity", "allocatable")
_NODE_SPEC = ("taints", "unschedulable")  # GPU preemption's refit on the leader (hami.kubesched.taints)
# Annotation values shared by many pods: the node they are placed on, the bind phase.
_INTERNED_ANNOTATIONS = (codec.VGPU_NODE_ANNOTATION, codec.BIND_PHASE_ANNOTATION)


class Shared:
    """Equal JSON values stored once: `share(value)` returns the first equal value seen.

    Keyed by the value's JSON bytes. Values no cached object holds any more are dropped when the
    table has doubled since the last sweep, so it stays proportional to the distinct values in use.
    """

    def __init__(self, min_sweep: int = 1024):
        self._by_json: dict[bytes, object] = {}
        self._min_sweep = min_sweep
        self._sweep_at = min_sweep

    def __len__(self) -> int:
        return len(self._by_json)

    def share(self, value):
        if value is None:
            return None
        key = orjson.dumps(value)
        got = self._by_json.get(key)
        if got is not None:
            return got
        self._by_json[key] = value
        if len(self._by_json) > self._sweep_at:
            self.sweep()
        return value

    def sweep(self) -> None:
        table = self._by_json
        for key in list(table):
            if sys.getrefcount(table[key]) <= 2:  # the table's reference and the call's argument
                del table[key]
        self._sweep_at = max(self._min_sweep, 2 * len(table))


def _intern(value):
    return sys.intern(value) if type(value) is str else value


def _pick(obj, keys: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        return {}
    return {k: obj[k] for k in keys if k in obj}


def _containers(items, shared: Shared):
    if not isinstance(items, list):
        return items
    out = []
    for c in items:
        if isinstance(c, dict):
            c = {k: c[k] for k in ("name", "resources") if k in c}
        out.append(c)
    return shared.share(out)


def _init_statuses(items):
    if not isinstance(items, list):
        return items
    out = []
    for st in items:
        if not isinstance(st, dict):
            out.append(st)
            continue
        state = st.get("state")
        term = state.get("terminated") if isinstance(state, dict) else None
        kept: dict = {}
        if isinstance(term, dict):
            kept = {"terminated": {"exitCode": term["exitCode"]} if "exitCode" in term else {}}
        entry = {"state": kept}
        if "name" in st:
            entry = {"name": st["name"], "state": kept}
        out.append(entry)
    return out


def _pending_status(status: dict, st: dict) -> None:
    """A pending pod's nomination and kube-scheduler's PodScheduled=False condition (GPU preemption)."""
    if "nominatedNodeName" in status:
        st["nominatedNodeName"] = status["nominatedNodeName"]
    conds = status.get("conditions")
    if isinstance(conds, list):
        kept = [{k: c[k] for k in ("type", "status", "message") if k in c} for c in conds
                if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"]
        if kept:
            st["conditions"] = kept


def project_pod(obj: dict, shared: Shared) -> dict:
    """The fields of a pod the scheduler reads (module docstring), sharing what repeats."""
    out: dict = {}
    meta = _pick(obj.get("metadata"), _POD_META)
    if "namespace" in meta:
        meta["namespace"] = _intern(meta["namespace"])
    if isinstance(meta.get("labels"), dict):
        meta["labels"] = shared.share(meta["labels"])
    annos = meta.get("annotations")
    if isinstance(annos, dict):
        for key in _INTERNED_ANNOTATIONS:
            if key in annos:
                annos[key] = _intern(annos[key])
    out["metadata"] = meta
    spec = obj.get("spec")
    if isinstance(spec, dict):
        ps = _pick(spec, _POD_SPEC)
        if not spec.get("nodeName"):
            ps.update(_pick(spec, _PENDING_SPEC))
            created = (obj.get("metadata") or {}).get("creationTimestamp")
            if created is not None:
                meta["creationTimestamp"] = created
        for key in ("nodeName", "schedulerName"):
            if key in ps:
                ps[key] = _intern(ps[key])
        for key in ("initContainers", "containers"):
            if key in spec:
                ps[key] = _containers(spec[key], shared)
        out["spec"] = ps
    elif "spec" in obj:
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict):
        st: dict = {}
        if "phase" in status:
            st["phase"] = _intern(status["phase"])
        if "startTime" in status:
            st["startTime"] = status["startTime"]
        if "initContainerStatuses" in status:
            st["initContainerStatuses"] = _init_statuses(status["initContainerStatuses"])
        if status.get("resourceClaimStatuses"):
            st["resourceClaimStatuses"] = status["resourceClaimStatuses"]
        if isinstance(spec, dict) and not spec.get("nodeName"):
            _pending_status(status, st)
        out["status"] = shared.share(st) if len(st) <= 1 else st
    elif "status" in obj:
        out["status"] = status
    return out


def project_node(obj: dict, shared: Shared) -> dict:
    """The fields of a node the scheduler reads (module docstring)."""
    meta = _pick(obj.get("metadata"), _NODE_META)
    if "name" in meta:
        meta["name"] = _intern(meta["name"])
    out: dict = {"metadata": meta}
    spec = _pick(obj.get("spec"), _NODE_SPEC)
    if spec:
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict):
        st = _pick(status, _NODE_STATUS)
        for key in _NODE_STATUS:
            if isinstance(st.get(key), dict):
                st[key] = shared.share(st[key])
        out["status"] = st
    return out
