"""kube-apiserver's pod update validation for the embedded server (pure).

pkg/apis/core/validation ValidatePodUpdate: a pod's spec is immutable through an UPDATE or PATCH of the
pod itself except `spec.containers[*].image`, `spec.initContainers[*].image`,
`spec.activeDeadlineSeconds` (set from none, or lowered, never removed), `spec.tolerations` (only
additions to the existing ones), `spec.schedulingGates` (only removals) and
`spec.terminationGracePeriodSeconds` (to 1 where it was negative), and, while the pod is gated,
additions to `spec.nodeSelector` (kube's node-affinity additions for gated pods are not modelled:
they are refused here). Containers may not be added or removed. Anything else, `spec.priority`,
`spec.priorityClassName`, `spec.nodeName` (a Binding sets it), `spec.schedulerName` or a container's resources included,
is 422 Invalid with kube-apiserver's text. A pod's scheduling inputs are therefore what admission saw at CREATE: a
tenant cannot raise its priority after admission, nor move itself to a node.

Before comparing, the Priority admission plugin's update rule is applied (plugin/pkg/admission/priority):
a body without `spec.priority` or `spec.preemptionPolicy` keeps the stored ones, as kube-apiserver
does, so a client that drops them is not refused. The status subresource never reaches here (its
spec is the stored one).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

UPDATABLE = ("`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
             "`spec.tolerations` (only additions to existing tolerations),"
             "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
MAX_INT32 = 2**31 - 1


class PodUpdateInvalid(ValueError):
    """One forbidden or invalid change: `field` (kube's field path), `kind` ("Forbidden"/"Invalid"), `detail`."""

    def __init__(self, field: str, kind: str, detail: str):
        self.field, self.kind, self.detail = field, kind, detail
        super().__init__(f"{field}: {kind}: {detail}")


def prepare_update(old: Mapping, new: dict, subresource: str) -> None:
    """The pods row's update hook (hami.sim.apiserver.resources: `prepare_update`): on a write of the pod
    itself, a spec that is not an object is an empty one, and the Priority admission plugin's rule
    (`carry_priority`) applies before the validation hook compares the specs."""
    if subresource:
        return
    old_spec = old.get("spec") if isinstance(old.get("spec"), dict) else {}
    spec = new.get("spec")
    if not isinstance(spec, dict):
        spec = new["spec"] = {}
    carry_priority(old_spec, spec)


def carry_priority(old_spec: Mapping, new_spec: dict) -> None:
    """The Priority admission plugin on UPDATE: keep the stored priority and preemption policy where
    the body has none."""
    for key in ("priority", "preemptionPolicy"):
        if new_spec.get(key) is None and old_spec.get(key) is not None:
            new_spec[key] = old_spec[key]


def _containers(spec: Mapping, group: str) -> list:
    value = spec.get(group)
    return value if isinstance(value, list) else []


def _check_containers(old: Mapping, new: Mapping, group: str) -> None:
    olds, news = _containers(old, group), _containers(new, group)
    if len(olds) != len(news):
        raise PodUpdateInvalid(f"spec.{group}", "Forbidden", "pod updates may not add or remove containers")
    for i, ctr in enumerate(news):
        if isinstance(ctr, Mapping) and not ctr.get("image"):
            raise PodUpdateInvalid(f"spec.{group}[{i}].image", "Required value", "")


def _check_deadline(old: Mapping, new: Mapping) -> None:
    at = "spec.activeDeadlineSeconds"
    before, after = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    if after is not None:
        if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= MAX_INT32:
            raise PodUpdateInvalid(at, "Invalid", f"value: {after!r}: must be between 0 and {MAX_INT32}, inclusive")
        if isinstance(before, int) and before < after:
            raise PodUpdateInvalid(at, "Invalid", f"value: {after}: must be less than or equal to previous value")
    elif before is not None:
        raise PodUpdateInvalid(at, "Invalid", "value: null: must not update from a positive integer to nil value")


def _check_tolerations(old: Mapping, new: Mapping) -> None:
    olds, news = old.get("tolerations") or [], new.get("tolerations") or []
    for i, t in enumerate(olds):
        if t not in news:
            raise PodUpdateInvalid(f"spec.tolerations[{i}]", "Forbidden",
                                   "existing toleration can not be modified except its tolerationSeconds")


def _check_gates(old: Mapping, new: Mapping) -> None:
    olds, news = old.get("schedulingGates") or [], new.get("schedulingGates") or []
    for i, g in enumerate(news):
        if g not in olds:
            raise PodUpdateInvalid(f"spec.schedulingGates[{i}]", "Forbidden", "only deletion is allowed, "
                                   "but found new scheduling gate")


def validate_update(old_spec: Mapping, new_spec: Mapping) -> None:
    """Raise PodUpdateInvalid for the first change kube-apiserver refuses (module docstring)."""
    if old_spec == new_spec:
        return
    for group in ("containers", "initContainers"):
        _check_containers(old_spec, new_spec, group)
    _check_deadline(old_spec, new_spec)
    _check_tolerations(old_spec, new_spec)
    _check_gates(old_spec, new_spec)
    munged = copy.deepcopy(dict(new_spec))
    for group in ("containers", "initContainers"):
        for ctr, was in zip(_containers(munged, group), _containers(old_spec, group), strict=True):
            if isinstance(ctr, dict) and isinstance(was, Mapping):
                if "image" in was:
                    ctr["image"] = was["image"]
                else:
                    ctr.pop("image", None)
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        if key in old_spec:
            munged[key] = old_spec[key]
        else:
            munged.pop(key, None)
    if old_spec.get("schedulingGates"):  # a gated pod may gain node selector terms, never lose or change one
        selector, was = munged.get("nodeSelector") or {}, old_spec.get("nodeSelector") or {}
        if isinstance(selector, Mapping) and all(selector.get(k) == v for k, v in was.items()):
            munged["nodeSelector"] = old_spec.get("nodeSelector")
            if munged["nodeSelector"] is None:
                munged.pop("nodeSelector")
    grace_was = old_spec.get("terminationGracePeriodSeconds")
    if isinstance(grace_was, int) and grace_was < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = grace_was
    if munged != old_spec:
        changed = sorted(k for k in set(munged) | set(old_spec) if munged.get(k) != old_spec.get(k))
        raise PodUpdateInvalid("spec", "Forbidden", f"pod updates may not change fields other than {UPDATABLE}\n"
                                                    f"changed: {', '.join(f'spec.{k}' for k in changed)}")
