"""A tenant's pod (another host) and a hostile web page against the web UI, over real
HTTP against the embedded API server:

- without a read-only token the UI answers loopback peers only (kubectl port-forward): a request
  from another address of this machine is refused (403) unless --ui-allow-anonymous; with a token,
  that peer gets the pages with it;
- a Host header naming another site (a DNS name rebound to this address) is refused (403); the
  UI's own names are answered, and /healthz (kubelet's probe) whatever its Host;
- POST /whatif without its form's token, or with another site's Origin, is refused (403);
- a pending pod's diagnosis is kept per resourceVersion and new ones are rate-limited: ten views of
  one pod diagnose it once, eight pods viewed at once diagnose five (the burst);
- the pure checks behind these (hami.ui.gate)."""

from __future__ import annotations

import asyncio
import re
import socket

import aiohttp
import pytest
from aiohttp import web

from hami.config import Config, KubeSettings, UiSettings
from hami.ui import gate
from hami.ui.role import Ui
from tests.kube.helpers import client_for, eventually
from tests.ui.helpers import node, pod

pytestmark = pytest.mark.timeout(90)


def this_hosts_address() -> str:
    """An address of this machine that is not loopback (the one a route out would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.254.254.254", 9))  # no packet is sent: connect() on UDP only picks the route
        address = s.getsockname()[0]
    assert not gate.is_loopback(address), address
    return address


async def serve(apiserver, *, token: str = "", allow_anonymous: bool = False, pending: int = 1, clock=None):
    st = apiserver.store
    st.create("nodes", "", node("n1"))
    for i in range(pending):
        st.create("pods", "default", pod(f"wait-{i}", mem=45000))  # beyond a 40960 MiB card: pending
    client = await client_for(apiserver.kubeconfig)
    config = Config(kube=KubeSettings(kubeconfig=apiserver.kubeconfig),
                    ui=UiSettings(bind_address="0.0.0.0:0", allow_anonymous=allow_anonymous))
    ui = Ui(config, client, token=token, **({"clock": clock} if clock else {}))
    stop = asyncio.Event()
    tasks = [asyncio.create_task(i.run(stop)) for i in ui.informers()]
    await eventually(lambda: all(i.synced.is_set() for i in ui.informers()) and len(ui.pods.store) == pending)
    runner = web.AppRunner(ui.app())
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", 0).start()
    port = runner.addresses[0][1]

    async def close():
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await client.close()
    return ui, port, close


async def get(url: str, headers: dict | None = None, local: str | None = None) -> tuple[int, str]:
    connector = aiohttp.TCPConnector(local_addr=(local, 0) if local else None)
    async with aiohttp.ClientSession(connector=connector) as http, http.get(url, headers=headers or {}) as r:
        return r.status, await r.text()


async def test_without_a_token_only_loopback_peers_are_answered(apiserver):
    address = this_hosts_address()
    ui, port, close = await serve(apiserver)
    try:
        status, text = await get(f"http://{address}:{port}/pod/default/wait-0", local=address,
                                 headers={"Host": f"localhost:{port}"})
        assert status == 403 and "need a read-only token" in text and "ui.allowAnonymous" in text
        assert ui.diagnoses.made == 0  # refused before any API call
        status, _ = await get(f"http://127.0.0.1:{port}/")
        assert status == 200  # kubectl port-forward: the pod's own loopback
        status, _ = await get(f"http://{address}:{port}/healthz", local=address)
        assert status == 200  # kubelet's readiness probe
    finally:
        await close()


async def test_anonymous_reading_and_a_token_open_the_ui_to_other_peers(apiserver):
    address = this_hosts_address()
    ui, port, close = await serve(apiserver, allow_anonymous=True)
    try:
        status, _ = await get(f"http://{address}:{port}/", local=address, headers={"Host": f"localhost:{port}"})
        assert status == 200
    finally:
        await close()


async def test_a_token_is_required_of_every_peer_when_set(apiserver):
    address = this_hosts_address()
    ui, port, close = await serve(apiserver, token="s3cret")
    try:
        status, _ = await get(f"http://{address}:{port}/", local=address, headers={"Host": f"localhost:{port}"})
        assert status == 401
        status, _ = await get(f"http://{address}:{port}/", local=address,
                              headers={"Host": f"localhost:{port}", "Authorization": "Bearer s3cret"})
        assert status == 200
    finally:
        await close()


async def test_a_rebound_host_name_is_refused(apiserver):
    ui, port, close = await serve(apiserver)
    try:
        status, text = await get(f"http://127.0.0.1:{port}/", headers={"Host": f"attacker.example:{port}"})
        assert status == 403 and "'attacker.example' is not this UI's name" in text
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
            assert (await get(f"http://127.0.0.1:{port}/", headers={"Host": host}))[0] == 200, host
        assert (await get(f"http://127.0.0.1:{port}/healthz", headers={"Host": "10.1.2.3:8080"}))[0] == 200
    finally:
        await close()


async def test_a_post_needs_its_forms_token_from_the_uis_own_origin(apiserver):
    ui, port, close = await serve(apiserver)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/whatif", allow_redirects=False) as r:
                assert r.status == 403 and "form token" in await r.text()
            async with http.post(url + "/whatif", data={"form_token": "0" * 64}, allow_redirects=False) as r:
                assert r.status == 403
            async with http.get(url + "/whatif") as r:
                token = re.search(r"name='form_token' value='([0-9a-f]+)'", await r.text()).group(1)
            async with http.post(url + "/whatif", data={"form_token": token}, allow_redirects=False,
                                 headers={"Origin": "http://attacker.example"}) as r:
                assert r.status == 403  # another site's page carrying a stolen token still fails
            assert not ui.whatif_running and ui.whatif_result is None
            async with http.post(url + "/whatif", data={"form_token": token}, allow_redirects=False,
                                 headers={"Origin": f"http://127.0.0.1:{port}"}) as r:
                assert r.status == 303
    finally:
        await close()


async def test_diagnoses_are_kept_and_rate_limited(apiserver):
    ui, port, close = await serve(apiserver, pending=8, clock=lambda: 1000.0)  # time stands still: no refill
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(10):
            assert (await get(url + "/pod/default/wait-0"))[0] == 200
        assert ui.diagnoses.made == 1 and ui.diagnoses.reused == 9
        for i in range(1, 8):
            assert (await get(url + f"/pod/default/wait-{i}"))[0] == 200
        assert ui.diagnoses.made == 5 and ui.diagnoses.refused == 3  # the burst, then refused
    finally:
        await close()


def test_the_gate_in_pure_terms():
    assert gate.is_loopback("127.0.0.1") and gate.is_loopback("::1") and gate.is_loopback("::ffff:127.0.0.1")
    assert not gate.is_loopback("10.0.0.1") and not gate.is_loopback(None) and not gate.is_loopback("x")
    assert gate.peer_may_enter("10.0.0.1", token_set=True, allow_anonymous=False)
    assert not gate.peer_may_enter("10.0.0.1", token_set=False, allow_anonymous=False)
    assert gate.host_name("[::1]:8080") == "::1" and gate.host_name("LocalHost:80") == "localhost"
    assert gate.host_name(None) == "" and gate.host_name("a:b:c") == "a:b:c"
    hosts = gate.allowed_hosts("0.0.0.0", "hami-ui.hami-system.svc, ui.example.com")
    assert "hami-ui.hami-system.svc" in hosts and "0.0.0.0" not in hosts
    assert gate.host_allowed("ui.example.com:443", hosts) and not gate.host_allowed("evil.com", hosts)
    assert gate.host_allowed("anything", gate.allowed_hosts("", "*"))
    form = gate.FormToken(b"k" * 32)
    assert form.accepts(form.value, None, "h:1") and form.accepts(form.value, "http://h:1", "h:1")
    assert not form.accepts(form.value, "http://other", "h:1") and not form.accepts("x", None, "h:1")
