"""The resource table of the embedded API server: what it serves and how discovery describes it.

Pure data. `RESOURCES` is keyed by `(group, version, plural)`; group "" is the core API (`/api/v1`).
A row brings its own validation hook (`validate`, hami.sim.apiserver.validation), which the store calls
on every write of that resource, and, where the stored object keeps what an update's body leaves out,
its update hook (`prepare_update`, kube's PrepareForUpdate), which the store calls before validating.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hami.sim.apiserver import podupdate, validation
from hami.sim.apiserver.validation import Validator

# Fields every resource can be selected on.
_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "binding"
    fields: frozenset[str] = _META_FIELDS  # field-selector labels the server accepts
    storage: str = ""  # another resource's key when this one is a view of its objects
    verbs: tuple[str, ...] = ()  # discovery's verbs when not the usual CRUD set (create-only reviews)
    validate: Validator | None = None  # the API server's checks of a write (422 naming the field)
    # (stored object, the update's new object, subresource): fills in what the body may leave out
    prepare_update: Callable[[dict, dict, str], None] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


_POD_FIELDS = _META_FIELDS | {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
}
_EVENT_FIELDS = _META_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}
_NEW_EVENT_FIELDS = _META_FIELDS | {
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
}

_ALL = (
    Resource("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",), ("status",),
             _META_FIELDS | {"status.phase"}),
    Resource("", "v1", "nodes", "node", "Node", False, ("no",), ("status",),
             _META_FIELDS | {"spec.unschedulable"}, validate=validation.node_quantities),
    Resource("", "v1", "pods", "pod", "Pod", True, ("po",), ("status", "binding", "log", "eviction"), _POD_FIELDS,
             validate=validation.pod_update, prepare_update=podupdate.prepare_update),
    Resource("", "v1", "events", "event", "Event", True, ("ev",), (), _EVENT_FIELDS),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "resourcequotas", "resourcequota", "ResourceQuota", True, ("quota",), ("status",)),
    Resource("events.k8s.io", "v1", "events", "event", "Event", True, (), (), _NEW_EVENT_FIELDS, storage="events"),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    Resource("batch", "v1", "jobs", "job", "Job", True, (), ("status",), validate=validation.job_spec),
    Resource("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True,
             ("pdb",), ("status",)),
    # Dynamic Resource Allocation (validated by hami.sim.apiserver.dravalidate)
    Resource("resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", False,
             validate=validation.dra_object),
    Resource("resource.k8s.io", "v1", "resourceclaims", "resourceclaim", "ResourceClaim", True, (), ("status",),
             validate=validation.dra_object),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate",
             True, validate=validation.dra_object),
    Resource("resource.k8s.io", "v1", "resourceslices", "resourceslice", "ResourceSlice", False, (), (),
             _META_FIELDS | {"spec.nodeName", "spec.driver", "spec.pool.name"}, validate=validation.dra_object),
    # the Priority admission reads them (hami.sim.apiserver.priority)
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", False, ("pc",)),
    # answered, never stored (hami.sim.apiserver.authz)
    Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "", "SelfSubjectAccessReview", False,
             verbs=("create",)),
)

RESOURCES: dict[tuple[str, str, str], Resource] = {(r.group, r.version, r.plural): r for r in _ALL}
BY_KEY: dict[str, Resource] = {r.key: r for r in _ALL}
GROUPS: dict[str, tuple[str, ...]] = {}
for _r in _ALL:
    if _r.group and _r.version not in GROUPS.get(_r.group, ()):
        GROUPS[_r.group] = GROUPS.get(_r.group, ()) + (_r.version,)
del _r

# Status subresources replace .status only; the main resource ignores .status on update.
STATUS_ONLY_ON_SUBRESOURCE = frozenset({"pods", "nodes", "namespaces", "resourcequotas",
                                        "resourceclaims.resource.k8s.io"})


# events.k8s.io/v1 Event <-> core/v1 Event: one stored object, two shapes (as on a real server).
_EVENT_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)
_TO_V1 = dict(_EVENT_RENAMES)
_TO_CORE = {v: k for k, v in _EVENT_RENAMES}


def event_to_view(core: dict) -> dict:
    """A stored core/v1 Event as events.k8s.io/v1 shows it."""
    out = {_TO_V1.get(k, k): v for k, v in core.items()}
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    if not out.get("eventTime"):
        # A real server shows `null` for core events without one, and kubernetes-asyncio's model then
        # refuses the object; derive it from the first timestamp instead.
        ts = out.get("deprecatedFirstTimestamp") or (core.get("metadata") or {}).get("creationTimestamp") or ""
        if ts.endswith("Z") and "." not in ts:
            out["eventTime"] = ts[:-1] + ".000000Z"
    return out


def event_from_view(view: dict) -> dict:
    """An events.k8s.io/v1 Event in the core/v1 shape it is stored in."""
    out = {_TO_CORE.get(k, k): v for k, v in view.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def event_field_to_core(field: str) -> str:
    """`regarding.name` -> `involvedObject.name`, `reportingController` -> `reportingComponent`."""
    head, dot, rest = field.partition(".")
    return _TO_CORE.get(head, head) + dot + rest


def resource_list(group: str, version: str) -> dict:
    """The APIResourceList document for `/api/v1` or `/apis/<group>/<version>`."""
    items = []
    for r in _ALL:
        if r.group != group or r.version != version:
            continue
        items.append({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs) if r.verbs else list(_VERBS) + ["deletecollection"],
            **({"shortNames": list(r.short_names)} if r.short_names else {}),
            **({"categories": ["all"]} if r.key == "pods" else {}),
        })
        for sub in r.subresources:
            if sub == "status":
                items.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": ["get", "patch", "update"]})
            elif sub == "binding":
                items.append({"name": f"{r.plural}/binding", "singularName": "", "namespaced": True,
                              "kind": "Binding", "verbs": ["create"]})
            elif sub == "eviction":
                items.append({"name": f"{r.plural}/eviction", "singularName": "", "namespaced": True,
                              "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
            elif sub == "log":
                items.append({"name": f"{r.plural}/log", "singularName": "", "namespaced": True,
                              "kind": "Pod", "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": items}


def openapi_v3_index() -> dict:
    """`/openapi/v3`: where each group-version's document lives."""
    gvs = ["api/v1"] + [f"apis/{g}/{v}" for g, versions in GROUPS.items() for v in versions]
    return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=hami-sim"} for gv in gvs}}


def openapi_v3(group: str, version: str) -> dict:
    """A minimal OpenAPI v3 document for one group-version: no schemas, but every object path with
    a PATCH and POST that accept `fieldValidation`, which tells kubectl (1.27+) that the server
    validates, so `kubectl create -f` / `apply -f` need no client-side schema."""
    param = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
    paths = {}
    for r in _ALL:
        if r.group != group or r.version != version:
            continue
        base = "/api/v1" if not group else f"/apis/{group}/{version}"
        coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
        gvk = {"group": group, "version": version, "kind": r.kind}
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": param,
              "responses": {"200": {"description": "OK"}}}
        paths[coll] = {"post": {**op, "operationId": f"create{r.kind}"}}
        paths[coll + "/{name}"] = {"patch": {**op, "operationId": f"patch{r.kind}"}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.31.0"}, "paths": paths,
            "components": {"schemas": {}}}


def group_list() -> dict:
    """The APIGroupList document for `/apis`."""
    groups = []
    for name, versions in GROUPS.items():
        gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        groups.append({"name": name, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
