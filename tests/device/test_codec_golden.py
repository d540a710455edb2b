"""Golden tests: the literal strings of HAMi's own Go tests, decoded and encoded by hami.device.codec.

Covers, each case naming its source in Project-HAMi/HAMi:
- pkg/device/devices_test.go: DecodeContainerDevices, DecodePodDevices (empty containers kept,
  the trailing `;`), the bad-annotation table, MarshalNodeDevices / UnMarshalNodeDevices,
  DecodeNodeDevices (legacy form, exact error strings), EncodeNodeDevices, the MIG profile wire
  format, pair scores, EncodeContainerDeviceType, the handshake values of Test_CheckHealth, the
  Fuzz* seed corpora. (CheckUUID, CheckType and numa-bind: tests/scheduler/test_podfilter.py.)
- pkg/util/nodelock/nodelock_test.go: lock values and the 3-part error.
- pkg/util/device_scoring_weights_test.go: ParseDeviceScoringWeights.
- ../shared/spec/scheduler.md §1.4-§1.5 and node.md §1.3: byte-exact register JSON examples.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from hami.device import codec
from hami.device.codec import CodecError
from hami.device.model import ContainerDevice, DeviceInfo, MigPlacement, MigProfile, ScoringWeights

DEVICES_TEST = "pkg/device/devices_test.go"
U = codec.UNSET_CONTAINER_DEVICE_IDX


def cd(uuid: str, type_: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid, type_, mem, cores, U)


# --------------------------------------------------------------------------- DecodeContainerDevices

CONTAINER_OK = [
    ("empty string returns empty ContainerDevices", "", ()),
    ("trailing delimiters only returns empty ContainerDevices", ":::", ()),
    (
        "valid single device",
        "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,500,3:",
        (cd("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "NVIDIA", 500, 3),),
    ),
    ("valid single device with zero resources", "GPU-zero,NVIDIA,0,0:", (cd("GPU-zero", "NVIDIA", 0, 0),)),
    (
        "multiple valid devices",
        "GPU-1,NVIDIA,1000,10:GPU-2,Cambricon,2000,20:",
        (cd("GPU-1", "NVIDIA", 1000, 10), cd("GPU-2", "Cambricon", 2000, 20)),
    ),
    (
        "existing valid fields preserved with extra optional fields",
        "GPU-1,NVIDIA,1000,10,extra1,extra2:",
        (cd("GPU-1", "NVIDIA", 1000, 10),),
    ),
]

CONTAINER_BAD = [
    ("malformed segment without comma", "garbage", 'malformed container device annotation segment: "garbage"'),
    ("malformed segment without comma and with delimiter", "garbage:",
     'malformed container device annotation segment: "garbage"'),
    ("missing required fields (only 2 fields)", "GPU-1,NVIDIA:",
     "pod annotation format error, missing fields, do not use nodeName in task spec"),
    ("missing required fields (only 3 fields)", "GPU-1,NVIDIA,1000:",
     "pod annotation format error, missing fields, do not use nodeName in task spec"),
    ("empty device ID / UUID", ",NVIDIA,1000,10:", "pod annotation format error, missing device UUID"),
    ("empty device type", "GPU-1,,1000,10:", "pod annotation format error, missing device type"),
    ("negative memory value", "GPU-1,NVIDIA,-500,10:", "memory field must not be negative: -500"),
    ("negative cores value", "GPU-1,NVIDIA,500,-1:", "core field must not be negative: -1"),
    ("invalid non-numeric memory", "GPU-1,NVIDIA,invalid,10:",
     'invalid memory field: strconv.ParseInt: parsing "invalid": invalid syntax'),
    ("invalid non-numeric core", "GPU-1,NVIDIA,500,invalid:",
     'invalid core field: strconv.ParseInt: parsing "invalid": invalid syntax'),
    ("memory integer overflow", "GPU-1,NVIDIA,99999999999999999999999999,10:",
     'invalid memory field: strconv.ParseInt: parsing "99999999999999999999999999": value out of range'),
    ("core integer overflow", "GPU-1,NVIDIA,500,99999999999999999999999999:",
     'invalid core field: strconv.ParseInt: parsing "99999999999999999999999999": value out of range'),
    ("valid device followed by malformed device fails entire decode", "GPU-1,NVIDIA,1000,10:malformed_segment:",
     'malformed container device annotation segment: "malformed_segment"'),
    ("malformed device followed by valid device fails entire decode", "malformed_segment:GPU-1,NVIDIA,1000,10:",
     'malformed container device annotation segment: "malformed_segment"'),
    ("valid device followed by negative resource fails entire decode", "GPU-1,NVIDIA,1000,10:GPU-2,NVIDIA,-100,10:",
     "memory field must not be negative: -100"),
    ("negative resource followed by valid device fails entire decode", "GPU-1,NVIDIA,1000,-5:GPU-2,NVIDIA,1000,10:",
     "core field must not be negative: -5"),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in CONTAINER_OK], ids=[c[0] for c in CONTAINER_OK])
def test_decode_container_devices_accepts_hami_golden_values(text, want):
    """devices_test.go TestDecodeContainerDevices, valid rows."""
    assert codec.decode_container_devices(text) == want


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in CONTAINER_BAD], ids=[c[0] for c in CONTAINER_BAD])
def test_decode_container_devices_rejects_hami_golden_values_with_hami_message(text, message):
    """devices_test.go TestDecodeContainerDevices, error rows (messages from devices.go)."""
    with pytest.raises(CodecError) as err:
        codec.decode_container_devices(text)
    assert str(err.value) == message
    assert err.value.text in text
    assert text[err.value.position:].startswith(err.value.text)


def test_container_device_idx_is_the_unset_sentinel_after_a_round_trip():
    """devices_test.go TestDecodeContainerDevices_IdxNotPreservedAcrossRoundTrip."""
    original = (ContainerDevice("GPU-1", "NVIDIA", 1000, 10, idx=3),)
    decoded = codec.decode_container_devices(codec.encode_container_devices(original))
    assert len(decoded) == 1 and decoded[0].idx == -1


def test_empty_container_devices_round_trip_to_empty():
    """devices_test.go TestEmptyContainerDevicesCoding."""
    assert codec.encode_container_devices(()) == ""
    assert codec.decode_container_devices("") == ()


# --------------------------------------------------------------------------- pod device strings

POD_CODING = [
    ("one pod one container use zero device", (), "", ((),)),
    (
        "one pod one container use one device",
        ((cd("UUID1", "Type1", 1000, 30),),),
        "UUID1,Type1,1000,30:;",
        ((cd("UUID1", "Type1", 1000, 30),), ()),
    ),
    (
        "one pod two container, every container use one device",
        ((cd("UUID1", "Type1", 1000, 30),), (cd("UUID1", "Type1", 1000, 30),)),
        "UUID1,Type1,1000,30:;UUID1,Type1,1000,30:;",
        ((cd("UUID1", "Type1", 1000, 30),), (cd("UUID1", "Type1", 1000, 30),), ()),
    ),
    (
        "one pod one container use two devices",
        ((cd("UUID1", "Type1", 1000, 30), cd("UUID2", "Type1", 1000, 30)),),
        "UUID1,Type1,1000,30:UUID2,Type1,1000,30:;",
        ((cd("UUID1", "Type1", 1000, 30), cd("UUID2", "Type1", 1000, 30)), ()),
    ),
]


@pytest.mark.parametrize(("pod", "encoded", "decoded"), [c[1:] for c in POD_CODING], ids=[c[0] for c in POD_CODING])
def test_pod_devices_encode_then_decode_keeps_the_trailing_empty_container(pod, encoded, decoded):
    """devices_test.go TestPodDevicesCoding: the encoded string, and its decode with the extra
    empty container the trailing `;` yields."""
    assert codec.encode_pod_devices(pod) == encoded
    assert codec.decode_pod_devices(encoded) == decoded


def test_decode_pod_devices_two_containers_golden():
    """devices_test.go Test_DecodePodDevices "annos having two device"."""
    text = (
        "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,500,3:;"
        "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,NVIDIA,500,3:;"
    )
    assert codec.decode_pod_devices(text) == (
        (cd("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "NVIDIA", 500, 3),),
        (cd("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", "NVIDIA", 500, 3),),
        (),
    )


POD_BAD = [
    ("missing required fields (only 3 fields)", "uuid,type,100:;"),
    ("malformed non-empty segment without comma", "malformed_annotation:;"),
    ("negative memory in first container", "GPU-1,NVIDIA,-500,10:;"),
    ("negative cores in second container", "GPU-1,NVIDIA,500,10:;GPU-2,NVIDIA,500,-1:;"),
    ("empty UUID", ",NVIDIA,500,10:;"),
    ("empty type", "GPU-1,,500,10:;"),
    ("negative decoded protection", "GPU-1,NVIDIA,-1000,-10:;"),
]


@pytest.mark.parametrize("text", [c[1] for c in POD_BAD], ids=[c[0] for c in POD_BAD])
def test_decode_pod_devices_rejects_bad_annotations(text):
    """devices_test.go TestDecodePodDevices_BadAnnotation and
    TestResourceAccounting_NegativeDecodedProtection."""
    with pytest.raises(CodecError) as err:
        codec.decode_pod_devices(text)
    assert err.value.field == codec.TO_ALLOCATE_ANNOTATION
    assert text[err.value.position:].startswith(err.value.text)


def test_decode_pod_devices_missing_fields_message_is_hamis():
    """devices.go DecodeContainerDevices: the `do not use nodeName` error (spec scheduler.md §1.5)."""
    with pytest.raises(CodecError,
                       match="^pod annotation format error, missing fields, do not use nodeName in task spec$"):
        codec.decode_pod_devices("uuid,type,100:;")


@pytest.mark.parametrize(
    ("text", "containers"),
    [
        ("", 1),
        ("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;", 2),
        (
            "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;"
            "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,5000,0:;",
            3,
        ),
        (";uuid1,NVIDIA,1000,30:;;", 4),
    ],
    ids=["fuzz-seed-empty", "fuzz-seed-one", "fuzz-seed-two", "spec-middle-container-only"],
)
def test_decode_pod_devices_seed_corpus_container_counts(text, containers):
    """devices_test.go FuzzDecodePodDevices seeds, and spec scheduler.md §1.5's 3-container example."""
    assert len(codec.decode_pod_devices(text)) == containers


@pytest.mark.parametrize("text", ["uuid,type,100:;", ",,,;"], ids=["three-fields", "all-empty"])
def test_decode_pod_devices_bad_fuzz_seeds_raise_codec_error(text):
    """devices_test.go FuzzDecodePodDevices seeds that HAMi rejects."""
    with pytest.raises(CodecError):
        codec.decode_pod_devices(text)


ENCODE_TYPE = [
    ("empty container devices", (), ""),
    (
        "single matching device",
        (ContainerDevice("GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313", "NVIDIA", 1000, 10),),
        "GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313,NVIDIA,1000,10",
    ),
    (
        "multiple devices with type match",
        (
            ContainerDevice("GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313", "NVIDIA", 1000, 10),
            ContainerDevice("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "AMD", 2000, 20),
            ContainerDevice("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", "NVIDIA", 3000, 30),
        ),
        "GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313,NVIDIA,1000,10:GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,NVIDIA,3000,30",
    ),
]


@pytest.mark.parametrize(("devs", "want"), [c[1:] for c in ENCODE_TYPE], ids=[c[0] for c in ENCODE_TYPE])
def test_encode_container_device_type_separator_between_form(devs, want):
    """devices_test.go TestEncodeContainerDeviceType."""
    assert codec.encode_container_device_type(devs, "NVIDIA") == want


# --------------------------------------------------------------------------- register annotation: JSON


def test_marshal_node_devices_golden_devices_decode_equal():
    """devices_test.go TestMarshalNodeDevices "test multiple": Go compares decoded values, so do we;
    the `want` literal (non-canonical key order, explicit zeros) decodes to the same devices."""
    devices = (
        DeviceInfo(id="id-1", index=1, count=1, devmem=1024, devcore=10, type="type", numa=0, health=True),
        DeviceInfo(id="id-2", index=2, count=2, devmem=2048, devcore=20, type="type2", numa=1, health=False),
    )
    want = (
        '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","numa":0,"health":true},'
        '{"index":2,"id":"id-2","count":2,"devmem":2048,"devcore":20,"type":"type2","numa":1,"health":false}]'
    )
    assert codec.decode_node_devices(want) == devices
    assert codec.decode_node_devices(codec.encode_node_devices(devices)) == devices
    # And Go's own output order, zero values omitted:
    assert codec.encode_node_devices(devices) == (
        '[{"id":"id-1","index":1,"count":1,"devmem":1024,"devcore":10,"type":"type","health":true},'
        '{"id":"id-2","index":2,"count":2,"devmem":2048,"devcore":20,"type":"type2","numa":1}]'
    )


def test_a_registrations_gpu_types_modes_and_memory_are_one_object_each_across_nodes():
    text = ('[{"id":"GPU-a","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100","mode":"hami-core",'
            '"health":true},{"id":"GPU-b","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA A100",'
            '"mode":"hami-core","health":true}]')
    one, other = codec.decode_node_devices(text), codec.decode_node_devices(text.replace("GPU-", "GPU-x"))
    assert [d.id for d in one + other] == ["GPU-a", "GPU-b", "GPU-xa", "GPU-xb"]
    assert len({id(d.type) for d in one + other}) == 1 and len({id(d.mode) for d in one + other}) == 1
    assert (one[0].type, one[0].mode) == ("NVIDIA A100", "hami-core")
    assert len({id(d.devmem) for d in one + other}) == 1 and one[0].devmem == 81920


def test_pod_device_memory_decoded_by_many_pods_is_one_object():
    a = codec.decode_pod_devices("GPU-a,NVIDIA,81000,10:;")
    b = codec.decode_pod_devices("GPU-b,NVIDIA,81000,20:;")
    assert a[0][0].usedmem == b[0][0].usedmem == 81000 and a[0][0].usedmem is b[0][0].usedmem


def test_marshal_node_devices_empty_list():
    """devices_test.go TestMarshalNodeDevices "test empty"."""
    assert codec.encode_node_devices([]) == "[]"
    assert codec.decode_node_devices("[]") == ()


UNMARSHAL = [
    (
        "test one",
        '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","health":true}]\n',
        (DeviceInfo(id="id-1", index=1, count=1, devmem=1024, devcore=10, type="type", health=True),),
    ),
    (
        "test two",
        '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","health":true},'
        '{"index":2,"id":"id-2","count":2,"devmem":4096,"devcore":20,"type":"type2","health":false}]',
        (
            DeviceInfo(id="id-1", index=1, count=1, devmem=1024, devcore=10, type="type", health=True),
            DeviceInfo(id="id-2", index=2, count=2, devmem=4096, devcore=20, type="type2", health=False),
        ),
    ),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in UNMARSHAL], ids=[c[0] for c in UNMARSHAL])
def test_unmarshal_node_devices_golden(text, want):
    """devices_test.go TestUnMarshalNodeDevices."""
    assert codec.decode_node_devices(text) == want


SPEC_REGISTER = [
    (
        "scheduler.md 1.4 two V100",
        '[{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","mode":"hami-core","health":true},'
        '{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core"}]',
        (
            DeviceInfo("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                       mode="hami-core", health=True),
            DeviceInfo("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                       index=1, numa=1, mode="hami-core", health=False),
        ),
    ),
    (
        "node.md 1.3 two A100",
        '[{"id":"GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111","count":10,"devmem":40960,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core","health":true},'
        '{"id":"GPU-91ab03c4-77de-4c0a-8b21-222222222222","index":1,"count":10,"devmem":40960,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-40GB","numa":1,"mode":"hami-core","health":true}]',
        (
            DeviceInfo("GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111", 10, 40960, 100, "NVIDIA A100-SXM4-40GB",
                       mode="hami-core", health=True),
            DeviceInfo("GPU-91ab03c4-77de-4c0a-8b21-222222222222", 10, 40960, 100, "NVIDIA A100-SXM4-40GB",
                       index=1, numa=1, mode="hami-core", health=True),
        ),
    ),
]


@pytest.mark.parametrize(("text", "devices"), [c[1:] for c in SPEC_REGISTER], ids=[c[0] for c in SPEC_REGISTER])
def test_register_json_byte_matches_hamis_encoding(text, devices):
    """spec scheduler.md §1.4 / node.md §1.3: Go encoding/json output, omitempty, struct key order."""
    assert codec.encode_node_devices(devices) == text
    assert codec.decode_node_devices(text) == devices


def test_mig_profile_uses_compact_wire_format():
    """devices_test.go TestMigProfileUsesCompactWireFormat (byte-exact)."""
    profile = MigProfile("1g.5gb", memory_mb=4864, core=15, slice_count=1, placements=(MigPlacement(6, 1),))
    want = '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}'
    assert codec.encode_mig_profiles([profile]) == "[" + want + "]"
    device = DeviceInfo("GPU-a", 7, 40960, 100, "NVIDIA A100-SXM4-40GB", mode="mig", health=True,
                        mig_profiles=(profile,))
    encoded = codec.encode_node_devices([device])
    assert encoded == (
        '[{"id":"GPU-a","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",'
        '"migProfiles":[' + want + '],"health":true}]'
    )
    assert codec.decode_node_devices(encoded) == (device,)


def test_register_json_strings_are_escaped_like_go():
    """Go encoding/json escapes <, >, & and U+2028/9 (HTML-safe); Python's json does not."""
    device = DeviceInfo("GPU-<&>", 1, 1, 1, "A\u2028B")
    assert codec.encode_node_devices([device]) == (
        '[{"id":"GPU-\\u003c\\u0026\\u003e","count":1,"devmem":1,"devcore":1,"type":"A\\u2028B"}]'
    )
    assert codec.decode_node_devices(codec.encode_node_devices([device])) == (device,)


def test_register_json_keys_match_case_insensitively_like_go():
    """Go's decoder maps `ID` or `Count` onto the `id`/`count` fields, assigning keys in document
    order, so of `Count` and `count` the later one wins."""
    assert codec.decode_node_devices('[{"ID":"GPU-x","Count":3,"count":4}]') == (DeviceInfo("GPU-x", 4, 0, 0, ""),)
    assert codec.decode_node_devices('[{"count":4,"COUNT":3}]') == (DeviceInfo("", 3, 0, 0, ""),)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[{"id":0}]', "hami.io/node-nvidia-register[0].id"),
        ('[{"count":1.0}]', "hami.io/node-nvidia-register[0].count"),
        ('[{"count":2147483648}]', "hami.io/node-nvidia-register[0].count"),
        ('[{"index":-1}]', "hami.io/node-nvidia-register[0].index"),
        ('[{"health":"true"}]', "hami.io/node-nvidia-register[0].health"),
        ('[{"migProfiles":{}}]', "hami.io/node-nvidia-register[0].migProfiles"),
        ('{"id":"x"}', "hami.io/node-nvidia-register"),
        ('[1]', "hami.io/node-nvidia-register[0]"),
        ("[{", "hami.io/node-nvidia-register"),
    ],
    ids=["id-number", "count-float", "count-over-int32", "index-negative", "health-string", "mig-object",
         "top-object", "element-number", "truncated"],
)
def test_register_json_type_errors_name_the_field(text, field):
    """Go json.Unmarshal fails on a wrong type or range; the error names the field."""
    with pytest.raises(CodecError) as err:
        codec.decode_node_devices(text)
    assert err.value.field == field


def test_register_json_null_is_an_empty_list():
    """Go: `null` unmarshals to a nil slice, which GetNodeDevices reports as "no gpu found"."""
    assert codec.decode_node_devices("null") == ()


# --------------------------------------------------------------------------- register annotation: legacy

LEGACY_DECODE_ERRORS = [
    ("args is empty", "", "node annotation missing device separator"),
    ("args missing delimiter with comma", ",", "node annotation missing device separator"),
    ("args has comma and delimiter but empty fields", ",:", "unexpected field count 2 in node annotation"),
    ("args is invalid format missing split symbol", "a", "node annotation missing device separator"),
    ("malformed segment without comma", "garbage:", 'malformed node annotation segment: "garbage"'),
    ("invalid count field", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,notanint,7680,100,NVIDIA-Tesla P4,0,true:",
     'invalid count field: strconv.ParseInt: parsing "notanint": invalid syntax'),
    ("invalid memory field", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,notanint,100,NVIDIA-Tesla P4,0,true:",
     'invalid memory field: strconv.ParseInt: parsing "notanint": invalid syntax'),
    ("invalid core field", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,notanint,NVIDIA-Tesla P4,0,true:",
     'invalid core field: strconv.ParseInt: parsing "notanint": invalid syntax'),
    ("invalid numa field", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,notanint,true:",
     'invalid numa field: strconv.Atoi: parsing "notanint": invalid syntax'),
    ("invalid health field", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,notabool:",
     'invalid health field: strconv.ParseBool: parsing "notabool": invalid syntax'),
    ("unexpected field count", "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4:",
     "unexpected field count 5 in node annotation"),
    ("invalid index field in new format",
     "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,notanint,hami-core:",
     'invalid index field: strconv.Atoi: parsing "notanint": invalid syntax'),
    ("negative index field in new format",
     "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,-1,hami-core:",
     "index field must not be negative: -1"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in LEGACY_DECODE_ERRORS], ids=[c[0] for c in LEGACY_DECODE_ERRORS]
)
def test_legacy_register_errors_match_hami_exactly(text, message):
    """devices_test.go Test_DecodeNodeDevices error rows: the exact Go error strings."""
    with pytest.raises(CodecError) as err:
        codec.decode_node_devices(text)
    assert str(err.value) == message


@pytest.mark.parametrize("text", [":", "::"], ids=["only delimiter", "multiple delimiters"])
def test_legacy_register_only_delimiters_is_an_empty_list(text):
    """devices_test.go Test_DecodeNodeDevices "args is only delimiter" / "multiple delimiters"."""
    assert codec.decode_node_devices(text) == ()


P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


@pytest.mark.parametrize(
    ("text", "index"),
    [
        (f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true:", 0),
        (f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:", 1),
    ],
    ids=["str is old format", "str is new format"],
)
def test_legacy_register_old_and_new_forms(text, index):
    """devices_test.go Test_DecodeNodeDevices / TestDecodeNodeDevicesLegacyFormat: the 7-field form
    gets index 0 and mode hami-core."""
    assert codec.decode_node_devices(text) == (
        DeviceInfo(P4, 10, 7680, 100, "NVIDIA-Tesla P4", index=index, numa=0, mode="hami-core", health=True),
    )


@pytest.mark.parametrize(
    ("index", "want"),
    [
        (0, f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:"),
        (1, f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"),
    ],
    ids=["old format", "test two"],
)
def test_encode_node_devices_legacy_golden(index, want):
    """devices_test.go Test_EncodeNodeDevices, and TestEncodeDecodeNodeDevicesRoundtrip."""
    device = DeviceInfo(P4, 10, 7680, 100, "NVIDIA-Tesla P4", index=index, mode="hami-core", health=True)
    assert codec.encode_node_devices_legacy([device]) == want
    assert codec.decode_node_devices(want) == (device,)


def test_legacy_register_round_trip_multiple_devices():
    """devices_test.go TestEncodeDecodeNodeDevicesRoundtrip "multiple devices"."""
    devices = (
        DeviceInfo("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                   mode="hami-core", health=True),
        DeviceInfo("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB",
                   index=1, mode="hami-core", health=True),
    )
    assert codec.decode_node_devices(codec.encode_node_devices_legacy(devices)) == devices


@pytest.mark.parametrize(
    "text",
    ["GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:",
     f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"],
    ids=["fuzz-seed-7-fields", "fuzz-seed-9-fields"],
)
def test_legacy_register_fuzz_seeds_decode(text):
    """devices_test.go FuzzDecodeNodeDevices seeds that are valid."""
    assert len(codec.decode_node_devices(text)) == 1


@pytest.mark.parametrize("text", ["", "garbage:", ",,,,,:"], ids=["empty", "garbage", "commas"])
def test_legacy_register_bad_fuzz_seeds_raise_codec_error(text):
    """devices_test.go FuzzDecodeNodeDevices seeds that are invalid."""
    with pytest.raises(CodecError):
        codec.decode_node_devices(text)


# --------------------------------------------------------------------------- pair scores


def test_pair_scores_golden_decodes():
    """devices_test.go TestDecodeNodeDevices (DecodePairScores) and spec scheduler.md §1.1."""
    text = '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20,"GPU-3":20}}]'
    (entry,) = codec.decode_pair_scores(text)
    assert entry.uuid == "GPU-0" and dict(entry.scores) == {"GPU-1": 50, "GPU-2": 20, "GPU-3": 20}
    assert codec.encode_pair_scores([entry]) == text


# --------------------------------------------------------------------------- device cordon


@pytest.mark.parametrize(
    ("text", "want"),
    [("GPU-aaa, GPU-bbb", ("GPU-aaa", "GPU-bbb")), ("", ()), (None, ()), (" ,GPU-a,, ", ("GPU-a",))],
)
def test_device_cordon_trims_and_skips_empties(text, want):
    """spec scheduler.md §1.1 `hami.io/device-cordon`."""
    assert codec.decode_device_cordon(text) == want


# --------------------------------------------------------------------------- handshake


@pytest.mark.parametrize(
    ("value", "state", "has_stamp"),
    [
        ("Requesting_2128-12-02 00:00:00", "Requesting", True),
        ("Requesting", "Requesting", False),
        ("Requesting_not-a-timestamp", "Requesting", False),
        ("Unknown", "Unknown", False),
        ("Requesting_2024-01-02 00:00:00", "Requesting", True),
        ("Deleted_2024-01-02 00:00:00", "Deleted", True),
        ("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895", "Reported", True),
        ("ready", "Unknown", False),
        (None, "Unknown", False),
    ],
    ids=["requesting", "requesting-no-stamp", "requesting-unparsable", "unknown", "requesting-expired",
         "deleted", "legacy-reported", "other", "absent"],
)
def test_handshake_values_classified_like_check_health(value, state, has_stamp):
    """devices_test.go Test_CheckHealth values, nvidia/device_test.go TestNodeCleanUp (`Deleted_`),
    and the legacy `Reported` value of spec scheduler.md §2.1."""
    hs = codec.decode_handshake(value, tz=UTC)
    assert hs.state == state
    assert (hs.timestamp is not None) is has_stamp


def test_handshake_requesting_timestamp_is_local_datetime():
    """`Requesting_<2006-01-02 15:04:05>` in the scheduler's zone; the legacy Go time string keeps nanoseconds."""
    tz = timezone(timedelta(hours=8))
    assert codec.decode_handshake("Requesting_2026-08-21 06:20:39", tz=tz).timestamp == (
        datetime(2026, 8, 21, 6, 20, 39, tzinfo=tz).timestamp()
    )
    reported = codec.decode_handshake("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895")
    assert reported.timestamp == pytest.approx(datetime(2024, 1, 23, 4, 30, 4, tzinfo=UTC).timestamp() + 0.434037031)


def test_handshake_requesting_encodes_datetime_layout():
    """spec scheduler.md §2.1: `Requesting_2026-08-21 06:20:39`."""
    ts = datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC).timestamp()
    assert codec.encode_handshake_requesting(ts, UTC) == "Requesting_2026-08-21 06:20:39"
    assert codec.encode_handshake_deleted(ts, UTC) == "Deleted_2026-08-21 06:20:39"


# --------------------------------------------------------------------------- node lock


def test_node_lock_value_golden():
    """spec scheduler.md §2.2 and nodelock.go GenerateNodeLockKeyByPod: `<RFC3339>,<ns>,<pod>`."""
    ts = datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC).timestamp()
    assert codec.encode_node_lock(ts, "default", "gpu-pod") == "2026-08-21T06:20:39Z,default,gpu-pod"
    assert codec.encode_node_lock(ts, "hami-ns", "hami", tz=timezone(timedelta(hours=8))) == (
        "2026-08-21T14:20:39+08:00,hami-ns,hami"
    )
    lock = codec.decode_node_lock("2026-08-21T06:20:39Z,default,gpu-pod")
    assert (lock.timestamp, lock.namespace, lock.name) == (ts, "default", "gpu-pod")
    assert lock.owned_by("default", "gpu-pod") and not lock.legacy


def test_node_lock_legacy_bare_timestamp():
    """nodelock.go ParseNodeLock: no comma -> RFC3339 only, namespace and name empty."""
    lock = codec.decode_node_lock("2026-08-21T14:20:39+08:00")
    assert lock.legacy and lock.timestamp == datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lock", None),
        ("a,b", "malformed lock annotation: expected 3 parts, got 2 from a,b"),
        ("2026-08-21T06:20:39Z,ns,pod,extra", "malformed lock annotation: expected 3 parts, got 4 from "
                                               "2026-08-21T06:20:39Z,ns,pod,extra"),
        ("not-a-time,ns,pod", None),
    ],
    ids=["node lock is invalid", "two parts", "four parts", "bad time"],
)
def test_node_lock_invalid_values(value, message):
    """nodelock_test.go Test_LockNode "node lock is invalid" (`lock`) and ParseNodeLock's 3-part error."""
    with pytest.raises(CodecError) as err:
        codec.decode_node_lock(value)
    if message:
        assert str(err.value) == message
    assert err.value.field == codec.NODE_LOCK_ANNOTATION


def test_node_lock_owner_suffix():
    """nodelock_test.go TestGeneratePodNamespaceName with the `,` separator ReleaseNodeLock uses."""
    assert codec.node_lock_owner_suffix("test-namespace", "test-pod") == ",test-namespace,test-pod"


# --------------------------------------------------------------------------- scoring weights

WEIGHTS_OK = [
    ("valid ordered weights", "slot=1,core=2,memory=3", ScoringWeights(1, 2, 3)),
    ("valid reordered weights and whitespace", " memory = 3, slot = 1, core = 0 ", ScoringWeights(1, 0, 3)),
    ("missing annotation uses defaults", None, ScoringWeights(1, 1, 1)),
]
WEIGHTS_BAD = [
    ("empty annotation", "", "expected slot, core, and memory weights"),
    ("missing dimension", "slot=1,memory=3", "expected slot, core, and memory weights"),
    ("malformed entry", "slot=1,core,memory=3", "expected key=value entries"),
    ("non-integer", "slot=1,core=high,memory=3", '"core" weight must be an integer'),
    ("negative", "slot=1,core=-1,memory=3", '"core" weight must not be negative'),
    ("unknown key", "slot=1,bandwidth=2,memory=3", 'unknown weight "bandwidth"'),
    ("duplicate key", "slot=1,slot=2,memory=3", 'duplicate "slot" weight'),
    ("all zero", "slot=0,core=0,memory=0", "at least one weight must be positive"),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in WEIGHTS_OK], ids=[c[0] for c in WEIGHTS_OK])
def test_scoring_weights_valid(text, want):
    """device_scoring_weights_test.go TestParseDeviceScoringWeights / TestGetDeviceScoringWeightsByPod."""
    assert codec.decode_scoring_weights(text) == want


@pytest.mark.parametrize(("text", "fragment"), [c[1:] for c in WEIGHTS_BAD], ids=[c[0] for c in WEIGHTS_BAD])
def test_scoring_weights_invalid_messages(text, fragment):
    """device_scoring_weights_test.go TestParseDeviceScoringWeights error rows (ErrorContains)."""
    with pytest.raises(CodecError) as err:
        codec.decode_scoring_weights(text)
    assert fragment in str(err.value)
    assert str(err.value).startswith(f'invalid hami.io/device-scoring-weights annotation "{text}": ')


# --------------------------------------------------------------------------- MIG allocations


def test_mig_allocations_golden():
    """spec scheduler.md §1.2 `hami.io/vgpu-mig-allocations` and nvidia/mig_allocations.go."""
    text = ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"1g.5gb",'
            '"placement":{"start":6,"size":1}}]')
    (alloc,) = codec.decode_mig_allocations(text)
    assert alloc == codec.MigAllocation(0, 0, "GPU-x", "1g.5gb", MigPlacement(6, 1))
    assert codec.encode_mig_allocations([alloc]) == text
    full = codec.MigAllocation(1, 2, "GPU-y", "2g.10gb", MigPlacement(0, 2), "MIG-1", 0, 0)
    assert codec.decode_mig_allocations(codec.encode_mig_allocations([full])) == (full,)
    assert codec.encode_mig_allocations([]) == ""


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"p","placement":{"start":0,"size":1}}]',
         "incomplete"),
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{"start":0,"size":1},'
         '"migUUID":"MIG-1"}]', "partial runtime identity"),
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{"start":0,"size":1}},'
         '{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{"start":1,"size":1}}]',
         "duplicate MIG allocation for container 0 device 0"),
    ],
    ids=["incomplete", "partial-identity", "duplicate"],
)
def test_mig_allocations_validation(text, fragment):
    """nvidia/mig_allocations.go DecodeMigAllocations checks."""
    with pytest.raises(CodecError, match=fragment):
        codec.decode_mig_allocations(text)
