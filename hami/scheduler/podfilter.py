"""The pod's device filters, read from its annotations (pure, no I/O).

HAMi sources: `pkg/device/devices.go` (`CheckType`, `CheckUUID`), `pkg/device/nvidia/device.go`
(`checkType`, `assertNuma`). Spec: scheduler.md §1.2.

- `split_types(value)` / `split_uuids(value)`: a use/nouse list in the form `fit.FitOptions`
  keeps it (None: no constraint); the fit checks every card against that form.
- `gpu_type_allowed`, `gpu_uuid_allowed`, `numa_bind`, `vgpu_mode_allowed`: the same rules on the
  annotation values themselves, one card at a time.
"""

from __future__ import annotations

from hami.device.codec import go_to_upper, go_trim_space

from .policy import parse_bool


def split_types(value: str | None) -> tuple[str, ...] | None:
    """CheckType members: trimmed, upper-cased as Go does (strings.ToUpper), empty members dropped
    (devices.go CheckType);
    None when the value is absent or blank (no constraint)."""
    if value is None or not go_trim_space(value):
        return None
    return tuple(t for t in (go_to_upper(go_trim_space(p)) for p in value.split(",")) if t)


def split_uuids(value: str | None) -> frozenset[str] | None:
    """CheckUUID members: trimmed, exact; None when the value is absent or blank."""
    if value is None or not go_trim_space(value):
        return None
    return frozenset(go_trim_space(p) for p in value.split(","))


def gpu_type_allowed(card_type: str, use: str | None, nouse: str | None) -> bool:
    """Go CheckType: use/nouse gputype lists; a member matches when it is a case-insensitive
    substring of the card type; empty members never match; empty/absent values mean no constraint."""
    card = go_to_upper(card_type)
    use_types, nouse_types = split_types(use), split_types(nouse)
    if use_types is not None and not any(t in card for t in use_types):
        return False
    return not (nouse_types is not None and any(t in card for t in nouse_types))


def gpu_uuid_allowed(uuid: str, use: str | None, nouse: str | None) -> bool:
    """Go CheckUUID: use/nouse gpuuuid lists of exact (trimmed) UUIDs; empty values: no constraint."""
    use_uuids, nouse_uuids = split_uuids(use), split_uuids(nouse)
    if use_uuids is not None and uuid not in use_uuids:
        return False
    return not (nouse_uuids is not None and uuid in nouse_uuids)


def numa_bind(value: str | None) -> bool:
    """`nvidia.com/numa-bind`: strconv.ParseBool true; anything unparsable means false."""
    return parse_bool(value)


def vgpu_mode_allowed(annotation: str | None, card_mode: str) -> bool:
    """`nvidia.com/vgpu-mode`: the card's mode must be a substring of the value when it is set."""
    return annotation is None or card_mode in annotation
