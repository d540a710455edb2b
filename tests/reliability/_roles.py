"""Every role of hami on one embedded API server, in one process, for the fault scenarios.

`Roles.start(apiserver, tmp)` runs: the scheduler (extender, informers, events) over nodes
n2..n3 registered by annotation; a node agent for node n1 on fake GPUs with the test kubelet
over unix-socket gRPC; the monitor role for n1; and the lead's kube-scheduler loop
(`hami.sim.kubescheduler`) driving the extender. `informers()` names every watch cache of every
role; `converged()` compares each one with the server's objects (key -> resourceVersion).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import yaml

from hami.agent.role import Agent
from hami.app import RoleContext
from hami.config import Config, KubeSettings, MonitorSettings
from hami.device.model import NvidiaConfig
from hami.device.nodeconfig import effective_device_settings
from hami.gpu.fake import FakeBackend
from hami.kube.informer import Informer
from hami.monitor import role as monitor_role
from hami.sim.kubelet.devicemanager import Kubelet
from hami.sim.kubelet.libstub import write_stub_library
from hami.sim.kubescheduler import KubeSchedulerLoop
from tests.kube.helpers import client_for, node_obj
from tests.kube.scheduler_env import requesting_now, start_env, stop_env

AGENT_NODE = "n1"
GPU_UUIDS = ("GPU-8f1c2a77-0d3b-4a51-9a0e-111111111111", "GPU-91ab03c4-77de-4c0a-8b21-222222222222")


def gpu_doc() -> dict:
    return {"gpus": [{"uuid": u, "model": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "numa": i}
                     for i, u in enumerate(GPU_UUIDS)]}


def write_yaml(path: str, doc: dict) -> None:
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)


def _matches(obj: dict, field_selector: str | None) -> bool:
    if not field_selector:
        return True
    for term in field_selector.split(","):
        path, _, want = term.partition("=")
        cur: object = obj
        for part in path.split("."):
            cur = (cur or {}).get(part) if isinstance(cur, dict) else None
        if (cur or "") != want:
            return False
    return True


def _closure_informer(fn) -> Informer | None:
    for cell in getattr(fn, "__closure__", None) or ():
        if isinstance(cell.cell_contents, Informer):
            return cell.cell_contents
    return None


class Roles:
    def __init__(self, apiserver):
        self.apiserver = apiserver
        self.store = apiserver.store
        self.dir = tempfile.mkdtemp(prefix="hami-rel-", dir="/tmp")  # unix socket paths stay short
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> Roles:
        self.store.create("nodes", "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": AGENT_NODE},
                                        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        self.env = await start_env(self.apiserver, [node_obj(f"n{i}", 2, handshake=requesting_now())
                                                    for i in (2, 3)])
        # node agent + kubelet for n1
        gpu_file = os.path.join(self.dir, "gpus.yaml")
        write_yaml(gpu_file, gpu_doc())
        self.agent_client = await client_for(self.apiserver.kubeconfig)
        sockets = os.path.join(self.dir, "dp")
        self.kubelet = Kubelet(sockets, client=self.agent_client, node_name=AGENT_NODE)
        await self.kubelet.start()
        settings = effective_device_settings(NvidiaConfig(), None)
        self.agent = Agent(self.agent_client, AGENT_NODE, FakeBackend(gpu_file, node_name=AGENT_NODE), settings,
                           socket_dir=sockets, hook_path=os.path.join(self.dir, "hook"), tick=0.05,
                           vgpu_lib=write_stub_library(os.path.join(self.dir, "image", "libvgpu.so")))
        self.agent.plugin.poll_interval = 0.05
        ready = asyncio.Event()
        self.tasks.append(asyncio.create_task(self.agent.run(self.stop, ready), name="rel:agent"))
        await asyncio.wait_for(ready.wait(), 20)
        # monitor role for n1
        cfg = Config(roles=("monitor",), kube=KubeSettings(kubeconfig=self.apiserver.kubeconfig),
                     monitor=MonitorSettings(node_name=AGENT_NODE, cache_dir=os.path.join(self.dir, "containers"),
                                             metrics_bind_address="127.0.0.1:0", proc_root=os.path.join(self.dir,
                                                                                                        "proc"),
                                             gpu_backend="fake", fake_gpus=gpu_file))
        self.monitor_ctx = RoleContext(name="monitor", config=cfg, stop=asyncio.Event())
        self.tasks.append(asyncio.create_task(monitor_role.run(self.monitor_ctx), name="rel:monitor"))
        await asyncio.wait_for(self.monitor_ctx.ready.wait(), 20)
        self.monitor = self.monitor_ctx.shared["monitor"][AGENT_NODE]["monitor"]
        # kube-scheduler loop against the extender
        self.ks_client = await client_for(self.apiserver.kubeconfig)
        self.kube_scheduler = KubeSchedulerLoop(self.ks_client, self.env.sched.url, "hami-scheduler")
        self.tasks.append(asyncio.create_task(self.kube_scheduler.run(self.stop), name="rel:kube-scheduler"))
        await self.kube_scheduler.pods.wait_synced(10)
        return self

    def informers(self) -> dict[str, Informer]:
        st = self.env.sched.state
        out = {"scheduler/nodes": st.nodes, "scheduler/pods": st.pods, "scheduler/resourcequotas": st.quotas,
               "agent/nodes": self.agent.nodes, "agent/pods": self.agent.pods,
               "kube-scheduler/nodes": self.kube_scheduler.nodes, "kube-scheduler/pods": self.kube_scheduler.pods}
        mon = _closure_informer(self.monitor.pods)
        assert mon is not None, "monitor pod informer not found"
        out["monitor/pods"] = mon
        return out

    def clients(self) -> dict:
        return {"scheduler": self.env.sched.client, "agent": self.agent_client, "kube-scheduler": self.ks_client}

    def expected(self, inf: Informer) -> dict[str, str]:
        out = {}
        for e in self.store.list(inf.kind, "")[1]:
            obj = e.obj
            if not _matches(obj, inf.field_selector):
                continue
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            out[key] = meta["resourceVersion"]
        return out

    def lagging(self) -> list[str]:
        bad = []
        for name, inf in self.informers().items():
            have = {k: v["metadata"]["resourceVersion"] for k, v in inf.store.items()}
            if have != self.expected(inf):
                bad.append(name)
        return bad

    async def close(self) -> None:
        self.stop.set()
        self.monitor_ctx.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.kubelet.stop()
        await stop_env(self.env)
        await self.agent_client.close()
        await self.ks_client.close()
        shutil.rmtree(self.dir, ignore_errors=True)
