"""The pod's device filters, read from its annotations (pure, no I/O).

HAMi sources: `pkg/device/devices.go` (`CheckType`, `CheckUUID`), `pkg/device/nvidia/device.go`
(`checkType`, `assertNuma`). Spec: scheduler.md §1.2.

- `split_types(value)` / `split_uuids(value)`: a use/nouse list in the form `fit.FitOptions`
  keeps it (None: no constraint); the fit checks every card against that form
  (`FitOptions.type_ok` / `uuid_ok`, numa-bind and vgpu-mode there too): one rendering of each
  rule, which tests/scheduler/test_podfilter.py checks against HAMi's tables.
"""

from __future__ import annotations

from hami.device.codec import go_to_upper, go_trim_space


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
