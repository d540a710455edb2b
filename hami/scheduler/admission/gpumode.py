"""Which GPU mode a pod gets with --dra (pure): claims (DRA) or the device plugin, per namespace and
per pod, so a cluster can move nodes to DRA one at a time while both kinds of pods keep landing.

- `--dra-default-mode` (dra or device-plugin, default dra): a GPU pod's mode when its namespace
  names none;
- the namespace label `hami.io/gpu-mode` (`dra` or `device-plugin`): that namespace's mode;
- the pod annotation `hami.io/gpu-mode`: honoured only where the namespace lets pods choose, with the
  label `hami.io/gpu-mode-pod-choice: "true"`; elsewhere an annotation naming another mode than the
  namespace's is refused at admission (never silently ignored: the pod asked for something).

Namespace labels are the cluster admin's (tenants cannot label their namespace in a usual RBAC
setup); the pod annotation is tenant input. All a tenant can do with it is pick one of the two
modes where the admin allowed both: each mode keeps its own quota and limits (HAMi-core in both), so
choosing gains no GPU, only the other kind of node. An unknown value is refused naming it.

The webhook records the outcome on the pod (`DECISION_ANNOTATION`, "<mode>: <why>") for
`hami doctor pod`; a pod creator may overwrite that annotation later, so it explains, it decides
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

LABEL = "hami.io/gpu-mode"  # namespace label and pod annotation share the node label's key
CHOICE_LABEL = "hami.io/gpu-mode-pod-choice"
DECISION_ANNOTATION = "hami.io/gpu-mode-decision"
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
MODES = (DEVICE_PLUGIN, DRA)


class ModeChoice(NamedTuple):
    mode: str
    why: str
    refused: str = ""  # non-empty: the pod is refused with this text

    @property
    def text(self) -> str:
        return f"{self.mode}: {self.why}"


def choose(annotations: Mapping | None, namespace_labels: Mapping | None, namespace: str,
           default: str) -> ModeChoice:
    labels = namespace_labels or {}
    ns_mode = labels.get(LABEL)
    if ns_mode in MODES:
        base, why = str(ns_mode), f"namespace {namespace} has the label {LABEL}={ns_mode}"
    elif ns_mode is not None:
        base, why = default, (f"the scheduler's default (--dra-default-mode={default}); namespace {namespace}'s "
                              f"label {LABEL}={str(ns_mode)[:64]!r} is not dra or device-plugin")
    else:
        base, why = default, f"the scheduler's default (--dra-default-mode={default})"
    asked = (annotations or {}).get(LABEL)
    if asked is None or asked == "":
        return ModeChoice(base, why)
    if asked not in MODES:
        shown = str(asked)[:64]
        return ModeChoice(base, why, f"annotation {LABEL}: {shown!r} is not dra or device-plugin")
    if asked == base:
        return ModeChoice(base, f"the pod's annotation {LABEL}={asked}, as {why}")
    if labels.get(CHOICE_LABEL) == "true":
        return ModeChoice(str(asked), f"the pod's annotation {LABEL}={asked} (namespace {namespace} lets pods "
                                      f"choose: {CHOICE_LABEL}=true)")
    return ModeChoice(base, why, (
        f"annotation {LABEL}={asked}: namespace {namespace} does not let pods choose their GPU mode (its mode is "
        f"{base}: {why}); a cluster admin can label the namespace {CHOICE_LABEL}=true"))
