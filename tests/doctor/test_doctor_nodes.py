"""`hami doctor nodes`: the per-node table that replaces the runbook's shell loop.

Covers: register state (ok with GPU count, missing, invalid), handshake value and age, stale
handshake (old Requesting with no allocatable GPUs), lock holder and age and a lock older than
the timeout, unhealthy GPUs lowering the schedulable count, CPU-only nodes never unhealthy, and the
CLI's table, --json and exit code; HAMi-core per node as the agent publishes it (version, missing
making the node unhealthy, `-` when not reported) in the table and JSON, with the annotation name
the agent writes (1 when a GPU node is unhealthy, 0 when all are fine); the GPU mode (device-plugin, dra)
per node, and a node both modes serve as a problem.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from hami.device import codec
from hami.doctor.nodes import check

from .conftest import doctor_args


async def test_table_rows_judge_each_node(cluster, kube, apiserver):
    cluster.node("a-ok", gpus=4, lock=codec.encode_node_lock(cluster.now - 12, "ml", "trainer"))
    cluster.node("b-noreg", register=False)
    cluster.node("c-stale", handshake_age=900, allocatable=0)
    cluster.node("d-oldlock", lock=codec.encode_node_lock(cluster.now - 900, "ml", "stuck"))
    cluster.node("e-sick", gpus=2, healthy=False)
    cluster.node("f-cpu", gpus=0, register=False, handshake_age=None)
    apiserver.store.create("nodes", "", {"metadata": {"name": "g-badreg",
                                                      "annotations": {codec.REGISTER_ANNOTATION: "{not json"}}})
    rows = {r.name: r for r in await check(kube, doctor_args(), now=cluster.now)}
    ok = rows["a-ok"]
    assert (ok.healthy, ok.register, ok.schedulable_gpus, ok.lock_holder) == (True, "ok (4 GPUs)", 4, "ml/trainer")
    assert 11 <= ok.lock_age <= 13 and 4 <= ok.handshake_age <= 6
    assert ok.handshake.startswith("Requesting_")
    assert not rows["b-noreg"].healthy and rows["b-noreg"].register == "missing"
    assert not rows["c-stale"].healthy and rows["c-stale"].schedulable_gpus == 0
    assert any("handshake stale" in p for p in rows["c-stale"].problems)
    assert not rows["d-oldlock"].healthy and any("node lock held by ml/stuck" in p for p in rows["d-oldlock"].problems)
    assert not rows["e-sick"].healthy and rows["e-sick"].schedulable_gpus == 0
    assert rows["f-cpu"].healthy and not rows["f-cpu"].gpu_node
    assert not rows["g-badreg"].healthy and rows["g-badreg"].register.startswith("invalid: ")


async def _cli(apiserver, *extra):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hami.cli.main", "doctor", "nodes", "--kubeconfig", apiserver.kubeconfig, *extra,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_cli_exit_code_zero_when_all_gpu_nodes_are_healthy(cluster, apiserver):
    cluster.node("n1")
    cluster.node("cpu", gpus=0, register=False, handshake_age=None)
    rc, out, err = await _cli(apiserver)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "MODE", "REGISTER", "HAMI-CORE", "HANDSHAKE", "HS-AGE", "LOCK-HOLDER",
                                "LOCK-AGE", "SCHEDULABLE", "STATUS"]
    assert lines[2].startswith("n1") and lines[2].endswith("ok")


async def test_cli_exit_code_one_and_json_when_a_gpu_node_is_unhealthy(cluster, apiserver):
    cluster.node("n1")
    cluster.node("n2", register=False)
    rc, out, _ = await _cli(apiserver, "--json")
    assert rc == 1
    doc = {r["name"]: r for r in json.loads(out)}
    assert doc["n1"]["healthy"] and not doc["n2"]["healthy"]
    assert doc["n2"]["problems"] == ["register annotation missing: the node agent has not registered GPUs"]


async def test_hami_core_install_state_per_node(cluster, kube, apiserver):
    from hami.agent.hamicore import ANNOTATION
    from hami.doctor.tree import HAMI_CORE_ANNOTATION

    assert HAMI_CORE_ANNOTATION == ANNOTATION
    cluster.node("a-core", hami_core="v2.6.0")
    cluster.node("b-nocore", hami_core="missing")
    cluster.node("c-go-agent")  # HAMi's own device plugin does not publish it
    rows = {r.name: r for r in await check(kube, doctor_args(), now=cluster.now)}
    assert (rows["a-core"].hami_core, rows["a-core"].healthy) == ("v2.6.0", True)
    assert (rows["b-nocore"].hami_core, rows["b-nocore"].healthy) == ("missing", False)
    assert any("HAMi-core (libvgpu.so) is not installed" in p for p in rows["b-nocore"].problems)
    assert (rows["c-go-agent"].hami_core, rows["c-go-agent"].healthy) == ("-", True)
    rc, out, _ = await _cli(apiserver)
    assert rc == 1
    lines = out.split("\n\n")[0].splitlines()  # the table; the handshake legend follows a blank line
    col = lines[0].index("HAMI-CORE")
    cells = {ln.split()[0]: ln[col:].split()[0] for ln in lines[1:] if not ln.split()[0].endswith(":")}
    assert cells == {"a-core": "v2.6.0", "b-nocore": "missing", "c-go-agent": "-"}
    rc, out, _ = await _cli(apiserver, "--json")
    assert {r["name"]: r["hami_core"] for r in json.loads(out)} == {
        "a-core": "v2.6.0", "b-nocore": "missing", "c-go-agent": "-"}


async def test_gpu_mode_per_node_and_both_modes_on_one_node_is_a_problem(cluster, kube, apiserver):
    from hami.kube.nodemode import LABEL

    cluster.node("a-dp")
    apiserver.store.patch("nodes", "", "a-dp", json.dumps({"metadata": {"labels": {LABEL: "device-plugin"}}}),
                          "application/merge-patch+json")
    apiserver.store.create("nodes", "", {"metadata": {"name": "b-dra", "labels": {LABEL: "dra"}}})
    cluster.node("c-both")  # a device plugin registered it, and the DRA role marked it too
    apiserver.store.patch("nodes", "", "c-both", json.dumps({"metadata": {"labels": {LABEL: "dra"}}}),
                          "application/merge-patch+json")
    rows = {r.name: r for r in await check(kube, doctor_args(), now=cluster.now)}
    assert (rows["a-dp"].mode, rows["a-dp"].healthy) == ("device-plugin", True)
    assert (rows["b-dra"].mode, rows["b-dra"].healthy, rows["b-dra"].gpu_node) == ("dra", True, True)
    assert rows["b-dra"].register.startswith("- (dra")
    assert not rows["c-both"].healthy
    [problem] = rows["c-both"].problems
    assert "both modes serve this node" in problem
    assert "kubectl annotate node c-both hami.io/node-nvidia-register-" in problem
    rc, out, _ = await _cli(apiserver)
    assert rc == 1 and "c-both: both modes serve this node" in out
