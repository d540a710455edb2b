"""hami.obs.profiling.encoder: the hand-written profile.proto encoder.

Covers: varint encoding (against the protobuf runtime's own decoder), round trip of arbitrary
profiles through the test decoder (stacks leaf first, values, labels, comments, period), function
and location deduplication, string table index 0, gzip framing, merge_samples, and PprofError on
bad input naming the field.
"""

from __future__ import annotations

import gzip

import pytest
from google.protobuf.internal import decoder as pb_decoder
from hypothesis import given
from hypothesis import strategies as st

from hami.obs.profiling.encoder import (
    Frame,
    PprofError,
    Profile,
    Sample,
    encode_gzip,
    encode_profile,
    merge_samples,
    varint,
)
from tests.obs.pprof_decode import decode

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
frames = st.builds(Frame, names, st.text(max_size=8), st.integers(0, 10_000), st.integers(0, 10_000))
int64 = st.integers(-(1 << 63), (1 << 63) - 1)


@given(st.integers(0, (1 << 64) - 1))
def test_varint_matches_protobuf_runtime(n):
    data = varint(n)
    value, pos = pb_decoder._DecodeVarint(data, 0)
    assert (value, pos) == (n, len(data))


@given(int64)
def test_negative_int64_is_twos_complement(n):
    value, _ = pb_decoder._DecodeVarint(varint(n), 0)
    assert value == n & ((1 << 64) - 1)


@st.composite
def profiles(draw):
    ntypes = draw(st.integers(1, 4))
    types = tuple((f"t{i}", draw(st.sampled_from(["count", "bytes", "nanoseconds"]))) for i in range(ntypes))
    samples = draw(st.lists(st.builds(
        Sample,
        st.lists(frames, max_size=6).map(tuple),
        st.lists(int64, min_size=ntypes, max_size=ntypes).map(tuple),
        st.dictionaries(names, names, max_size=3),
        st.dictionaries(names.map(lambda s: "n" + s), int64, max_size=2),
    ), max_size=8))
    return Profile(types, samples, ("cpu", "nanoseconds"), draw(st.integers(0, 10**9)),
                   draw(st.integers(0, 2**62)), draw(st.integers(0, 2**62)),
                   tuple(draw(st.lists(names, max_size=3))), types[-1][0])


@given(profiles())
def test_round_trip_keeps_every_sample(profile):
    d = decode(encode_gzip(profile))
    assert d.strings[0] == ""
    assert d.sample_types == list(profile.sample_types)
    assert d.period_type == ("cpu", "nanoseconds") and d.period == profile.period
    assert (d.time_nanos, d.duration_nanos) == (profile.time_nanos, profile.duration_nanos)
    assert d.comments == list(profile.comments)
    assert d.default_sample_type == profile.default_sample_type
    assert len(d.samples) == len(profile.samples)
    for (stack, values, labels), want in zip(d.samples, profile.samples, strict=True):
        assert stack == [(f.function, f.filename, f.line) for f in want.stack]
        assert values == list(want.values)
        assert labels == {**want.labels, **want.num_labels}


def test_functions_and_locations_are_shared_between_samples():
    a = Frame("pkg.a", "/x.py", 10, 9)
    b = Frame("pkg.b", "/x.py", 20, 19)
    a2 = Frame("pkg.a", "/x.py", 11, 9)  # same function, another line
    prof = Profile((("samples", "count"),), [Sample((a, b), (1,)), Sample((a2, b), (2,)), Sample((a, b), (3,))])
    d = decode(encode_profile(prof))
    assert d.function_ids == [1, 2]
    assert d.location_ids == [1, 2, 3]
    assert d.flat("samples") == {"pkg.a": 6}
    assert d.cum("samples") == {"pkg.a": 6, "pkg.b": 6}


def test_gzip_output_is_deterministic_and_decompresses():
    prof = Profile((("samples", "count"),), [Sample((Frame("f"),), (1,))])
    one, two = encode_gzip(prof), encode_gzip(prof)
    assert one == two
    assert gzip.decompress(one) == encode_profile(prof)


def test_merge_samples_sums_values_of_equal_stacks_and_labels():
    f = (Frame("f"),)
    merged = merge_samples([Sample(f, (1, 10), {"task": "x"}), Sample(f, (2, 20), {"task": "x"}),
                            Sample(f, (5, 50), {"task": "y"})])
    assert [(s.values, dict(s.labels)) for s in merged] == [((3, 30), {"task": "x"}), ((5, 50), {"task": "y"})]


@pytest.mark.parametrize(
    ("profile", "field"),
    [
        (Profile(()), "sample_types"),
        (Profile((("a", "count"),), [Sample((), (1, 2))]), "samples[0].values"),
        (Profile((("a", "count"),), [Sample((), ("x",))]), "samples[0].values"),
        (Profile((("a", "count"),), [Sample(("f",), (1,))]), "samples[0].stack"),
        (Profile((("a", "count"),), [Sample((Frame("f", line=-1 << 70),), (1,))]), "samples[0].stack.line"),
        (Profile((("a", "count"),), period=1 << 70), "period"),
    ],
    ids=["no-sample-types", "value-count", "value-type", "frame-type", "line-range", "period-range"],
)
def test_bad_input_raises_pprof_error_naming_the_field(profile, field):
    with pytest.raises(PprofError) as info:
        encode_profile(profile)
    assert info.value.field_name == field
    assert field in str(info.value)
