"""Vastai's die registration (pkg/device/vastai at HAMi v2.10.0).

Vastai's device plugin registers NVIDIA's JSON under `hami.io/node-va-register`; in its "die"
strategy each registered device is one die of a physical card, and its `custominfo` says so:
`{"DeviceStrategy":"die","AIC":"<card id>"}`. The fit groups dies by their card (`AIC`) and the
node score counts how many of a container's dies share one card. `die_cards` reads those two
fields per device; the custominfo itself stays byte-exact on the DeviceInfo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson

from hami.device.model import DeviceInfo

STRATEGY = "DeviceStrategy"
AIC = "AIC"
DIE = "die"


def die_cards(devices: Iterable[DeviceInfo]) -> Mapping[str, tuple[str | None, str | None]] | None:
    """`{device id: (DeviceStrategy, AIC)}` for the devices whose custominfo names either (a value
    that is not a string counts as absent, as HAMi's `.(string)` assertions); None when none does."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for d in devices:
        text = d.custom_info
        if not text or (STRATEGY not in text and AIC not in text):
            continue
        info = orjson.loads(text)  # our own canonical form of an object: cannot fail
        strategy, aic = info.get(STRATEGY), info.get(AIC)
        if STRATEGY in info or AIC in info:
            out[d.id] = (strategy if type(strategy) is str else None, aic if type(aic) is str else None)
    return out or None
