"""The chart as a real node and a real start see it.

Covers: every hami container the chart renders under the default, dev and prod values passes
`hami ... --check-config` through the real CLI, with its rendered environment, the files it mounts
(device config, node config, a TLS pair) and the image's HAMI_VGPU_LIB; the node DaemonSet has the
kubelet device-plugins dir, the hook path (where the agent installs HAMi-core), the host's /proc
for the monitor's host-PID repair,
the readiness probe (the agent's /readyz, false while HAMi-core is missing),
root for the node containers (the image defaults to non-root), GPU-taint tolerations, the CDI
strategy flags, and runtimeClassName only when one is set; deploy/examples/*.yaml are valid pods and
Jobs asking for a third of a card, a whole card and a card pinned by type, and the webhook's decode
of their requests is what each file says.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from hami.cli import main as cli
from hami.sim.kubelet.libstub import write_stub_library
from tests.deploy.chart import ROOT, container, find, objects, one, rendered

EXAMPLES = ROOT / "deploy" / "examples"


def _args(c: dict) -> list[str]:
    return list(c.get("command", [])) + list(c.get("args", []))


def _tls_pair(tmp: Path) -> dict[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hami-scheduler")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "tls.crt").write_bytes(pem)
    (tmp / "ca.crt").write_bytes(pem)
    (tmp / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    return {f"/tls/{n}": str(tmp / n) for n in ("tls.crt", "tls.key", "ca.crt")}


@pytest.mark.parametrize("which", ["default", "dev", "prod"])
def test_every_rendered_hami_container_passes_check_config(which, tmp_path, monkeypatch, capsys):
    docs = rendered(which)
    files = _tls_pair(tmp_path)
    dev = tmp_path / "device-config.yaml"
    dev.write_text(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    files["/device-config.yaml"] = str(dev)
    node_cm = find(docs, "ConfigMap", "hami-device-plugin")
    node = tmp_path / "config.json"
    node.write_text(node_cm[0]["data"]["config.json"])
    files["/config/config.json"] = str(node)
    image_lib = write_stub_library(str(tmp_path / "image" / "libvgpu.so"))
    checked = []
    for d in find(docs, "Deployment") + find(docs, "DaemonSet"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            argv = _args(c)
            if argv[0] != "hami":
                continue
            for path, local in files.items():
                argv = [a.replace(f"={path}", f"={local}") for a in argv]
            env = {"HAMI_VGPU_LIB": image_lib, "NODE_NAME": "gpu-node-1", "POD_NAME": "p", "POD_NAMESPACE": "ns"}
            env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
            for key in list(os.environ):
                if key.startswith(("HAMI_", "HOOK_PATH", "KUBECONFIG", "DEVICE_LIST")):
                    monkeypatch.delenv(key)
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            try:
                rc = cli.main(argv[1:] + ["--check-config"])
            except SystemExit as exc:
                rc = exc.code
            out = capsys.readouterr()
            assert rc == 0, f"{d['kind']}/{c['name']}: {' '.join(argv)}\n{out.err}"
            resolved = json.loads(out.out)
            checked.append(tuple(resolved["roles"]))
            assert resolved["log"]["verbosity"] < 4 or which == "prod"
            if "node-agent" in resolved["roles"]:
                assert resolved["agent"]["vgpu_lib"] == image_lib
                assert resolved["agent"]["device_list_strategy"] == ["envvar"]
    assert sorted(checked) == [("monitor",), ("node-agent",), ("scheduler",)]


def test_node_daemonset_has_what_a_real_node_needs():
    docs = rendered("default")
    spec = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec
    agent = container(docs, "DaemonSet", "device-plugin")
    monitor = container(docs, "DaemonSet", "vgpu-monitor")
    monitor_spec = one(docs, "DaemonSet", "hami-device-plugin-monitor")["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for s in (spec, monitor_spec) for v in s["volumes"] if "hostPath" in v}
    agent_mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    monitor_mounts = {m["name"]: m for m in monitor["volumeMounts"]}
    assert host["device-plugin"] == agent_mounts["device-plugin"] == "/var/lib/kubelet/device-plugins"
    hook = {e["name"]: e.get("value") for e in agent["env"]}["HOOK_PATH"]
    assert host["lib"] == agent_mounts["lib"] == f"{hook}/vgpu"  # where the agent installs HAMi-core
    assert host["host-proc"] == "/proc" and monitor_mounts["host-proc"]["readOnly"] is True
    assert f"--proc-root={monitor_mounts['host-proc']['mountPath']}" in _args(monitor)
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"  # not ready without HAMi-core either
    assert agent["securityContext"]["runAsUser"] == 0 and agent["securityContext"]["privileged"] is False
    assert monitor["securityContext"]["runAsUser"] == 0
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    assert "--device-list-strategy=envvar" in _args(agent) and "--device-id-strategy=uuid" in _args(agent)


def test_runtime_class_and_cdi_values_reach_the_daemonset():
    docs = objects({"devicePlugin": {"runtimeClassName": "nvidia", "deviceListStrategy": "cdi-cri",
                                     "deviceIDStrategy": "index"}})
    spec = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    args = _args(container(docs, "DaemonSet", "device-plugin"))
    assert "--device-list-strategy=cdi-cri" in args and "--device-id-strategy=index" in args


def _examples() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out.append((path.name, doc))
    return out


def test_examples_cover_the_common_requests_and_validate():
    import kubernetes_validate

    from hami.device.model import NvidiaConfig
    from hami.device.request import container_request

    docs = _examples()
    assert {name for name, _ in docs} >= {"third-of-a-card.yaml", "exclusive-card.yaml", "card-by-type.yaml"}
    assert {d["kind"] for _, d in docs} == {"Pod", "Job"}
    seen = {}
    for name, doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
        pod_spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        (ctr,) = pod_spec["containers"]
        req = container_request(ctr, NvidiaConfig())
        seen.setdefault(name, []).append((req, (doc["metadata"].get("annotations") or {}) |
                                          ((doc["spec"].get("template") or {}).get("metadata", {})
                                           .get("annotations") or {})))
    for req, _ in seen["third-of-a-card.yaml"]:
        assert req.nums == 1 and req.mempercentagereq == 33 and req.coresreq == 33
    for req, _ in seen["exclusive-card.yaml"]:
        assert req.nums == 1 and req.coresreq == 100
    for req, anns in seen["card-by-type.yaml"]:
        assert req.nums == 1 and anns.get("nvidia.com/use-gputype") == "A100"


def test_webhook_certificate_is_stable_across_renders():
    first, second = objects(), objects()  # two independent renders, as `helm template` and GitOps make them
    assert yaml.safe_dump_all(first) == yaml.safe_dump_all(second)
    dev = yaml.safe_load((ROOT / "deploy" / "helm" / "hami" / "ci" / "dev-values.yaml").read_text())
    assert yaml.safe_dump_all(objects(dev)) == yaml.safe_dump_all(objects(dev))  # cert-manager mode too
    (wh,) = one(first, "MutatingWebhookConfiguration")["webhooks"]
    assert "caBundle" not in wh["clientConfig"]  # patched in by the post-install Job
    create = one(first, "Job", "hami-scheduler-certgen-create")
    patch = one(first, "Job", "hami-scheduler-certgen-patch")
    assert create["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert patch["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    (c,) = create["spec"]["template"]["spec"]["containers"]
    assert re.fullmatch(r"registry\.k8s\.io/ingress-nginx/kube-webhook-certgen:v\d+\.\d+\.\d+", c["image"])
    hosts = next(a for a in c["args"] if a.startswith("--host=")).removeprefix("--host=").split(",")
    assert {"127.0.0.1", "hami-scheduler.hami-system.svc"} <= set(hosts)
    assert {"--secret-name=hami-scheduler-tls", "--cert-name=tls.crt", "--key-name=tls.key",
            "--ca-name=ca.crt"} <= set(c["args"])
    (p,) = patch["spec"]["template"]["spec"]["containers"]
    assert "--webhook-name=hami-scheduler-webhook" in p["args"] and "--secret-name=hami-scheduler-tls" in p["args"]
    vols = one(first, "Deployment", "hami-scheduler")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "hami-scheduler-tls", "defaultMode": 0o440}} in vols
    # why Helm's own generator is opt-in: each render without the cluster makes a new CA
    helm_mode = {"scheduler": {"tls": {"generator": "helm"}}}
    cas = {one(objects(helm_mode), "Secret", "hami-scheduler-tls")["data"]["ca.crt"] for _ in range(2)}
    assert len(cas) == 2
