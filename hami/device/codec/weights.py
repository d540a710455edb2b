"""`hami.io/device-scoring-weights`: `slot=N,core=N,memory=N` (Go ParseDeviceScoringWeights).
"""

from __future__ import annotations

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    INT64,
    go_int,
    go_quote,
    go_trim_space,
    require_str,
)
from hami.device.codec.keys import (
    SCORING_WEIGHTS_ANNOTATION,
)
from hami.device.model import (
    ScoringWeights,
)


def decode_scoring_weights(text: str | None) -> ScoringWeights:
    """Go ParseDeviceScoringWeights; None (annotation absent) gives the defaults (1,1,1)."""
    require_str(text, SCORING_WEIGHTS_ANNOTATION, none_ok=True)
    if text is None:
        return ScoringWeights()
    key_name = SCORING_WEIGHTS_ANNOTATION

    def fail(why: str) -> CodecError:
        return CodecError(f"invalid {key_name} annotation {go_quote(text)}: {why}", field=key_name, text=text)

    parts = text.split(",")
    if len(parts) != 3:
        raise fail("expected slot, core, and memory weights")
    weights = {"slot": 0, "core": 0, "memory": 0}
    seen: set[str] = set()
    for part in parts:
        key, sep, raw = go_trim_space(part).partition("=")
        if not sep:
            raise fail("expected key=value entries")
        key = go_trim_space(key)
        if key in seen:
            raise fail(f"duplicate {go_quote(key)} weight")
        value = go_int(go_trim_space(raw), INT64, "ParseInt")
        if isinstance(value, str):
            raise fail(f"{go_quote(key)} weight must be an integer")
        if value < 0:
            raise fail(f"{go_quote(key)} weight must not be negative")
        if key not in weights:
            raise fail(f"unknown weight {go_quote(key)}")
        weights[key] = value
        seen.add(key)
    if not any(weights.values()):
        raise fail("at least one weight must be positive")
    return ScoringWeights(**weights)


def encode_scoring_weights(w: ScoringWeights) -> str:
    return f"slot={w.slot},core={w.core},memory={w.memory}"
