"""`hami.io/node-nvidia-score`: JSON `[{"uuid":..,"score":{uuid:int}}]` (Go DevicePairScores).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    INT64,
    JSON_KIND,
    fold_keys,
    go_json_string,
    json_loads,
    require_str,
    str_field,
    type_error,
)
from hami.device.codec.keys import (
    PAIR_SCORE_ANNOTATION,
)


@dataclass(frozen=True, slots=True)
class DevicePairScore:
    """One entry of `hami.io/node-nvidia-score`: how well `uuid` connects to each other GPU."""

    uuid: str
    scores: Mapping[str, int]

    def __hash__(self) -> int:
        return hash((self.uuid, tuple(sorted(self.scores.items()))))


def encode_pair_scores(entries: Iterable[DevicePairScore]) -> str:
    """JSON of []DevicePairScore (both fields omitempty; Go sorts map keys)."""
    out = []
    for e in entries:
        parts = []
        if e.uuid:
            parts.append('"uuid":' + go_json_string(e.uuid))
        if e.scores:
            inner = ",".join(f"{go_json_string(k)}:{int(v)}" for k, v in sorted(e.scores.items()))
            parts.append('"score":{' + inner + "}")
        out.append("{" + ",".join(parts) + "}")
    return "[" + ",".join(out) + "]"


def decode_pair_scores(text: str | bytes) -> tuple[DevicePairScore, ...]:
    """Go DecodePairScores."""
    require_str(text, PAIR_SCORE_ANNOTATION, bytes_ok=True)
    field = PAIR_SCORE_ANNOTATION
    doc = json_loads(text, field)
    shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if doc is None:
        return ()
    if type(doc) is not list:
        raise CodecError(
            f"json: cannot unmarshal {JSON_KIND.get(type(doc), 'value')} into Go value of type device.DevicePairScores",
            field=field, text=shown,
        )
    out = []
    for i, obj in enumerate(doc):
        if obj is None:
            out.append(DevicePairScore("", {}))
            continue
        if type(obj) is not dict:
            raise type_error(obj, "DevicePairScores", "device.DevicePairScore", f"{field}[{i}]", shown)
        if not obj.keys() <= {"uuid", "score"}:
            obj = fold_keys(obj, ("uuid", "score"))
        uuid = str_field(obj, "uuid", "DevicePairScore.uuid", f"{field}[{i}].uuid", shown)
        raw = obj.get("score")
        scores: dict[str, int] = {}
        if raw is not None:
            if type(raw) is not dict:
                raise type_error(raw, "DevicePairScore.score", "map[string]int", f"{field}[{i}].score", shown)
            for k, v in raw.items():
                if v is None:
                    v = 0
                if type(v) is not int or not INT64[0] <= v <= INT64[1]:
                    raise type_error(v, "DevicePairScore.score", "int", f"{field}[{i}].score.{k}", shown)
                scores[k] = v
        out.append(DevicePairScore(uuid, scores))
    return tuple(out)
