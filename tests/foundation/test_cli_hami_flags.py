"""HAMi's historical flags and the per-role help.

Covers: every HAMi alias flag (scheduler --default-mem/--default-cores/--default-gpu/--resource-name
and the other resource names; device plugin --device-split-count/--device-memory-scaling/
--device-cores-scaling/--disable-core-limit) resolves, through --check-config, to exactly the
configuration its device config key gives, says once which key to use instead, wins over the file
as every flag does, and a bad value is refused naming the flag and the key; the '_' spelling works;
HAMi's flags with no equivalent are refused naming what to set; `hami --role R --help` shows R's
flags and the common ones and not the other roles', `hami --help` shows every flag grouped by role,
and every flag of the parser appears in exactly one group.
"""

from __future__ import annotations

import json

import pytest

from hami.cli import main as cli
from hami.cli.aliases import ALIASES, REFUSED
from hami.cli.rolehelp import roles_of
from hami.config.flagtable import ROLE_FLAGS

# one value per alias, different from the default so the mapping is visible
VALUES = {"defaultMemory": 3000, "defaultCores": 30, "defaultGPUNum": 2, "resourceCountName": "example.com/gpu",
          "resourceMemoryName": "example.com/mem", "resourceMemoryPercentageName": "example.com/pct",
          "resourceCoreName": "example.com/cores", "resourcePriorityName": "example.com/prio",
          "deviceSplitCount": 5, "deviceMemoryScaling": 1.5, "deviceCoreScaling": 2.0, "disableCoreLimit": True}


def _check(argv: list[str], capsys) -> tuple[int, dict | None, str]:
    try:
        rc = cli.main(argv + ["--check-config"])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def _resolved(doc: dict) -> dict:
    """What a device config key changes: the nvidia section and the vendor table built from it."""
    return {"nvidia": doc["nvidia"], "vendors": doc["vendors"]}


@pytest.mark.parametrize("flag", list(ALIASES))
def test_each_alias_resolves_like_its_config_key_and_says_which_key(flag, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.delenv("HAMI_DEVICE_CONFIG_FILE", raising=False)
    key, kind = ALIASES[flag]
    value = VALUES[key]
    dev = tmp_path / "device-config.yaml"
    dev.write_text(f"nvidia:\n  {key}: {json.dumps(value)}\n")
    rc, by_key, err = _check(["--role", "scheduler", "--device-config-file", str(dev)], capsys)
    assert rc == 0, err
    argv = [flag] if kind == "bool" else [flag, str(value)]
    rc, by_flag, err = _check(["--role", "scheduler"] + argv, capsys)
    assert rc == 0, err
    assert _resolved(by_flag) == _resolved(by_key)
    rc, default, _ = _check(["--role", "scheduler"], capsys)
    assert _resolved(default) != _resolved(by_flag)  # the alias really changed something
    assert err.count(f"hami: warning: {flag} is HAMi's deprecated flag") == 1
    assert f"set nvidia.{key} in --device-config-file" in err


def test_alias_wins_over_the_file_and_the_underscore_spelling_works(tmp_path, capsys):
    dev = tmp_path / "device-config.yaml"
    dev.write_text("nvidia:\n  deviceSplitCount: 3\n  defaultMemory: 100\n")
    rc, doc, err = _check(["--role", "scheduler", "--device-config-file", str(dev), "--device_split_count", "7"],
                          capsys)
    assert rc == 0, err
    assert doc["nvidia"]["device_split_count"] == 7 and doc["nvidia"]["default_memory"] == 100


@pytest.mark.parametrize("argv,named", [
    (["--device-split-count", "0"], "--device-split-count: nvidia.deviceSplitCount: got 0"),
    (["--default-cores", "150"], "--default-cores: nvidia.defaultCores: got 150"),
    (["--device-memory-scaling", "-1"], "--device-memory-scaling: nvidia.deviceMemoryScaling: got -1.0"),
])
def test_bad_alias_values_name_the_flag_and_the_key(argv, named, capsys):
    rc, _, err = _check(["--role", "scheduler"] + argv, capsys)
    assert rc == 2 and named in err


@pytest.mark.parametrize("flag", list(REFUSED))
def test_flags_with_no_equivalent_are_refused_naming_what_to_set(flag, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--role", "node-agent", flag, "x"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"{flag} is HAMi's flag and has no equivalent here: set {REFUSED[flag]} instead" in err


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


def _options(text: str) -> set[str]:
    import re

    return set(re.findall(r"^  (--?[\w-]+)", text, re.M))


@pytest.mark.parametrize("role", ["scheduler", "node-agent", "monitor", "ui", "dra", "sim"])
def test_role_help_shows_that_roles_flags_and_the_common_ones(role, capsys):
    text = _help(["--role", role, "--help"], capsys)
    shown = _options(text)
    for flag in ROLE_FLAGS:
        roles = roles_of(flag.dest)
        name = flag.spellings[0]
        if not roles or role in roles:
            assert name in shown, (role, name)
        else:
            assert name not in shown, (role, name)
    assert "common flags (every role)" in text
    assert ("--device-split-count" in shown) == (role in ("scheduler", "node-agent"))
    assert _help(["--help", "--role", role], capsys) == text  # --help before --role too


def test_full_help_shows_every_flag_once_grouped_by_role(capsys):
    text = _help(["--help"], capsys)
    for title in ("common flags (every role)", "\nscheduler flags:", "\nnode-agent flags:", "\nmonitor flags:",
                  "\nsim flags (the embedded cluster", "HAMi's flags (deprecated aliases"):
        assert title in text
    shown = _options(text)
    assert {flag.spellings[0] for flag in ROLE_FLAGS} | set(ALIASES) | set(REFUSED) <= shown
    assert text.count("\n  --http_bind") == 1
    # the scheduler's flags sit under the scheduler heading
    assert text.index("\nscheduler flags:") < text.index("  --http_bind") < text.index("\nnode-agent flags:")
    assert _help(["--role", "all", "--help"], capsys) == text


def test_dra_help_shows_what_the_dra_plugin_reads_and_not_the_device_plugins_flags(capsys):
    shown = _options(_help(["--role", "dra", "--help"], capsys))
    for flag in ("--plugin-dir", "--cdi-root", "--dra-mig-partitions", "--node-name", "--device-config-file",
                 "--node-config-file", "--hook-path", "--health-bind-address"):
        assert flag in shown, flag
    for flag in ("--kubelet-socket-dir", "--register-interval", "--http_bind", "--sim-nodes"):
        assert flag not in shown, flag
    node_agent = _options(_help(["--role", "node-agent", "--help"], capsys))
    assert "--plugin-dir" not in node_agent and "--cdi-root" not in node_agent  # the DRA plugin's own


def test_every_embedded_cluster_flag_is_in_the_sim_group():
    sim = [f.dest for f in ROLE_FLAGS if f.dest.startswith("sim_") or f.dest in ("embedded", "demo_workload")]
    assert sim and all(roles_of(dest) == ("sim",) for dest in sim), [(d, roles_of(d)) for d in sim]


def test_the_lane_flags_help_states_each_roles_default_budget():
    """The defaults a --kube-* flag's help names are ROLE_BUDGETS' (hami.kube.lanes), role by role."""
    import re as _re

    from hami.config.flagtable import BY_DEST
    from hami.kube.lanes import ROLE_BUDGETS

    for dest, lane, field in (("kube_qps", 0, "qps"), ("kube_burst", 0, "burst"),
                              ("kube_background_qps", 1, "qps"), ("kube_background_burst", 1, "burst")):
        text = BY_DEST[dest].help
        for role in ("scheduler", "node-agent", "monitor"):
            m = _re.search(rf"{role} (\d+(?:\.\d+)?)", text)
            assert m, (dest, role, text)
            assert float(m.group(1)) == float(getattr(ROLE_BUDGETS[role][lane], field)), (dest, role, text)
