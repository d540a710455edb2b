"""HAMi's GPU resources as DRA claims (pure): what the webhook's `--dra` mode does to a pod.

As Project-HAMi/HAMi-DRA's webhook: each container that limits `nvidia.com/gpu` gets one claim
against DeviceClass `hami-core-gpu.project-hami.io` with one request `gpu`: `exactly.count` =
the GPU count, `capacity.requests` `memory` (bytes, from `nvidia.com/gpumem` MiB) and `cores`
(`nvidia.com/gpucores`), the class's type selector, and CEL selectors from the UUID/type
annotations (`nvidia.com/use-gpuuuid`, `nouse-gpuuuid`, `use-gputype`, `nouse-gputype`). Those
resources leave the container, which references the claim in `resources.claims`; the pod gets
the label `hami.io/dra: "true"`.

Unlike HAMi-DRA, which creates a ResourceClaim from the webhook, the pod references a
ResourceClaimTemplate (`spec.resourceClaims[].resourceClaimTemplateName`) whose name is a
digest of its spec: one template per distinct shape in a namespace, and the resourceclaim
controller makes (and deletes) each pod's claim, owned by the pod. The claim spec is HAMi-DRA's,
so HAMi's kubelet plugin and DeviceClass serve it unchanged.

The webhook creates nothing: a review's body is only a claim that a pod is being created, and anyone
who reaches /webhook can send one. The pod carries its claims' shapes in `hami.io/dra-claims`
(`{"<pod claim>": [count, memory MiB or null, cores or null]}`), and `templates_of` rebuilds, from
a pod that exists in the API, the templates it references (hami.dra.templates creates them, in the
pod's namespace only). That annotation is tenant input like any other: it is parsed with the same
bounds as the resources it stands for, and a template is made only where the rebuilt template's
digest is the name the pod's own spec references.

Type annotations keep HAMi's meaning (a case-insensitive substring of the product name, as the
device plugin matched it); UUIDs match exactly. `gpumem-percentage` has no DRA form (capacity
requests are absolute): 100 (the whole card, the memory policy's default) is accepted, any other
value is refused naming the resource. Every field is tenant input: counts, MiB, cores and the
annotation lists are bounded, and literals are quoted, never spliced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from hami.device.codec.keys import DRA_CLAIMS_ANNOTATION
from hami.device.model import NvidiaConfig
from hami.device.request import quantity_as_int64

DRIVER = "hami-core-gpu.project-hami.io"
DEVICE_CLASS = DRIVER
DEVICE_TYPE = "hami-gpu"
REQUEST_NAME = "gpu"
DRA_LABEL = "hami.io/dra"
CLAIMS_ANNOTATION = DRA_CLAIMS_ANNOTATION
MAX_CLAIMS_TEXT = 16 << 10  # bytes of hami.io/dra-claims: 64 claims of the longest shape fit many times
TEMPLATE_PREFIX = "hami-gpu-"
USE_UUID, NOUSE_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"
USE_TYPE, NOUSE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
PERCENTAGE = "nvidia.com/gpumem-percentage"

MAX_COUNT = 32  # a claim holds at most 32 devices
MAX_MEMORY_MIB = 1 << 24  # 16 TiB per GPU: far above any card, far below an overflow
MAX_LIST = 64  # UUIDs or types in one annotation
MAX_ITEM = 128  # characters of one UUID or type
_NAME_MAX = 63  # a pod claim name is a DNS label


class ClaimError(ValueError):
    """A pod whose GPU request has no valid claim: names the field and what was wrong."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class Translation:
    pod: dict  # the mutated pod (a copy)
    templates: tuple[dict, ...]  # ResourceClaimTemplates the pod references, to create if absent


def class_selector(driver: str = DRIVER) -> str:
    """HAMi's DeviceClass selector (HAMi-DRA's chart)."""
    return f'device.driver == "{driver}" && device.attributes["{driver}"].type == "{DEVICE_TYPE}"'


def device_class(driver: str = DRIVER) -> dict:
    """The DeviceClass HAMi-DRA's chart installs (and ours, with dra.enabled)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": class_selector(driver)}}]}}


def _int(ctr: Mapping, name: str, at: str, lo: int, hi: int) -> int | None:
    res = ctr.get("resources") or {}
    raw = None
    for part in ("limits", "requests"):
        v = (res.get(part) or {}).get(name)
        if v is not None:
            raw = v
            break
    if raw is None:
        return None
    value = quantity_as_int64(raw)
    if value is None or not lo <= value <= hi:
        raise ClaimError(f"{at}.resources.limits[{name}]", f"{str(raw)[:64]!r} is not an integer in {lo}..{hi}")
    return value


def _literals(pod: Mapping, key: str) -> list[str] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    if raw is None:
        return None
    items = [v.strip() for v in str(raw).split(",") if v.strip()]
    if not items:
        raise ClaimError(f"metadata.annotations[{key}]", f"no usable value in {str(raw)[:64]!r}")
    if len(items) > MAX_LIST:
        raise ClaimError(f"metadata.annotations[{key}]", f"{len(items)} values, at most {MAX_LIST}")
    for v in items:
        if len(v) > MAX_ITEM or not v.isprintable():
            raise ClaimError(f"metadata.annotations[{key}]", f"value {v[:32]!r}... is not a printable string of "
                                                             f"at most {MAX_ITEM} characters")
    return items


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)  # a CEL string literal: quotes and backslashes escaped


def annotation_selectors(pod: Mapping, driver: str = DRIVER) -> list[str]:
    """CEL selectors for the UUID and type annotations (refused when one yields no value)."""
    attrs = f"device.attributes[{_quote(driver)}]"
    out = []
    for key, negate in ((USE_UUID, False), (NOUSE_UUID, True)):
        items = _literals(pod, key)
        if items is not None:
            expr = f"{attrs}.uuid in [{', '.join(_quote(v) for v in items)}]"
            out.append(f"!({expr})" if negate else expr)
    for key, negate in ((USE_TYPE, False), (NOUSE_TYPE, True)):
        items = _literals(pod, key)
        if items is not None:
            name = f"{attrs}.productName.upperAscii()"
            expr = " || ".join(f"{name}.contains({_quote(v.upper())})" for v in items)
            out.append(f"!({expr})" if negate else f"({expr})")
    return out


def claim_spec(count: int, memory_mib: int | None, cores: int | None, selectors: list[str]) -> dict:
    """The ResourceClaim spec of one container's GPUs, in HAMi-DRA's shape."""
    caps = {}
    if cores is not None:
        caps["cores"] = str(cores)
    if memory_mib is not None:
        caps["memory"] = str(memory_mib << 20)
    exactly = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": count,
               "selectors": [{"cel": {"expression": s}} for s in [class_selector(), *selectors]]}
    if caps:
        exactly["capacity"] = {"requests": caps}
    return {"devices": {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}}


def template_for(spec: dict) -> dict:
    """A ResourceClaimTemplate named by its spec's digest: same shape, same template."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE_PREFIX + digest, "labels": {DRA_LABEL: "true"}},
            "spec": {"spec": spec}}


def pod_claim_name(container: str) -> str:
    """`<container>-nvidia` as a DNS label (HAMi-DRA's suffix; long names shortened with a digest)."""
    name = f"{container}-nvidia"
    if len(name) <= _NAME_MAX:
        return name
    suffix = "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[:_NAME_MAX - len(suffix)].rstrip("-") + suffix


def translate_pod(pod: Mapping, cfg: NvidiaConfig) -> Translation | None:
    """The pod with its GPU resources turned into claims, or None when it asks for no GPU."""
    pod = json.loads(json.dumps(pod))
    spec = pod.get("spec") or {}
    templates: dict[str, dict] = {}
    claims: list[dict] = list(spec.get("resourceClaims") or [])
    taken = {c.get("name") for c in claims if isinstance(c, Mapping)}
    selectors: list[str] | None = None
    shapes: dict[str, list] = {}
    names = (cfg.resource_count_name, cfg.resource_memory_name, cfg.resource_core_name,
             cfg.resource_memory_percentage_name or PERCENTAGE)
    for group in ("initContainers", "containers"):
        for i, ctr in enumerate(spec.get(group) or ()):
            at = f"spec.{group}[{i}]"
            count = _int(ctr, cfg.resource_count_name, at, 1, MAX_COUNT)
            if count is None:
                continue
            memory = _int(ctr, cfg.resource_memory_name, at, 1, MAX_MEMORY_MIB)
            cores = _int(ctr, cfg.resource_core_name, at, 0, 100)
            pct = _int(ctr, names[3], at, 1, 100)
            if pct is not None and pct != 100:
                raise ClaimError(f"{at}.resources.limits[{names[3]}]",
                                 f"{pct}% has no DRA form (claims request absolute memory): use "
                                 f"{cfg.resource_memory_name} in MiB, or 100 for the whole card")
            if memory is not None and pct is not None:
                raise ClaimError(f"{at}.resources.limits", f"{cfg.resource_memory_name} and {names[3]} together")
            if selectors is None:
                selectors = annotation_selectors(pod)
            tmpl = template_for(claim_spec(count, memory, cores, selectors))
            templates[tmpl["metadata"]["name"]] = tmpl
            name = pod_claim_name(str(ctr.get("name", f"c{i}")))
            if name in taken:
                raise ClaimError(f"{at}.name", f"pod claim {name!r} already exists in spec.resourceClaims")
            taken.add(name)
            shapes[name] = [count, memory, cores]
            claims.append({"name": name, "resourceClaimTemplateName": tmpl["metadata"]["name"]})
            res = ctr.setdefault("resources", {})
            for part in ("limits", "requests"):
                if isinstance(res.get(part), dict):
                    for n in names:
                        res[part].pop(n, None)
                    if not res[part]:
                        del res[part]
            res["claims"] = [*(res.get("claims") or []), {"name": name}]
    if not templates:
        return None
    spec["resourceClaims"] = claims
    meta = pod.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), DRA_LABEL: "true"}
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           CLAIMS_ANNOTATION: json.dumps(shapes, sort_keys=True, separators=(",", ":"))}
    return Translation(pod, tuple(templates.values()))


def _bounded(value: object, at: str, lo: int, hi: int, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ClaimError(at, f"{str(value)[:32]!r} is not an integer in {lo}..{hi}")
    return value


def claim_shapes(pod: Mapping) -> dict[str, tuple[int, int | None, int | None]]:
    """The pod's `hami.io/dra-claims`: pod claim name -> (count, memory MiB, cores); {} when absent."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIMS_ANNOTATION)
    if raw is None:
        return {}
    at = f"metadata.annotations[{CLAIMS_ANNOTATION}]"
    if not isinstance(raw, str) or len(raw) > MAX_CLAIMS_TEXT:
        raise ClaimError(at, f"not a JSON text of at most {MAX_CLAIMS_TEXT} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ClaimError(at, f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or len(doc) > MAX_LIST:
        raise ClaimError(at, f"expected an object of at most {MAX_LIST} claims")
    out = {}
    for name, shape in doc.items():
        where = f"{at}[{str(name)[:_NAME_MAX]!r}]"
        if not isinstance(shape, list) or len(shape) != 3:
            raise ClaimError(where, "expected [count, memory MiB or null, cores or null]")
        out[name] = (_bounded(shape[0], where, 1, MAX_COUNT, False),
                     _bounded(shape[1], where, 1, MAX_MEMORY_MIB, True), _bounded(shape[2], where, 0, 100, True))
    return out


def templates_of(pod: Mapping) -> dict[str, dict]:
    """The ResourceClaimTemplates this pod references (spec.resourceClaims) that its claim shapes and
    its use/nouse annotations rebuild to exactly, by name; a reference they do not rebuild is left
    alone (someone else's template, or a tenant's edit). Raises ClaimError on a malformed annotation."""
    shapes = claim_shapes(pod)
    if not shapes:
        return {}
    selectors = annotation_selectors(pod)
    out: dict[str, dict] = {}
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if not isinstance(ref, Mapping):
            continue
        wanted, shape = ref.get("resourceClaimTemplateName"), shapes.get(ref.get("name"))
        if shape is None or not isinstance(wanted, str) or not wanted.startswith(TEMPLATE_PREFIX):
            continue
        tmpl = template_for(claim_spec(*shape, selectors))
        if tmpl["metadata"]["name"] == wanted:
            out[wanted] = tmpl
    return out
