"""The flag table (hami.config.flagtable) is the only place a flag is named: the tool subcommands' parsers
(`hami doctor`, `tune`, `whatif`, `cache`, `kubectl hami`) are generated from its rows like the roles', no
module but the generator (hami.cli.flags) declares an argparse option, and every spelling and default the
subcommands had still parses the same."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hami.cli.main import subcommand_parser
from hami.config.flagtable import COMMANDS, FLAGS, command_flags
from hami.kubectlhami.cli import build_parser as kubectl_parser

HAMI = Path(__file__).resolve().parents[2] / "hami"
GENERATOR = HAMI / "cli" / "flags.py"


def _add_argument_calls(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if "_pb" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "add_argument":
                found.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno}")
    return found


def test_no_argparse_option_is_declared_outside_the_tables_generator():
    outside = [c for c in _add_argument_calls(HAMI) if not c.startswith("hami/cli/flags.py:")]
    assert not outside, "add_argument outside hami/cli/flags.py (declare the flag in hami/config/flagtable.py " \
                        "and add it with add_command_flags): " + ", ".join(outside)
    assert _add_argument_calls(GENERATOR.parent), "the check must see the generator's own calls"


def test_the_check_sees_an_add_argument_anywhere(tmp_path):
    pkg = tmp_path / "hami"
    pkg.mkdir()
    (pkg / "tool.py").write_text("def configure(p):\n    p.add_argument('--x')\n")
    assert _add_argument_calls(pkg) == ["hami/tool.py:2"]


def test_every_row_names_known_commands_and_every_command_has_rows():
    assert {c for f in FLAGS for c in f.commands} == set(COMMANDS)
    for command in COMMANDS:
        spellings = [s for f in command_flags(command) for s in f.spellings]
        assert len(spellings) == len(set(spellings)), f"{command}: a spelling twice"
    with pytest.raises(KeyError):
        command_flags("doctor pods")


def _doctor(*argv: str):
    return subcommand_parser("doctor").parse_args(list(argv))


def test_doctor_keeps_its_spellings_and_defaults():
    args = _doctor("pod", "default/train-1")
    assert (args.pod, args.scheduler_name, args.scheduler_url, args.hami_namespace, args.scheduler_namespace,
            args.lease_name, args.node_lock_timeout, args.json, args.whatif, args.node_scheduler_policy,
            args.gpu_scheduler_policy) == ("default/train-1", "hami-scheduler", "", "", "", "hami-scheduler", "5m",
                                           False, True, "binpack", "spread")
    assert not hasattr(args, "kubeconfig")  # the role rows stay unset unless given, as for a role run
    args = _doctor("pod", "ns/p", "--kubeconfig", "k.yaml", "--kube-timeout", "1m30s", "-v=4", "--json",
                   "--no-whatif", "--scheduler_name", "s", "--node-lock-timeout", "30s",
                   "--node-scheduler-policy", "spread")
    assert (args.kubeconfig, args.kube_timeout, args.v, args.json, args.whatif, args.scheduler_name,
            args.node_lock_timeout, args.node_scheduler_policy) == ("k.yaml", 90.0, 4, True, False, "s", "30s",
                                                                    "spread")
    nodes = _doctor("nodes", "--json", "--hami-namespace", "hami-system")
    assert (nodes.json, nodes.hami_namespace, nodes.lease_name) == (True, "hami-system", "hami-scheduler")
    with pytest.raises(SystemExit):
        _doctor("pod")  # the pod is required


def test_tune_keeps_its_spellings_and_defaults():
    parser = subcommand_parser("tune")
    args = parser.parse_args([])
    assert (args.metrics_url, args.prometheus_url, args.window, args.samples, args.interval,
            args.device_memory_scaling, args.device_split_count, args.json, args.whatif_scenario) == \
        ([], "", "7d", 1, 10.0, 1.0, 10, False, "")
    args = parser.parse_args(["--metrics-url", "http://a/metrics", "--metrics-url", "http://b/metrics",
                              "--samples", "3", "--interval", "0.5", "--device-memory-scaling", "1.5",
                              "--device-split-count", "4", "--whatif-scenario", "plan.yaml", "--json"])
    assert (args.metrics_url, args.samples, args.interval, args.device_memory_scaling, args.device_split_count,
            args.whatif_scenario, args.json) == (["http://a/metrics", "http://b/metrics"], 3, 0.5, 1.5, 4,
                                                 "plan.yaml", True)
    assert parser.parse_args([]).metrics_url == [], "a repeatable option's default is not shared between parses"


def test_whatif_keeps_its_spellings_defaults_and_choices():
    from hami.whatif.scenario import NODE_POLICIES

    parser = subcommand_parser("whatif")
    args = parser.parse_args([])
    assert (args.command, args.snapshot_file, args.output, args.scenario, args.format, args.html, args.suggest,
            args.scale_up, args.node_scheduler_policy, args.gpu_scheduler_policy, args.scheduler_name, args.timing,
            args.timing_limit, args.timing_creators, args.allocate_delay) == \
        ("run", "", "", "", "text", "", False, False, "binpack", "spread", "hami-scheduler", False, 120.0, 1, 0.0)
    args = parser.parse_args(["snapshot", "-o", "snap.json", "--kubeconfig", "k"])
    assert (args.command, args.output, args.kubeconfig) == ("snapshot", "snap.json", "k")
    args = parser.parse_args(["--snapshot", "s.json", "--format", "json", "--timing", "--timing-limit", "30",
                              "--timing-creators", "8", "--allocate-delay", "0.01", "--scale-up", "--suggest"])
    assert (args.snapshot_file, args.format, args.timing, args.timing_limit, args.timing_creators,
            args.allocate_delay, args.scale_up, args.suggest) == ("s.json", "json", True, 30.0, 8, 0.01, True, True)
    policy = next(f for f in command_flags("whatif") if f.dest == "node_scheduler_policy")
    assert policy.choices == NODE_POLICIES
    for bad in (["--format", "yaml"], ["--node-scheduler-policy", "pack"], ["replay"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_cache_dump_keeps_its_argument_and_switch():
    args = subcommand_parser("cache").parse_args(["dump", "/x/a.cache", "--json"])
    assert (args.cache_command, args.file, args.json) == ("dump", "/x/a.cache", True)


def test_kubectl_hami_flags_before_and_after_the_subcommand():
    p = kubectl_parser()
    args = p.parse_args(["--context", "prod", "top", "pods", "-A", "-o", "json", "-n", "ml"])
    assert (args.context, args.what, args.all_namespaces, args.output, args.namespace, args.kubeconfig,
            args.metrics_url) == ("prod", "pods", True, "json", "ml", None, None)
    args = p.parse_args(["top", "gpus", "--metrics-url", "http://m/metrics"])
    assert (args.output, args.metrics_url, args.context) == ("table", ["http://m/metrics"], None)


def _help(argv: list[str], capsys) -> str:
    name, rest = argv[0], argv[1:]
    with pytest.raises(SystemExit):
        (kubectl_parser() if name == "kubectl" else subcommand_parser(name)).parse_args([*rest, "--help"])
    return capsys.readouterr().out


def test_every_subcommands_help_names_its_rows(capsys):
    for command in COMMANDS:
        words = command.split()
        text = _help(["kubectl", *words[2:]] if words[0] == "kubectl" else words, capsys)
        for flag in command_flags(command):
            shown = (flag.metavar or flag.names) if flag.positional else flag.spellings[0]
            if flag.choices and flag.positional:
                shown = "{" + ",".join(flag.choices) + "}"
            assert shown in text, (command, shown)


def test_the_doctor_names_the_label_it_looks_for():
    from hami.doctor.gather import SCHEDULER_LABEL

    row = next(f for f in command_flags("doctor pod") if f.dest == "hami_namespace")
    assert SCHEDULER_LABEL in row.help
