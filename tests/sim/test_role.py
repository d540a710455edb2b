"""`hami --role sim` as a role (hami.sim.role.run) inside the role runner's context.

Covers: the role serves on --sim-listen (port 0 picks one), writes the kubeconfig to --sim-kubeconfig
or `<state dir>/kubeconfig`, publishes `shared["kubeconfig"]` and `shared["apiserver"]` before
`ready`, the kubeconfig works with kubernetes-asyncio as written, the watch window comes from
config, the role returns once `stop` is set and the port is released; parse_listen forms and
errors; a busy port fails with a message naming --sim-listen.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from kubernetes_asyncio import client, config

from hami.app import RoleContext
from hami.config import build_config
from hami.sim import role


async def start_role(flags: dict) -> tuple[RoleContext, asyncio.Task]:
    ctx = RoleContext("sim", build_config(flags, env={}), asyncio.Event())
    task = asyncio.create_task(role.run(ctx))
    await asyncio.wait_for(ctx.ready.wait(), 10)
    return ctx, task


async def test_role_serves_and_publishes_kubeconfig(tmp_path):
    path = tmp_path / "kc" / "kubeconfig"
    ctx, task = await start_role({"sim_listen": "127.0.0.1:0", "sim_kubeconfig": str(path), "sim_watch_window": 7})
    server = ctx.shared["apiserver"]
    assert ctx.shared["kubeconfig"] == str(path) and path.exists()
    assert server.store.watch_window == 7
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        names = {n.metadata.name for n in (await client.CoreV1Api(api).list_namespace()).items}
    assert {"default", "kube-system"} <= names
    ctx.stop.set()
    await asyncio.wait_for(task, 10)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)


async def test_role_defaults_kubeconfig_into_state_dir(tmp_path):
    ctx, task = await start_role({"sim_listen": "127.0.0.1:0", "sim_state_dir": str(tmp_path)})
    assert ctx.shared["kubeconfig"] == os.path.join(str(tmp_path), "kubeconfig")
    ctx.stop.set()
    await asyncio.wait_for(task, 10)


async def test_busy_port_names_the_flag(tmp_path):
    ctx, task = await start_role({"sim_listen": "127.0.0.1:0", "sim_state_dir": str(tmp_path / "a")})
    port = ctx.shared["apiserver"].port
    other = RoleContext("sim", build_config({"sim_listen": f"127.0.0.1:{port}", "sim_state_dir": str(tmp_path / "b")},
                                            env={}), asyncio.Event())
    with pytest.raises(RuntimeError, match="--sim-listen"):
        await role.run(other)
    ctx.stop.set()
    await asyncio.wait_for(task, 10)


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:6443", ("127.0.0.1", 6443)),
    (":6443", ("127.0.0.1", 6443)),
    ("[::1]:0", ("::1", 0)),
    ("localhost:1", ("localhost", 1)),
])
def test_parse_listen(text, want):
    assert role.parse_listen(text) == want


@pytest.mark.parametrize("text", ["6443", "host:port", "127.0.0.1:70000"])
def test_parse_listen_rejects_bad_addresses(text):
    with pytest.raises(ValueError, match="--sim-listen"):
        role.parse_listen(text)
