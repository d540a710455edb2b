"""kube-apiserver's ResourceQuota admission of pods, and the quota controller's `status.used`, for the
embedded API server (pure over the objects it is given).

What a pod counts is what Kubernetes' pod evaluator counts (pkg/quota/v1/evaluator/core/pods.go,
podComputeUsageHelper): `pods` and `count/pods` one each; cpu, memory and ephemeral-storage as `<r>` and
`requests.<r>` (their requests) and `limits.<r>` (their limits); hugepages as `hugepages-<size>` and
`requests.hugepages-<size>`; an extended resource only as `requests.<r>` (Kubernetes counts no
`limits.<extended>`: such a hard key, as HAMi's `limits.nvidia.com/gpumem`, is neither checked nor
recounted by Kubernetes, its used value stays what was written). Amounts as
resourcehelper.PodRequests/PodLimits take them: the app containers' sum against the largest init
container, plus `spec.overhead`. A container's request defaults to its limit (the API's defaulting), so
`nvidia.com/gpu: 1` in limits counts `requests.nvidia.com/gpu` 1. A pod counts until it is terminal
(Succeeded or Failed).

`admit(pod, quotas, totals)` is the ResourceQuota admission plugin on a pod CREATE (after the mutating
webhooks, as kube-apiserver orders them): a quota whose `spec.hard` names a key the pod adds to, and
that the namespace's usage plus the pod would pass, refuses it with kube-apiserver's 403 text
(`exceeded quota: <name>, requested: <key>=<n>, used: <key>=<n>, limited: <key>=<n>`). `status(quota,
totals)` is what the controller writes: `hard` as the spec says, `used` of each hard key the evaluator
counts (others keep their last value). The embedded server admits and recounts in one step, so two
creates at one instant are judged one after the other, as kube-apiserver's compare-and-swap on the
quota's status makes them.

Not modelled: scopes and scopeSelector, `count/<resource>` of objects other than pods, the
"must specify requests.cpu" refusal of a pod without the quota's compute resources, restartable
(sidecar) init containers, and (Kubernetes 1.35+, DRAExtendedResource) the devices of ResourceClaims of
a DeviceClass that maps an extended resource counted as `requests.<that resource>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from hami.apierror import ApiError
from hami.device.codec import CodecError
from hami.device.request import parse_quantity

COMPUTE = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES = "hugepages-"
TERMINAL = ("Succeeded", "Failed")


def _amounts(ctr: Mapping, part: str) -> dict[str, Fraction]:
    res = ctr.get("resources") if isinstance(ctr.get("resources"), Mapping) else {}
    raw = dict(res.get("limits") or {}) if part == "requests" else {}
    raw.update(res.get(part) or {})  # requests default to limits
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = parse_quantity(value)
        except CodecError:
            continue  # the API server's validation refuses it; nothing to count
    return out


def _pod_totals(spec: Mapping, part: str) -> dict[str, Fraction]:
    app: dict[str, Fraction] = {}
    for ctr in spec.get("containers") or ():
        if isinstance(ctr, Mapping):
            for name, v in _amounts(ctr, part).items():
                app[name] = app.get(name, Fraction(0)) + v
    for ctr in spec.get("initContainers") or ():
        if isinstance(ctr, Mapping):
            for name, v in _amounts(ctr, part).items():
                app[name] = max(app.get(name, Fraction(0)), v)
    for name, raw in (spec.get("overhead") or {}).items():
        try:
            app[str(name)] = app.get(str(name), Fraction(0)) + parse_quantity(raw)
        except CodecError:
            continue
    return app


def is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified name outside kubernetes.io, not a quota `requests.` key."""
    domain = name.partition("/")[0] if "/" in name else ""
    return bool(domain) and not domain.endswith("kubernetes.io") and not name.startswith("requests.")


def counted(key: str) -> bool:
    """The pod evaluator counts this quota key (MatchingResources)."""
    if key in ("pods", "count/pods") or key in COMPUTE:
        return True
    prefix, _, name = key.partition(".")
    if prefix in ("requests", "limits") and name in COMPUTE:
        return True
    if key.startswith(HUGEPAGES) or key.startswith("requests." + HUGEPAGES):
        return True
    return prefix == "requests" and is_extended(name)


def pod_usage(pod: Mapping) -> dict[str, Fraction]:
    """The quota keys one pod adds to (nothing once it is terminal)."""
    if ((pod.get("status") or {}).get("phase")) in TERMINAL:
        return {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    out = {"pods": Fraction(1), "count/pods": Fraction(1)}
    for name, v in _pod_totals(spec, "requests").items():
        if name in COMPUTE or name.startswith(HUGEPAGES):
            out[name] = v
            out[f"requests.{name}"] = v
        elif is_extended(name):
            out[f"requests.{name}"] = v
    for name, v in _pod_totals(spec, "limits").items():
        if name in COMPUTE:
            out[f"limits.{name}"] = v
    return out


def counts_differ(old: Mapping | None, new: Mapping) -> bool:
    """A pod update can change what it counts only by ending (its spec's resources do not change): the
    quota controller need not recount for the rest (conditions, annotations, binding)."""
    if old is None:
        return True
    return (((old.get("status") or {}).get("phase")) in TERMINAL) != (((new.get("status") or {}).get("phase"))
                                                                       in TERMINAL)


def _hard(quota: Mapping) -> dict[str, Fraction]:
    out = {}
    for key, raw in (((quota.get("spec") or {}).get("hard")) or {}).items():
        try:
            out[str(key)] = parse_quantity(raw)
        except CodecError:
            continue
    return out


def totals_of(pods: Iterable[Mapping]) -> dict[str, Fraction]:
    """Every quota key the pods add to, summed (what the controller recounts from)."""
    total: dict[str, Fraction] = {}
    for p in pods:
        add(total, p, 1)
    return total


def add(total: dict[str, Fraction], pod: Mapping | None, sign: int) -> None:
    """Count a pod in (`sign` 1) or out (-1) of a namespace's running totals."""
    if pod is None:
        return
    for key, v in pod_usage(pod).items():
        total[key] = total.get(key, Fraction(0)) + sign * v


def format_quantity(v: Fraction) -> str:
    """A canonical quantity: an integer as itself, else milli-units (rounded up, as Kubernetes does)."""
    if v.denominator == 1:
        return str(v.numerator)
    return f"{-((-v * 1000).numerator // (v * 1000).denominator)}m"


def admit(pod: Mapping, quotas: Iterable[Mapping], totals: Mapping[str, Fraction]) -> None:
    """Raise kube-apiserver's 403 when the pod would pass a quota of its namespace, whose pods count
    `totals` (totals_of)."""
    quotas = list(quotas)
    mine = pod_usage(pod)
    if not mine or not quotas:
        return
    for q in sorted(quotas, key=lambda q: (q.get("metadata") or {}).get("name", "")):
        hard = _hard(q)
        asked = {k: v for k, v in mine.items() if k in hard and v > 0}
        if not asked:
            continue
        used = {k: totals.get(k, Fraction(0)) for k in asked}
        over = sorted(k for k, v in asked.items() if used[k] + v > hard[k])
        if over:
            name = str((pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName") or "")
            raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: '
                           f'{(q.get("metadata") or {}).get("name", "")}, requested: {_each(asked, over)}, '
                           f"used: {_each(used, over)}, limited: {_each(hard, over)}", {"name": name, "kind": "pods"})


def _each(values: Mapping[str, Fraction], keys: list[str]) -> str:
    return ",".join(f"{k}={format_quantity(values[k])}" for k in keys)


def status(quota: Mapping, totals: Mapping[str, Fraction]) -> dict:
    """The quota's status as the controller writes it (syncResourceQuota) from its namespace's pod
    `totals`: `hard` from the spec; `used` of each hard key, the evaluator's count where it counts the
    key, else the last value written."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    before = ((quota.get("status") or {}).get("used")) or {}
    counts = {k: totals.get(k, Fraction(0)) for k in hard if counted(k)}
    used = {k: format_quantity(counts[k]) if k in counts else before[k] for k in hard if k in counts or k in before}
    return {"hard": dict(hard), "used": dict(sorted(used.items()))}
