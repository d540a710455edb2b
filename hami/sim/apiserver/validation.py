"""The validation hooks the resource table's rows bring (hami.sim.apiserver.resources: `validate`).

A hook sees one write and answers the first invalid field as `(field, message)` (or `(field, message,
reason)` when the cause is not FieldValueInvalid), or None; the store turns that into the API server's 422
naming the field. A create has no `old`. The store's own state a hook may need (the CEL compiler,
a namespace's labels) comes through `WriteContext`, so every hook stays a pure function of its write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hami.sim.apiserver import dravalidate, nodestatus, podupdate
from hami.sim.controllers import jobspec


class WriteContext(Protocol):
    def cel_check(self) -> Callable[..., Any]:
        """The CEL selector check, compiled on first use (celpy is loaded only where DRA objects are written)."""

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The labels of a stored namespace; {} when it is not stored."""


@dataclass(frozen=True, slots=True)
class Write:
    key: str  # the resource's store key
    obj: dict
    subresource: str
    old: dict | None
    context: WriteContext


Problem = tuple[str, str] | tuple[str, str, str] | None
Validator = Callable[[Write], Problem]


def node_quantities(write: Write) -> Problem:
    """Nodes: their capacity and allocatable quantities."""
    errors = nodestatus.resource_errors(write.obj)
    return errors[0] if errors else None


def pod_update(write: Write) -> Problem:
    """Pods: kube-apiserver's ValidatePodUpdate on an update of the pod itself (hami.sim.apiserver.podupdate),
    after the row's `prepare_update`; a create, and the status subresource (its spec is the stored one), pass."""
    if write.old is None or write.subresource:
        return None
    old_spec = write.old.get("spec") if isinstance(write.old.get("spec"), dict) else {}
    try:
        podupdate.validate_update(old_spec, write.obj.get("spec") or {})
    except podupdate.PodUpdateInvalid as exc:
        detail = f"{exc.kind}: {exc.detail}" if exc.detail else exc.kind
        return exc.field, detail, "FieldValueForbidden" if exc.kind == "Forbidden" else "FieldValueInvalid"
    return None


def job_spec(write: Write) -> Problem:
    """Jobs: hami.sim.controllers.jobspec.validate (the status subresource is the controller's own)."""
    if write.subresource == "status":
        return None
    try:
        jobspec.validate(write.obj)
    except jobspec.FieldInvalid as exc:
        return exc.field, exc.message
    return None


def dra_object(write: Write) -> Problem:
    """resource.k8s.io objects: hami.sim.apiserver.dravalidate, with the namespace's admin-access label."""
    ns = (write.obj.get("metadata") or {}).get("namespace") or ""
    labels = write.context.namespace_labels(ns)
    try:
        dravalidate.validate(write.key, write.obj, write.context.cel_check(), subresource=write.subresource,
                             old=write.old,
                             admin_access_allowed=labels.get(dravalidate.ADMIN_ACCESS_LABEL) == "true")
    except dravalidate.FieldInvalid as exc:
        return exc.field, exc.message
    return None
