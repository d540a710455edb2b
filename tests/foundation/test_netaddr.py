"""hami.netaddr: the one HOST:PORT parser behind every listener flag, and dial URLs for listeners."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.netaddr import dial_url, split_host_port, url_host


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)),
    (":9394", ("0.0.0.0", 9394)),
    ("[::1]:0", ("::1", 0)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_split_host_port_forms(text, want):
    assert split_host_port(text, flag="--x", default_host="0.0.0.0") == want


@pytest.mark.parametrize(("text", "why"), [
    ("8080", "expected HOST:PORT"), ("h:", "not a number"), ("h:x", "not a number"),
    ("h:-1", "not a number"), ("h:+80", "not a number"), ("h:65536", "out of range"), ("h:٣", "not a number"),
])
def test_split_host_port_errors_name_the_flag_and_text(text, why):
    with pytest.raises(ValueError, match=why) as err:
        split_host_port(text, flag="--sim-listen", default_host="127.0.0.1")
    assert str(err.value).startswith(f"--sim-listen {text!r}")


@given(host=st.sampled_from(["", "127.0.0.1", "[::1]", "node-1.example"]), port=st.integers(0, 65535))
def test_split_host_port_round_trips(host, port):
    got = split_host_port(f"{host}:{port}", flag="--x", default_host="dflt")
    assert got == (host.strip("[]") or "dflt", port)


@given(st.text(max_size=20))
def test_split_host_port_only_raises_value_error(text):
    try:
        host, port = split_host_port(text, flag="--x", default_host="h")
    except ValueError as err:
        assert "--x" in str(err)
    else:
        assert 0 <= port <= 65535 and isinstance(host, str)


@pytest.mark.parametrize(("bind", "want"), [
    (":9395", "http://127.0.0.1:9395/metrics"),
    ("0.0.0.0:80", "http://127.0.0.1:80/metrics"),
    ("[::]:80", "http://127.0.0.1:80/metrics"),
    ("[::1]:80", "http://[::1]:80/metrics"),
    ("10.0.0.1:443", "http://10.0.0.1:443/metrics"),
])
def test_dial_url_turns_wildcards_into_loopback(bind, want):
    assert dial_url(bind, "/metrics") == want


def test_dial_url_scheme_and_url_host():
    assert dial_url("127.0.0.1:8443", scheme="https") == "https://127.0.0.1:8443"
    assert url_host("::1") == "[::1]" and url_host("[::1]") == "[::1]" and url_host("h") == "h"
