"""Configuration: precedence (defaults, files, environment, flags set), HAMi device config and
per-node config.json parsing, errors that name key, file, value and expectation, warnings for
unknown keys, Go durations, and the CLI flag spellings feeding the same object."""

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.cli.flags import add_role_flags
from hami.config import ConfigError, build_config, parse_duration


def _flags(argv):
    parser = argparse.ArgumentParser()
    add_role_flags(parser)
    return {k: v for k, v in vars(parser.parse_args(argv)).items() if k != "role"}


def test_defaults_match_hami():
    cfg = build_config({}, env={})
    assert cfg.scheduler.http_bind == "127.0.0.1:8080"
    assert cfg.scheduler.node_lock_timeout == 300.0
    assert cfg.scheduler.node_scheduler_policy == "binpack"
    assert cfg.scheduler.gpu_scheduler_policy == "spread"
    assert cfg.scheduler.metrics_bind_address == ":9395"
    assert cfg.monitor.metrics_bind_address == ":9394"
    # None: each role takes its lanes' budgets from hami.kube.lanes (tests/kube/test_lanes.py)
    assert (cfg.kube.qps, cfg.kube.burst, cfg.kube.timeout) == (None, None, None)
    assert cfg.nvidia.device_split_count == 10
    assert cfg.nvidia.default_gpu_num == 1


@pytest.mark.parametrize(
    "argv",
    [["--http_bind", "127.0.0.2:443"], ["--http-bind", "127.0.0.2:443"], ["--http_bind=127.0.0.2:443"]],
    ids=["underscore", "dash", "equals"],
)
def test_both_flag_spellings_are_accepted(argv):
    assert build_config(_flags(argv), env={}).scheduler.http_bind == "127.0.0.2:443"


TLS = ["--cert_file", "/tls/tls.crt", "--key_file", "/tls/tls.key"]


@pytest.mark.parametrize(("argv", "flag", "words"), [
    (["--http_bind", "0.0.0.0:443"], "--http_bind", "a loopback address"),
    (["--http_bind", ":443", *TLS], "--http_bind", "--client-ca-file"),
    (["--http_bind", "10.0.0.5:443", "--client-ca-file", "/tls/ca.crt"], "--client-ca-file", "--cert_file"),
    (["--webhook-bind-address", "0.0.0.0:443"], "--webhook-bind-address", "TLS only"),
    (["--debug-bind-address", "0.0.0.0:6060"], "--debug-bind-address", "loopback"),
], ids=["extender-wildcard", "extender-tls-without-ca", "ca-without-cert", "webhook-plain", "pprof-off-pod"])
def test_listeners_reachable_from_other_pods_need_mtls_or_tls(argv, flag, words):
    with pytest.raises(ConfigError) as err:
        build_config(_flags(argv), env={})
    assert err.value.key == flag and words in str(err.value)


def test_remote_extender_with_mtls_and_webhook_with_tls_are_accepted():
    cfg = build_config(_flags(["--http_bind", "0.0.0.0:8443", "--client-ca-file", "/tls/ca.crt",
                               "--webhook-bind-address", "0.0.0.0:443", *TLS]), env={})
    sc = cfg.scheduler
    assert (sc.http_bind, sc.client_ca_file, sc.webhook_bind_address) == ("0.0.0.0:8443", "/tls/ca.crt", "0.0.0.0:443")


@pytest.mark.parametrize(("argv", "flag"), [
    (["--http_bind", "8080"], "--http_bind"),
    (["--scheduler-metrics-bind-address", "h:x"], "--scheduler-metrics-bind-address"),
    (["--monitor-metrics-bind-address", ":99999"], "--monitor-metrics-bind-address"),
    (["--debug-bind-address", "localhost"], "--debug-bind-address"),
    (["--sim-listen", "127.0.0.1:-1"], "--sim-listen"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_listener_addresses_are_refused_naming_the_flag(argv, flag):
    with pytest.raises(ConfigError) as err:
        build_config(_flags(argv), env={})
    assert err.value.key.startswith(flag) and err.value.value == argv[1] and "HOST:PORT" in str(err.value)


def test_empty_metrics_listener_means_off_and_is_accepted():
    assert build_config(_flags(["--scheduler-metrics-bind-address", ""]), env={}).scheduler.metrics_bind_address == ""


@pytest.mark.parametrize("argv", [["-v=4"], ["--v=4"], ["-v", "4"], ["--debug"]], ids=str)
def test_verbosity_flags_and_debug_imply_level_4(argv):
    assert build_config(_flags(argv), env={}).log.verbosity == 4


def test_go_style_boolean_flags():
    assert build_config(_flags(["--leader-elect"]), env={}).scheduler.leader_elect is True
    assert build_config(_flags(["--feedback=false"]), env={}).monitor.feedback is False


def test_precedence_defaults_file_env_flags(tmp_path):
    f = tmp_path / "device-config.yaml"
    f.write_text("nvidia:\n  deviceSplitCount: 4\n  defaultMemory: 1000\n")
    env = {"HAMI_NODELOCK_EXPIRE": "2m", "NODE_NAME": "gpu-1", "KUBECONFIG": "/tmp/kc"}
    cfg = build_config(_flags(["--device-config-file", str(f), "--node-lock-timeout", "90s"]), env=env)
    assert cfg.nvidia.device_split_count == 4  # file over default
    assert cfg.nvidia.default_memory == 1000
    assert cfg.scheduler.node_lock_timeout == 90.0  # flag over env
    assert cfg.agent.node_name == cfg.monitor.node_name == "gpu-1"  # env
    assert cfg.kube.kubeconfig == "/tmp/kc"
    assert build_config({}, env=env).scheduler.node_lock_timeout == 120.0  # env over default
    assert build_config({}, env={"HAMI_RESYNC_INTERVAL": "10m"}).monitor.cache_grace == 600.0
    flag_cfg = build_config(_flags(["--kubeconfig", "/other"]), env=env)
    assert flag_cfg.kube.kubeconfig == "/other"


def test_metrics_bind_address_flag_feeds_roles_and_role_specific_flag_wins():
    cfg = build_config(_flags(["--metrics-bind-address", ":9000", "--monitor-metrics-bind-address", ":9001"]),
                       env={})
    assert cfg.scheduler.metrics_bind_address == ":9000"
    assert cfg.monitor.metrics_bind_address == ":9001"


def test_wrong_type_in_device_config_names_key_file_value_and_expectation(tmp_path):
    f = tmp_path / "dc.yaml"
    f.write_text("nvidia:\n  deviceSplitCount: ten\n")
    with pytest.raises(ConfigError) as err:
        build_config({"device_config_file": str(f)}, env={})
    msg = str(err.value)
    assert "nvidia.deviceSplitCount" in msg and str(f) in msg and "'ten'" in msg and "integer" in msg


def test_out_of_range_value_is_an_error(tmp_path):
    f = tmp_path / "dc.yaml"
    f.write_text("nvidia:\n  gpuCorePolicy: sometimes\n")
    with pytest.raises(ConfigError, match="gpuCorePolicy.*one of default, force, disable"):
        build_config({"device_config_file": str(f)}, env={})


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    f = tmp_path / "dc.yaml"
    f.write_text("nvidia:\n  deviceSplitCount: [1,\n")
    with pytest.raises(ConfigError) as err:
        build_config({"device_config_file": str(f)}, env={})
    assert str(f) in str(err.value) and "line" in str(err.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="readable file"):
        build_config({"device_config_file": str(tmp_path / "nope.yaml")}, env={})


def test_unknown_key_warns_once_naming_key_and_file(tmp_path):
    f = tmp_path / "dc.yaml"
    f.write_text("nvidia:\n  deviceSplitCont: 3\n  resourceCountName: nvidia.com/gpu\n")
    warnings = []
    build_config({"device_config_file": str(f)}, env={}, warn=warnings.append)
    assert len(warnings) == 1
    assert "deviceSplitCont" in warnings[0] and str(f) in warnings[0]
    assert "(did you mean deviceSplitCount?)" in warnings[0]


def test_unknown_node_config_key_names_the_nearest_known_key_or_none(tmp_path):
    f = tmp_path / "nodes.json"
    f.write_text('{"nodeconfig": [{"name": "n1", "devicesplitcont": 4, "zzz": 1}], "nodeconfg": []}')
    warnings = []
    build_config({"node_config_file": str(f)}, env={}, warn=warnings.append)
    assert len(warnings) == 3
    assert "(did you mean devicesplitcount?)" in warnings[1] and "zzz" in warnings[2]
    assert "did you mean" not in warnings[2]
    assert "nodeconfg" in warnings[0] and "(did you mean nodeconfig?)" in warnings[0]


def test_shipped_examples_parse_cleanly():
    warnings = []
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "config"
    dc, nc = root / "device-config.yaml", root / "node-config.json"
    if not dc.exists() or not nc.exists():
        pytest.fail("config/device-config.yaml and config/node-config.json must ship as examples")
    cfg = build_config({"device_config_file": str(dc), "node_config_file": str(nc)}, env={},
                       warn=warnings.append)
    assert warnings == []
    assert cfg.node_configs, "the example node config lists at least one node"


def test_node_config_parses_and_validates(tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"nodeconfig":[{"name":"inference-pool-*","devicesplitcount":4,'
                 '"devicememoryscaling":1.5,"filterdevices":{"uuid":["GPU-x"],"index":[3]}}]}')
    cfg = build_config({"node_config_file": str(f)}, env={})
    (entry,) = cfg.node_configs
    assert entry.name == "inference-pool-*" and entry.devicesplitcount == 4
    assert entry.devicememoryscaling == 1.5
    assert entry.filterdevices.uuid == ("GPU-x",) and entry.filterdevices.index == (3,)
    f.write_text('{"nodeconfig":[{"name":"a","devicesplitcount":"4"}]}')
    with pytest.raises(ConfigError, match=r"nodeconfig\[0\].devicesplitcount"):
        build_config({"node_config_file": str(f)}, env={})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("28s", 28.0), ("1h30m", 5400.0), ("250ms", 0.25), ("30", 30.0), ("1.5s", 1.5)],
    ids=str,
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@given(st.text(max_size=20))
def test_parse_duration_raises_only_config_error(text):
    try:
        value = parse_duration(text)
    except ConfigError:
        return
    assert value >= 0


def test_bad_duration_flag_names_flag(capsys):
    with pytest.raises(SystemExit) as exc:  # parsed as a duration with the command line
        _flags(["--node-lock-timeout", "five minutes"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --node-lock-timeout/--node_lock_timeout: invalid duration 'five minutes'" in err
    with pytest.raises(ConfigError, match="--node-lock-timeout"):  # a caller's text goes through the same rule
        build_config({"node_lock_timeout": "five minutes"}, env={})


@pytest.mark.parametrize(("argv", "dest", "seconds"), [
    (["--kube-timeout", "1m30s"], "kube_timeout", 90.0),
    (["--sim-read-latency", "250ms"], "sim_read_latency", 0.25),
    (["--gpu-preemption-hold-timeout", "2"], "gpu_preemption_hold_timeout", 2.0),
])
def test_duration_flags_are_parsed_as_go_durations_by_the_parser(argv, dest, seconds):
    assert _flags(argv)[dest] == pytest.approx(seconds)


def test_embedded_defaults_point_roles_at_the_embedded_cluster_on_loopback(tmp_path):
    cfg = build_config(_flags(["--embedded"]) | {"sim_state_dir": str(tmp_path)}, env={"KUBECONFIG": "/real"})
    # never a real cluster's; the scheduler's own identity, not the people's kubeconfig
    assert cfg.kube.kubeconfig == str(tmp_path / "scheduler.kubeconfig")
    assert cfg.monitor.gpu_backend == "fake" and cfg.monitor.cache_dir.startswith(str(tmp_path))
    assert cfg.scheduler.metrics_bind_address == "127.0.0.1:9395"
    assert cfg.monitor.metrics_bind_address == "127.0.0.1:9394"
    mine = build_config(_flags(["--embedded", "--metrics-bind-address", ":9000"]) | {"sim_state_dir": str(tmp_path)},
                        env={})
    assert mine.scheduler.metrics_bind_address == ":9000"  # what the user set wins


def test_report_node_capacity_from_flag_or_hamis_environment_variable():
    from hami.config import ConfigError, build_config

    assert build_config({}, env={}).agent.report_node_capacity is False
    assert build_config({}, env={"REPORT_NODE_CAPACITY": "true"}).agent.report_node_capacity is True
    # the flag wins over the environment, as every flag does
    assert build_config({"report_node_capacity": False}, env={"REPORT_NODE_CAPACITY": "1"}).agent.report_node_capacity \
        is False
    with pytest.raises(ConfigError, match="REPORT_NODE_CAPACITY"):
        build_config({}, env={"REPORT_NODE_CAPACITY": "yes please"})


def test_sim_node_groups_are_repeatable_flags():
    from hami.cli.main import role_parser
    from hami.config import build_config

    args = role_parser().parse_args(["--role", "sim", "--sim-node-group", "a:0:2:1xT4:15360",
                                      "--sim-node-group=b:1:1:2xT4:15360", "--sim-scale-down-unneeded", "5s"])
    cfg = build_config({k: v for k, v in vars(args).items() if k != "role"}, env={})
    assert cfg.sim.node_groups == ("a:0:2:1xT4:15360", "b:1:1:2xT4:15360")
    assert cfg.sim.scale_down_unneeded == 5.0


def test_listener_trust_flags():
    cfg = build_config(_flags(["--http-trusted-sources", "127.0.0.0/8, 10.2.0.0/16",
                               "--http-max-trusted-connections", "4096"]), env={})
    assert cfg.listen.trusted_sources == ("127.0.0.0/8", "10.2.0.0/16")
    assert cfg.listen.trusted_connections == 4096
    assert build_config({}, env={}).listen.trusted_sources == ("127.0.0.0/8", "::1/128")  # loopback
    with pytest.raises(ConfigError, match=r"--http-trusted-sources.*'10\.2\.0\.0/33'"):
        build_config(_flags(["--http-trusted-sources", "10.2.0.0/33"]), env={})


def test_sim_percentage_of_nodes_to_score_reaches_the_embedded_kube_scheduler_and_refuses_out_of_range(capsys):
    """--sim-percentage-of-nodes-to-score is the embedded kube-scheduler's percentageOfNodesToScore, in the
    configuration it builds as the chart does (default 100, the chart's); outside 0-100 it is refused by name."""
    from hami.kubesched.schedconfig import profile
    from hami.sim.cluster import kube_scheduler_configuration

    def percentage(argv) -> int:
        conf = kube_scheduler_configuration(build_config(_flags(argv), env={}))
        return profile(conf, "hami-scheduler").percentage_of_nodes_to_score

    assert build_config({}, env={}).sim.percentage_of_nodes_to_score == 100
    assert percentage([]) == 100
    assert percentage(["--sim-percentage-of-nodes-to-score", "0"]) == 0
    assert percentage(["--sim-percentage-of-nodes-to-score", "30"]) == 30
    with pytest.raises(ConfigError, match=r"--sim-percentage-of-nodes-to-score.*101"):
        build_config(_flags(["--sim-percentage-of-nodes-to-score", "101"]), env={})
    for bad in ("-1", "half"):
        with pytest.raises(SystemExit):
            _flags(["--sim-percentage-of-nodes-to-score", bad])
        assert "--sim-percentage-of-nodes-to-score" in capsys.readouterr().err


def test_burst_spread_flag_sets_the_width_and_refuses_a_negative_or_infinite_value(capsys):
    assert build_config({}, env={}).scheduler.burst_spread == 2.0
    assert build_config(_flags(["--burst-spread", "0.5"]), env={}).scheduler.burst_spread == 0.5
    assert build_config(_flags(["--burst-spread", "0"]), env={}).scheduler.burst_spread == 0.0
    for bad in ("-1", "inf", "nan", "wide"):
        with pytest.raises(SystemExit):
            _flags(["--burst-spread", bad])
        assert "--burst-spread" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--burst-spread"):  # a value that bypassed the parser
        build_config({"burst_spread": -1.0}, env={})
