"""What the scheduler's watch caches keep of each pod and node (pure, no I/O).

The informers store these projections (`Informer(transform=...)`), not the objects as listed:
at 40,000 pods the full dicts were most of the scheduler's memory, and most of a real pod
(managedFields, env, volumes, probes, container statuses) is never read again. Each field kept
below has a reader; a new reader of another field must add it here (tests/scheduler/test_project.py
lists them).

Pods keep
  metadata: name, namespace, uid, resourceVersion, labels (PDB selectors), annotations (HAMi's
            placement, bind phase, use/nouse filters, every vendor's keys; all but HAMi's vgpu-time
            and kubectl's last-applied-configuration, which nothing reads), deletionTimestamp
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
phase, a bound pod's spec shared by its replicas on one node, a done devices-to-allocate) are stored
once through `Shared`, and the short strings many objects repeat (namespace, node names, scheduler
name, phase, the placement node and bind phase) are interned. Cached objects are never mutated (the
informer contract), which is what makes sharing safe.
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
# Annotations no reader of the cache uses, not kept: HAMi's placement time (written with the
# placement, never read back) and kubectl's copy of the whole applied object (kilobytes a pod).
_UNREAD_ANNOTATIONS = frozenset((codec.VGPU_TIME_ANNOTATION, "kubectl.kubernetes.io/last-applied-configuration"))
# Once every container's devices are allocated, devices-to-allocate is `;` per container on every
# bound pod: stored once per value (through `Shared`, so a value no pod holds any more goes).
_DONE_TO_ALLOCATE_MAX = 16
# A bound pod's spec with only these keys is stored once per node, scheduler, priority and
# containers: the replicas of one ReplicaSet on one node (4 kept dicts a pod become 3).
_SHAREABLE_SPEC = frozenset(("nodeName", "schedulerName", "priority", "initContainers", "containers"))
_ABSENT = object()  # a key the spec lacks (a null value is another spec)


class Shared:
    """Equal JSON values stored once: `share(value)` returns the first equal value seen.

    Keyed by the value's JSON bytes, or by a key the caller builds (`share_as`). Values no cached
    object holds any more are dropped when the table has doubled since the last sweep, so it stays
    proportional to the distinct values in use.
    """

    def __init__(self, min_sweep: int = 1024):
        self._by_json: dict[object, object] = {}
        self._min_sweep = min_sweep
        self._sweep_at = min_sweep

    def __len__(self) -> int:
        return len(self._by_json)

    def share(self, value):
        if value is None:
            return None
        return self.share_as(orjson.dumps(value), value)

    def share_as(self, key: tuple | bytes, value):
        """`value` under a key equal for equal values only; a key naming an object by `id()` is
        sound only if `value` holds that object (then no other object can take its id while the
        entry lives)."""
        got = self._by_json.get(key)
        if got is not None:
            return got
        self._by_json[key] = value
        if len(self._by_json) > self._sweep_at:
            self.sweep()
        return value

    def sweep(self) -> None:
        table = self._by_json
        # Newest first: a shared value holding another (a spec its containers) came in after it,
        # so dropping it first lets the one it held go in the same sweep.
        for key in reversed(list(table)):
            if sys.getrefcount(table[key]) <= 2:  # the table's reference and the call's argument
                del table[key]
        self._sweep_at = max(self._min_sweep, 2 * len(table))


def _intern(value):
    return sys.intern(value) if type(value) is str else value


def _pick(obj, keys: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        return {}
    return {k: obj[k] for k in keys if k in obj}


def _annotations(annos: dict, shared: Shared) -> dict:
    if not _UNREAD_ANNOTATIONS.isdisjoint(annos):
        annos = {k: v for k, v in annos.items() if k not in _UNREAD_ANNOTATIONS}
    for key in _INTERNED_ANNOTATIONS:
        if key in annos:
            annos[key] = _intern(annos[key])
    done = annos.get(codec.TO_ALLOCATE_ANNOTATION)
    if type(done) is str and len(done) <= _DONE_TO_ALLOCATE_MAX:
        annos[codec.TO_ALLOCATE_ANNOTATION] = shared.share(done)
    return annos


def _containers(items, shared: Shared):
    if not isinstance(items, list):
        return items
    out = []
    for c in items:
        if isinstance(c, dict):
            c = {k: c[k] for k in ("name", "resources") if k in c}
        out.append(c)
    return shared.share(out)


def _bound_spec(ps: dict, shared: Shared) -> dict:
    """A bound pod's spec stored once for equal ones (_SHAREABLE_SPEC); any other spec as it is.

    Keyed without serialising it: the containers are already shared, so equal ones are the same
    objects and their ids stand for them (the shared spec holds them, so the ids stay theirs).
    """
    node, scheduler, priority = ps.get("nodeName"), ps.get("schedulerName"), ps.get("priority")
    if (type(node) is not str or not node or not (scheduler is None or type(scheduler) is str)
            or not (priority is None or type(priority) is int) or not ps.keys() <= _SHAREABLE_SPEC):
        return ps
    absent = _ABSENT
    key = ("spec", node, scheduler if "schedulerName" in ps else absent, priority if "priority" in ps else absent,
           id(ps["initContainers"]) if "initContainers" in ps else absent,
           id(ps["containers"]) if "containers" in ps else absent)
    return shared.share_as(key, ps)


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
        meta["annotations"] = _annotations(annos, shared)
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
        out["spec"] = _bound_spec(ps, shared)
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
