"""The chart refuses to render the placeholder image name nobody publishes, unless told it was pushed.

Covers: the default values fail the render naming docker.io/hami/hami, the value that names it and
what to do (scripts/build-image, image.registry/repository/tag, image.pushed); image.pushed=true
renders it; a real registry renders without image.pushed; a component still on the placeholder while
the others moved is named; the monitor's image is not checked when it is off.
"""

from __future__ import annotations

import pytest

from tests.deploy.chart import CHART, NAMESPACE, RELEASE, find


def _render(values: dict) -> dict[str, str]:
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE)


def _images(out: dict[str, str]) -> set[str]:
    import yaml

    docs = [d for name, text in out.items() if name.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    return {c["image"] for d in find(docs, "Deployment") + find(docs, "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"] if c["name"] != "kube-scheduler"}


def test_default_values_fail_naming_the_placeholder_and_the_way_out():
    import helm_python as helm

    with pytest.raises(helm.HelmError) as err:
        _render({})
    text = str(err.value)
    assert "image docker.io/hami/hami:0.1.0 (scheduler.extender.image) is the chart's placeholder" in text
    for hint in ("scripts/build-image", "image.registry, image.repository and image.tag", "image.pushed=true"):
        assert hint in text


def test_pushed_or_a_real_registry_renders():
    assert _images(_render({"image": {"pushed": True}})) == {"docker.io/hami/hami:0.1.0"}
    mine = {"image": {"registry": "registry.example.com", "repository": "ml/hami", "tag": "0.1.0"}}
    assert _images(_render(mine)) == {"registry.example.com/ml/hami:0.1.0"}
    assert _images(_render({"global": {"imageRegistry": "harbor.local"}})) == {"harbor.local/hami/hami:0.1.0"}


def test_a_component_left_on_the_placeholder_is_named():
    import helm_python as helm

    values = {"scheduler": {"extender": {"image": {"registry": "registry.example.com"}}},
              "devicePlugin": {"image": {"registry": "registry.example.com"}}}
    with pytest.raises(helm.HelmError, match=r"\(devicePlugin\.monitor\.image\) is the chart's placeholder"):
        _render(values)
    values["devicePlugin"]["monitor"] = {"enabled": False}
    assert _images(_render(values)) == {"registry.example.com/hami/hami:0.1.0"}
