"""`hami --role ui` over real HTTP against the embedded API server (informers, no mock).

Covers: every page answers 200 with the figures of the objects in the API server (a forged pending pod
counts nothing); a missing pod or node answers 404 with its name escaped; the Content-Security-Policy
and nosniff headers on every answer; with a read-only token, a request without it gets 401, a Bearer
header or `?token=` once (which sets an HttpOnly SameSite=Strict cookie) gets the page; the what-if
runs on demand on the live cluster, one at a time and at most once per interval (429 otherwise), and
shows the suggestion that places the pending pod; the UI writes nothing (the store's resource versions
do not move while it serves); the cluster page is rendered once while nothing changes and again, with
the new pod on it, once a pod is placed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

import aiohttp
import pytest
from aiohttp import web

from hami.config import Config, KubeSettings, UiSettings
from hami.ui.role import COOKIE, Ui
from tests.kube.helpers import client_for, eventually

from .helpers import filter_failed, node, pod


async def _serve(apiserver, token: str = "", interval: float = 30.0):
    st = apiserver.store
    st.create("nodes", "", node("n1"))
    st.create("nodes", "", node("n2"))
    st.create("pods", "default", pod("run", node="n1", mem=30000))
    st.create("pods", "default", pod("squat", vgpu_node="n2", mem=40960))  # forged: pending, counts nothing
    st.create("pods", "default", pod("wait", mem=45000))  # beyond a 40960 MiB card: pending
    st.create("events", "default", filter_failed("wait", "1 nodes CardInsufficientMemory(n1)"))
    client = await client_for(apiserver.kubeconfig)
    config = Config(kube=KubeSettings(kubeconfig=apiserver.kubeconfig),
                    ui=UiSettings(whatif_interval=interval, whatif_timeout=20.0))
    ui = Ui(config, client, token=token)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(i.run(stop)) for i in ui.informers()]
    await eventually(lambda: all(i.synced.is_set() for i in ui.informers()))
    await eventually(lambda: len(ui.pods.store) == 3 and len(ui.events.store) == 1)
    runner = web.AppRunner(ui.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def close():
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await client.close()
    return ui, url, close


async def form_token(http: aiohttp.ClientSession, url: str) -> str:
    """The token the what-if page's form carries (hami.ui.gate.FormToken)."""
    async with http.get(url + "/whatif") as r:
        found = re.search(r"name='form_token' value='([0-9a-f]+)'", await r.text())
    assert found is not None
    return found.group(1)


async def test_pages_show_the_cluster_and_escape_unknown_names(apiserver):
    ui, url, close = await _serve(apiserver)
    rv_before = apiserver.store.rv
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/") as r:
                text = await r.text()
                assert r.status == 200 and "default-src 'none'" in r.headers["Content-Security-Policy"]
                assert r.headers["X-Content-Type-Options"] == "nosniff"
            assert "29.3 GiB of 160.0 GiB" in text  # only the placed pod's 30000 MiB: the squatter counts nothing
            assert "CardInsufficientMemory" in text and "/pod/default/wait" in text
            for path in ("/node/n1", "/pod/default/run", "/pod/default/wait", "/quotas", "/whatif", "/static/ui.js"):
                async with http.get(url + path) as r:
                    assert r.status == 200, path
                    body = await r.text()
                    if path == "/node/n1":
                        assert "/pod/default/run" in body and "GPU-n1-0" in body
                    if path == "/pod/default/wait":
                        assert "hami doctor pod" in body and "CardInsufficientMemory" in body
            async with http.get(url + "/pod/default/%3Cscript%3Ealert(1)%3C%2Fscript%3E") as r:
                body = await r.text()
                assert r.status == 404 and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
                assert "<script>alert" not in body
        assert apiserver.store.rv == rv_before  # read-only: no write moved the store
    finally:
        await close()


async def test_the_cluster_page_is_rendered_once_until_the_cluster_changes(apiserver):
    ui, url, close = await _serve(apiserver)
    try:
        async with aiohttp.ClientSession() as http:
            bodies = []
            for _ in range(3):
                async with http.get(url + "/") as r:
                    assert r.status == 200
                    bodies.append(await r.text())
            assert ui.page_renders == 1 and bodies[0] == bodies[1] == bodies[2]
            assert "29.3 GiB of 160.0 GiB" in bodies[0]
            apiserver.store.create("pods", "default", pod("late", node="n2", mem=5000))
            await eventually(lambda: "default/late" in ui.pods.store)
            async with http.get(url + "/") as r:
                assert "34.2 GiB of 160.0 GiB" in await r.text()  # 30000 + 5000 MiB placed
            assert ui.page_renders == 2
            builds = ui.view_builds
            ui.forget_view()  # the view is built again at the next request (what bench_ui times as "rebuilt")
            async with http.get(url + "/") as r:
                assert "34.2 GiB of 160.0 GiB" in await r.text()
            assert ui.view_builds == builds + 1
    finally:
        await close()


async def test_read_only_token(apiserver):
    ui, url, close = await _serve(apiserver, token="s3cret")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/") as r:
                assert r.status == 401 and "token is required" in await r.text()
            async with http.get(url + "/", headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            async with http.get(url + "/", headers={"Authorization": "Bearer s3cret"}) as r:
                assert r.status == 200
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.get(url + "/quotas?token=s3cret", allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/quotas"
                cookie = r.headers["Set-Cookie"]
                assert COOKIE in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            async with http.get(url + "/quotas") as r:
                assert r.status == 200
    finally:
        await close()


async def test_whatif_on_demand_is_rate_limited_and_places_the_pending_pod(apiserver):
    ui, url, close = await _serve(apiserver, interval=3600)
    try:
        async with aiohttp.ClientSession() as http:
            form = {"form_token": await form_token(http, url)}
            async with http.post(url + "/whatif", data=form, allow_redirects=False) as r:
                assert r.status == 303
            async with http.post(url + "/whatif", data=form, allow_redirects=False) as r:
                assert r.status == 429  # one at a time, once per interval
            await eventually(lambda: ui.whatif_result is not None, timeout=30)
            assert "error" not in ui.whatif_result, ui.whatif_result
            assert ui.whatif_result["baseline"]["pending"] == 1
            assert ui.whatif_result["suggestions"][0]["gained"] == 1
            async with http.get(url + "/whatif") as r:
                body = await r.text()
                assert "+1" in body and "next run possible in" in body
                # the HTML report's plots: placed/pending, memory allocated/stranded/free, card heat maps
                assert "GPU memory: allocated / stranded / free" in body
                assert body.count('aria-label="card fill heat map"') == 2  # the baseline and the best change
    finally:
        await close()


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(UiSettings)])
def test_every_ui_setting_has_a_flag(field):
    from hami.config import FLAGS

    flags = {target for flag in FLAGS for target in flag.targets if target[0] == "ui"}
    assert ("ui", field) in flags or field == "whatif_timeout"


def test_the_embedded_default_starts_the_ui_and_a_real_all_does_not():
    import json
    import subprocess
    import sys

    def roles(*args):
        res = subprocess.run([sys.executable, "-m", "hami.cli.main", *args, "--check-config"], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["roles"]

    assert roles("--role", "all", "--embedded") == ["sim", "scheduler", "monitor", "ui"]
    # On a node, `all` keeps its meaning: the UI's default port is the extender's (127.0.0.1:8080).
    assert "ui" not in roles("--role", "all", "--node-name", "n1")


async def test_a_pending_dra_pod_is_explained_by_claim_request_and_device(apiserver):
    """The pod page runs `hami doctor pod`: for a pod with claims, which request of which claim failed
    on which node, and each device's reason with the numbers."""
    from hami.kube.client import resource_path
    from tests.dra._objects import DEVICE_CLASS, DRIVER, MIB, claim, gpu_device, slice_for

    ui, url, close = await _serve(apiserver)
    client = await client_for(apiserver.kubeconfig)
    try:
        await client.create("deviceclasses", DEVICE_CLASS)
        await client.create("resourceslices", slice_for("n1", [gpu_device(0)]))
        held = claim("held", memory_mib=6000)
        held["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "s1",
             "consumedCapacity": {"memory": str(6000 * MIB)}}]}}}
        created = await client.create("resourceclaims", {k: v for k, v in held.items() if k != "status"}, "default")
        await client.request("replace", "resourceclaims/status", "PUT",
                             resource_path("resourceclaims", "default", "held", "status"),
                             body={**created, "status": held["status"]}, content_type="application/json")
        await client.create("resourceclaims", claim("mine", memory_mib=4000), "default")
        apiserver.store.create("pods", "default", {
            "metadata": {"name": "dra-wait", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}]},
            "status": {"phase": "Pending"}})
        await eventually(lambda: "default/dra-wait" in ui.pods.store)
        async with aiohttp.ClientSession() as http, http.get(url + "/pod/default/dra-wait") as r:
            body = await r.text()
        assert r.status == 200
        assert "claim default/mine: request gpu: not enough free memory on any matching device" in body
        assert "n1: n1/gpu-0: memory 4000Mi requested, 2000Mi of 8000Mi free" in body
    finally:
        await client.close()
        await close()
