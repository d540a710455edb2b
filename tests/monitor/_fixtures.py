"""Shared builders for the monitor tests: pods, cache dirs and fake GPU files."""

from __future__ import annotations

import os

from hami.monitor.shmwrite import write_region

U0 = "GPU-0d4c6a5e-0000-4000-8000-000000000001"
U1 = "GPU-0d4c6a5e-0000-4000-8000-000000000002"
VERSIONS = ("0", "1.1", "1.2", "1.1-interim")


def pod(uid: str, name: str = "p1", namespace: str = "ns", containers=("main",), init=(), cids=None,
        node: str = "n1") -> dict:
    statuses = [{"name": c, "containerID": f"containerd://{cids[c]}"} for c in containers if cids and c in cids]
    return {
        "metadata": {"uid": uid, "name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": c} for c in containers],
                 "initContainers": [{"name": c} for c in init]},
        "status": {"containerStatuses": statuses},
    }


def cache_file(cache_dir: str, uid: str, container: str, devices=(), procs=(), version: str = "1.2",
               name: str = "a1b2.cache", **kw) -> str:
    path = os.path.join(cache_dir, f"{uid}_{container}", name)
    write_region(path, devices, procs, version, **kw)
    return path


def fake_gpus(path: str, gpus: list[dict]) -> str:
    import yaml

    with open(path, "w") as fh:
        yaml.safe_dump({"gpus": gpus}, fh)
    return path
