"""`hami.io/device-cordon`: a comma list of GPU UUIDs the scheduler must not use.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami.device.codec.errors import CodecError
from hami.device.codec.golang import (
    go_quote,
    go_trim_space,
    require_str,
)
from hami.device.codec.keys import (
    CORDON_ANNOTATION,
)


def decode_device_cordon(text: str | None) -> tuple[str, ...]:
    """`hami.io/device-cordon`: comma list of UUIDs, spaces trimmed, empty members skipped."""
    require_str(text, CORDON_ANNOTATION, none_ok=True)
    if not text:
        return ()
    return tuple(u for u in (go_trim_space(p) for p in text.split(",")) if u)


def encode_device_cordon(uuids: Iterable[str]) -> str:
    out = []
    for u in uuids:
        if not u or "," in u or go_trim_space(u) != u:
            raise CodecError(f"cordon UUID {go_quote(u)} is empty, has a comma or surrounding space",
                             field=CORDON_ANNOTATION, text=u)
        out.append(u)
    return ",".join(out)
