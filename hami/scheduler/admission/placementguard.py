"""Only hami writes placements: which pod annotations decide a GPU placement, and who may set them.

Pure (no I/O). The webhook (hami.scheduler.admission.webhook) calls `check_review` on every pod CREATE and
UPDATE and every pods/binding CREATE, whatever the pod's scheduler, with the AdmissionReview's
`request.userInfo`:

* A placement or bind key (`placement_keys`: hami.io/vgpu-node, bind-phase, devices-to-allocate,
  ... and every vendor's allocation keys the codebase writes) set, changed or removed by a principal
  that is not in the trusted list is refused, naming the key and the principal. Removal too: a
  running pod's container keeps its GPU whatever its annotations say, so stripping them would only
  hide the placement from whoever reads it (the scheduler keeps counting a bound pod anyway:
  hami.scheduler.cache.state).
* A Binding (pods/binding) counts as written by its creator: kube-apiserver copies its annotations
  onto the pod, so any placement key it carries is refused the same way.

The trusted principals are usernames (`system:serviceaccount:<ns>:<name>`), matched exactly
(hami.principals: a tenant can create a service account of any name in its own namespace).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami.device import codec
from hami.device.codec import awsneuron as neuron_codec
from hami.device.codec import cambricon as cambricon_codec
from hami.device.codec import kunlunxin as kunlun_codec
from hami.device.codec import metax as metax_codec
from hami.device.vendors import VendorTable
from hami.principals import DEFAULT_TRUSTED_WRITERS as DEFAULT_TRUSTED_WRITERS

# What /filter, /bind and Allocate write on a pod: NVIDIA's keys (HAMi's wire format).
CORE_PLACEMENT_KEYS = frozenset({
    codec.VGPU_NODE_ANNOTATION, codec.VGPU_TIME_ANNOTATION, codec.BIND_PHASE_ANNOTATION,
    codec.BIND_TIME_ANNOTATION, codec.TO_ALLOCATE_ANNOTATION, codec.ALLOCATED_ANNOTATION,
    codec.MIG_ALLOCATIONS_ANNOTATION,
})
# Every other vendor's PatchAnnotations extras (hami.device.allocation).
VENDOR_EXTRA_KEYS = frozenset({
    neuron_codec.ASSIGNED_IDS, neuron_codec.RESOURCE_TYPE, neuron_codec.ALLOC_TIME, neuron_codec.ALLOCATED,
    neuron_codec.PREDICATE_NODE, cambricon_codec.DSMLU_PROFILE, cambricon_codec.DSMLU_ASSIGNED,
    kunlun_codec.DEVICE_IDX, metax_codec.ALLOCATED, metax_codec.PREDICATE_TIME,
    "mthreads.com/gpu-index", "mthreads.com/predicate-time", "mthreads.com/predicate-node", "predicate-time",
})


def placement_keys(vendors: VendorTable | None = None) -> frozenset[str]:
    """Every pod annotation that carries a placement or a bind state (the config's vendor table:
    `Config.vendors` is the shipped table plus the device config's rows)."""
    keys = set(CORE_PLACEMENT_KEYS | VENDOR_EXTRA_KEYS)
    for v in (vendors.others if vendors is not None else ()):
        keys.update(k for k in (v.to_allocate_key, v.allocated_key, v.allocation_key) if k)
    return frozenset(keys)


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str


def principal(user_info: Mapping | None) -> str:
    """The username of an AdmissionReview's request.userInfo ("" when absent)."""
    name = (user_info or {}).get("username") if isinstance(user_info, Mapping) else None
    return name if isinstance(name, str) else ""


def _annotations(obj: Mapping | None) -> Mapping:
    meta = (obj or {}).get("metadata") if isinstance(obj, Mapping) else None
    annos = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annos if isinstance(annos, Mapping) else {}


def written_placement_keys(obj: Mapping | None, old: Mapping | None, keys: Iterable[str]) -> list[str]:
    """The placement keys `obj` sets, changes or removes against `old` (all present ones on CREATE)."""
    new_a, old_a = _annotations(obj), _annotations(old)
    return sorted(k for k in keys if (k in new_a or k in old_a) and (k not in new_a or k not in old_a
                                                                   or old_a[k] != new_a[k]))


def check_review(request: Mapping, keys: frozenset[str], trusted: Iterable[str]) -> Refusal | None:
    """The refusal for this pod CREATE/UPDATE, or None when it may proceed."""
    user = principal(request.get("userInfo"))
    if user in set(trusted):
        return None
    op = request.get("operation") or "CREATE"
    obj = request.get("object")  # a Pod, or a Binding on pods/binding (its annotations go onto the pod)
    old = request.get("oldObject") if op == "UPDATE" else None
    written = written_placement_keys(obj, old, keys)
    if not written:
        return None
    who = user or "an unauthenticated caller"
    what = "set it" if old is None else ("remove it" if written[0] not in _annotations(obj) else "change it")
    via = " through a Binding" if request.get("subResource") == "binding" else ""
    return Refusal(f"annotation {written[0]} is a placement written only by hami's scheduler and node agent; "
                   f"{who} may not {what}{via}" + (f" (also: {', '.join(written[1:])})" if written[1:] else ""))
