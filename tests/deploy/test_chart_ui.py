"""The chart's web UI: rendered only with ui.enabled, read-only, reachable only inside.

Covers: the default render has no UI object; with ui.enabled a Deployment, a ClusterIP Service (never a
NodePort or LoadBalancer), a ServiceAccount and a ClusterRole that only reads (no Secret, no write verb)
render; the container runs `--role ui` non-root with a read-only root filesystem; readonlyTokenSecret
mounts the Secret's token and passes --ui-readonly-token-file; the rendered args pass `hami --check-config`.
"""

from __future__ import annotations

import subprocess
import sys

from .chart import find, objects, one, rendered

UI = "hami-ui"


def _ui_objects(docs):
    return [d for d in docs if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == UI]


def test_no_ui_unless_enabled():
    assert _ui_objects(rendered("default")) == []


def test_ui_enabled_renders_a_read_only_internal_page():
    docs = objects({"ui": {"enabled": True}})
    ui = _ui_objects(docs)
    assert sorted(d["kind"] for d in ui) == ["ClusterRole", "ClusterRoleBinding", "Deployment", "NetworkPolicy",
                                             "Service", "ServiceAccount"]
    svc = one(ui, "Service")
    assert svc["spec"]["type"] == "ClusterIP" and "nodePort" not in str(svc)
    role = one(ui, "ClusterRole")
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert "secrets" not in rule["resources"]
    ctr = one(ui, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--role=ui" in ctr["args"] and ctr["securityContext"]["readOnlyRootFilesystem"] is True
    pod_sc = one(ui, "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == 65532
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", *ctr["args"], "--check-config"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_token_secret_is_mounted_as_a_file():
    docs = objects({"ui": {"enabled": True, "readonlyTokenSecret": "ui-token"}})
    spec = one(_ui_objects(docs), "Deployment")["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    assert "--ui-readonly-token-file=/etc/hami-ui/token" in ctr["args"]
    assert spec["volumes"][0]["secret"]["secretName"] == "ui-token"
    assert not any("token" in str(a) and "file" not in str(a) for a in ctr["args"])  # never inline
    assert find(docs, "Secret", "ui-token") == []  # the user's Secret, not rendered by the chart


def test_closed_by_default_and_opened_only_as_asked():
    """Issue 39 §6: no anonymous flag and an open port by default (the UI itself answers only its pod's
    loopback without a token); ui.allowAnonymous, ui.allowedHosts and ui.from as given, and the args
    still pass `hami --check-config`."""
    ctr = one(_ui_objects(objects({"ui": {"enabled": True}})), "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    assert not any(a.startswith(("--ui-allow-anonymous", "--ui-allowed-hosts")) for a in ctr["args"])
    sources = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = objects({"ui": {"enabled": True, "allowAnonymous": True, "from": sources,
                           "allowedHosts": ["hami-ui.hami-system.svc", "ui.example.com"]}})
    ui = _ui_objects(docs)
    ctr = one(ui, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--ui-allow-anonymous=true" in ctr["args"]
    assert "--ui-allowed-hosts=hami-ui.hami-system.svc,ui.example.com" in ctr["args"]
    assert one(ui, "NetworkPolicy")["spec"]["ingress"][0]["from"] == sources
    res = subprocess.run([sys.executable, "-m", "hami.cli.main", *ctr["args"], "--check-config"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
