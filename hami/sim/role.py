"""`hami --role sim`: the embedded Kubernetes API server, the no-cluster default.

Serves plain HTTP on `--sim-listen` (default 127.0.0.1:6443; port 0 picks a free one), writes a
kubeconfig to `--sim-kubeconfig` (default `<--sim-state-dir>/kubeconfig`, else
`<tmp>/hami-sim-<uid>/kubeconfig`) that kubectl and kubernetes-asyncio use as is, puts
`ctx.shared["kubeconfig"]` (the path) and `ctx.shared["apiserver"]` (the `ApiServer`, with `.url`
and `.store`) and then sets `ctx.ready`. Serves until `ctx.stop` is set.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tempfile
from typing import Any

from hami.config import check_sim_listen, embedded_paths
from hami.netaddr import split_host_port
from hami.obs.log import get_logger
from hami.sim.apiserver.server import ApiServer, Faults
from hami.sim.apiserver.store import Store

log = get_logger(__name__)


def parse_listen(address: str) -> tuple[str, int]:
    """`127.0.0.1:6443` -> ("127.0.0.1", 6443); `:6443` -> loopback; `[::1]:0` -> ("::1", 0)."""
    return split_host_port(address, flag="--sim-listen", default_host="127.0.0.1")


def default_kubeconfig(state_dir: str) -> str:
    base = state_dir or os.path.join(tempfile.gettempdir(), f"hami-sim-{os.getuid()}")
    return os.path.join(base, "kubeconfig")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def run(ctx: Any) -> None:
    cfg = ctx.config.sim
    host, port = parse_listen(cfg.listen)
    check_sim_listen(cfg)  # also for configs built in code: no unauthenticated API off loopback unasked
    if not _is_loopback(host):
        log.warning("The embedded API server has no authentication; serving beyond loopback "
                    "(--sim-listen-insecure)", listen=cfg.listen)
    server = ApiServer(Store(watch_window=cfg.watch_window), host, port,
                       faults=Faults(read_delay=cfg.read_latency, write_delay=cfg.write_latency,
                                     max_inflight=cfg.max_inflight),
                       # every informer of the embedded cluster holds a watch connection
                       listen=dataclasses.replace(ctx.config.listen,
                                                  max_connections=max(1024, ctx.config.listen.max_connections)))
    try:
        await server.start()
    except OSError as exc:
        raise RuntimeError(f"--sim-listen {cfg.listen}: cannot listen: {exc.strerror or exc}") from None
    ctx.listeners.add("api", server.host, server.port)
    try:
        path = cfg.kubeconfig or default_kubeconfig(cfg.state_dir)
        node_kubeconfig = ""
        if cfg.embedded:  # people get an ordinary user; hami's roles their own accounts (docs/security.md)
            from hami.principals import EMBEDDED_NODE_USER, EMBEDDED_SCHEDULER_USER
            from hami.sim.apiserver.authn import demo_user_info, service_account_info

            paths = embedded_paths(cfg.state_dir)
            server.authn.anonymous = demo_user_info()  # kubectl sends no token to an http:// server
            server.write_kubeconfig(path, server.authn.issue(demo_user_info()))
            server.write_kubeconfig(paths["scheduler_kubeconfig"],
                                    server.authn.issue(service_account_info(EMBEDDED_SCHEDULER_USER)), primary=False)
            node_kubeconfig = server.write_kubeconfig(
                paths["node_kubeconfig"], server.authn.issue(service_account_info(EMBEDDED_NODE_USER)), primary=False)
        else:
            server.write_kubeconfig(path)
        ctx.shared["kubeconfig"] = path
        ctx.shared["apiserver"] = server
        log.info("Embedded Kubernetes API ready", url=server.url, kubeconfig=path,
                 hint=f"export KUBECONFIG={path}")
        if not cfg.embedded:
            ctx.ready.set()
            await ctx.stop.wait()
            return
        # --embedded: simulated GPU nodes, their agents and kubelets, and a kube-scheduler loop.
        from hami.listeners import BIND_FIELDS, with_bound_addresses
        from hami.sim.apiserver.admission import WebhookAdmission
        from hami.sim.cluster import SCHEDULER_POD, EmbeddedCluster, banner, extender_url
        from hami.sim.instance import publish_kubeconfig, publish_state, withdraw_kubeconfig, withdraw_state

        ring = ctx.shared.get("log_ring")
        if ring is not None:
            server.pod_logs = lambda ns, name: ring.tail() if (ns, name) == ("kube-system", SCHEDULER_POD) else None
        cluster = EmbeddedCluster(ctx.config, node_kubeconfig)
        cluster.write_fake_gpus()  # before ready: the monitor role reads it at start
        ctx.ready.set()
        # Listeners given port 0 are dialled at the address they bound, once the other roles bound them.
        config = await with_bound_addresses(ctx.config, ctx.listeners, ctx.stop, tuple(BIND_FIELDS))
        if config is None:  # stopped first
            return
        cluster.cfg = config
        # As kube-apiserver with the chart's MutatingWebhookConfiguration: pods go through /webhook.
        # CREATE and UPDATE; UPDATEs of hami's own accounts skip it, as the chart's matchConditions say.
        server.admission = WebhookAdmission(extender_url(config) + "/webhook", operations=("CREATE", "UPDATE"),
                                            skip_users=config.scheduler.trusted_placement_writers)
        pointer = publish_kubeconfig(path) if cfg.embedded else None
        state_pointer = publish_state(os.path.dirname(path)) if cfg.embedded else None
        print(banner(config, path, server.url, pointer), flush=True)
        try:
            await cluster.run(ctx.stop)
        finally:
            if pointer:
                withdraw_kubeconfig(path, pointer)
            if state_pointer:
                withdraw_state(os.path.dirname(path), state_pointer)
    finally:
        await server.stop()
