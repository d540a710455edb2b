"""Builders shared by the kube and scheduler-I/O tests: nodes, pods, a client, a scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import uuid as _uuid

from hami.config import Config, KubeSettings, SchedulerSettings
from hami.device import codec
from hami.device.model import DeviceInfo
from hami.kube.client import KubeClient


class LoopTurns:
    """The event loop's turns, counted while inside `async with` (a task that yields once a turn),
    and how many calls of some work each turn held (`count()`, called from the work): a test that
    the work gives the loop a turn every so often bounds `most()`."""

    def __init__(self) -> None:
        self.turn = 0
        self.per_turn: dict[int, int] = {}
        self._task: asyncio.Task | None = None

    def count(self) -> None:
        self.per_turn[self.turn] = self.per_turn.get(self.turn, 0) + 1

    def most(self) -> int:
        return max(self.per_turn.values(), default=0)

    def total(self) -> int:
        return sum(self.per_turn.values())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turn += 1

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Clock:
    """A settable clock for code that takes `clock=`: returns `now` until the test moves it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def server_side(guard, writer: asyncio.StreamWriter):
    """The hami.httpguard protocol serving the connection `writer` is the client side of, or None
    while the listener has not accepted it yet."""
    local = writer.get_extra_info("sockname")
    return next((proto for transport, proto in list(guard.open.items())
                 if transport.get_extra_info("peername") == local), None)


def gpu_uuid(node: str, i: int) -> str:
    return f"GPU-{_uuid.uuid5(_uuid.NAMESPACE_DNS, f'{node}-{i}')}"


def node_obj(name: str, gpus: int = 2, mem: int = 40960, *, count: int = 10, numa=None,
             handshake: str | None = None, registered: bool = True, allocatable: int | None = None,
             labels: dict | None = None, annotations: dict | None = None,
             gpu_type: str = "NVIDIA A100-SXM4-40GB") -> dict:
    annos = dict(annotations or {})
    if registered:
        devs = [DeviceInfo(id=gpu_uuid(name, i), count=count, devmem=mem, devcore=100, type=gpu_type, index=i,
                           numa=(numa[i] if numa else 0), mode="hami-core", health=True) for i in range(gpus)]
        annos[codec.REGISTER_ANNOTATION] = codec.encode_node_devices(devs)
    if handshake is not None:
        annos[codec.HANDSHAKE_ANNOTATION] = handshake
    alloc = gpus * count if allocatable is None else allocatable
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annos},
        "status": {"allocatable": {"nvidia.com/gpu": str(alloc), "cpu": "64", "memory": "512Gi"},
                   "capacity": {"nvidia.com/gpu": str(alloc)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod_obj(name: str, ns: str = "default", *, gpus: int = 1, mem: int | None = None, cores: int | None = None,
            pct: int | None = None, annotations: dict | None = None, containers: int = 1,
            init: list[dict] | None = None, scheduler: str = "hami-scheduler", labels: dict | None = None) -> dict:
    limits: dict = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = str(pct)
    ctrs = [{"name": f"c{i}", "image": "cuda", "resources": {"limits": dict(limits)}} for i in range(containers)]
    spec: dict = {"containers": ctrs, "schedulerName": scheduler}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {}), "labels": labels or {}},
        "spec": spec, "status": {"phase": "Pending"},
    }


def config_for(kubeconfig: str, **sched) -> Config:
    sched.setdefault("http_bind", "127.0.0.1:0")
    sched.setdefault("metrics_bind_address", "127.0.0.1:0")
    return Config(kube=KubeSettings(kubeconfig=kubeconfig, qps=0, burst=100),
                  scheduler=SchedulerSettings(**sched))


async def client_for(kubeconfig: str, **kw) -> KubeClient:
    return await KubeClient.from_settings(KubeSettings(kubeconfig=kubeconfig, **{"qps": 0, "burst": 100, **kw}))


async def eventually(pred, timeout: float = 5.0, interval: float = 0.02):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
