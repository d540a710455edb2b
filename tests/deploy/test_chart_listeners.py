"""The scheduler started with exactly the listener flags the chart renders (ports moved to free
ones, the chart's own generated certificate): seen from another pod's position (127.0.0.2 stands
for the pod IP), /filter and /bind are unreachable, the Service's webhook port serves only the
webhook and probes, and pprof is nowhere; kube-scheduler in the same pod reaches the extender
on loopback over TLS that verifies against the chart's CA. Probes answer on the metrics port."""

from __future__ import annotations

import base64
import re
import ssl

import aiohttp
import orjson

from hami.cli.main import role_parser
from hami.config import build_config, replace
from hami.scheduler.role import start_scheduler
from tests.deploy.chart import container, objects, one, rendered
from tests.kube.helpers import pod_obj

PORT = re.compile(r":\d+$")


def _chart_scheduler_config(tmp_path, kubeconfig: str):
    docs = rendered("default")
    # the TLS Secret as the certgen Job makes it in a cluster; rendered here with Helm's generator
    secret = one(objects({"scheduler": {"tls": {"generator": "helm"}}}), "Secret", "hami-scheduler-tls")
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    device = one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    (tmp_path / "device-config.yaml").write_text(device)
    argv = []
    for a in container(docs, "Deployment", "hami-scheduler")["command"][1:]:
        if a.startswith(("--http_bind=", "--webhook-bind-address=", "--metrics-bind-address=")):
            a = PORT.sub(":0", a)  # the chart's hosts, free ports
        a = a.replace("=/tls/", f"={tmp_path}/").replace("=/device-config.yaml", f"={tmp_path}/device-config.yaml")
        argv.append(a)
    args = role_parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if k != "role"}
    config = build_config({**flags, "roles": (args.role,)}, env={})
    return replace(config, kube=replace(config.kube, kubeconfig=kubeconfig)), str(tmp_path / "ca.crt")


async def _status(url: str, method: str = "GET", **kw) -> int | str:
    try:
        async with aiohttp.ClientSession() as http, http.request(
                method, url, timeout=aiohttp.ClientTimeout(total=3), **kw) as r:
            return r.status
    except aiohttp.ClientConnectorError:
        return "refused"
    except aiohttp.ServerDisconnectedError:
        return "disconnected"


async def test_chart_listeners_keep_bind_and_pprof_away_from_other_pods(apiserver, tmp_path):
    config, ca = _chart_scheduler_config(tmp_path, apiserver.kubeconfig)
    assert config.scheduler.http_bind == "127.0.0.1:0" and config.scheduler.webhook_bind_address == "0.0.0.0:0"
    sched = await start_scheduler(config)
    try:
        assert await sched.state.wait_synced(10) and await sched.access.wait_answered(10)
        trust = ssl.create_default_context(cafile=ca)
        ext, wh, metrics = sched.port, sched.webhook_port, sched.metrics_port
        # another pod: the extender port is closed, the Service ports have no /filter, /bind or pprof
        for path in ("/filter", "/bind"):
            assert await _status(f"https://127.0.0.2:{ext}{path}", "POST", ssl=trust) == "refused"
            assert await _status(f"https://127.0.0.2:{wh}{path}", "POST", data=b"{}", ssl=False) == 404
        for url in (f"https://127.0.0.2:{wh}", f"http://127.0.0.2:{metrics}"):
            assert await _status(url + "/debug/pprof/", ssl=False) == 404
            assert await _status(url + "/debug/pprof/profile?seconds=1", ssl=False) == 404
        # kube-scheduler in the pod: loopback, TLS verified against the chart's CA (cert for 127.0.0.1)
        body = orjson.dumps({"Pod": pod_obj("cpu", gpus=0), "NodeNames": ["n0"]})
        async with aiohttp.ClientSession() as http, http.post(f"https://127.0.0.1:{ext}/filter", data=body,
                                                              ssl=trust) as r:
            assert r.status == 200 and (await r.json())["NodeNames"] == ["n0"]
        # the API server reaches the webhook through the Service; kubelet probes the metrics port
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u", "namespace": "default", "operation": "CREATE", "object": pod_obj("p")}}
        assert await _status(f"https://127.0.0.2:{wh}/webhook", "POST", data=orjson.dumps(review), ssl=False) == 200
        assert await _status(f"http://127.0.0.2:{wh}/webhook", "POST", data=b"{}") == "disconnected"  # TLS only
        assert await _status(f"http://127.0.0.2:{metrics}/readyz") == 200
        assert await _status(f"http://127.0.0.2:{metrics}/healthz") == 200
    finally:
        await sched.close()


def test_every_role_probes_healthz_and_readyz():
    docs = rendered("default")
    assert "--health-bind-address=:9396" in container(docs, "DaemonSet", "device-plugin")["command"]
    for kind, name, port in (("Deployment", "hami-scheduler", "metrics"), ("DaemonSet", "vgpu-monitor", "metrics"),
                             ("DaemonSet", "device-plugin", "health")):
        c = container(docs, kind, name)
        assert (c["livenessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["port"]) == ("/healthz", port)
        assert (c["readinessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["port"]) == ("/readyz", port)
