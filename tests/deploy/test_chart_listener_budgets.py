"""The chart's listener budgets (scheduler.listener) reach the scheduler as its flags: the defaults render
the binary's own budgets and trust loopback only; trustedSources adds CIDRs after loopback (kube-scheduler
calls the extender there, so the chart never drops it); empty values drop their flag; the rendered command
line parses into the settings hami.httpaccept reads; the schema refuses a count below 1 and a non-list of
sources, and a CIDR typo stops the scheduler's start naming the flag."""

from __future__ import annotations

import pytest

from hami.cli.main import role_parser
from hami.config import build_config
from hami.config.settings import ConfigError
from tests.deploy.chart import container, objects, one, rendered


def _args(docs: list[dict]) -> list[str]:
    return container(docs, "Deployment", "hami-scheduler")["command"][1:]


def _listen(args: list[str], tmp_path):
    """The settings the scheduler starts with from the rendered command line (its device config written
    where the ConfigMap would be mounted)."""
    device = one(rendered("default"), "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    (tmp_path / "device-config.yaml").write_text(device)
    args = [a.replace("=/device-config.yaml", f"={tmp_path}/device-config.yaml") for a in args]
    parsed = role_parser().parse_args(args)
    flags = {k: v for k, v in vars(parsed).items() if k != "role"}
    return build_config({**flags, "roles": (parsed.role,)}, env={}).listen


def _listener(**kw) -> dict:
    return {"scheduler": {"listener": kw}}


def test_default_budgets_render_the_binarys_defaults_and_trust_loopback_only(tmp_path):
    args = _args(rendered("default"))
    assert "--http-max-connections=256" in args and "--http-max-trusted-connections=2048" in args
    assert not [a for a in args if a.startswith("--http-trusted-sources")]
    listen = _listen(args, tmp_path)
    assert (listen.max_connections, listen.trusted_connections) == (256, 2048)
    assert listen.trusted_sources == ("127.0.0.0/8", "::1/128")


def test_set_budgets_and_sources_render_and_parse_with_loopback_kept_first(tmp_path):
    args = _args(objects(_listener(maxConnections=64, maxTrustedConnections=4096,
                                   trustedSources=["10.96.0.0/12", "::1/128", "fd00::/8"])))
    assert "--http-max-connections=64" in args and "--http-max-trusted-connections=4096" in args
    assert "--http-trusted-sources=127.0.0.0/8,::1/128,10.96.0.0/12,fd00::/8" in args
    listen = _listen(args, tmp_path)
    assert (listen.max_connections, listen.trusted_connections) == (64, 4096)
    assert listen.trusted_sources == ("127.0.0.0/8", "::1/128", "10.96.0.0/12", "fd00::/8")


def test_empty_values_drop_their_flags(tmp_path):
    args = _args(objects(_listener(maxConnections="", maxTrustedConnections="", trustedSources=[])))
    assert not [a for a in args if a.startswith(("--http-max-connections", "--http-max-trusted-connections",
                                                 "--http-trusted-sources"))]
    listen = _listen(args, tmp_path)
    assert (listen.max_connections, listen.trusted_connections) == (256, 2048)


@pytest.mark.parametrize("listener, key", [
    ({"maxConnections": 0}, "maxConnections"),
    ({"maxTrustedConnections": -1}, "maxTrustedConnections"),
    ({"maxConnections": "many"}, "maxConnections"),
    ({"trustedSources": "10.0.0.0/8"}, "trustedSources"),
])
def test_the_schema_refuses_a_bad_budget_naming_it(listener, key):
    import helm_python as helm

    with pytest.raises(helm.HelmError) as err:
        objects(_listener(**listener))
    assert key in str(err.value)


def test_a_cidr_typo_renders_but_stops_the_start_naming_the_flag(tmp_path):
    args = _args(objects(_listener(trustedSources=["10.0.0.0/33"])))
    with pytest.raises(ConfigError) as err:
        _listen(args, tmp_path)
    assert "--http-trusted-sources" in str(err.value) and "10.0.0.0/33" in str(err.value)
