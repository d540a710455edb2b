"""The chart README tells the truth about the objects: every `<release>-NAME` it names is an object the
chart renders (release `hami`) under some values (defaults, prod, DRA, the UI, cert-manager, the
Prometheus Operator, the Helm-generated TLS Secret), and every alert the PrometheusRule ships is named in it."""

from __future__ import annotations

import re

from tests.deploy.chart import ROOT, objects, one, rendered

README = ROOT / "deploy" / "helm" / "hami" / "README.md"


def _names() -> set[str]:
    names: set[str] = set()
    for docs in (rendered("default"), rendered("prod"),
                 objects({"dra": {"enabled": True}, "ui": {"enabled": True}}),
                 objects({"scheduler": {"certManager": {"enabled": True}}}),
                 objects({"scheduler": {"tls": {"generator": "helm"}}})):  # the TLS Secret, rendered
        names |= {d["metadata"]["name"] for d in docs if d}
    return names


def test_every_object_the_readme_names_is_rendered():
    text = README.read_text()
    named = set(re.findall(r"<release>-([a-z0-9][a-z0-9-]*[a-z0-9])", text))
    assert len(named) >= 8
    missing = sorted(f"<release>-{n}" for n in named if f"hami-{n}" not in _names())
    assert not missing, f"named in the chart README, not rendered: {missing}"


def test_every_shipped_alert_is_in_the_readme():
    alerts = [r["alert"] for g in one(rendered("prod"), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    text = README.read_text()
    assert len(alerts) >= 7 and [a for a in alerts if f"`{a}`" not in text] == []
    assert f"{len(alerts)} alerts" in text
