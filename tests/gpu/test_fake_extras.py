"""The fake backend's topology, telemetry and MIG parts (docs/architecture.md, "Fake GPU file").

Covers: the geometry table (A100-40GB, A100-80GB, H100-80GB: profile names, placements inside 8
memory slices, models mapped to geometries); bad input names the key (telemetry field, topology
level, nvlinks, MIG on a model without geometry, MIG instances on a card in non-MIG mode);
telemetry left out is None (not supported), file edits drive the counters; MIG create/destroy on
the card: placements checked against the geometry, overlaps refused with the card unchanged, MIG
mode cannot be turned off under live instances, state survives file edits (it is the card's).
"""

from __future__ import annotations

import pytest
import yaml

from hami.gpu.backend import GpuBackendError
from hami.gpu.fake import FakeBackend
from hami.gpu.health import THROTTLE_BITS
from hami.gpu.mig import MigError, geometries, geometry_for_model

U = "GPU-0d4c6a5e-0000-4000-8000-000000000001"


def write(tmp_path, gpu: dict, **top) -> str:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": [{"uuid": U, "memory_mib": 40960, **gpu}], **top}))
    return str(path)


def test_geometry_table_covers_the_three_cards():
    assert set(geometries()) == {"A100-40GB", "A100-80GB", "H100-80GB"}
    for name, profiles in geometries().items():
        assert profiles[0].slices == 1 and profiles[-1].slices == 7, name
        for p in profiles:
            assert p.placements and all(0 <= s and s + z <= 8 for s, z in p.placements), (name, p.name)
    assert [p.name for p in geometries()["A100-40GB"]] == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
                                                           "7g.40gb"]
    assert geometry_for_model("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert geometry_for_model("NVIDIA H100 80GB HBM3") == "H100-80GB"
    assert geometry_for_model("NVIDIA Tesla T4") is None


@pytest.mark.parametrize("gpu, top, key", [
    ({"telemetry": {"temp": 3}}, {}, "gpus[0].telemetry.temp"),
    ({"telemetry": {"power_w": -1}}, {}, "gpus[0].telemetry.power_w"),
    ({"telemetry": {"throttle_reasons": ["melting"]}}, {}, "gpus[0].telemetry.throttle_reasons"),
    ({"nvlinks": [1, 2]}, {}, "gpus[0].nvlinks"),
    ({}, {"topology": {"default": "far"}}, "topology.default"),
    ({}, {"topology": {"pairs": [{"gpus": [0], "level": "single"}]}}, "topology.pairs[0].gpus"),
    ({"model": "NVIDIA Tesla T4", "mig": {}}, {}, "gpus[0].mig"),
    ({"model": "NVIDIA A100-SXM4-40GB", "mig": {"instances": [{"profile": "1g.5gb"}]}}, {}, "gpus[0].mig.instances"),
    ({"model": "NVIDIA A100-SXM4-40GB", "mig": {"enabled": True, "instances": [{"profile": "9g.1tb"}]}}, {},
     "gpus[0].mig.instances[0]"),
])
def test_bad_extras_are_refused_naming_the_key(tmp_path, gpu, top, key):
    with pytest.raises(GpuBackendError) as err:
        FakeBackend(write(tmp_path, gpu, **top))
    assert key in str(err.value)


def test_telemetry_left_out_is_not_supported_and_file_edits_drive_counters(tmp_path):
    path = write(tmp_path, {"telemetry": {"temperature_c": 50, "throttle_reasons": ["sw_power_cap"], "xids": {79: 1}}})
    backend = FakeBackend(path)
    (h,) = backend.health()
    assert h.temperature_c == 50 and h.power_w is None and h.ecc_uncorrected is None
    assert h.throttle_reasons == THROTTLE_BITS["sw_power_cap"] and h.xid_counts == {79: 1}
    doc = yaml.safe_load(open(path))
    doc["gpus"][0]["telemetry"] = {"temperature_c": 91, "ecc_uncorrected": 3, "xids": {79: 4, 48: 1}}
    open(path, "w").write(yaml.safe_dump(doc) + "\n")  # size changes: picked up on the next call
    (h,) = backend.health()
    assert (h.temperature_c, h.ecc_uncorrected, h.xid_counts) == (91, 3, {79: 4, 48: 1})


def test_mig_create_destroy_checks_placements_and_keeps_the_card_on_refusal(tmp_path):
    backend = FakeBackend(write(tmp_path, {"model": "NVIDIA A100-SXM4-40GB", "mig": {"enabled": False}}))
    assert backend.mig_capable(U) and not backend.mig_enabled(U)
    with pytest.raises(MigError, match="MIG mode is disabled"):
        backend.create_mig(U, "1g.5gb", 0)
    backend.set_mig_mode(U, True)
    a = backend.create_mig(U, "3g.20gb", 4)
    assert a.mig_uuid.startswith("MIG-") and a.placement == (4, 4)
    with pytest.raises(MigError, match="overlaps"):
        backend.create_mig(U, "2g.10gb", 4)
    with pytest.raises(MigError, match="cannot start at slice 3"):
        backend.create_mig(U, "2g.10gb", 3)
    assert backend.mig_instances(U) == (a,)
    with pytest.raises(MigError, match="cannot disable"):
        backend.set_mig_mode(U, False)
    backend.destroy_mig(U, a.gpu_instance_id)
    with pytest.raises(MigError, match="not found"):
        backend.destroy_mig(U, a.gpu_instance_id)
    backend.set_mig_mode(U, False)
    assert not backend.mig_enabled(U) and backend.mig_instances(U) == ()


def test_mig_instances_from_the_file_are_the_cards_and_survive_edits(tmp_path):
    path = write(tmp_path, {"model": "NVIDIA H100 80GB HBM3",
                            "mig": {"enabled": True, "instances": [{"profile": "1g.10gb", "start": 0},
                                                                   {"profile": "3g.40gb", "start": 4}]}})
    backend = FakeBackend(path)
    first = backend.mig_instances(U)
    assert [(m.profile, m.start) for m in first] == [("1g.10gb", 0), ("3g.40gb", 4)]
    open(path, "a").write("\n# touched\n")
    assert backend.mig_instances(U) == first
    assert not FakeBackend(write(tmp_path, {"model": "NVIDIA Tesla T4"})).mig_capable(U)
