"""Every vendor hook's steps in one place to read: hook -> step -> its own function, or None for the shared one.

A vendor row names its hook (config/vendors.yaml `hook:`); the hook's traits are hami.device.vendorhooks.HOOKS,
and each step it does its own way is a function in that step's table, in the module that owns the step:

    request     parsing a container's limits   hami.device.vendorrequest.OWN_REQUESTS   (shared: generic_request)
    fit         the Fit walk over its cards    hami.scheduler.placement.fit.OWN_FITS    (shared: fit_vendor_devices)
    score       its term of the node score     hami.scheduler.placement.vendorscore.TERMS, by the kinds its
                                               traits name (shared: none; a row's own keys may add one, SHARED)
    allocation  annotations beside its devices hami.device.allocation.OWN_EXTRAS        (shared: none)
    webhook     its mutation at admission      hami.scheduler.admission.webhook.OWN_MUTATIONS (shared: none)
    doctor      its words for a reason key     hami.doctor.tree.OWN_ADVICE              (shared: REASON_ADVICE)

The tables stay beside their steps: a step reads its own table where it runs, and one table in hami.device
would import the scheduler and the doctor, which the device package may not (.importlinter). This module
sits above all of them and only assembles the view: nothing in hami imports it (.importlinter,
vendorsteps-view). tests/foundation/test_vendor_steps.py proves from it that every hook has the steps its
traits need, and docs/vendors.md's table of hooks and steps is `render_table()`. NVIDIA's hook is HAMi's
own path (hami.device.request, fit.fit_devices, the NVIDIA codec), not a vendor row's steps: it is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from hami.device.allocation import OWN_EXTRAS
from hami.device.vendorhooks import HOOKS, Hook
from hami.device.vendorrequest import OWN_REQUESTS, generic_request
from hami.doctor.tree import OWN_ADVICE, REASON_ADVICE
from hami.scheduler.admission.webhook import OWN_MUTATIONS
from hami.scheduler.placement.fit import OWN_FITS, fit_vendor_devices
from hami.scheduler.placement.vendorscore import TERMS

STEPS = ("request", "fit", "score", "allocation", "webhook", "doctor")
OWN_TABLES: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "request": OWN_REQUESTS, "fit": OWN_FITS, "allocation": OWN_EXTRAS, "webhook": OWN_MUTATIONS,
    "doctor": OWN_ADVICE,
})
# What a hook without its own function for the step gets; the score's are the terms a row's own keys add
# whatever its hook (MetaX GPU's topology annotations, Vastai's dies).
SHARED: Mapping[str, Any] = MappingProxyType({
    "request": generic_request, "fit": fit_vendor_devices,
    "score": MappingProxyType({kind: TERMS[kind] for kind in ("topology", "aic")}),
    "allocation": None, "webhook": None, "doctor": REASON_ADVICE,
})


def score_kinds(hook: Hook) -> tuple[str, ...]:
    """The node-score terms a hook's traits name (hami.device.vendors.Vendor.node_score)."""
    kinds = ("network" if hook.network_score_prefix else "", hook.whole_card_score, hook.score)
    return tuple(k for k in kinds if k)


def vendor_steps() -> Mapping[str, Mapping[str, Any]]:
    """hook -> step (STEPS) -> the hook's own function for it, or None where it takes SHARED's; the score
    step is {kind: term} for the terms its traits name ({} = none of its own)."""
    out = {}
    for name, hook in HOOKS.items():
        if hook.nvidia:
            continue
        steps: dict[str, Any] = {step: table.get(name) for step, table in OWN_TABLES.items()}
        steps["score"] = MappingProxyType({kind: TERMS[kind] for kind in score_kinds(hook)})
        out[name] = MappingProxyType({step: steps[step] for step in STEPS})
    return MappingProxyType(out)


def render_table() -> str:
    """docs/vendors.md's table: per hook, each step its own (with the score's kinds) or shared."""
    lines = ["| hook | " + " | ".join(STEPS) + " |", "|---|" + "---|" * len(STEPS)]
    for name, steps in vendor_steps().items():
        cells = []
        for step in STEPS:
            own = steps[step]
            if step == "score":
                cells.append(", ".join(f"own: {k}" for k in own) or "shared")
            else:
                cells.append("own" if own is not None else "shared")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)
