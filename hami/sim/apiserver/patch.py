"""The three PATCH flavours of the Kubernetes API, applied to plain dicts. Pure.

- `application/merge-patch+json` (RFC 7386): maps merge recursively, `null` deletes a key, lists
  and scalars replace.
- `application/strategic-merge-patch+json`: like merge patch, except lists named in `MERGE_KEYS`
  merge item by item on their key (containers and env by name, conditions by type, ...), lists in
  `MERGE_PRIMITIVES` (finalizers) merge as sets, and the directives `$patch` (replace/delete/merge),
  `$retainKeys`, `$deleteFromPrimitiveList/<f>` and `$setElementOrder/<f>` are honoured.
- `application/json-patch+json` (RFC 6902, including `test` and `~0`/`~1` escapes) via `jsonpatch`.

`apply_patch` never mutates its input. Errors are `PatchError(code, message)`: 400 for a body that
is not the right JSON shape, 422 for a patch that cannot be applied, 415 for an unknown type.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer
import orjson

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (MERGE, STRATEGIC, JSON_PATCH)

# Strategic merge: list field name -> merge key (the subset of Kubernetes' schema hami's code uses).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "addresses": "type",
    "taints": "key",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}
MERGE_PRIMITIVES = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch is malformed (400), cannot be applied (422) or has an unsupported type (415)."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.message = message
        super().__init__(message)


def apply_patch(obj: dict, body: bytes | str, content_type: str) -> dict:
    """Return a new object: `obj` with the patch `body` of `content_type` applied."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ctype not in PATCH_TYPES:
        raise PatchError(415, f"the body of the request was in an unknown format - accepted media types "
                              f"include: {', '.join(PATCH_TYPES)}")
    try:
        patch = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PatchError(400, f"error decoding patch: {exc}") from None
    if ctype == JSON_PATCH:
        return json_patch(obj, patch)
    if not isinstance(patch, dict):
        raise PatchError(400, f"error decoding patch: expected a JSON object, got {type(patch).__name__}")
    if ctype == MERGE:
        return merge_patch(obj, patch)
    return strategic_merge_patch(obj, patch)


def json_patch(obj: dict, ops: Any) -> dict:
    if not isinstance(ops, list):
        raise PatchError(400, "error decoding patch: a JSON patch must be a list of operations")
    try:
        result = jsonpatch.JsonPatch(ops).apply(obj, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchError(422, "the server rejected our request due to an error in our request: "
                              f"test failed: {exc}") from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(422, f"the server rejected our request due to an error in our request: {exc}") from None
    except (TypeError, KeyError, AttributeError) as exc:
        raise PatchError(400, f"error decoding patch: invalid operation: {exc}") from None
    if not isinstance(result, dict):
        raise PatchError(422, "the server rejected our request: the patched document is not an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch; returns a new value and shares untouched sub-trees with `target`."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: dict) -> Any:
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target: dict, patch: dict) -> dict | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise PatchError(422, f"unknown patch directive {directive!r}")
    out = dict(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(value, list):
                out[field] = [x for x in out[field] if x not in value]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(out.get(key) if isinstance(out.get(key), dict) else {}, value)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _smp_list(key, out[key], value)
        elif isinstance(value, list):
            out[key] = _smp_list(key, [], value)
        else:
            out[key] = value
    if isinstance(retain, list):
        keep = set(retain)
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _smp_list(field: str, current: list, patch: list) -> list:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [x for x in patch if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    if field in MERGE_PRIMITIVES:
        out = list(current)
        out.extend(x for x in patch if x not in out)
        return out
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(x, dict) for x in patch):
        return [x for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    out = list(current)
    for item in patch:
        if key not in item:
            raise PatchError(422, f"strategic merge patch: an item of {field} lacks its merge key {key!r}")
        idx = next((i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            merged = _smp_map({}, item)
            if merged is not None:
                out.append(merged)
        else:
            merged = _smp_map(out[idx], item)
            if merged is None:
                del out[idx]
            else:
                out[idx] = merged
    return out
