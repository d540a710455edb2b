"""deploy/image/README.md's "who runs as what" against the chart: what the table says of each node
container's privilege and capabilities is what the default render sets."""

from __future__ import annotations

import re

from tests.deploy.chart import ROOT, rendered

README = ROOT / "deploy" / "image" / "README.md"


def _row(role: str) -> str:
    for line in README.read_text().splitlines():
        if line.startswith(f"| {role} "):
            return line
    raise AssertionError(f"no row for {role}")


def _container(name: str) -> dict:
    for d in rendered("default"):
        if d["kind"] in ("DaemonSet", "Deployment"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                if c["name"] == name:
                    return c["securityContext"]
    raise AssertionError(name)


def test_the_node_containers_row_matches_their_security_context():
    agent, monitor = _container("device-plugin"), _container("vgpu-monitor")
    assert agent["privileged"] is False and agent["capabilities"] == {"drop": ["ALL"]} and agent["runAsUser"] == 0
    row = _row("node-agent")
    assert "**not privileged**" in row and "every capability dropped" in row and "root (uid 0)" in row
    assert monitor["privileged"] is False and monitor["capabilities"] == {"add": ["DAC_OVERRIDE"], "drop": ["ALL"]}
    row = _row("monitor")
    assert "not privileged" in row and "`DAC_OVERRIDE`" in row and "SYS_ADMIN" not in row
    assert set(re.findall(r"`([A-Z_]{4,})`", row)) == set(monitor["capabilities"]["add"])
