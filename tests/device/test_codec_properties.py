"""Property tests for hami.device.codec (hypothesis).

Covers: every decoder, given arbitrary text and arbitrary JSON, returns a value or raises
CodecError and nothing else (decode_handshake never raises at all); CodecError always carries a
field, the offending text and a position inside the input when it has one; encode-then-decode
round-trips for every valid value of every format (register JSON and legacy, pair scores, pod
device strings, handshake, node lock, cordon, scoring weights, MIG allocations, unix seconds).
"""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device import codec
from hami.device.codec import CodecError
from hami.device.model import ContainerDevice, DeviceInfo, MigPlacement, MigProfile, ScoringWeights

INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)

# --------------------------------------------------------------------------- any input -> CodecError only

TEXT_DECODERS = {
    "decode_node_devices": codec.decode_node_devices,
    "decode_node_devices_json": codec.decode_node_devices_json,
    "decode_node_devices_legacy": codec.decode_node_devices_legacy,
    "decode_pod_devices": codec.decode_pod_devices,
    "decode_container_devices": codec.decode_container_devices,
    "decode_node_lock": codec.decode_node_lock,
    "decode_pair_scores": codec.decode_pair_scores,
    "decode_scoring_weights": codec.decode_scoring_weights,
    "decode_mig_allocations": codec.decode_mig_allocations,
    "decode_device_cordon": codec.decode_device_cordon,
    "decode_unix_seconds": codec.decode_unix_seconds,
    "parse_rfc3339": codec.parse_rfc3339,
    "parse_datetime": lambda t: codec.parse_datetime(t, UTC),
    "parse_go_time_string": codec.parse_go_time_string,
    "parse_go_bool": codec.parse_go_bool,
}

# Text that looks like the formats, so the fuzzer gets past the first check.
format_alphabet = st.sampled_from(list("0123456789,:;-_ TZ.+eE[]{}\"nultrfaGPUNVIDIA"))
formatish_text = st.text(format_alphabet, max_size=60)
any_text = st.one_of(st.text(max_size=80), formatish_text)


def _check_error(err: CodecError, text: str) -> None:
    assert isinstance(err.field, str) and err.field
    assert isinstance(err.text, str)
    assert str(err)
    if err.position is not None:
        assert 0 <= err.position <= len(text)


@pytest.mark.parametrize("name", sorted(TEXT_DECODERS))
@given(text=any_text)
def test_every_decoder_raises_only_codec_error_on_arbitrary_text(name, text):
    try:
        TEXT_DECODERS[name](text)
    except CodecError as err:
        _check_error(err, text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health",
                         "migProfiles", "placements", "name", "memoryMB", "sliceCount", "start", "size",
                         "uuid", "score", "containerIndex", "deviceIndex", "gpuUUID", "profile", "placement",
                         "migUUID", "gpuInstanceID", "computeInstanceID", "custominfo", "migtemplate",
                         "devicevendor", "ID", "Count"]) | st.text(max_size=6),
        children, max_size=6,
    ),
    max_leaves=25,
)


@pytest.mark.parametrize(
    "name", ["decode_node_devices", "decode_node_devices_json", "decode_pair_scores", "decode_mig_allocations"]
)
@given(doc=json_values)
def test_json_decoders_raise_only_codec_error_on_arbitrary_json(name, doc):
    text = json.dumps(doc)
    try:
        TEXT_DECODERS[name](text)
    except CodecError as err:
        _check_error(err, text)


placement_like = st.fixed_dictionaries({}, optional={"start": st.integers(-1, 2**32), "size": UINT32})
mig_profile_like = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=4),
        "memoryMB": INT32 | st.text(max_size=2),
        "core": INT32,
        "sliceCount": st.integers(-1, 2**32),
        "placements": st.none() | st.lists(placement_like, max_size=2),
    },
)
device_like = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=5) | st.integers(),
        "index": st.integers(-5, 2**64 + 5),
        "count": st.integers(-(2**32), 2**32) | st.booleans() | st.none(),
        "devmem": INT32 | st.floats(allow_nan=False),
        "devcore": INT32,
        "type": st.text(max_size=5) | st.none(),
        "numa": st.integers(-(2**64), 2**64),
        "mode": st.sampled_from(["hami-core", "mig", "mps", ""]) | st.integers(),
        "health": st.booleans() | st.integers(0, 1) | st.none(),
        "migProfiles": st.none() | st.lists(mig_profile_like, max_size=2),
    },
)


@given(devices=st.lists(device_like, max_size=4))
def test_register_decoder_on_register_shaped_json_raises_only_codec_error(devices):
    text = json.dumps(devices)
    try:
        decoded = codec.decode_node_devices(text)
    except CodecError as err:
        _check_error(err, text)
    else:
        assert len(decoded) == len(devices)
        for d in decoded:
            assert -(2**31) <= d.count < 2**31 and 0 <= d.index < 2**64


@given(text=any_text)
def test_decode_handshake_never_raises(text):
    hs = codec.decode_handshake(text, tz=UTC)
    assert hs.state in ("Requesting", "Reported", "Deleted", "Unknown")


# --------------------------------------------------------------------------- round trips

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
wire_token = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=",:;"), min_size=1, max_size=16)

placements = st.builds(MigPlacement, UINT32, UINT32)
mig_profiles = st.builds(
    MigProfile, names, INT32, INT32, UINT32, st.lists(placements, max_size=3).map(tuple)
)
devices_json = st.builds(
    DeviceInfo,
    id=st.text(max_size=20),
    count=INT32, devmem=INT32, devcore=INT32,
    type=st.text(max_size=20),
    index=st.integers(0, 2**64 - 1),
    numa=st.integers(-(2**63), 2**63 - 1),
    mode=st.text(max_size=10),
    health=st.booleans(),
    mig_profiles=st.lists(mig_profiles, max_size=2).map(tuple),
)


@given(devices=st.lists(devices_json, max_size=5))
def test_register_json_round_trip(devices):
    text = codec.encode_node_devices(devices)
    assert codec.decode_node_devices(text) == tuple(devices)
    # What we write is what Go would write: compact, and orjson agrees it is JSON.
    assert orjson.loads(text) is not None and ", " not in text.replace('", "', "")


devices_legacy = st.builds(
    DeviceInfo,
    id=wire_token, count=INT32, devmem=INT32, devcore=INT32, type=wire_token,
    index=st.integers(0, 2**63 - 1), numa=st.integers(-(2**63), 2**63 - 1),
    mode=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=",:"), max_size=10),
    health=st.booleans(),
)


@given(devices=st.lists(devices_legacy, min_size=1, max_size=5))
def test_register_legacy_round_trip(devices):
    # (An empty list encodes to "", which HAMi's decoder rejects: "missing device separator".)
    assert codec.decode_node_devices_legacy(codec.encode_node_devices_legacy(devices)) == tuple(devices)


pair_scores = st.builds(
    codec.DevicePairScore, st.text(max_size=10),
    st.dictionaries(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), max_size=4),
)


@given(entries=st.lists(pair_scores, max_size=4))
def test_pair_scores_round_trip(entries):
    assert codec.decode_pair_scores(codec.encode_pair_scores(entries)) == tuple(entries)


container_device = st.builds(
    ContainerDevice, wire_token, wire_token, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1),
    st.just(codec.UNSET_CONTAINER_DEVICE_IDX),
)
pods = st.lists(st.lists(container_device, max_size=3).map(tuple), max_size=5).map(tuple)


@given(pod=pods)
def test_pod_devices_round_trip_adds_one_trailing_empty_container(pod):
    text = codec.encode_pod_devices_checked(pod)
    assert codec.decode_pod_devices(text) == pod + ((),)


@given(devs=st.lists(container_device, max_size=4).map(tuple))
def test_container_devices_round_trip(devs):
    assert codec.decode_container_devices(codec.encode_container_devices(devs)) == devs


zones = st.sampled_from([UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))])
seconds = st.integers(0, 4_000_000_000)


@given(ts=seconds, tz=zones)
def test_handshake_requesting_round_trip(ts, tz):
    value = codec.encode_handshake_requesting(ts, tz)
    hs = codec.decode_handshake(value, tz=tz)
    assert (hs.state, hs.timestamp) == ("Requesting", ts)


@given(ts=seconds, tz=zones)
def test_handshake_deleted_round_trip(ts, tz):
    hs = codec.decode_handshake(codec.encode_handshake_deleted(ts, tz), tz=tz)
    assert (hs.state, hs.timestamp) == ("Deleted", ts)


@given(ts=seconds, micros=st.integers(0, 999_999), tz=zones)
def test_handshake_reported_round_trip(ts, micros, tz):
    stamp = ts + micros / 1e6
    hs = codec.decode_handshake(codec.encode_handshake_reported(stamp, tz))
    assert hs.state == "Reported" and hs.timestamp == pytest.approx(stamp, abs=1e-6)


lock_part = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=","), max_size=20)


@given(ts=seconds, ns=lock_part, name=lock_part, tz=zones)
def test_node_lock_round_trip(ts, ns, name, tz):
    lock = codec.decode_node_lock(codec.encode_node_lock(ts, ns, name, tz=tz))
    assert (lock.timestamp, lock.namespace, lock.name) == (ts, ns, name)


@given(ts=seconds, tz=zones)
def test_node_lock_legacy_round_trip(ts, tz):
    lock = codec.decode_node_lock(codec.encode_node_lock_legacy(ts, tz=tz))
    assert lock.legacy and lock.timestamp == ts


cordon_uuid = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc", "Zl", "Zp"),
                                    blacklist_characters=",\x85"), min_size=1, max_size=12)


@given(uuids=st.lists(cordon_uuid, max_size=5))
def test_device_cordon_round_trip(uuids):
    assert codec.decode_device_cordon(codec.encode_device_cordon(uuids)) == tuple(uuids)


weights = st.builds(ScoringWeights, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
                    st.integers(0, 2**63 - 1)).filter(lambda w: w.slot or w.core or w.memory)


@given(w=weights)
def test_scoring_weights_round_trip(w):
    assert codec.decode_scoring_weights(codec.encode_scoring_weights(w)) == w


@st.composite
def mig_allocation_lists(draw):
    keys = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), unique=True, max_size=4))
    out = []
    for ci, di in keys:
        runtime = draw(st.booleans())
        out.append(codec.MigAllocation(
            ci, di, draw(names), draw(names), MigPlacement(draw(UINT32), draw(st.integers(1, 2**32 - 1))),
            draw(names) if runtime else "", draw(UINT32) if runtime else None, draw(UINT32) if runtime else None,
        ))
    return out


@given(allocs=mig_allocation_lists())
def test_mig_allocations_round_trip(allocs):
    assert codec.decode_mig_allocations(codec.encode_mig_allocations(allocs)) == tuple(allocs)


@given(ts=st.integers(0, 2**62))
def test_unix_seconds_round_trip(ts):
    assert codec.decode_unix_seconds(codec.encode_unix_seconds(ts)) == ts


@given(value=st.text(max_size=30))
def test_go_json_string_is_valid_json_for_the_same_text(value):
    encoded = codec.go_json_string(value)
    assert "<" not in encoded and ">" not in encoded and "&" not in encoded
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        assert orjson.loads(encoded) == value


non_strings = st.one_of(
    st.none(), st.integers(), st.floats(), st.booleans(), st.binary(max_size=10),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(value=non_strings)
@settings(max_examples=40)
def test_every_decoder_raises_only_codec_error_on_non_string_values(value):
    for name, decoder in TEXT_DECODERS.items():
        try:
            decoder(value)
        except CodecError as err:
            assert err.field and isinstance(err.text, str), name
    assert codec.decode_handshake(value).state == "Unknown"


# ---------------------------------------------------------------- metav1.Time / MicroTime

@settings(max_examples=200, deadline=None)
@given(st.integers(0, 4102444800 * 10**6))
def test_kube_times_read_back_what_they_write(micros):
    ts = micros / 10**6
    assert codec.kube_time(codec.format_micro_time(ts)) == pytest.approx(ts, abs=1e-6)
    assert codec.kube_time(codec.format_rfc3339(ts, UTC)) == int(ts)
    assert codec.format_micro_time(ts).endswith("Z") and len(codec.format_micro_time(ts)) == 27


@settings(max_examples=300, deadline=None)
@given(st.one_of(any_text, st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2)))
def test_kube_time_is_a_time_or_none_never_an_error(value):
    got = codec.kube_time(value)
    assert got is None or isinstance(got, float)
    if isinstance(value, str) and got is not None:
        assert codec.parse_rfc3339(value, field="time") == got


def test_kube_time_refuses_what_rfc3339_does_not_allow():
    assert codec.kube_time("2026-11-25T10:00:00.5+01:00") == codec.kube_time("2026-11-25T09:00:00.5Z")
    for text in ("2026-11-25", "2026-11-25T10:00:00", "2026-11-25 10:00:00Z", ""):
        assert codec.kube_time(text) is None
