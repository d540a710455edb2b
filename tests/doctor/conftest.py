"""Builders for `hami doctor` / `hami tune` tests: HAMi objects in the embedded API server."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import pytest

from hami.config import KubeSettings
from hami.device import codec
from hami.device.model import DeviceInfo
from hami.kube.client import KubeClient

MODEL = "NVIDIA A100-SXM4-40GB"


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def register_value(node: str, gpus: int = 2, healthy: bool = True, mem: int = 40960) -> str:
    return codec.encode_node_devices([
        DeviceInfo(id=f"GPU-{node}-{i}", count=10, devmem=mem, devcore=100, type=MODEL, index=i, numa=0,
                   mode="hami-core", health=healthy)
        for i in range(gpus)
    ])


class Cluster:
    """Writes straight into the store of the `apiserver` fixture."""

    def __init__(self, store):
        self.store = store
        self.now = time.time()
        self._n = 0

    def node(self, name: str, *, gpus: int = 2, register: bool = True, handshake_age: float | None = 5.0,
             allocatable: int | None = None, lock: str | None = None, healthy: bool = True,
             mem: int = 40960, hami_core: str | None = None) -> None:
        annos = {}
        if hami_core is not None:
            annos["hami.io/hami-core"] = hami_core
        if register:
            annos[codec.REGISTER_ANNOTATION] = register_value(name, gpus, healthy, mem)
        if handshake_age is not None:
            annos[codec.HANDSHAKE_ANNOTATION] = codec.encode_handshake_requesting(self.now - handshake_age)
        if lock is not None:
            annos[codec.NODE_LOCK_ANNOTATION] = lock
        alloc = gpus * 10 if allocatable is None else allocatable
        res = {"nvidia.com/gpu": str(alloc), "cpu": "8"} if gpus else {"cpu": "8"}
        self.store.create("nodes", "", {"metadata": {"name": name, "annotations": annos},
                                        "status": {"allocatable": res, "capacity": dict(res)}})

    def pod(self, name: str, ns: str = "default", *, gpu: int | None = 1, mem: int | None = 4000,
            scheduler: str = "hami-scheduler", annotations: dict | None = None, node_name: str = "") -> dict:
        limits = {}
        if gpu is not None:
            limits["nvidia.com/gpu"] = str(gpu)
        if mem is not None and gpu is not None:
            limits["nvidia.com/gpumem"] = str(mem)
        spec = {"schedulerName": scheduler,
                "containers": [{"name": "c", "image": "x", "resources": {"limits": limits} if limits else {}}]}
        if node_name:
            spec["nodeName"] = node_name
        self.store.create("pods", ns, {"metadata": {"name": name, "annotations": annotations or {}}, "spec": spec})
        return self.store.get("pods", ns, name)

    def event(self, pod: str, reason: str, message: str, ns: str = "default", etype: str = "Normal",
              age: float = 10.0, component: str = "hami-scheduler") -> None:
        self._n += 1
        n = self._n
        self.store.create("events", ns, {
            "metadata": {"name": f"{pod}.{reason.lower()}.{n}.{int(age * 1000)}"},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
            "reason": reason, "message": message, "type": etype, "count": 1,
            "source": {"component": component}, "lastTimestamp": rfc3339(self.now - age),
        })

    def lease(self, renewed_ago: float, name: str = "hami-scheduler", ns: str = "kube-system",
              duration: int = 15) -> None:
        self.store.create("leases.coordination.k8s.io", ns, {
            "metadata": {"name": name},
            "spec": {"holderIdentity": "hami-scheduler-0", "leaseDurationSeconds": duration,
                     "renewTime": datetime.fromtimestamp(self.now - renewed_ago, UTC).strftime(
                         "%Y-%m-%dT%H:%M:%S.%fZ")},
        })

    def live_lease(self) -> None:
        """The leader Lease of a running scheduler, live for as long as any test takes: the doctor
        compares it with the wall clock when it runs, and on a loaded machine a `hami doctor` child
        can start later than HAMi's 15 s lease allows."""
        self.lease(renewed_ago=1, duration=24 * 3600)

    def quota(self, name: str, hard: dict, used: dict, ns: str = "default") -> None:
        self.store.create("resourcequotas", ns, {"metadata": {"name": name},
                                                 "spec": {"hard": {k: str(v) for k, v in hard.items()}},
                                                 "status": {"hard": {k: str(v) for k, v in hard.items()},
                                                            "used": {k: str(v) for k, v in used.items()}}})


@pytest.fixture
def cluster(apiserver):
    return Cluster(apiserver.store)


@pytest.fixture
async def kube(apiserver):
    client = await KubeClient.from_settings(KubeSettings(kubeconfig=apiserver.kubeconfig, qps=0, burst=100))
    try:
        yield client
    finally:
        await client.close()


def doctor_args(**kw) -> argparse.Namespace:
    base = dict(scheduler_name="hami-scheduler", scheduler_url="", scheduler_namespace="kube-system", hami_namespace="",
                lease_name="hami-scheduler", node_lock_timeout="5m", json=False)
    base.update(kw)
    return argparse.Namespace(**base)
