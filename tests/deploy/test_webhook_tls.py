"""The scheduler's webhook and extender are served over TLS only (security).

Covers: the MutatingWebhookConfiguration (pod CREATE, failurePolicy Ignore, admission review versions,
selectors excluding hami.io/webhook=ignore, a service reference on the scheduler's HTTPS port, never a
plain URL); the chart's generated certificate chain, proven with a real TLS handshake on loopback: the
webhook's caBundle and the Secret's ca.crt verify the serving certificate for the Service DNS names
and for 127.0.0.1 (where kube-scheduler calls the extender); the scheduler container has no plain-HTTP
listener; the cert-manager alternative wires the same Secret and CA injection.
"""

from __future__ import annotations

import asyncio
import base64
import ssl

import pytest
import yaml

from tests.deploy.chart import NAMESPACE, container, find, objects, one, rendered

# tls.generator=helm: Helm's genCA at render time (opt-in; the default is the certgen Job)
HELM_TLS = {"scheduler": {"tls": {"generator": "helm"}}}


def _webhook(docs):
    (wh,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    return wh


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_webhook_registration_matches_hami(which):
    wh = _webhook(rendered(which))
    assert wh["name"] == "vgpu.hami.io"
    assert wh["failurePolicy"] == "Ignore"
    assert wh["sideEffects"] == "None"
    assert set(wh["admissionReviewVersions"]) >= {"v1", "v1beta1"}
    # HAMi registers CREATE on pods; UPDATE too, so a placement annotation added later is refused, and
    # CREATE on pods/binding, whose annotations land on the pod (a door around the pod rule otherwise).
    assert wh["rules"] == [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                            "resources": ["pods"], "scope": "Namespaced"},
                           {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                            "resources": ["pods/binding"], "scope": "Namespaced"}]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in wh["namespaceSelector"]["matchExpressions"]
    # A pod's own label is no opt-out: HAMi's objectSelector clause is gone.
    assert ignore not in ((wh.get("objectSelector") or {}).get("matchExpressions") or [])


@pytest.mark.parametrize("which", ["default", "prod", "dev"])
def test_webhook_goes_to_the_https_port_and_nothing_listens_in_plain_http(which):
    docs = rendered(which)
    wh = _webhook(docs)
    assert "url" not in wh["clientConfig"]
    ref = wh["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"], ref["path"]) == ("hami-scheduler", NAMESPACE, "/webhook")
    svc = one(docs, "Service", "hami-scheduler")
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == ref["port"]]
    assert port["name"] == "https" and port["targetPort"] == "https"
    c = container(docs, "Deployment", "hami-scheduler")
    https = {p["name"]: p["containerPort"] for p in c["ports"]}["https"]
    args = c["command"]
    assert f"--webhook-bind-address=0.0.0.0:{https}" in args
    assert "--cert_file=/tls/tls.crt" in args and "--key_file=/tls/tls.key" in args
    # /filter and /bind are on loopback only, for the kube-scheduler container of the same pod
    assert "--http_bind=127.0.0.1:8443" in args
    ks = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-config")["data"]["config.yaml"])
    assert ks["extenders"][0]["urlPrefix"] == "https://127.0.0.1:8443"
    # the only container ports are the webhook and metrics; the probes use the metrics port
    assert {p["name"] for p in c["ports"]} == {"https", "metrics"}
    assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/readyz", "metrics")
    assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == ("/healthz", "metrics")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert mounts["tls"] == "/tls" and vols["tls"]["secret"]["secretName"] == "hami-scheduler-tls"


def test_webhook_can_be_switched_off_but_tls_stays():
    docs = objects({"scheduler": {"admissionWebhook": {"enabled": False}}})
    assert not find(docs, "MutatingWebhookConfiguration")
    assert "--cert_file=/tls/tls.crt" in container(docs, "Deployment", "hami-scheduler")["command"]
    assert find(docs, "Job", "hami-scheduler-certgen-create")  # the Secret is still made


def _server_context(secret: dict) -> ssl.SSLContext:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        crt, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        crt.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
        key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(crt), str(key))
    return ctx


async def _handshake(secret: dict, ca_pem: bytes, server_hostname: str) -> bytes:
    """Serve with the Secret's cert/key on loopback; connect verifying against `ca_pem`."""
    server_ctx = _server_context(secret)

    async def handle(reader, writer):
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                       server_hostname=server_hostname)
        data = await reader.read()
        writer.close()
        return data
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("hostname", ["127.0.0.1", "hami-scheduler.hami-system.svc",
                                      "hami-scheduler.hami-system.svc.cluster.local"])
async def test_generated_certificate_verifies_against_the_webhook_ca_bundle(hostname):
    docs = objects(HELM_TLS)
    secret = one(docs, "Secret", "hami-scheduler-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_bundle = base64.b64decode(_webhook(docs)["clientConfig"]["caBundle"])
    assert ca_bundle == base64.b64decode(secret["data"]["ca.crt"])
    assert await _handshake(secret, ca_bundle, hostname) == b"ok"


async def test_certificate_is_refused_for_another_name_and_another_ca():
    docs = objects(HELM_TLS)
    secret = one(docs, "Secret", "hami-scheduler-tls")
    ca = base64.b64decode(secret["data"]["ca.crt"])
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(secret, ca, "evil.example.com")
    other_ca = base64.b64decode(one(objects(HELM_TLS), "Secret", "hami-scheduler-tls")["data"]["ca.crt"])
    assert other_ca != ca  # a fresh render makes a fresh CA
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(secret, other_ca, "127.0.0.1")


def test_cert_manager_mode_issues_the_same_secret_and_injects_the_ca():
    docs = rendered("dev")
    assert not find(docs, "Secret")
    cert = one(docs, "Certificate")
    assert cert["spec"]["secretName"] == "hami-scheduler-tls"
    assert "127.0.0.1" in cert["spec"]["ipAddresses"]
    assert "hami-scheduler.hami-system.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(docs, "Issuer")["metadata"]["name"]
    wh_obj = one(docs, "MutatingWebhookConfiguration")
    assert wh_obj["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NAMESPACE}/{cert['metadata']['name']}"
    assert "caBundle" not in wh_obj["webhooks"][0]["clientConfig"]
