"""What kube-apiserver's ValidateNode checks of a Node's `status.capacity` and `status.allocatable`
(pkg/apis/core/validation: validateResourceName, ValidateResourceQuantityValue). Pure.

* a key is a standard resource (no `/`, e.g. `cpu`, `hugepages-2Mi`) or a fully qualified name
  (`nvidia.com/gpumem`);
* a value is a quantity, never negative;
* an extended resource (a qualified name outside `kubernetes.io/`) and the integer standard ones
  (`pods`) hold whole numbers: `1.5` or `500m` is refused, `2k` is not.

A write that breaks one is answered 422 Invalid naming the field, as on a real server, so a node agent
that writes a bad quantity fails here the way it would there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hami.device.codec import CodecError
from hami.device.request import parse_quantity

_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_INTEGER_STANDARD = frozenset({"pods", "services", "replicationcontrollers", "resourcequotas", "secrets",
                               "configmaps", "persistentvolumeclaims"})


def is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: qualified, outside kubernetes.io, not a quota `requests.` key."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io")) and bool(_QUALIFIED.match(name))


def resource_errors(node: Mapping) -> list[tuple[str, str]]:
    """(field, message) for each bad capacity or allocatable entry, in field order."""
    errors = []
    status = node.get("status") or {}
    for section in ("capacity", "allocatable"):
        values = status.get(section) if isinstance(status, Mapping) else None
        if not isinstance(values, Mapping):
            continue
        for name in sorted(values):
            field = f"status.{section}[{name}]"
            value = values[name]
            if not isinstance(name, str) or not _QUALIFIED.match(name) or ("/" not in name and "." in name):
                errors.append((field, f"Invalid value: {name!r}: must be a standard resource type or fully qualified"))
                continue
            try:
                q = parse_quantity(value, field=field)
            except CodecError as exc:
                errors.append((field, f"Invalid value: {value!r}: {exc}"))
                continue
            if q < 0:
                errors.append((field, f"Invalid value: {value!r}: must be greater than or equal to 0"))
            elif (is_extended(name) or name in _INTEGER_STANDARD) and q.denominator != 1:
                errors.append((field, f"Invalid value: {value!r}: must be an integer"))
    return errors
