"""kube-apiserver's Priority admission plugin for the embedded server (pure over the store's objects).

plugin/pkg/admission/priority/admission.go: on pod CREATE, `spec.priorityClassName` names a
scheduling.k8s.io/v1 PriorityClass whose `value` becomes `spec.priority` and whose
`preemptionPolicy` (default PreemptLowerPriority) becomes `spec.preemptionPolicy`. No class named:
the class marked `globalDefault: true` (the lowest value when several are), else priority 0. A class
that does not exist is refused (403 Forbidden, "no PriorityClass with name X was found"), and so is a
pod that sets `spec.priority` to anything but what its class gives. The two system classes
(`system-cluster-critical`, `system-node-critical`) exist on every cluster; here they resolve
without being stored. Only pods created over HTTP are admitted: the store's own `create` is the
server's storage layer, below admission, as for the mutating webhook.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami.apierror import ApiError

PREEMPT_LOWER = "PreemptLowerPriority"
NEVER = "Never"
SYSTEM_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
# PriorityClasses a user may create are at most this (HighestUserDefinablePriority).
HIGHEST_USER_PRIORITY = 1000000000


def _forbidden(name: str, message: str) -> ApiError:
    return ApiError(403, "Forbidden", f'pods "{name}" is forbidden: {message}',
                    {"name": name, "kind": "pods"})


def resolve(class_name: str, classes: Iterable[Mapping]) -> tuple[int, str, str] | None:
    """(priority, preemptionPolicy, class name) for a pod naming `class_name` ("": the global
    default); None when the named class does not exist."""
    by_name = {(c.get("metadata") or {}).get("name"): c for c in classes}
    if not class_name:
        defaults = [c for c in by_name.values() if c.get("globalDefault") is True and isinstance(c.get("value"), int)]
        if not defaults:
            return 0, PREEMPT_LOWER, ""
        best = min(defaults, key=lambda c: c["value"])
        return best["value"], best.get("preemptionPolicy") or PREEMPT_LOWER, best["metadata"]["name"]
    if class_name in SYSTEM_CLASSES and class_name not in by_name:
        return SYSTEM_CLASSES[class_name], PREEMPT_LOWER, class_name
    pc = by_name.get(class_name)
    if pc is None or not isinstance(pc.get("value"), int):
        return None
    return pc["value"], pc.get("preemptionPolicy") or PREEMPT_LOWER, class_name


def admit_pod(pod: dict, classes: Iterable[Mapping]) -> dict:
    """Fill spec.priority / spec.preemptionPolicy (and the default class name) in place; raise
    ApiError 403 as kube-apiserver does."""
    if pod.get("spec") is None:
        pod["spec"] = {}
    spec = pod["spec"]
    if not isinstance(spec, dict):
        return pod  # not an object: the store's validation answers
    name = str((pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName") or "")
    class_name = spec.get("priorityClassName") or ""
    if not isinstance(class_name, str):
        raise _forbidden(name, "spec.priorityClassName must be a string")
    got = resolve(class_name, classes)
    if got is None:
        raise _forbidden(name, f"no PriorityClass with name {class_name} was found")
    value, policy, resolved_name = got
    given = spec.get("priority")
    if given is not None and given != value:
        raise _forbidden(name, f"the integer value of priority ({given}) must not be provided in pod spec; "
                               f"priority admission controller computed {value} from the given PriorityClass name")
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise _forbidden(name, f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
                               f"pod spec; priority admission controller computed {policy} from the given "
                               "PriorityClass name")
    spec["priority"] = value
    spec["preemptionPolicy"] = policy
    if resolved_name:
        spec["priorityClassName"] = resolved_name
    return pod


def validate_class(pc: Mapping) -> None:
    """What kube-apiserver's validation refuses in a PriorityClass (422), before it is stored."""
    name = str((pc.get("metadata") or {}).get("name") or "")

    def invalid(field: str, message: str) -> ApiError:
        return ApiError(422, "Invalid", f'PriorityClass.scheduling.k8s.io "{name}" is invalid: {field}: {message}',
                        {"name": name, "group": "scheduling.k8s.io", "kind": "PriorityClass",
                         "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]})
    value = pc.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid("value", "Required value: an integer")
    if name.startswith("system-") and name not in SYSTEM_CLASSES:
        raise invalid("metadata.name", "Invalid value: the name prefix 'system-' is reserved")
    if value > HIGHEST_USER_PRIORITY and name not in SYSTEM_CLASSES:
        raise invalid("value", f"Invalid value: {value}: maximum allowed value of a user defined priority is "
                               f"{HIGHEST_USER_PRIORITY}")
    policy = pc.get("preemptionPolicy")
    if policy is not None and policy not in (PREEMPT_LOWER, NEVER):
        raise invalid("preemptionPolicy", f'Unsupported value: "{policy}": supported values: '
                                          f'"{NEVER}", "{PREEMPT_LOWER}"')
    if pc.get("globalDefault") not in (None, True, False):
        raise invalid("globalDefault", "Invalid value: must be a boolean")
