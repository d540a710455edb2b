"""HAMi's own pod filter tables against the fit's one reading of them: `fit.fit_options` (the
lists split by hami.scheduler.placement.podfilter) and `FitOptions.uuid_ok` / `type_ok` / `numa_bind`, the
checks /filter and /bind run (moved from tests/device/test_codec_golden.py; the per-annotation
predicates that only tests called are gone).

Covers, each case naming its source in Project-HAMi/HAMi: pkg/device/devices_test.go CheckUUID and
CheckType, pkg/device/nvidia/device_test.go checkType (gputype substring match) and numa-bind,
and spec scheduler.md §1.2 `nvidia.com/vgpu-mode`.
"""

from __future__ import annotations

import pytest

from hami.device import codec
from hami.device.model import DeviceInfo
from hami.scheduler.placement.fit import fit_options
from hami.scheduler.placement.usage import DeviceState


def _options(**annos):
    return fit_options({k: v for k, v in annos.items() if v is not None})


def _card(card: str, mode: str = "hami-core") -> DeviceState:
    return DeviceState.from_info(DeviceInfo(id="GPU-x", count=10, devmem=1000, devcore=100, type=card, mode=mode))

CHECK_UUID = [
    ("don't set GPUUseUUID and GPUNoUseUUID annotation", None, None, "abc", True),
    ("use set, device match", "abc,123", None, "abc", True),
    ("use set, device don't match", "abc,123", None, "1abc", False),
    ("nouse set, device match", None, "abc,123", "abc", False),
    ("nouse set, device don't match", None, "abc,123", "1abc", True),
    ("both set, device in use list but also in nouse list", "abc,123", "abc", "abc", False),
    ("both set, device in use list and not in nouse list", "abc,123", "456", "abc", True),
    ("use list with spaces around uuids", " abc , 123 ", None, "abc", True),
    ("empty use annotation does not filter", "", None, "abc", True),
    ("whitespace-only use annotation does not filter", "   ", None, "abc", True),
    ("empty nouse annotation does not exclude", None, "", "abc", True),
]


@pytest.mark.parametrize(("use", "nouse", "uuid", "want"), [c[1:] for c in CHECK_UUID], ids=[c[0] for c in CHECK_UUID])
def test_gpu_uuid_lists_like_hami_check_uuid(use, nouse, uuid, want):
    """devices_test.go TestCheckUUID."""
    assert _options(**{codec.USE_GPUUUID_ANNOTATION: use, codec.NOUSE_GPUUUID_ANNOTATION: nouse}).uuid_ok(uuid) is want


CHECK_TYPE = [
    ("no annotation is no constraint", None, None, "NVIDIA-A100", True),
    ("use list matches by substring", "A100,V100", None, "NVIDIA-A100", True),
    ("use list does not match", "V100", None, "NVIDIA-A100", False),
    ("nouse list matches excludes the device", None, "A100", "NVIDIA-A100", False),
    ("nouse list does not match keeps the device", None, "V100", "NVIDIA-A100", True),
    ("empty use value is no constraint", "", None, "NVIDIA-A100", True),
    ("whitespace-only nouse value excludes nothing", None, "   ", "NVIDIA-A100", True),
    ("use satisfied and nouse matches still excludes", "A100", "A100", "NVIDIA-A100", False),
    ("nouse with trailing comma only excludes named type", None, "V100,", "NVIDIA-A100", True),
    ("nouse with leading comma only excludes named type", None, ",V100", "NVIDIA-A100", True),
    ("use with trailing comma matches named type only", "V100,", None, "NVIDIA-A100", False),
    # pkg/device/nvidia/device_test.go Test_checkType
    ("nvidia: use A10 matches A100 by substring", "A10", None, "NVIDIA A100", True),
    ("nvidia: use A10 nouse A100 excludes A100", "A10", "A100", "NVIDIA A100", False),
    ("nvidia: use A10 nouse A100 keeps A10", "A10", "A100", "NVIDIA A10", True),
    ("case-insensitive", "a100", None, "NVIDIA A100", True),
]


@pytest.mark.parametrize(("use", "nouse", "card", "want"), [c[1:] for c in CHECK_TYPE], ids=[c[0] for c in CHECK_TYPE])
def test_gpu_type_lists_like_hami_check_type(use, nouse, card, want):
    """devices_test.go TestCheckType and nvidia/device_test.go Test_checkType."""
    assert _options(**{codec.USE_GPUTYPE_ANNOTATION: use,
                       codec.NOUSE_GPUTYPE_ANNOTATION: nouse}).type_ok(_card(card)) is want


@pytest.mark.parametrize(
    ("value", "want"),
    [("true", True), ("1", True), ("t", True), ("TRUE", True), ("True", True), ("T", True),
     ("false", False), ("0", False), ("yes", False), ("", False), (None, False), (" true", False)],
)
def test_numa_bind_uses_parse_bool(value, want):
    """nvidia/device.go assertNuma: strconv.ParseBool true; anything else is false."""
    assert _options(**{codec.NUMA_BIND_ANNOTATION: value}).numa_bind is want


@pytest.mark.parametrize(
    ("annotation", "mode", "want"),
    [(None, "mig", True), ("hami-core", "hami-core", True), ("hami-core,mps", "mps", True),
     ("mig", "hami-core", False), ("", "hami-core", False)],
)
def test_vgpu_mode_card_mode_must_be_a_substring(annotation, mode, want):
    """spec scheduler.md §1.2 `nvidia.com/vgpu-mode`."""
    assert _options(**{codec.VGPU_MODE_ANNOTATION: annotation}).type_ok(_card("A100", mode)) is want
