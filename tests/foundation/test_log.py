"""Leveled logging: klog-style text lines, JSON lines, the verbosity gate separate from severity,
and secrets never reaching the log."""

import io

import orjson
import pytest

from hami.obs.log import configure_logging, get_logger


@pytest.fixture
def stream():
    buf = io.StringIO()
    yield buf
    configure_logging(0)


def test_text_lines_look_like_klog(stream):
    configure_logging(4, "text", stream)
    get_logger("hami.scheduler.placement.fit").v(4).info(
        "Node filtered out", pod="default/p", node="gpu-node-01", reason="CardInsufficientMemory", requested=8192
    )
    line = stream.getvalue().strip()
    assert line[0] == "I" and line[1:5].isdigit()
    assert 'test_log.py:' in line
    assert line.endswith('] "Node filtered out" pod="default/p" node="gpu-node-01" '
                         'reason="CardInsufficientMemory" requested=8192')


def test_verbosity_gate_is_separate_from_severity(stream):
    configure_logging(2, "text", stream)
    log = get_logger("hami.x")
    log.v(4).info("per-node decision")
    log.v(2).info("score")
    log.v(4).error("even errors behind v(4) are gated")
    out = stream.getvalue()
    assert "score" in out and "per-node decision" not in out and "gated" not in out
    assert log.enabled(2) and not log.enabled(3)


def test_json_format_is_one_object_per_line(stream):
    configure_logging(0, "json", stream)
    log = get_logger("hami.x")
    log.info("a", n=1)
    log.warning("b", node="n1")
    rows = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["event"] for r in rows] == ["a", "b"]
    assert rows[1]["level"] == "warning" and rows[1]["node"] == "n1"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_tokens_and_passwords_are_redacted_at_every_level(stream, fmt):
    configure_logging(5, fmt, stream)
    get_logger("hami.x").v(5).info("connect", token="s3cr3t", bearer_token="abc", password="pw")
    out = stream.getvalue()
    assert "s3cr3t" not in out and "abc" not in out and "pw\"" not in out
    assert "<redacted>" in out


def test_log_ring_keeps_complete_lines_and_writes_through():
    from hami.obs.log import LogRing

    out = io.StringIO()
    ring = LogRing(out, size=2)
    ring.write("first")
    ring.write(" line\nsecond\nthi")
    assert ring.tail() == ["first line", "second"]
    ring.write("rd\n")
    assert ring.tail() == ["second", "third"]  # bounded
    assert out.getvalue() == "first line\nsecond\nthird\n"
