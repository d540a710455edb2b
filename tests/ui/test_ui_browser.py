"""The web UI in headless Chromium, against `hami --role all --embedded --demo-workload`.

Covers: each page (cluster, node, a running pod, a pending pod with the doctor's diagnosis, quotas,
what-if after an on-demand run) loads in a real browser with its script; the cluster page's key figures
(GPU nodes, GPUs, pending GPU pods) equal what the API server says at that moment; a pod name holding
`<script>` in the URL is shown escaped and never runs; screenshots of every page are saved under the
test's output (and copied to $HAMI_UI_SCREENSHOTS when set: docs/ui/ was made that way).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request

import pytest

from tests.e2e.embedded import wait_until
from tests.tools import chromium, find_kubectl, stop_process

pytestmark = pytest.mark.slow


def _browser(tmp_path, url: str, shot: str | None = None) -> str:
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
            "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1400"]
    args += [f"--screenshot={shot}"] if shot else ["--dump-dom"]
    proc = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _text(dom: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_every_page_in_headless_chromium(tmp_path):
    state = tmp_path / "state"
    ports_file = tmp_path / "ports.json"  # every listener on port 0: the process says which it bound
    cmd = [sys.executable, "-m", "hami.cli.main", "--role", "all", "--embedded", "--demo-workload",
           "--sim-state-dir", str(state), "--sim-listen", "127.0.0.1:0", "--http_bind", "127.0.0.1:0",
           "--scheduler-metrics-bind-address", "127.0.0.1:0", "--monitor-metrics-bind-address", "127.0.0.1:0",
           "--ui-bind-address", "127.0.0.1:0", "--ports-file", str(ports_file)]
    log = open(tmp_path / "hami.log", "w")
    # HOME: its ~/.hami pointers stay in tmp_path, never over the user's embedded default
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "HOME": str(tmp_path)})
    env = {**os.environ, "KUBECONFIG": str(state / "kubeconfig")}

    def kubectl_json(*args):
        out = subprocess.run([find_kubectl(), *args, "-o", "json"], env=env, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        return json.loads(out)["items"]
    try:
        wait_until(lambda: proc.poll() is None and ports_file.exists(), 180, what="the ports file")
        base = f"http://{json.loads(ports_file.read_text())['ui']}"
        wait_until(lambda: urllib.request.urlopen(base + "/healthz", timeout=2).status == 200, 90, what="the UI")
        pods = wait_until(lambda: [p for p in kubectl_json("get", "pods")
                                   if p["metadata"]["name"].startswith("demo-huge")]
                          and kubectl_json("get", "pods"), 90, what="the demo's never-fitting pod")
        running = wait_until(lambda: [p for p in kubectl_json("get", "pods") if p["status"].get("phase") == "Running"],
                             60, what="a running demo pod")
        page = urllib.request.urlopen(base + "/whatif", timeout=10).read().decode()
        token = re.search(r"name='form_token' value='([0-9a-f]+)'", page).group(1)  # the form's own token
        req = urllib.request.Request(base + "/whatif", data=f"form_token={token}".encode(), method="POST")
        urllib.request.urlopen(req, timeout=10)
        wait_until(lambda: "gained" in urllib.request.urlopen(base + "/whatif", timeout=5).read().decode(), 60,
                   what="the what-if result")

        pages = {"cluster": "/", "node": "/node/gpu-node-1",
                 "pod-running": f"/pod/default/{running[0]['metadata']['name']}",
                 "pod-pending": "/pod/default/" + next(p["metadata"]["name"] for p in pods
                                                       if p["metadata"]["name"].startswith("demo-huge")),
                 "quotas": "/quotas", "whatif": "/whatif"}
        # Key figures against the API server, read right before the page.
        nodes = kubectl_json("get", "nodes")
        all_pods = kubectl_json("get", "pods")
        pending = [p for p in all_pods if not p["spec"].get("nodeName") and p["status"].get("phase") == "Pending"]
        cluster = _text(_browser(tmp_path, base + "/"))
        assert f"GPU nodes {len(nodes)} " in cluster
        assert f"GPUs {2 * len(nodes)} " in cluster
        shown = int(re.search(r"pending GPU pods (\d+)", cluster).group(1))
        assert abs(shown - len(pending)) <= 1  # the demo keeps submitting: one may arrive between the reads
        dom = _text(_browser(tmp_path, base + pages["pod-pending"]))
        assert "hami doctor pod" in dom and "never-fits" in dom
        assert "CUDA" not in dom  # no env value on any page
        node_dom = _text(_browser(tmp_path, base + pages["node"]))
        assert "GPU-" in node_dom and "Node lock and handshake" in node_dom
        hostile = _browser(tmp_path, base + "/pod/default/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile and "<script>alert" not in hostile

        out_dir = os.environ.get("HAMI_UI_SCREENSHOTS")
        for name, path in pages.items():
            shot = tmp_path / f"{name}.png"
            _browser(tmp_path, base + path, str(shot))
            assert shot.stat().st_size > 10_000, name  # a rendered page, not a blank one
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                shutil.copy(shot, os.path.join(out_dir, f"{name}.png"))
    finally:
        stop_process(proc)
        log.close()
