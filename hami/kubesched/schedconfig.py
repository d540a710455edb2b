"""What a KubeSchedulerConfiguration makes of one profile's extender, NodeResourcesFit and node search
(pure).

kube-scheduler's rules, `kubescheduler.config.k8s.io/v1`:

- `HTTPExtender.IsInterested` (pkg/scheduler/extender.go): an extender with no `managedResources` is
  called for every pod of the profile (Filter, Prioritize, Bind when it is the binder, Preempt); with
  some, only for a pod whose container or init container names one of them in its requests or limits.
- `buildExtenders` (pkg/scheduler/scheduler.go): the `ignoredByScheduler: true` managed resources of
  every extender become NodeResourcesFitArgs.ignoredResources of every profile, replacing what the
  profile's pluginConfig said; with none, the profile's own `pluginConfig` NodeResourcesFit args
  (`ignoredResources`, `ignoredResourceGroups`: names, and domains before the `/`) stand.
- `percentageOfNodesToScore` (the configuration's, and a profile's own, which wins): how many feasible
  nodes end a cycle's search (hami.kubesched.nodestoscore); unset everywhere is kube-scheduler's 0,
  adaptive. A value outside [0-100] is refused, as kube-scheduler's validation does.

`profile(doc, scheduler_name)` reads one profile of a parsed configuration; `is_interested` is
IsInterested. A shape that is not a configuration's raises ConfigShapeError naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami.kubesched.nodestoscore import PercentageError, check_percentage, effective_percentage

FIT_PLUGIN = "NodeResourcesFit"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigShapeError(ValueError):
    """A KubeSchedulerConfiguration field of the wrong shape (names the field)."""


@dataclass(frozen=True)
class ExtenderEntry:
    """One `extenders[]` entry, as kube-scheduler reads it."""

    url: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 1
    http_timeout: float = 30.0
    managed: frozenset[str] = frozenset()
    ignored_by_scheduler: frozenset[str] = frozenset()
    ignorable: bool = False

    def interested(self, pod: Mapping) -> bool:
        return is_interested(self.managed, pod)


@dataclass(frozen=True)
class Profile:
    """One profile with what the configuration's extenders do to it."""

    scheduler_name: str
    extenders: tuple[ExtenderEntry, ...]
    fit_ignored: frozenset[str]
    fit_ignored_groups: frozenset[str]
    # the profile's percentageOfNodesToScore, else the global one, else 0 (adaptive)
    percentage_of_nodes_to_score: int = 0


def is_interested(managed: frozenset[str] | set[str], pod: Mapping) -> bool:
    """HTTPExtender.IsInterested: no managed resources, or one named in a container's (or init
    container's) requests or limits."""
    if not managed:
        return True
    spec = pod.get("spec") or {}
    for group in ("containers", "initContainers"):
        for ctr in spec.get(group) or ():
            res = (ctr.get("resources") if isinstance(ctr, Mapping) else None) or {}
            for part in ("requests", "limits"):
                if any(name in managed for name in res.get(part) or {}):
                    return True
    return False


def _list(value: Any, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigShapeError(f"{field}: expected a list, got {type(value).__name__}")
    return value


def _strings(value: Any, field: str) -> frozenset[str]:
    items = _list(value, field)
    if not all(isinstance(x, str) for x in items):
        raise ConfigShapeError(f"{field}: expected a list of strings")
    return frozenset(items)


def _seconds(value: Any, field: str) -> float:
    """A metav1.Duration ("30s", "1m30s", "500ms"); absent: kube-scheduler's 30 s default."""
    if value is None or value == "":
        return 30.0
    text = str(value)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigShapeError(f"{field}: {text!r} is not a duration such as 30s")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def extender_entry(raw: Any, field: str) -> ExtenderEntry:
    if not isinstance(raw, Mapping):
        raise ConfigShapeError(f"{field}: expected an object")
    managed, ignored = set(), set()
    for i, r in enumerate(_list(raw.get("managedResources"), f"{field}.managedResources")):
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str) or not r["name"]:
            raise ConfigShapeError(f"{field}.managedResources[{i}].name: expected a resource name")
        managed.add(r["name"])
        if r.get("ignoredByScheduler") is True:
            ignored.add(r["name"])
    return ExtenderEntry(
        url=str(raw.get("urlPrefix") or ""), filter_verb=str(raw.get("filterVerb") or ""),
        prioritize_verb=str(raw.get("prioritizeVerb") or ""), preempt_verb=str(raw.get("preemptVerb") or ""),
        bind_verb=str(raw.get("bindVerb") or ""), weight=int(raw.get("weight") or 1),
        http_timeout=_seconds(raw.get("httpTimeout"), f"{field}.httpTimeout"),
        managed=frozenset(managed), ignored_by_scheduler=frozenset(ignored), ignorable=raw.get("ignorable") is True)


def profile(doc: Mapping, scheduler_name: str) -> Profile:
    """The profile named `scheduler_name` (absent profiles: kube-scheduler's one default-scheduler
    profile) with the configuration's extenders and its NodeResourcesFit ignored resources."""
    if not isinstance(doc, Mapping):
        raise ConfigShapeError("KubeSchedulerConfiguration: expected an object")
    profiles = _list(doc.get("profiles"), "profiles") or [{"schedulerName": "default-scheduler"}]
    chosen = next((p for p in profiles if isinstance(p, Mapping)
                   and (p.get("schedulerName") or "default-scheduler") == scheduler_name), None)
    if chosen is None:
        raise ConfigShapeError(f"profiles: no profile has schedulerName {scheduler_name!r}")
    extenders = tuple(extender_entry(e, f"extenders[{i}]") for i, e in enumerate(_list(doc.get("extenders"),
                                                                                        "extenders")))
    ignored, groups = frozenset(), frozenset()
    for i, pc in enumerate(_list(chosen.get("pluginConfig"), "profiles[].pluginConfig")):
        if isinstance(pc, Mapping) and pc.get("name") == FIT_PLUGIN:
            args = pc.get("args") or {}
            if not isinstance(args, Mapping):
                raise ConfigShapeError(f"profiles[].pluginConfig[{i}].args: expected an object")
            ignored = _strings(args.get("ignoredResources"), f"profiles[].pluginConfig[{i}].args.ignoredResources")
            groups = _strings(args.get("ignoredResourceGroups"),
                              f"profiles[].pluginConfig[{i}].args.ignoredResourceGroups")
    by_extenders = frozenset().union(*(e.ignored_by_scheduler for e in extenders))
    if by_extenders:  # buildExtenders: the extenders' list replaces the profile's ignoredResources
        ignored = by_extenders
    percentage = effective_percentage(_percentage(chosen, "profiles[].percentageOfNodesToScore"),
                                      _percentage(doc, "percentageOfNodesToScore"))
    return Profile(scheduler_name, extenders, ignored, groups, percentage)


def _percentage(holder: Mapping, field: str) -> int | None:
    value = holder.get("percentageOfNodesToScore")
    try:
        check_percentage(value, field)
    except PercentageError as exc:
        raise ConfigShapeError(str(exc)) from None
    return value
