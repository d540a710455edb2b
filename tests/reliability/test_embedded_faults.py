"""The embedded mode under faults a user can cause:
- a pod deleted right after its bind, while the simulated kubelet is inside its Allocate, never kills
  the process (it was a KeyError in the pod runner): the runner skips the pod, hands its devices
  back to the kubelet and starts the next pod;
- `--sim-listen` on a non-loopback address is refused at startup (exit 2 naming the flag: the
  embedded API server authenticates no one) unless the operator opts in with `--sim-listen-insecure`;
  a config built in code gets the same refusal from the role."""

from __future__ import annotations

import asyncio

import pytest

from hami.app import RoleContext
from hami.cli.main import main
from hami.config import Config, ConfigError, SimSettings, build_config
from hami.sim import role as sim_role
from hami.sim.cluster import PodRunner
from tests.agent.harness import NODE, U1, U2, NodeHarness

pytestmark = pytest.mark.timeout(60)


async def test_pod_deleted_during_allocate_does_not_kill_the_runner(tmp_path):
    async with NodeHarness() as h:
        await h.kubelet.wait_for(lambda: h.kubelet.healthy_count() == 20)
        assert await h.agent.nodes.wait_for(
            lambda: "hami.io/node-nvidia-register" in (h.agent.nodes.store.get(NODE, {}).get("metadata", {})
                                                       .get("annotations") or {}), 10)
        runner = PodRunner(h.client, NODE, h.kubelet, Config(), node_index=1, hostpid_bug=False,
                           proc_root=str(tmp_path / "proc"))
        stop = asyncio.Event()
        loop = asyncio.create_task(runner.run(stop))
        real_allocate = h.kubelet.allocate_pod
        victim_uid = ""

        async def allocate_then_lose_the_pod(pod, resource="nvidia.com/gpu"):
            out = await real_allocate(pod, resource)
            if pod["metadata"]["name"] == "doomed":  # the user deletes it right after the bind
                await h.client.delete("pods", "doomed", "default")
                await runner.pods.wait_for(lambda: victim_uid not in runner.started, 10)
            return out

        h.kubelet.allocate_pod = allocate_then_lose_the_pod
        try:
            doomed = await h.create_pod("doomed", {"main": 1}, f"{U1},NVIDIA,3000,30:;")
            victim_uid = doomed["metadata"]["uid"]
            await h.kubelet.wait_for(lambda: victim_uid not in runner.started and not any(
                k[0] == victim_uid for k in h.kubelet.assigned), 10)
            assert not loop.done()  # the runner survived the deletion
            h.kubelet.allocate_pod = real_allocate
            nxt = await h.create_pod("next", {"main": 1}, f"{U2},NVIDIA,3000,30:;")
            await h.kubelet.wait_for(lambda: (runner.pods.store.get("default/next") or {}).get(
                "status", {}).get("phase") == "Running", 10)
            assert nxt["metadata"]["uid"] in runner.started
            assert not loop.done()
        finally:
            stop.set()
            await asyncio.wait_for(loop, 10)


@pytest.mark.parametrize("listen", ["0.0.0.0:6443", "10.1.2.3:6443", "[::]:6443"])
def test_sim_listen_beyond_loopback_is_refused_without_the_opt_in(listen):
    with pytest.raises(ConfigError, match="--sim-listen") as err:
        build_config({"sim_listen": listen}, env={})
    assert "--sim-listen-insecure" in str(err.value)
    assert build_config({"sim_listen": listen, "sim_listen_insecure": True}, env={}).sim.listen == listen
    assert build_config({"sim_listen": "127.0.0.1:0"}, env={}).sim.listen == "127.0.0.1:0"


def test_sim_listen_beyond_loopback_exits_2_naming_the_flag(capsys):
    assert main(["--role", "sim", "--sim-listen", "0.0.0.0:0"]) == 2
    assert "--sim-listen" in capsys.readouterr().err


async def test_the_role_refuses_a_config_built_in_code():
    ctx = RoleContext("sim", Config(sim=SimSettings(listen="0.0.0.0:0")), asyncio.Event())
    with pytest.raises(ConfigError, match="--sim-listen"):
        await sim_role.run(ctx)
