"""Who can reach the scheduler, and whether its readiness tells the truth.

* The extender listens on loopback: from another address (127.0.0.2 stands for the pod IP another
  pod would dial) /filter and /bind are unreachable; pprof is on no role listener even with
  --profiling, and the debug listener is loopback too.
* With --client-ca-file (mTLS) a client without a certificate, or with one from another CA, fails
  the TLS handshake; kube-scheduler's certificate from that CA is served.
* With mTLS, hanging TLS handshakes from an untrusted source fill that class's cap, yet kube-scheduler
  (its certificate verified) still gets in: the oldest hanging handshake is dropped for it, and once
  verified its connection counts in the trusted class.
* /readyz is 503 naming the reason before the caches sync and once a watch is broken past its
  bound, 200 again after recovery; /healthz stays 200 (alive).
* A failing informer handler is counted, that object is resynced from the cache and the index
  converges to what a fresh scheduler computes; the scheduler is unready until then (per-object
  resync and the full rebuild fallback: tests/scheduler/test_object_resync.py).
* /filter for a pod that is already bound answers an Error and leaves its usage alone.
"""

from __future__ import annotations

import datetime
import ssl

import aiohttp
import orjson
import pytest

from hami.config import DebugSettings, replace
from hami.obs.profiling import start_debug_server
from hami.scheduler.role import start_scheduler
from tests.kube.helpers import config_for, eventually, pod_obj
from tests.kube.scheduler_env import Env, hami_nodes, start_env, stop_env
from tests.scheduler.test_state_io import placed, used

x509 = pytest.importorskip("cryptography.x509")  # a dev dependency; present in every venv
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


async def get(url: str, **kw) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, **kw) as r:
        return r.status, await r.text()


async def unreachable(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.post(url, data=b"{}",
                                                              timeout=aiohttp.ClientTimeout(total=3)):
            return False
    except aiohttp.ClientConnectorError:
        return True


# --------------------------------------------------------------------------- listeners


async def test_extender_and_pprof_are_unreachable_from_another_address(apiserver):
    env = await start_env(apiserver, hami_nodes(1))
    try:
        port = env.sched.port
        assert await get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        for path in ("/filter", "/bind"):
            assert await unreachable(f"http://127.0.0.2:{port}{path}"), path
    finally:
        await stop_env(env)
    # --profiling mounts nothing on the role listeners; the debug listener is loopback only.
    config = replace(config_for(apiserver.kubeconfig), debug=DebugSettings(profiling=True))
    sched = await start_scheduler(config)
    runner, debug_port = await start_debug_server("127.0.0.1:0")
    try:
        for port in (sched.port, sched.metrics_port):
            status, _ = await get(f"http://127.0.0.1:{port}/debug/pprof/")
            assert status == 404, port
        assert (await get(f"http://127.0.0.1:{debug_port}/debug/pprof/"))[0] == 200
        assert await unreachable(f"http://127.0.0.2:{debug_port}/debug/pprof/")
    finally:
        await runner.cleanup()
        await sched.close()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool = False, ip: str | None = None):
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ip:
        import ipaddress

        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path, cert, key=None) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(path)


@pytest.fixture
def pki(tmp_path):
    """A CA, the scheduler's serving cert (127.0.0.1), kube-scheduler's client cert and a stranger's."""
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("hami-ca", ca_key, "hami-ca", ca_key, ca=True)
    files = {"ca": _write(tmp_path / "ca.crt", ca)}
    for name, issuer, issuer_key, ip in (("server", "hami-ca", ca_key, "127.0.0.1"),
                                         ("kube-scheduler", "hami-ca", ca_key, None),
                                         ("stranger", "other-ca", other_key, None)):
        key = ec.generate_private_key(ec.SECP256R1())
        files[name] = _write(tmp_path / f"{name}.crt", _cert(name, key, issuer, issuer_key, ip=ip), key)
    return files


def _client_ctx(pki, who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if who:
        ctx.load_cert_chain(pki[who], pki[who][: -len(".crt")] + ".key")
    return ctx


async def _handshake_refused(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        await get(url, ssl=ctx)
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
        return True
    return False


async def test_mtls_extender_serves_kube_schedulers_certificate_only(apiserver, pki):
    server_key = pki["server"][: -len(".crt")] + ".key"
    env = await start_env(apiserver, hami_nodes(1), http_bind="0.0.0.0:0", cert_file=pki["server"],
                          key_file=server_key, client_ca_file=pki["ca"])
    try:
        url = f"https://127.0.0.1:{env.sched.port}/readyz"
        assert await get(url, ssl=_client_ctx(pki, "kube-scheduler")) == (200, "ok\n")
        assert await _handshake_refused(url, _client_ctx(pki, None))
        assert await _handshake_refused(url, _client_ctx(pki, "stranger"))
    finally:
        await stop_env(env)


async def test_hanging_handshakes_cannot_crowd_out_kube_schedulers_mtls_connection(apiserver, pki):
    import asyncio

    from hami.config import ListenSettings

    for n in hami_nodes(1):
        apiserver.store.create("nodes", "", n)
    server_key = pki["server"][: -len(".crt")] + ".key"
    cfg = config_for(apiserver.kubeconfig, http_bind="0.0.0.0:0", cert_file=pki["server"], key_file=server_key,
                     client_ca_file=pki["ca"])
    # no source is trusted by address: only the verified certificate makes a connection trusted
    cfg = replace(cfg, listen=ListenSettings(max_connections=4, trusted_sources=("192.0.2.0/24",)))
    sched = await start_scheduler(cfg)
    try:
        assert await sched.state.wait_synced(10)
        budget = sched.runners[0].guard.budget
        hanging = [await asyncio.open_connection("127.0.0.1", sched.port) for _ in range(4)]  # never a ClientHello
        await eventually(lambda: budget.untrusted == 4, 5)
        url = f"https://127.0.0.1:{sched.port}/readyz"
        async with aiohttp.ClientSession() as http:
            async with http.get(url, ssl=_client_ctx(pki, "kube-scheduler")) as r:
                assert (r.status, await r.text()) == (200, "ok\n")
                assert budget.trusted == 1 and budget.evicted == 1  # verified: the trusted class
        assert await asyncio.wait_for(hanging[0][0].read(), 10) == b""  # the oldest handshake was dropped
        for _, w in hanging:
            w.close()
    finally:
        await sched.close()


async def test_webhook_gets_its_own_listener_without_the_extender_verbs(apiserver):
    env = await start_env(apiserver, hami_nodes(1), webhook_bind_address="127.0.0.1:0")
    try:
        wh = env.sched.webhook_url
        assert wh != env.sched.url
        async with env.http.post(wh + "/filter", data=b"{}") as r:
            assert r.status == 404  # the Service port never reaches /filter or /bind
        async with env.http.post(wh + "/bind", data=b"{}") as r:
            assert r.status == 404
        async with env.http.post(env.sched.url + "/webhook", data=b"{}") as r:
            assert r.status == 404  # and the extender listener no longer serves /webhook
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "namespace": "default", "operation": "CREATE",
                              "object": pod_obj("w", scheduler="")}}
        async with env.http.post(wh + "/webhook", data=orjson.dumps(review)) as r:
            assert r.status == 200 and (await r.json())["response"]["allowed"] is True
    finally:
        await stop_env(env)


# --------------------------------------------------------------------------- readiness


async def test_readyz_before_sync_when_watch_breaks_and_after_recovery(apiserver):
    for n in hami_nodes(1):
        apiserver.store.create("nodes", "", n)
    await apiserver.stop()
    sched = await start_scheduler(config_for(apiserver.kubeconfig))
    try:
        for inf in sched.state.informers():
            inf.backoff_max, inf.unready_after = 0.2, 0.5
        ready = f"http://127.0.0.1:{sched.metrics_port}/readyz"
        status, text = await get(ready)
        assert status == 503 and "caches not synced yet" in text and "nodes: initial list not done" in text
        assert await get(f"http://127.0.0.1:{sched.metrics_port}/healthz") == (200, "ok\n")
        await apiserver.start()
        assert await sched.state.wait_synced(10) and await sched.access.wait_answered(10)
        assert await get(ready) == (200, "ok\n")
        assert await get(sched.url + "/readyz") == (200, "ok\n")
        await apiserver.stop()
        status, text = None, ""
        for _ in range(100):
            status, text = await get(ready)
            if status == 503:
                break
            await _sleep(0.05)
        assert status == 503 and "watch broken for" in text, text
        await apiserver.start()
        for _ in range(100):
            if (await get(ready))[0] == 200:
                break
            await _sleep(0.05)
        assert await get(ready) == (200, "ok\n")
    finally:
        await sched.close()


async def _sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


def _usage(env: Env) -> dict:
    idx = env.sched.state.index
    return {n: [(d.id, d.used, d.usedmem, d.usedcores) for d in idx.nodes[n].devices] for n in sorted(idx.nodes)}


async def test_handler_failure_repairs_the_index_to_what_a_fresh_scheduler_computes(apiserver):
    env = await start_env(apiserver, hami_nodes(2))
    state = env.sched.state
    real = state.count_pod
    failures = []

    def flaky(uid, key, *a, **kw):
        if key == "default/b" and not failures:
            failures.append(key)
            state.index.add_pod(uid, "n1", (), namespace="default")  # a half-applied update, then the crash
            raise RuntimeError("injected")
        return real(uid, key, *a, **kw)

    state.count_pod = flaky
    try:
        env.create_pod(placed("a", "n0", 1000, 10))
        env.create_pod(placed("b", "n1", 2000, 20, gpu=1))
        await eventually(lambda: failures and state.object_resyncs == 1 and not state.health(), timeout=10)
        assert state.handler_failures == 1
        assert used(env, "n1", 1) == (1, 2000, 20) and used(env, "n0", 0) == (1, 1000, 10)
        text = env.sched.metrics.exposition().decode()
        assert "hami_scheduler_informer_handler_failures_total 1.0" in text
        assert "hami_scheduler_informer_object_resyncs_total 1.0" in text  # that pod alone, no rebuild
        fresh = await start_env(apiserver)
        try:
            assert _usage(fresh) == _usage(env)
        finally:
            await stop_env(fresh)
    finally:
        await stop_env(env)


async def test_filter_refuses_a_pod_that_is_already_bound(apiserver):
    env = await start_env(apiserver, hami_nodes(2))
    try:
        pod = env.create_pod(placed("running", "n0", 3000, 30, bound=False))
        env.store.bind("default", "running", {"target": {"name": "n0"}})
        await eventually(lambda: (env.sched.state.pod("default", "running") or {}).get("spec", {}).get("nodeName"))
        before = used(env, "n0")
        assert before == (1, 3000, 30)
        out = await env.filter(pod, ["n0", "n1"])
        assert out == {"Error": "pod default/running is already bound to node n0; its devices are not re-placed"}
        assert used(env, "n0") == before
        annos = env.pod("default", "running")["metadata"]["annotations"]
        assert annos["hami.io/vgpu-node"] == "n0"
        # The same answer when the request itself carries spec.nodeName (a replayed or forged body).
        forged = pod_obj("other", mem=10)
        forged["spec"]["nodeName"] = "n1"
        out = await env.filter(forged, ["n0", "n1"])
        assert out["Error"] == "pod default/other is already bound to node n1; its devices are not re-placed"
    finally:
        await stop_env(env)
