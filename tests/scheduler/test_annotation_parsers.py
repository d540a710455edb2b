"""Every pod/node annotation and resource value the scheduler reads has one parser, with HAMi's Go rules
(cordon and gpu-scheduler-policy are in test_one_parser_per_field.py, the wire codecs in
tests/device/test_codec_properties.py, scoring weights in test_hami_texts.py).

Each property feeds random values to every consumer of a field and checks one answer against an oracle
written here from HAMi's Go source:
* `nvidia.com/use-gputype` / `nouse-gputype`: devices.go CheckType (strings.Split on ",", TrimSpace,
  empty members never match, strings.ToUpper both sides, Contains; a blank value is no constraint),
  through fit_options(...).type_ok (the fit's one reading). Go's ToUpper is rune for rune
  ("ß" stays, "ᾀ" -> "ᾈ"), not Python's full mapping ("ß".upper() == "SS"): the oracle's table says so.
* `nvidia.com/use-gpuuuid` / `nouse-gpuuuid`: CheckUUID (TrimSpace members, exact), through
  fit_options(...).uuid_ok.
* `nvidia.com/numa-bind`: assertNuma = strconv.ParseBool, true only when it parses to true.
* `nvidia.com/vgpu-mode`: strings.Contains(annotation, card mode) when the key is present.
* `hami.io/bind-time` in the node agent's order of pods waiting for Allocate: strconv.ParseInt(s, 10, 64)
  (unparsable sorts last), never Python's int().
* Node `status.allocatable[<count resource>]` in the handshake: Quantity.Value() (CheckHealth's
  `qty.Value() > 0`), never Python's int(): "1k" is 1000, "500m" rounds up to 1, " 5" and "1_0" are
  not quantities. The webhook and doctor read resource limits with that same parser.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.agent.allocate import age_key
from hami.device import codec
from hami.device.model import DeviceInfo, NvidiaConfig
from hami.device.request import quantity_value
from hami.doctor import recommend, tree
from hami.scheduler.admission import webhook
from hami.scheduler.cache.handshake import gpu_allocatable
from hami.scheduler.placement.fit import fit_options
from hami.scheduler.placement.usage import DeviceState

GO_SPACE = ("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
            "\u2028\u2029\u202f\u205f\u3000")
# unicode.ToUpper of every rune the properties use, written out (not computed): ASCII letters, and
# runes where Python's str.upper() disagrees with Go or is easy to get wrong.
GO_UPPER = {**{c: c.upper() for c in "abcdefghijklmnopqrstuvwxyz"}, "ß": "ß", "ﬁ": "ﬁ", "ᾀ": "ᾈ", "ı": "I",
            "ſ": "S", "µ": "Μ", "ŉ": "ŉ"}
RUNES = sorted(set(GO_UPPER) | set("ABCXYZ0123456789-") | {"ᾈ", "Μ"})


def go_upper(text: str) -> str:
    return "".join(GO_UPPER.get(c, c) for c in text)


def go_trim(text: str) -> str:
    return text.strip(GO_SPACE)  # the set above is Go's unicode.IsSpace, written out


def go_parse_bool(text: str) -> bool | None:
    return {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}.get(text)


def go_check_type(annos: dict, card: str) -> bool:
    card = go_upper(card)

    def match(value: str) -> bool:
        return any(go_trim(t) != "" and go_upper(go_trim(t)) in card for t in value.split(","))

    use, nouse = annos.get(codec.USE_GPUTYPE_ANNOTATION), annos.get(codec.NOUSE_GPUTYPE_ANNOTATION)
    if use is not None and go_trim(use) != "" and not match(use):
        return False
    return not (nouse is not None and go_trim(nouse) != "" and match(nouse))


def go_check_uuid(annos: dict, uuid: str) -> bool:
    def match(value: str) -> bool:
        return any(go_trim(u) == uuid for u in value.split(","))

    use, nouse = annos.get(codec.USE_GPUUUID_ANNOTATION), annos.get(codec.NOUSE_GPUUUID_ANNOTATION)
    if use is not None and go_trim(use) != "" and not match(use):
        return False
    return not (nouse is not None and go_trim(nouse) != "" and match(nouse))


member = st.text(st.sampled_from(RUNES + [" ", "\u3000", "\x1c"]), max_size=5)
lists = st.lists(member, max_size=3).map(",".join)
maybe = st.none() | lists


def _device(card: str, mode: str = "hami-core", uuid: str = "GPU-a") -> DeviceState:
    return DeviceState.from_info(DeviceInfo(id=uuid, count=10, devmem=1000, devcore=100, type=card, mode=mode))


def _annos(**pairs) -> dict:
    return {k: v for k, v in pairs.items() if v is not None}


@settings(max_examples=300, deadline=None)
@given(use=maybe, nouse=maybe, card=st.text(st.sampled_from(RUNES), max_size=8))
def test_gpu_type_lists_give_go_checktypes_answer_in_every_consumer(use, nouse, card):
    annos = _annos(**{codec.USE_GPUTYPE_ANNOTATION: use, codec.NOUSE_GPUTYPE_ANNOTATION: nouse})
    want = go_check_type(annos, card)
    assert fit_options(annos).type_ok(_device(card)) == want


def test_go_upper_keeps_runes_python_would_expand():
    assert codec.go_to_upper("tesla-ß") == "TESLA-ß"
    assert codec.go_to_upper("ᾀﬁµ") == "ᾈﬁΜ"
    # "ß" asked for on a card whose type contains "SS": Go does not match, Python's upper() would
    assert not fit_options({codec.USE_GPUTYPE_ANNOTATION: "ß"}).type_ok(_device("GLASS-A100"))
    assert fit_options({codec.NOUSE_GPUTYPE_ANNOTATION: "ß"}).type_ok(_device("GLASS-A100"))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=12))
def test_go_upper_is_rune_for_rune(text):
    up = codec.go_to_upper(text)
    assert len(up) == len(text)
    assert all(a == b or b == a.upper() or b == a.title() for a, b in zip(text, up, strict=True))


uuid_member = st.lists(st.sampled_from(["GPU-a", "GPU-b", " ", "\t", "\u3000", "\x1f", "x"]), max_size=3).map("".join)
uuid_lists = st.none() | st.lists(uuid_member, max_size=3).map(",".join)


@settings(max_examples=300, deadline=None)
@given(use=uuid_lists, nouse=uuid_lists, uuid=st.sampled_from(["GPU-a", "GPU-b", "x"]))
def test_gpu_uuid_lists_give_go_checkuuids_answer_in_every_consumer(use, nouse, uuid):
    annos = _annos(**{codec.USE_GPUUUID_ANNOTATION: use, codec.NOUSE_GPUUUID_ANNOTATION: nouse})
    want = go_check_uuid(annos, uuid)
    assert fit_options(annos).uuid_ok(uuid) == want


bools = st.sampled_from(["1", "t", "T", "TRUE", "true", "True", "0", "f", "FALSE", "yes", "on", " true", "TRue",
                         "", "2"]) | st.text(max_size=4)


@settings(max_examples=200, deadline=None)
@given(value=st.none() | bools)
def test_numa_bind_is_strconv_parsebool_true(value):
    want = value is not None and go_parse_bool(value) is True
    assert fit_options(_annos(**{codec.NUMA_BIND_ANNOTATION: value})).numa_bind == want


@settings(max_examples=200, deadline=None)
@given(value=st.none() | st.lists(st.sampled_from(["hami-core", "mig", "mps", ",", " "]), max_size=3).map("".join),
       mode=st.sampled_from(["hami-core", "mig", "mps"]))
def test_vgpu_mode_is_go_contains_when_the_key_is_present(value, mode):
    want = value is None or mode in value  # strings.Contains(annos[AllocateMode], d.Mode)
    assert fit_options(_annos(**{codec.VGPU_MODE_ANNOTATION: value})).type_ok(_device("A100", mode)) == want


# --------------------------------------------------------------------------- resource quantities

digits = st.integers(0, 5000).map(str)
quantities = st.builds(lambda n, frac, suffix: n + frac + suffix, digits,
                       st.sampled_from(["", ".5", ".25"]), st.sampled_from(["", "k", "Ki", "m", "M", "e2", "E1"]))
SCALE = {"": 1, "k": 1000, "Ki": 1024, "m": Fraction(1, 1000), "M": 10 ** 6, "e2": 100, "E1": 10}


def _exact(text: str) -> Fraction:
    for suffix in sorted(SCALE, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * SCALE[suffix]
    return Fraction(text)


@settings(max_examples=300, deadline=None)
@given(q=quantities)
def test_allocatable_and_limits_read_as_quantity_value_everywhere(q):
    want = -((-_exact(q).numerator) // _exact(q).denominator)  # Value(): rounded up
    node = {"status": {"allocatable": {"nvidia.com/gpu": q}}}
    assert gpu_allocatable(node) == want
    assert webhook.quantity_value(q) == want
    ctr = {"resources": {"limits": {"nvidia.com/gpu": q}}}
    assert tree.pod_gpu_counts({"spec": {"containers": [ctr]}}, NvidiaConfig()) == [want]
    assert recommend.quantity_number(q) == want


def test_values_python_int_would_take_but_go_rejects_read_as_no_quantity():
    for text in (" 5", "5 ", "1_0", "+ 1", "٣"):
        assert quantity_value(text) is None, text
        assert gpu_allocatable({"status": {"allocatable": {"nvidia.com/gpu": text}}}) == 0
        assert webhook.quantity_value(text) is None
    assert webhook.quantity_value("-1.5") == -2  # Value() rounds away from zero, as Go does
    assert webhook.quantity_int("1.5") is None and webhook.quantity_int("2k") == 2000


def go_parse_int64(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body or any(c not in "0123456789" for c in body):
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from("0123456789+-_ \u0663x"), max_size=6) | st.integers(-(1 << 64), 1 << 64).map(str))
def test_bind_time_orders_pods_by_strconv_parseint(text):
    pod = {"metadata": {"name": "p", "namespace": "default", "annotations": {codec.BIND_TIME_ANNOTATION: text}}}
    want = go_parse_int64(text)
    assert age_key(pod)[0] == (want if want is not None else 1 << 62)
