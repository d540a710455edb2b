"""Shared fixtures: the embedded Kubernetes API server that every test stands on.

`apiserver` (function scope, async): an `hami.sim.apiserver.server.ApiServer` serving a fresh
`hami.sim.apiserver.store.Store` over HTTP on 127.0.0.1 with a free port. Use it through
- `apiserver.url`, `apiserver.kubeconfig` (path of a kubeconfig file for kubectl / kubernetes-asyncio);
- `apiserver.store`: the objects; `store.create/get/update/patch/delete/bind/list` act directly
  (no HTTP), `store.rv` is the global resourceVersion;
- `await apiserver.restart()` (or `stop()` then `start()`): cut every connection and listen again on
  the same port; the store, its resourceVersion and watch window survive;
- `apiserver.store.set_watch_window(n)` / `apiserver.store.compact()`: make watches from older
  versions answer 410 Gone;
- `apiserver.bookmark_interval`: seconds between BOOKMARK events of idle watches (default 60, as
  kube-apiserver; one more is sent 2 s before a watch's deadline);
- `apiserver.faults`: `delay` / `write_delay` (seconds before answering), `fail_next_writes(n, 429|500)`,
  `silent_watch = True` (watches answer 200 and then stay silent), `reset()`.

`kube_api`: a kubernetes_asyncio `ApiClient` loaded from that kubeconfig.

Behaviour to know: pods are created with `status.phase: Pending` whatever the body says (set status
through `pods/<name>/status`); updates to the main resource ignore `.status` for pods, nodes,
namespaces and resourcequotas; DELETE removes at once (no graceful termination); creating in a
namespace that does not exist gives 404 (`default`, `kube-system`, `kube-public` and
`kube-node-lease` exist at start).
"""

from __future__ import annotations

import fcntl
import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

from hami.sim.apiserver.server import ApiServer
from hami.sim.apiserver.store import Store

# One Hypothesis profile for every test file, loaded here so no file's import order changes another's
# settings: no per-example deadline (a wall-clock limit fails on a loaded machine, not on a wrong
# answer) and no too-slow health check, for the same reason. Tests set their own max_examples.
settings.register_profile("hami", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hami")


@pytest.fixture
async def apiserver(tmp_path):
    server = ApiServer(Store(), "127.0.0.1", 0)
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kube_api(apiserver):
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=apiserver.kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


@pytest.fixture
def default_ports():
    """Held while a test runs hami on its default ports and ~/.hami pointers, as the README does: one such
    test at a time across xdist workers (a file lock; --dist loadfile ignores xdist groups)."""
    with open(os.path.join(tempfile.gettempdir(), "hami-default-ports.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
