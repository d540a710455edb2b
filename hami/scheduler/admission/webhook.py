"""The mutating admission webhook as a pure function (HAMi `pkg/scheduler/webhook.go`).

Spec: scheduler.md §3.4. HAMi's NVIDIA `MutateAdmission` (`pkg/device/nvidia/device.go`).

API
---
- `WebhookSettings(scheduler_name, force_overwrite_default_scheduler, nvidia)`;
  `WebhookSettings.from_config(config)` builds it from `hami.config.Config`.
- `mutate(review, settings, quota=None) -> dict`: takes a decoded AdmissionReview
  (`admission.k8s.io/v1` or `v1beta1`) and returns the AdmissionReview to send back, with the
  same apiVersion. Mutations come back as a base64 JSONPatch (`patchType: JSONPatch`) built from
  what mutation touched (hami.scheduler.admission.patchbuild; no whole-pod diff on the event loop). `quota` is a
  callable `namespace -> usage.QuotaView | None` (or a QuotaView) for the ResourceQuota check. `mark`: the
  nonce every allowed pod CREATE carries as `hami.io/admitted` (hami.scheduler.admission.admitted).
- `mutate_pod(pod, settings, quota=None) -> Decision`: the same on a pod dict; `Decision.pod`
  is the mutated copy.
- `WebhookError`: the review itself is malformed (names the field).

Before HAMi's rules, for every pod CREATE and UPDATE and every pods/binding CREATE, whatever the pod's
scheduler: a placement or bind annotation set, changed or removed by a principal (`request.userInfo`)
not in `trusted_writers` -> denied naming the key (hami.scheduler.admission.placementguard). An UPDATE
and a Binding are only checked, never mutated.

Handling, in HAMi's order: no containers -> denied `pod has no containers`; a foreign
schedulerName -> allowed unchanged; per init container then container: gpumem-percentage
outside 0..100 -> error (code 500); `nvidia.com/priority` -> env CUDA_TASK_PRIORITY;
a GPU quantity the device annotations cannot carry (not a whole number, negative, over int32 or
2^31 MiB) -> denied naming the resource and the limit (hami.scheduler.admission.quantitylimits);
`CUDA_DISABLE_CONTROL` in a GPU container's env -> denied unless `allow_disable_control`;
gpuCorePolicy force/disable -> env GPU_CORE_UTILIZATION_POLICY; gpucores/gpumem/percentage
without a count -> `nvidia.com/gpu: defaultGPUNum`; exclusive default `nvidia.com/gpucores: 100`;
runtimeClassName; overwriteEnv -> NVIDIA_VISIBLE_DEVICES=none; a pod with a GPU and a malformed
`hami.io/device-scoring-weights` -> denied with HAMi's parse error; any privileged container in a pod
with a GPU -> denied `container <name> is privileged` (first privileged, init containers first);
schedulerName set, nodeName set -> denied `pod has node assigned`; ResourceQuota (memory and
cores = max(sum over app containers, max over init containers) of request x count, §3.4)
-> denied `exceeding resource quota`. Pods without GPUs still get env mutations back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from hami.device.codec.keys import ADMITTED_ANNOTATION
from hami.device.model import NvidiaConfig
from hami.device.request import quantity_as_int64
from hami.device.request import quantity_value as _request_quantity_value
from hami.device.vendorrequest import vendor_request
from hami.device.vendors import Vendor, VendorTable
from hami.dra import claims as dra_claims
from hami.scheduler.admission import gpumode
from hami.scheduler.admission.patchbuild import build_patch, mutation_copy
from hami.scheduler.admission.placementguard import DEFAULT_TRUSTED_WRITERS, check_review, placement_keys
from hami.scheduler.admission.quantitylimits import check_container, nvidia_limits, vendor_limits
from hami.scheduler.placement.policy import PolicyError, weights_for
from hami.scheduler.placement.usage import QuotaView
from hami.scheduler.placement.vendorrules import (
    METAX_APP_CLASS,
    METAX_APP_CLASSES,
    METAX_QOS,
    METAX_QOS_POLICIES,
    VNPU_HAMI_CORE,
    VNPU_MODE,
)

DEFAULT_SCHEDULER = "default-scheduler"
TASK_PRIORITY_ENV = "CUDA_TASK_PRIORITY"
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"


class WebhookError(ValueError):
    """The AdmissionReview cannot be handled: names the field and what was wrong."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    # Every other vendor whose resources the webhook recognises (HAMi's GetDevices loop).
    vendors: VendorTable | None = None
    dra: bool = False  # --dra: GPU resources become DRA claims (hami.dra.claims), as HAMi-DRA's webhook
    # --dra: the mode of a GPU pod whose namespace names none; per namespace and pod: admission.gpumode
    dra_default_mode: str = gpumode.DRA
    # Principals (request.userInfo.username) that may write placement annotations (placementguard).
    trusted_writers: tuple[str, ...] = DEFAULT_TRUSTED_WRITERS
    # Tenants may set CUDA_DISABLE_CONTROL (HAMi-core off in their container): the operator's opt-in.
    allow_disable_control: bool = False
    placement_keys: frozenset[str] = field(init=False, repr=False, compare=False)
    quantity_limits: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # --dra: the quota reservation id is the webhook's alone (quotaledger): no pod creator sets,
        # changes or removes it, so no pod can end another's reservation before its claims exist
        object.__setattr__(self, "placement_keys", placement_keys(self.vendors)
                           | ({RESERVATION_ANNOTATION} if self.dra else set()))
        object.__setattr__(self, "quantity_limits", nvidia_limits(self.nvidia)
                           + vendor_limits(self.vendors))

    @classmethod
    def from_config(cls, config: Any) -> WebhookSettings:
        sc = config.scheduler
        return cls(
            scheduler_name=sc.scheduler_name,
            force_overwrite_default_scheduler=sc.force_overwrite_default_scheduler,
            nvidia=config.nvidia,
            vendors=getattr(config, "vendors", None),
            dra=getattr(sc, "dra", False),
            dra_default_mode=getattr(sc, "dra_default_mode", gpumode.DRA),
            trusted_writers=getattr(sc, "trusted_placement_writers", DEFAULT_TRUSTED_WRITERS),
            allow_disable_control=getattr(sc, "allow_tenant_disable_control", False),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    pod: dict | None = None  # mutated copy when allowed and changed
    code: int = 200
    message: str = ""
    reason: str = ""
    # --dra: what to reserve on the namespace's quota before admitting (quotaledger): the GPUs, MiB and
    # cores a claim pod's claims will ask; a device-plugin pod's GPUs (its memory and cores are HAMi's)
    dra_amounts: tuple[int, int, int] | None = None


# --------------------------------------------------------------------------- quantities

# One quantity parser for every consumer: Go's resource.ParseQuantity grammar (hami.device.request).
quantity_value = _request_quantity_value  # Quantity.Value(): rounded up, away from zero
quantity_int = quantity_as_int64  # Quantity.AsInt64(): exact integers only


# --------------------------------------------------------------------------- containers

def _resources(ctr: dict) -> tuple[dict, dict]:
    res = ctr.get("resources") or {}
    return (res.get("limits") or {}), (res.get("requests") or {})


def _value(ctr: dict, name: str) -> int | None:
    """resourceValue: limits, then requests, as Quantity.Value()."""
    if not name:
        return None
    limits, requests = _resources(ctr)
    if name in limits:
        return quantity_value(limits[name])
    if name in requests:
        return quantity_value(requests[name])
    return None


def _present(ctr: dict, name: str) -> bool:
    if not name:
        return False
    limits, requests = _resources(ctr)
    return name in limits or name in requests


def _set_limit(ctr: dict, name: str, value: str) -> None:
    res = ctr.setdefault("resources", {})
    if res is None:
        res = ctr["resources"] = {}
    limits = res.get("limits")
    if limits is None:
        limits = res["limits"] = {}
    limits[name] = value


def _add_env(ctr: dict, name: str, value: str) -> None:
    env = ctr.get("env")
    if env is None:
        env = ctr["env"] = []
    env.append({"name": name, "value": value})


def _mutate_container(ctr: dict, pod: dict, cfg: NvidiaConfig) -> bool:
    """NVIDIA MutateAdmission for one container; returns whether it has the resource.

    Raises _Reject(500, ...) for an out-of-range gpumem-percentage.
    """
    pct = _value(ctr, cfg.resource_memory_percentage_name)
    if pct is not None and (pct < 0 or pct > 100):
        raise _Reject(
            500,
            f"invalid {cfg.resource_memory_percentage_name} value {pct} in container "
            f"{ctr.get('name', '')}: must be an integer between 0 and 100",
        )
    limits, _ = _resources(ctr)
    if cfg.resource_priority_name in limits:
        prio = quantity_value(limits[cfg.resource_priority_name])
        _add_env(ctr, TASK_PRIORITY_ENV, str(prio if prio is not None else 0))
    if cfg.gpu_core_policy not in ("", "default"):
        _add_env(ctr, CORE_POLICY_ENV, cfg.gpu_core_policy)

    has = False
    if cfg.resource_count_name in limits:
        has = True
    elif any(n and n in limits for n in (
        cfg.resource_core_name, cfg.resource_memory_name, cfg.resource_memory_percentage_name,
    )):
        if cfg.default_gpu_num > 0:
            _set_limit(ctr, cfg.resource_count_name, str(cfg.default_gpu_num))
            has = True
    if _default_exclusive_core(ctr, cfg):
        has = True
    if has and not pod["spec"].get("runtimeClassName") and cfg.runtime_class_name:
        pod["spec"]["runtimeClassName"] = cfg.runtime_class_name
    if not has and cfg.overwrite_env:
        _add_env(ctr, "NVIDIA_VISIBLE_DEVICES", "none")
    return has


def _default_exclusive_core(ctr: dict, cfg: NvidiaConfig) -> bool:
    if not _present(ctr, cfg.resource_count_name):
        return False
    if not cfg.resource_core_name or _present(ctr, cfg.resource_core_name):
        return False
    pct = _value(ctr, cfg.resource_memory_percentage_name)
    if pct is not None:
        exclusive = pct == 100
    elif not cfg.resource_memory_name:
        exclusive = True
    else:
        exclusive = _value(ctr, cfg.resource_memory_name) is None
    if not exclusive:
        return False
    _set_limit(ctr, cfg.resource_core_name, "100")
    return True


def _mutate_mthreads(ctr: dict, pod: dict, v: Vendor) -> None:
    """Mthreads MutateAdmission: several cards, or no memory asked, get whole cards (cores x
    cards; memory x cards when every card has one size, else left to the fit, which gives each
    chosen card whole); one card with memory must ask for one of `legalMemory`; the whole-card
    resource (handed out outside HAMi) never shares a container with sGPU slices."""
    limits, requests = _resources(ctr)
    if v.whole_card_resource and (v.whole_card_resource in limits or v.whole_card_resource in requests):
        raise _Reject(500, f"cannot mix {v.whole_card_resource} (whole card, delivered outside HAMi) with "
                      f"{v.count_resource}/{v.memory_resource}/{v.core_resource} (sGPU slices) in the same container")
    count = quantity_value(limits[v.count_resource]) or 0
    if count > 1 or v.memory_resource not in limits:
        _set_limit(ctr, v.core_resource, str(count * v.cores_per_card))
        if len(v.memory_per_card) == 1:
            _set_limit(ctr, v.memory_resource, str(count * v.memory_per_card[0]))
        if count > 1:
            pod.setdefault("metadata", {}).setdefault("annotations", {})["mthreads.com/request-gpu-num"] = str(count)
        return
    mem = quantity_int(limits[v.memory_resource])
    if v.legal_memory and mem not in v.legal_memory:
        raise _Reject(500, "sGPU memory request value is invalid, valid values are ["
                      + ", ".join(str(m) for m in v.legal_memory) + "]")


def _mutate_amd(limits: Mapping, v: Vendor) -> bool:
    """AMD's MutateAdmission (pkg/device/amd at v2.10.0): with the count, a core limit must be an
    integer percentage 1..100; the count, memory or core resource in limits sends the pod to us."""
    if v.count_resource in limits and v.core_resource in limits:
        core = quantity_int(limits[v.core_resource])
        if core is None or not 1 <= core <= 100:
            raise _Reject(500, f"{v.core_resource} must be an integer percentage between 1 and 100")
    return any(name in limits for name in (v.count_resource, v.memory_resource, v.core_resource) if name)


def _mutate_drs(ctr: dict, v: Vendor) -> bool:
    """Enflame DRS's MutateAdmission (pkg/device/enflame/device.go at v2.10.0): `drs-gcu` (limits,
    else requests) must be above 0; else `gcu-memory` must be above 0 and `gcu-core` in (0,100];
    a value named in only one of limits and requests is copied to the other."""
    limits, requests = _resources(ctr)
    names = [n for n in (v.count_resource, v.memory_resource, v.core_resource) if n]
    if not any(n in limits or n in requests for n in names):
        return False
    if v.count_resource in limits or v.count_resource in requests:
        if (quantity_value(limits.get(v.count_resource, requests.get(v.count_resource))) or 0) <= 0:
            raise _Reject(500, f"{v.count_resource} must be greater than 0")
        _mirror(ctr, v.count_resource)
        return True
    mem = limits.get(v.memory_resource, requests.get(v.memory_resource))
    core = limits.get(v.core_resource, requests.get(v.core_resource))
    if mem is not None and (quantity_value(mem) or 0) <= 0:
        raise _Reject(500, f"{v.memory_resource} must be greater than 0")
    if core is not None and not 0 < (quantity_value(core) or 0) <= 100:
        raise _Reject(500, f"{v.core_resource} must be in range (0,100]")
    for name in (v.memory_resource, v.core_resource):
        if name and (name in limits or name in requests):
            _mirror(ctr, name)
    return True


def _mirror(ctr: dict, name: str) -> None:
    """The value in limits (else requests) set in whichever of the two lacks it."""
    res = ctr.setdefault("resources", {})
    for key in ("limits", "requests"):
        if not isinstance(res.get(key), dict):
            res[key] = {}
    value = res["limits"].get(name, res["requests"].get(name))
    res["limits"].setdefault(name, value)
    res["requests"].setdefault(name, value)


def _mutate_vendor(ctr: dict, v: Vendor, pod: dict | None = None) -> bool:
    """Another vendor's MutateAdmission: the count resource in limits means the container has
    that vendor's device. Ascend (pkg/device/ascend MutateAdmission) also rounds the memory limit
    up to a vNPU template (or the whole card) in limits and requests, and refuses a memory beyond
    the card (`<memory resource> <value> is invalid`) and a vNPU for several devices. A hook's own
    steps are in OWN_MUTATIONS."""
    own = OWN_MUTATIONS.get(v.hook, _NO_OWN_MUTATION)
    pod = pod if pod is not None else {}
    if own.whole is not None:
        return own.whole(ctr, v)
    limits, _ = _resources(ctr)
    if v.count_resource not in limits:
        return False
    if own.counted is not None:
        own.counted(ctr, pod, v)
        return True
    if v.multi_card_cores and v.core_resource and (quantity_value(limits[v.count_resource]) or 0) > 1:
        # Iluvatar: several cards are whole cards.
        _set_limit(ctr, v.core_resource, str(quantity_value(limits[v.count_resource]) * 100))
    if v.container_name_env and ctr.get("name") and not any(
            isinstance(e, dict) and e.get("name") == v.container_name_env for e in ctr.get("env") or ()):
        _add_env(ctr, v.container_name_env, ctr["name"])
    if own.memory is not None and v.memory_resource:
        own.memory(ctr, pod, v, limits)
    return True


def _trim_vnpu(ctr: dict, pod: dict, v: Vendor, limits: dict) -> None:
    _mutate_ascend(ctr, pod, v)


def _trim_vxpu(ctr: dict, pod: dict, v: Vendor, limits: dict) -> None:
    """vXPU: the memory limit (and request) rounded up to a slice size, else the whole card."""
    if v.memory_resource not in limits:
        return
    mem = quantity_value(limits[v.memory_resource]) or 0
    trimmed = next((t.memory for t in v.templates if mem <= t.memory), v.memory_allocatable)
    _set_limit(ctr, v.memory_resource, str(trimmed))
    requests = ctr["resources"].get("requests")
    if not isinstance(requests, dict):
        requests = ctr["resources"]["requests"] = {}
    requests[v.memory_resource] = str(trimmed)


class VendorMutation(NamedTuple):
    """A hook's own MutateAdmission steps: `whole` replaces the shared one (container, row) -> has the
    device; `counted` replaces what follows the count check (container, pod, row); `memory` runs last
    for a row with a memory resource (container, pod, row, limits)."""
    whole: Callable[[dict, Vendor], bool] | None = None
    counted: Callable[[dict, dict, Vendor], None] | None = None
    memory: Callable[[dict, dict, Vendor, dict], None] | None = None


_NO_OWN_MUTATION = VendorMutation()
OWN_MUTATIONS = MappingProxyType({
    "awsneuron": VendorMutation(whole=lambda ctr, v: _mutate_neuron(ctr, v)),
    "amd": VendorMutation(whole=lambda ctr, v: _mutate_amd(_resources(ctr)[0], v)),
    "enflame": VendorMutation(whole=lambda ctr, v: _mutate_drs(ctr, v)),
    "metax": VendorMutation(counted=lambda ctr, pod, v: _mutate_sgpu(ctr, pod, v)),
    "mthreads": VendorMutation(counted=lambda ctr, pod, v: _mutate_mthreads(ctr, pod, v)),
    "ascend": VendorMutation(memory=_trim_vnpu),
    "kunlunxin": VendorMutation(memory=_trim_vxpu),
})


def _neuron_value(raw: Any, name: str, most: int) -> int:
    """validateResourceRequest: an integer in 1..most, else HAMi's error naming the resource."""
    n = quantity_as_int64(raw)
    if n is None:
        raise _Reject(500, f"{name} must be an integer")
    if n <= 0:
        raise _Reject(500, f"{name} must be greater than 0")
    if n > most:
        raise _Reject(500, f"{name} must not exceed {most}")
    return n


def _mutate_neuron(ctr: dict, v: Vendor) -> bool:
    """AWS Neuron MutateAdmission: devices (limits, else requests) or else NeuronCores; a core count
    above one device's must fill whole devices."""
    limits, requests = _resources(ctr)
    raw = limits.get(v.count_resource, requests.get(v.count_resource))
    if raw is not None:
        _neuron_value(raw, v.count_resource, _MAX_INT32)
        return True
    raw = limits.get(v.core_resource, requests.get(v.core_resource))
    if raw is None:
        return False
    cores = _neuron_value(raw, v.core_resource, _MAX_INT32 * 2)
    cpd = v.cores_per_card
    if cores > cpd and cores % cpd:
        raise _Reject(500, f"{v.core_resource} must be 1 or a multiple of {cpd}, got {cores}")
    return True


_MAX_INT32 = (1 << 31) - 1


def _mutate_sgpu(ctr: dict, pod: dict, v: Vendor) -> None:
    """MetaX sGPU MutateAdmission: an app-class pod is online or offline and asks for one device;
    a pod that is not online runs under a QoS policy, best-effort unless it names another."""
    meta = pod.setdefault("metadata", {})
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    app_class = annotations.get(METAX_APP_CLASS)
    if app_class is not None:
        if app_class not in METAX_APP_CLASSES:
            raise _Reject(500, f"{METAX_APP_CLASS} must be set one of [{', '.join(METAX_APP_CLASSES)}]")
        if (quantity_value(_resources(ctr)[0][v.count_resource]) or 0) != 1:
            raise _Reject(500, "app-class pod must request single device")
    if app_class == "online":
        return
    qos = annotations.get(METAX_QOS)
    if qos is None:
        meta["annotations"] = {**annotations, METAX_QOS: METAX_QOS_POLICIES[0]}
    elif qos not in METAX_QOS_POLICIES:
        raise _Reject(500, f"{METAX_QOS} must be set one of [{', '.join(METAX_QOS_POLICIES)}]")


ASCEND_VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"  # cleared by `overwriteEnv` where no NPU is asked


def _mutate_ascend(ctr: dict, pod: dict, v: Vendor) -> None:
    """Ascend MutateAdmission at HAMi v2.10.0 (pkg/device/ascend/device.go): 910C super-pod chips
    take whole modules (1 becomes 2, other odd counts are refused); a core request (limits, else
    requests) is refused unless the pod is annotated `huawei.com/vnpu-mode: hami-core` (PR #2026:
    a hard-split template fixes compute); hami-core keeps its memory as asked, otherwise memory
    rounds up to a vNPU template (or the whole card), refused beyond the card and for a vNPU of
    several devices (PR #2026's "not" spelling)."""
    limits, requests_in = _resources(ctr)
    count = quantity_value(limits[v.count_resource]) or 0
    if v.module_pairs:
        if count == 1:
            _set_limit(ctr, v.count_resource, "2")
            requests = ctr["resources"].get("requests")
            if isinstance(requests, dict) and v.count_resource in requests:
                requests[v.count_resource] = "2"
        elif count % 2:
            raise _Reject(500, f"{v.name} device request must be 1 or 2*n, got {count}")
    annotations = pod.setdefault("metadata", {}).get("annotations") or {}
    hami_core = annotations.get(VNPU_MODE) == VNPU_HAMI_CORE
    if not hami_core and v.core_resource:
        core = limits.get(v.core_resource, requests_in.get(v.core_resource))
        if core is not None and (quantity_value(core) or 0) > 0:
            raise _Reject(500, f"{v.core_resource} is only supported in hami-core (soft split) mode")
    trimmed = v.memory_allocatable
    if v.memory_resource in limits:
        mem = quantity_value(limits[v.memory_resource])
        if hami_core:
            trimmed = mem if mem is not None else 0
        else:
            trimmed, _ = v.trim_memory(mem if mem is not None else 0)
            if trimmed <= 0:
                raise _Reject(500, f"{v.memory_resource} {mem} is invalid")
    if count > 1 and not hami_core and trimmed != v.memory_allocatable:
        raise _Reject(500, "vNPU not supported for multiple devices")
    _set_limit(ctr, v.memory_resource, str(trimmed))
    requests = ctr["resources"].get("requests")
    if not isinstance(requests, dict):
        requests = ctr["resources"]["requests"] = {}
    requests[v.memory_resource] = str(trimmed)
    spec = pod.get("spec")
    if v.runtime_class_name and isinstance(spec, dict) and spec.get("runtimeClassName") is None:
        spec["runtimeClassName"] = v.runtime_class_name


def _fits_vendor_quota(pod: dict, vendors: VendorTable, view: Callable[[str], QuotaView | None]) -> bool:
    """HAMi fitResourceQuota for the other vendors: per vendor, memory and cores = the sum over
    every container (init and app) of request x count, against that vendor's quota resources."""
    spec = pod["spec"]
    ctrs = [c for g in ("initContainers", "containers") for c in (spec.get(g) or ()) if isinstance(c, dict)]
    for v in vendors.others:
        if not (v.memory_resource or v.core_resource):
            continue
        mem = cores = 0
        for ctr in ctrs:
            r = vendor_request(ctr, v)
            if r is not None:
                mem += r.memreq * r.nums
                cores += r.coresreq * r.nums
        if not mem and not cores:
            continue
        q = view(v.name)
        if q is not None and not q.fits(mem, cores):
            return False
    return True


class _Reject(Exception):
    def __init__(self, code: int, message: str):
        self.code, self.message = code, message
        super().__init__(message)


# --------------------------------------------------------------------------- quota

def _request(ctr: dict, cfg: NvidiaConfig) -> tuple[int, int, int]:
    """(nums, memreq, coresreq) as GenerateResourceRequests computes them (§4)."""
    limits, requests = _resources(ctr)
    raw = limits.get(cfg.resource_count_name, requests.get(cfg.resource_count_name))
    if raw is None:
        return 0, 0, 0
    nums = quantity_int(raw)
    if nums is None:
        return 0, 0, 0
    mem = 0
    if _present(ctr, cfg.resource_memory_name):
        q = limits.get(cfg.resource_memory_name, requests.get(cfg.resource_memory_name))
        m = quantity_int(q)
        factor = max(cfg.memory_factor, 1)
        if m is None or m < 0 or m > (2**31 - 1) // factor:
            return 0, 0, 0
        mem = m * factor
    pct = 101
    if _present(ctr, cfg.resource_memory_percentage_name):
        q = limits.get(cfg.resource_memory_percentage_name, requests.get(cfg.resource_memory_percentage_name))
        p = quantity_int(q)
        if p is not None:
            p = min(p, 100)
            pct = p if p > 0 else 101
    if pct == 101 and mem == 0 and cfg.default_memory:
        mem = cfg.default_memory
    cores = cfg.default_cores
    if _present(ctr, cfg.resource_core_name):
        q = limits.get(cfg.resource_core_name, requests.get(cfg.resource_core_name))
        c = quantity_int(q)
        if c is not None:
            cores = c
    return nums, mem, cores


def pod_amounts(pod: Mapping, cfg: NvidiaConfig) -> tuple[int, int, int]:
    """(GPUs, MiB, cores) a pod's quota counts, as HAMi's webhook counts them: the app containers'
    sum against the largest init container."""
    spec = pod["spec"]
    app_n = app_mem = app_cores = init_n = init_mem = init_cores = 0
    for ctr in spec.get("initContainers") or ():
        n, m, c = _request(ctr, cfg)
        if n > 0:
            init_n = max(init_n, n)
            init_mem = max(init_mem, m * n)
            init_cores = max(init_cores, c * n)
    for ctr in spec.get("containers") or ():
        n, m, c = _request(ctr, cfg)
        if n > 0:
            app_n += n
            app_mem += m * n
            app_cores += c * n
    return max(app_n, init_n), max(app_mem, init_mem), max(app_cores, init_cores)


def _fits_quota(pod: dict, cfg: NvidiaConfig, quota: QuotaView | None) -> bool:
    if quota is None:
        return True
    _, mem, cores = pod_amounts(pod, cfg)
    return quota.fits(mem, cores)


# --------------------------------------------------------------------------- pod

QuotaSource = Callable[[str], QuotaView | None] | QuotaView | None
# (namespace, vendor) -> that vendor's QuotaView (UsageIndex.vendor_quota_view).
VendorQuotaSource = Callable[[str, str], QuotaView | None] | None
# namespace -> its labels (--dra: the GPU mode, admission.gpumode); None when unknown.
NamespaceLabels = Callable[[str], Mapping | None] | None


def mutate_pod(pod: Mapping, settings: WebhookSettings, quota: QuotaSource = None, namespace: str = "",
               vendor_quota: VendorQuotaSource = None, namespace_labels: NamespaceLabels = None) -> Decision:
    """Apply HAMi's admission rules to a pod dict (not modified); see the module docstring."""
    if not isinstance(pod, Mapping):
        raise WebhookError("request.object", "expected a Pod object")
    pod = mutation_copy(pod)  # what mutation writes is copied; the rest is shared
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise WebhookError("request.object.spec", "missing")
    containers = spec.get("containers") or []
    if not containers:
        return Decision(False, code=403, reason="Forbidden", message="pod has no containers")
    sched = spec.get("schedulerName") or ""
    if sched and not (
        (sched == DEFAULT_SCHEDULER and settings.force_overwrite_default_scheduler)
        or (settings.scheduler_name and sched == settings.scheduler_name)
    ):
        return Decision(True, code=200, message="pod already has different scheduler assigned")
    cfg = settings.nvidia
    privileged = _privileged_container(spec)
    mode = None
    if settings.dra:
        ns = (pod.get("metadata") or {}).get("namespace") or namespace
        mode = gpumode.choose((pod.get("metadata") or {}).get("annotations"),
                              namespace_labels(ns) if namespace_labels is not None else None, ns,
                              settings.dra_default_mode)
        if mode.mode == gpumode.DRA or mode.refused:
            if mode.refused and not _asks_gpu(spec, cfg):
                return Decision(True, pod=pod)  # the annotation only matters to a GPU pod
            if mode.refused:
                return Decision(False, code=403, reason="Forbidden", message=mode.refused)
            return _with_mode(_dra_decision(pod, cfg, privileged, settings.scheduler_name), mode)
    try:
        has_resource = _mutate_containers(spec, pod, settings)
    except _Reject as r:
        return Decision(False, code=r.code, message=r.message)
    if has_resource:
        refused = _device_pod_refusal(pod, spec, settings, privileged)
        if refused is not None:
            return refused
    ns = (pod.get("metadata") or {}).get("namespace") or namespace
    view = quota(ns) if callable(quota) else quota
    if not _fits_quota(pod, cfg, view):
        return Decision(False, code=403, reason="Forbidden", message="exceeding resource quota")
    if vendor_quota is not None and settings.vendors is not None and settings.vendors.others and not _fits_vendor_quota(
            pod, settings.vendors, lambda vendor: vendor_quota(ns, vendor)):
        return Decision(False, code=403, reason="Forbidden", message="exceeding resource quota")
    if mode is not None and has_resource:
        # the GPU count is reserved beside the namespace's claims (Kubernetes' own check does not see them)
        return _with_mode(Decision(True, pod=pod, dra_amounts=(pod_amounts(pod, cfg)[0], 0, 0)), mode)
    return Decision(True, pod=pod)


def _mutate_containers(spec: dict, pod: dict, settings: WebhookSettings) -> bool:
    """Every container's mutation (NVIDIA's, then the other vendors'), then HAMi's quantity checks;
    whether any asks for a device. Raises _Reject with the first refusal."""
    has_resource = False
    others = settings.vendors.others if settings.vendors is not None else ()
    counts = settings.vendors.other_counts if settings.vendors is not None else frozenset()
    hide = settings.vendors.overwrite_env if settings.vendors is not None else ()
    for group in ("initContainers", "containers"):
        for ctr in spec.get(group) or ():
            if _mutate_container(ctr, pod, settings.nvidia):
                has_resource = True
            if counts and any(k in counts for part in _resources(ctr) for k in part):
                for v in others:
                    if _mutate_vendor(ctr, v, pod):
                        has_resource = True
            for v in hide:  # Ascend overwriteEnv: once per such chip the container does not ask for
                if v.count_resource not in _resources(ctr)[0]:
                    _add_env(ctr, ASCEND_VISIBLE_DEVICES, "")
            _check_quantities(ctr, settings)  # after the vendors' own checks, so HAMi's texts come first
    return has_resource


def _device_pod_refusal(pod: dict, spec: dict, settings: WebhookSettings, privileged: str | None) -> Decision | None:
    """A pod asking for a device: its scoring weights, privilege, HAMi-core control and node; the
    scheduler name set. The refusal, or None."""
    try:  # HAMi denies bad device-scoring weights at admission, before scheduling
        weights_for((pod.get("metadata") or {}).get("annotations"))
    except PolicyError as exc:
        return Decision(False, code=403, reason="Forbidden", message=str(exc))
    if privileged is not None:
        return Decision(False, code=403, reason="Forbidden", message=f"container {privileged} is privileged")
    if not settings.allow_disable_control:
        uncontrolled = _control_disabled(spec)
        if uncontrolled is not None:
            return Decision(False, code=403, reason="Forbidden", message=(
                f"container {uncontrolled} sets {DISABLE_CONTROL_ENV}: turning HAMi-core's limits off in a "
                f"pod whose GPU slice is counted is the operator's choice (node config allowDisableControl "
                f"and --allow-tenant-disable-control), not a pod's"))
    if settings.scheduler_name:
        spec["schedulerName"] = settings.scheduler_name
        if spec.get("nodeName"):
            return Decision(False, code=403, reason="Forbidden", message="pod has node assigned")
    return None


def _asks_gpu(spec: Mapping, cfg: NvidiaConfig) -> bool:
    return any(cfg.resource_count_name in part for group in ("initContainers", "containers")
               for ctr in spec.get(group) or () if isinstance(ctr, dict) for part in _resources(ctr))


def _with_mode(d: Decision, mode: gpumode.ModeChoice) -> Decision:
    """--dra: the GPU pod's mode and why, on the pod for `hami doctor pod` (gpumode.DECISION_ANNOTATION)."""
    if not d.allowed or d.pod is None:
        return d
    meta = d.pod.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), gpumode.DECISION_ANNOTATION: mode.text}
    return d


def _dra_decision(pod: dict, cfg: NvidiaConfig, privileged: str | None, scheduler_name: str) -> Decision:
    """--dra: the pod's GPU resources as claims (hami.dra.claims), and the pod handed to our scheduler
    profile as in device-plugin mode: kube-scheduler calls an extender only for its own profile's pods,
    and the chart's profile sends every pod to the extender, which ranks claim pods by GPU fill."""
    try:
        t = dra_claims.translate_pod(pod, cfg)
    except dra_claims.ClaimError as exc:
        return Decision(False, code=400, reason="BadRequest", message=str(exc))
    if t is None:
        return Decision(True, pod=pod)
    if privileged is not None:
        return Decision(False, code=403, reason="Forbidden", message=f"container {privileged} is privileged")
    if scheduler_name:
        t.pod["spec"]["schedulerName"] = scheduler_name
        if t.pod["spec"].get("nodeName"):  # no scheduler would allocate its claims
            return Decision(False, code=403, reason="Forbidden", message="pod has node assigned")
    # its templates are made from the pod in the API (hami.dra.templates)
    return Decision(True, pod=t.pod, dra_amounts=pod_amounts(pod, cfg))


DISABLE_CONTROL_ENV = "CUDA_DISABLE_CONTROL"
# --dra: the quota reservation a pod's admission made, until its claims exist (quotaledger); always
# the webhook's value, written over whatever the pod creator put there.
RESERVATION_ANNOTATION = "hami.io/dra-quota-reservation"


def _check_quantities(ctr: dict, settings: WebhookSettings) -> None:
    problem = check_container(ctr, settings.quantity_limits)
    if problem is not None:
        raise _Reject(400, problem)


def _control_disabled(spec: dict) -> str | None:
    """The first container whose env names CUDA_DISABLE_CONTROL (any value: valueFrom is unknown here)."""
    for group in ("initContainers", "containers"):
        for ctr in spec.get(group) or ():
            if any(isinstance(e, dict) and e.get("name") == DISABLE_CONTROL_ENV for e in ctr.get("env") or ()):
                return str(ctr.get("name", ""))
    return None


def _privileged_container(spec: dict) -> str | None:
    """The first privileged container, init containers first (privilegedContainerName)."""
    for group in ("initContainers", "containers"):
        for ctr in spec.get(group) or ():
            sc = ctr.get("securityContext") or {}
            if sc.get("privileged") is True:
                return ctr.get("name", "")
    return None


MAX_DEPTH = 64  # a real Pod nests ~15 levels; orjson reads 1024, copy.deepcopy fails near 500


def _check_shape(request: Mapping) -> None:
    """The API server sends valid Pods; refuse a body not shaped like one, naming the field."""
    def want(ok: bool, field: str, what: str, value: Any) -> None:
        if not ok:
            raise WebhookError(field, f"expected {what}, got {type(value).__name__}")

    def strings(v: Any) -> bool:
        return v is None or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))

    for key in ("uid", "namespace"):
        v = request.get(key)
        want(v is None or isinstance(v, str), f"request.{key}", "a string", v)
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:  # iterative: a hostile body must not exhaust the recursion limit (copy, jsonpatch)
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise WebhookError("request.object", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    meta = obj.get("metadata")
    want(meta is None or isinstance(meta, dict), "request.object.metadata", "an object", meta)
    for key in ("name", "namespace"):
        v = (meta or {}).get(key)
        want(v is None or isinstance(v, str), f"request.object.metadata.{key}", "a string", v)
    for key in ("annotations", "labels"):
        v = (meta or {}).get(key)
        want(strings(v), f"request.object.metadata.{key}", "an object of strings", v)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return
    for key in ("schedulerName", "nodeName", "runtimeClassName"):
        v = spec.get(key)
        want(v is None or isinstance(v, str), f"request.object.spec.{key}", "a string", v)
    for group in ("containers", "initContainers"):
        ctrs = spec.get(group)
        want(ctrs is None or isinstance(ctrs, list), f"request.object.spec.{group}", "an array", ctrs)
        for i, c in enumerate(ctrs or ()):
            at = f"request.object.spec.{group}[{i}]"
            want(isinstance(c, dict), at, "an object", c)
            want(isinstance(c.get("name", ""), str), f"{at}.name", "a string", c.get("name"))
            for key in ("resources", "securityContext"):
                v = c.get(key)
                want(v is None or isinstance(v, dict), f"{at}.{key}", "an object", v)
            for part in ("limits", "requests"):
                v = (c.get("resources") or {}).get(part)
                want(v is None or isinstance(v, dict), f"{at}.resources.{part}", "an object", v)
            env = c.get("env")
            want(env is None or (isinstance(env, list) and all(isinstance(e, dict) for e in env)),
                 f"{at}.env", "an array of objects", env)


def mutate(review: Mapping, settings: WebhookSettings, quota: QuotaSource = None,
           vendor_quota: VendorQuotaSource = None, mark: str | None = None, dra_reservation: str | None = None,
           reserved: list | None = None, namespace_labels: NamespaceLabels = None) -> dict:
    """AdmissionReview in, AdmissionReview out (v1 or v1beta1, echoing the request's version).
    `mark`: a nonce put on every pod CREATE allowed, as `hami.io/admitted` (hami.scheduler.admission.admitted:
    the pod seen in the API proves the API server applies this webhook's answers).
    `dra_reservation`: --dra, the quota reservation id a GPU pod of either mode carries
    (`RESERVATION_ANNOTATION`, hami.scheduler.admission.quotaledger); what it reserves (GPUs, MiB,
    cores: `Decision.dra_amounts`) is appended to `reserved`, for the caller to reserve before the
    answer goes out."""
    if not isinstance(review, Mapping):
        raise WebhookError("AdmissionReview", "expected an object")
    api_version = review.get("apiVersion") or "admission.k8s.io/v1"
    if api_version not in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        raise WebhookError("apiVersion", f"unsupported {api_version!r}")
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise WebhookError("request", "missing")
    _check_shape(request)
    uid = request.get("uid") or ""
    obj = request.get("object")
    response: dict[str, Any] = {"uid": uid}
    refusal = check_review(request, settings.placement_keys, settings.trusted_writers)
    if refusal is not None:
        response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": refusal.message})
    elif (request.get("operation") or "CREATE") != "CREATE" or request.get("subResource"):
        response.update(allowed=True, status={"code": 200})  # UPDATE, pods/binding: checked above, never mutated
    elif not isinstance(obj, Mapping) or not isinstance(obj.get("spec"), Mapping):
        response.update(allowed=False, status={"code": 400, "message": "request.object: expected a Pod object"})
    else:
        d = mutate_pod(obj, settings, quota, namespace=request.get("namespace") or "", vendor_quota=vendor_quota,
                       namespace_labels=namespace_labels)
        response["allowed"] = d.allowed
        pod = d.pod
        if d.allowed and d.dra_amounts is not None and dra_reservation is not None and d.dra_amounts[0] > 0:
            meta = pod.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), RESERVATION_ANNOTATION: dra_reservation}
            if reserved is not None:
                reserved.append(d.dra_amounts)
        if d.allowed and mark is not None:
            pod = pod if pod is not None else mutation_copy(obj)
            meta = pod.get("metadata")
            if not isinstance(meta, dict):
                meta = pod["metadata"] = {}
            meta["annotations"] = {**(meta.get("annotations") or {}), ADMITTED_ANNOTATION: mark}
        if d.allowed and pod is not None:
            ops = build_patch(obj, pod)
            if ops:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
            response["status"] = {"code": 200}
        else:
            status: dict[str, Any] = {"code": d.code, "message": d.message}
            if d.reason:
                status["reason"] = d.reason
            response["status"] = status
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}

