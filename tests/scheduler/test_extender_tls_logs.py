"""The extender over TLS (--cert_file/--key_file) with the certificate re-read when the files
change, and the -v gates: -v=2 logs every node's score, -v=4 every node's filter decision with
requested against available, -v=0 neither."""

from __future__ import annotations

import asyncio
import io
import os
import ssl
import subprocess

import aiohttp
import pytest

from hami.obs.log import configure_logging
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, start_env, stop_env


def make_cert(directory, cn: str) -> tuple[str, str]:
    cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={cn}",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key + ".new", "-out", cert + ".new"],
                   check=True, capture_output=True)
    os.replace(key + ".new", key)
    os.replace(cert + ".new", cert)
    return cert, key


async def trusted_by(url: str, ca_file: str) -> bool:
    """True when the served certificate verifies against `ca_file` (a self-signed cert)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    try:
        async with aiohttp.ClientSession() as http, http.get(url + "/healthz", ssl=ctx) as r:
            return r.status == 200
    except (aiohttp.ClientError, ssl.SSLError):
        return False


async def test_extender_serves_tls_and_reloads_changed_certificate(apiserver, tmp_path):
    cert, key = make_cert(tmp_path, "first")
    first = str(tmp_path / "first.crt")
    os.link(cert, first)
    e = await start_env(apiserver, hami_nodes(1), cert_file=cert, key_file=key)
    try:
        assert e.sched.url.startswith("https://")
        assert await trusted_by(e.sched.url, first)
        make_cert(tmp_path, "second")
        for _ in range(60):  # the watcher polls every 2 s
            if await trusted_by(e.sched.url, cert):
                break
            await asyncio.sleep(0.1)
        assert await trusted_by(e.sched.url, cert)
        assert not await trusted_by(e.sched.url, first)
    finally:
        await stop_env(e)


@pytest.fixture
def log_stream():
    stream = io.StringIO()
    yield stream
    configure_logging(0)


async def filter_with_verbosity(apiserver, stream, verbosity: int) -> str:
    configure_logging(verbosity, stream=stream)
    e = await start_env(apiserver, hami_nodes(2))
    try:
        pod = e.create_pod(pod_obj("p", mem=30000))
        e.create_pod(pod_obj("q", mem=30000))
        out = await e.filter(pod, ["n0", "n1", "ghost"])
        assert out["Error"] == "" and len(out["NodeNames"]) == 1 and out["NodeNames"][0] in ("n0", "n1"), out
        big = e.create_pod(pod_obj("big", mem=10**6))
        await e.filter(big, ["n0"])
        await eventually(lambda: True)
        return stream.getvalue()
    finally:
        await stop_env(e)


async def test_v4_logs_each_node_decision_with_requested_and_available(apiserver, log_stream):
    text = await filter_with_verbosity(apiserver, log_stream, 4)
    assert '"Node score"' in text and 'node="n0"' in text
    lines = [ln for ln in text.splitlines() if '"Node filtered out"' in ln]
    assert any('node="ghost"' in ln and 'reason="node unregistered"' in ln for ln in lines)
    mem = [ln for ln in lines if "CardInsufficientMemory" in ln]
    assert mem and "requested=" in mem[0] and "mem=1000000" in mem[0] and "available=" in mem[0]
    assert "mem=40960/40960" in mem[0]


async def test_v2_logs_scores_but_not_decisions(apiserver, log_stream):
    text = await filter_with_verbosity(apiserver, log_stream, 2)
    assert '"Node score"' in text and '"Node filtered out"' not in text


async def test_v0_logs_neither(apiserver, log_stream):
    text = await filter_with_verbosity(apiserver, log_stream, 0)
    assert '"Node score"' not in text and '"Node filtered out"' not in text
