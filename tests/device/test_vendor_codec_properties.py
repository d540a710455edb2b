"""Every vendor's register annotations, property-tested through the scheduler's own readers.

For each annotation-registered row of the table (Ascend chips: JSON under
`hami.io/node-register-<commonWord>`; Hygon: the legacy colon form), what a device plugin writes is
decoded by `vendorregister.decode_one` into devices of that vendor and re-encodes to the same bytes.
Cambricon's capacity registration and DSMLU profile, and Ascend's runtime-info annotation, round
trip too. Arbitrary text under a vendor's register key raises only CodecError, naming the key.
"""

from __future__ import annotations

import json
from dataclasses import replace

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.config import default_vendor_table
from hami.device import codec
from hami.device.codec import ascend as ascend_codec
from hami.device.codec import cambricon as cambricon_codec
from hami.device.codec import metax as metax_codec
from hami.device.codec.golang import go_json_value
from hami.device.model import DeviceInfo
from hami.device.vendorregister import decode_one

TABLE = default_vendor_table()
JSON_ROWS = [v for v in TABLE.others if v.register_source == "annotation" and v.register_format == "json"]
# (MetaX sGPU registers its own JSON form, tested below.)
LEGACY_ROWS = [v for v in TABLE.others if v.register_source == "annotation" and v.register_format == "legacy"]
INT32 = st.integers(-(2**31), 2**31 - 1)
POSITIVE = st.integers(1, 2**31 - 1)
token = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=",:;"), min_size=1, max_size=16)


# JSON values as Go decodes them into `any` (numbers are float64: no -0, whose sign a JSON integer
# literal cannot carry back, and integers only as far as float64 holds them exactly).
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.integers(-(2**53), 2**53),
                         st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != 0 or str(f) == "0.0"))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)
CUSTOM_INFO = st.one_of(
    st.just(""), st.builds(lambda n: go_json_value({"NetworkID": n}), st.integers(0, 64)),
    st.dictionaries(st.text(max_size=10), JSON_VALUES, min_size=1, max_size=3).map(go_json_value))


def _json_devices(vendor: str):
    return st.builds(DeviceInfo, id=st.text(max_size=24), count=POSITIVE, devmem=INT32, devcore=INT32,
                     type=st.sampled_from([vendor, "huawei.com/Ascend910", "npu"]), index=st.integers(0, 2**32),
                     numa=st.integers(-4, 4), mode=st.sampled_from(["", "hami-core"]), health=st.booleans(),
                     custom_info=CUSTOM_INFO)


def test_the_table_has_rows_of_each_register_kind():
    assert JSON_ROWS and LEGACY_ROWS and any(v.register_source == "capacity" for v in TABLE.others)


@pytest.mark.parametrize("row", JSON_ROWS, ids=lambda v: v.name)
@given(data=st.data())
def test_json_register_is_decoded_and_reencoded_byte_exact(row, data):
    devices = data.draw(st.lists(_json_devices(row.name), min_size=1, max_size=6))
    text = codec.encode_node_devices(devices)
    got = decode_one(row, "n", {row.register_key: text}, {})
    # Biren and Vastai (`register.cores`): HAMi's GetNodeDevices sets every card's cores to 100.
    forced = {"devcore": row.register_cores} if row.register_cores else {}
    assert got == tuple(replace(d, vendor=row.name, **forced) for d in devices)
    if not forced:
        assert codec.encode_node_devices(got) == text


def test_the_ascend_plugins_register_bytes_round_trip_with_their_network_ids():
    """Exactly what Project-HAMi/ascend-device-plugin's registerHAMi writes (Go json.Marshal of
    []*DeviceInfo: omitempty fields, custominfo last) decodes with each NPU's NetworkID and
    encodes back byte for byte."""
    row = TABLE.get("Ascend910B3")
    text = ('[{"id":"npu-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,'
            '"custominfo":{"NetworkID":0}},{"id":"npu-5","index":5,"count":4,"devmem":65536,"devcore":20,'
            '"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}}]')
    got = decode_one(row, "n", {row.register_key: text}, {})
    assert [d.custom_info for d in got] == ['{"NetworkID":0}', '{"NetworkID":1}']
    assert ascend_codec.network_ids(got) == {"npu-0": 0, "npu-5": 1}
    assert codec.encode_node_devices(got) == text


@pytest.mark.parametrize(("value", "go"), [
    (1.0, "1"), (100.0, "100"), (1e20, "100000000000000000000"), (1e21, "1e+21"), (1.5e-7, "1.5e-7"),
    (1e-6, "0.000001"), (0.1, "0.1"), (-2.5, "-2.5"), (12345678901234567890, "12345678901234567000"),
    ({"b": 1, "a": [True, None]}, '{"a":[true,null],"b":1}'), ("<&>", '"\\u003c\\u0026\\u003e"'),
])
def test_go_json_value_writes_what_go_marshal_writes(value, go):
    """encoding/json's float64 format (plain notation inside [1e-6, 1e21), shortest digits,
    `e-7` not `e-07`), sorted object keys and HTML-safe strings."""
    assert go_json_value(value) == go


@given(value=JSON_VALUES)
def test_go_json_value_is_canonical(value):
    """Decoding Go's form and writing it again gives the same bytes (what a decode/re-encode of a
    register annotation relies on), and it reads back as the same value."""
    text = go_json_value(value)
    assert go_json_value(orjson.loads(text)) == text
    assert json.loads(text, parse_int=float) == value  # (Go reads every number back as a float64)


@given(info=st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=3))
def test_network_ids_read_numbers_and_mark_other_values_present(info):
    d = DeviceInfo("npu-0", 1, 0, 0, "Ascend910B3", custom_info=go_json_value(info) if info else "")
    got = ascend_codec.network_ids([d])
    if "NetworkID" not in info:
        assert got is None
    else:
        v = info["NetworkID"]
        assert got == {"npu-0": int(v) if type(v) in (int, float) else None}


@pytest.mark.parametrize("row", LEGACY_ROWS, ids=lambda v: v.name)
@given(data=st.data())
def test_legacy_register_is_decoded_and_reencoded_byte_exact(row, data):
    devices = data.draw(st.lists(st.builds(
        DeviceInfo, id=token, count=INT32, devmem=INT32, devcore=INT32, type=token,
        index=st.integers(0, 2**63 - 1), numa=st.integers(-(2**63), 2**63 - 1),
        mode=st.sampled_from(["hami-core", "x"]), health=st.booleans()), min_size=1, max_size=6))
    text = codec.encode_node_devices_legacy(devices)
    got = decode_one(row, "n", {row.register_key: text}, {})
    assert got == tuple(replace(d, vendor=row.name) for d in devices)
    assert codec.encode_node_devices_legacy(got) == text


@pytest.mark.parametrize("row", JSON_ROWS[:1] + LEGACY_ROWS, ids=lambda v: v.name)
@given(text=st.one_of(st.text(max_size=60), st.text(st.sampled_from(list('[]{}",:0123456789idcountx ')), max_size=60)))
def test_arbitrary_register_text_raises_only_codec_error_naming_the_key(row, text):
    try:
        decode_one(row, "n", {row.register_key: text}, {})
    except codec.CodecError as exc:
        assert str(exc).startswith(row.register_key + ": ")


METAX_ROW = TABLE.get("Metax-SGPU")


@given(devices=st.lists(st.builds(
    DeviceInfo, id=st.text(max_size=20), count=INT32, devmem=INT32, devcore=INT32, type=st.just("Metax-SGPU"),
    index=st.just(0), numa=INT32, mode=st.sampled_from(["", "best-effort", "fixed-share", "burst-share"]),
    health=st.booleans(), vendor=st.just("Metax-SGPU"),
    custom_info=st.one_of(st.just(""), INT32.filter(bool).map(lambda z: f'{{"LinkZone":{z}}}'))),
    min_size=1, max_size=6))
def test_metax_sgpu_register_round_trips(devices):
    """metax-tech.com/node-gpu-devices: the fields HAMi reads decode as the plugin wrote them (device
    i has index i, the QoS policy is the mode, the MetaLink zone custom_info) and encode back to
    the same bytes."""
    devices = [replace(d, index=i) for i, d in enumerate(devices)]
    text = metax_codec.encode_sdevices(devices)
    got = decode_one(METAX_ROW, "n", {METAX_ROW.register_key: text}, {})
    assert got == tuple(devices)
    assert metax_codec.encode_sdevices(got) == text
    zones = metax_codec.link_zones(got) or {}
    ids = [d.id for d in got]
    assert all((d.id in zones) == bool(d.custom_info) for d in got if ids.count(d.id) == 1)


@given(text=st.one_of(st.text(max_size=60), st.text(st.sampled_from(list('[]{}",:0123456789uidtotalVRamhey ')),
                                                       max_size=60)))
def test_arbitrary_metax_text_raises_only_codec_error_naming_the_key(text):
    try:
        decode_one(METAX_ROW, "n", {METAX_ROW.register_key: text}, {})
    except codec.CodecError as exc:
        assert str(exc).startswith(METAX_ROW.register_key + ": ")


@pytest.mark.parametrize("name", ["AWSNeuron", "kunlun", "Metax-GPU", "GCU", "MLU", "Mthreads"])
@given(raw=st.one_of(st.text(max_size=12), st.integers(-10, 10**12).map(str)),
       cores=st.one_of(st.text(max_size=8), st.integers(-10, 10**12).map(str)))
def test_arbitrary_capacity_raises_only_codec_error_and_never_builds_a_huge_node(name, raw, cores):
    """Capacity-registered rows: any capacity text decodes to at most 1024 cards or raises only
    CodecError naming the resource (a hostile capacity cannot exhaust the scheduler)."""
    row = TABLE.get(name)
    cap = {row.count_resource: raw}
    if row.core_resource:
        cap[row.core_resource] = cores
    try:
        cards = decode_one(row, "n", {}, cap)
    except codec.CodecError as exc:
        assert str(exc).startswith((row.count_resource + ": ", (row.core_resource or row.count_resource) + ": "))
        return
    assert len(cards) <= 1024 and all(d.vendor == name for d in cards)


@given(cores=st.integers(1, 6400), units=st.integers(0, 10**6))
def test_cambricon_capacity_cards(cores, units):
    row = TABLE.get("MLU")
    cap = {row.core_resource: str(cores), row.memory_resource: str(units)}
    cards = decode_one(row, "node-a", {}, cap)
    assert len(cards) == -(-cores // 100)
    assert [d.id for d in cards] == [f"node-a-cambricon-mlu-{i}" for i in range(len(cards))]
    want = (units * 256 * 100 // cores + 2**31) % 2**32 - 2**31 if units else 0
    assert all((d.devmem, d.devcore, d.count, d.type, d.vendor) == (want, 100, 100, "MLU", "MLU") for d in cards)


@given(index=st.integers(0, 64), cores=st.integers(0, 100), units=st.integers(0, 2**20))
def test_dsmlu_profile_round_trip(index, cores, units):
    text = cambricon_codec.encode_dsmlu_profile(index, cores, units * 256)
    assert text == f"{index}_{cores}_{units}"
    assert cambricon_codec.decode_dsmlu_profile(text) == (index, cores, units * 256)


@given(items=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.sampled_from(["", "vir05_1c_16g", "vir02"])),
                      max_size=5))
def test_ascend_runtime_info_round_trip(items):
    text = ascend_codec.encode_runtime_info(items)
    assert ascend_codec.decode_runtime_info(text) == tuple(items)


@given(items=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.just(""), st.integers(0, 2**63 - 1),
                                st.integers(0, 2**31 - 1)), max_size=5))
def test_ascend_hami_core_runtime_info_round_trip(items):
    """HAMi-core mode: memory (int64) and core (int32) per NPU, zero fields left out as Go's omitempty."""
    text = ascend_codec.encode_runtime_info(items)
    assert ascend_codec.decode_runtime_info(text, full=True) == tuple(items)
    for _uuid, _temp, memory, core in items:
        assert ('"memory":' in text) or memory == 0
        assert ('"core":' in text) or core == 0


@pytest.mark.parametrize("text", ['[{"UUID":"a","memory":"1"}]', '[{"UUID":"a","core":2147483648}]'])
def test_ascend_runtime_info_rejects_bad_numbers_naming_the_field(text):
    with pytest.raises(codec.CodecError) as err:
        ascend_codec.decode_runtime_info(text, full=True)
    assert err.value.field.startswith("huawei.com/Ascend[0].")


@pytest.mark.parametrize(("flag", "default", "mode"), [
    (None, False, ""), (None, True, "hami-core"), ("true", False, "hami-core"), ("false", True, "")])
def test_ascend_devices_carry_the_nodes_hami_core_mode(flag, default, mode):
    """HAMi's nodeSupportHamiCore: the node's `hami-vnpu-core` annotation, else the chip's default."""
    v = replace(TABLE.get("Ascend910B3"), vnpu_core=default)
    annos = {v.register_key: codec.encode_node_devices([DeviceInfo("npu-0", 1, 65536, 100, "Ascend910B3",
                                                                   health=True)])}
    if flag is not None:
        annos["hami-vnpu-core"] = flag
    (dev,) = decode_one(v, "n1", annos, {})
    assert dev.mode == mode
