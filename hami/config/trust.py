"""Listener trust: which addresses each listener may take, checked before any role starts."""

from __future__ import annotations

from typing import Any

from hami.config.flagtable import flag_label
from hami.config.settings import ConfigError, DebugSettings, SchedulerSettings, SimSettings
from hami.netaddr import is_loopback, split_host_port


def check_trusted_sources(listen: dict[str, Any]) -> None:
    """--http-trusted-sources: a comma list of CIDRs, each checked here so a typo stops the start."""
    import ipaddress

    sources = listen.get("trusted_sources")
    if isinstance(sources, str):
        sources = tuple(s.strip() for s in sources.split(",") if s.strip())
        listen["trusted_sources"] = sources
    for text in sources or ():
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ConfigError("--http-trusted-sources", "command line", text,
                              "CIDR networks, e.g. 10.0.0.0/8") from None


# Listener settings checked at startup, so a typo exits 2 naming the flag instead of failing in a role.
LISTENERS = (
    ("scheduler", "http_bind"),
    ("scheduler", "webhook_bind_address"),
    ("agent", "health_bind_address"),
    ("scheduler", "metrics_bind_address"),
    ("monitor", "metrics_bind_address"),
    ("debug", "debug_bind_address"),
    ("sim", "listen"),
    ("ui", "bind_address"),
)


def check_listeners(groups: dict[str, dict[str, Any]]) -> None:
    for group, attr in LISTENERS:
        value = groups[group].get(attr)
        flag = flag_label(group, attr)
        if not value:
            continue  # the default, or "" (listener off)
        try:
            split_host_port(value, flag=flag, default_host="")
        except ValueError:
            raise ConfigError(flag, "command line", value, "HOST:PORT with a port in 0..65535, e.g. 127.0.0.1:8080") \
                from None


def check_sim_listen(sim: SimSettings) -> None:
    """The embedded API server has no authentication: beyond loopback only when the operator says so."""
    if not sim.listen or sim.listen_insecure:
        return
    host, _ = split_host_port(sim.listen, flag="--sim-listen", default_host="127.0.0.1")
    if not is_loopback(host):
        raise ConfigError("--sim-listen", "command line", sim.listen,
                          "a loopback address such as 127.0.0.1:6443 (the embedded API server authenticates "
                          "no one), or --sim-listen-insecure to serve it beyond loopback anyway")


def check_listener_trust(sc: SchedulerSettings, debug: DebugSettings) -> None:
    """Refuse listener layouts that let other pods bind pods or profile the process.

    /bind can bind any pod to any node with the scheduler's RBAC, so the extender listens on
    loopback (kube-scheduler as a sidecar) unless client certificates are required (mTLS). The
    webhook, reachable through the Service, is TLS only; profiling only ever on loopback.
    """
    tls = bool(sc.cert_file and sc.key_file)
    if sc.client_ca_file and not tls:
        raise ConfigError("--client-ca-file", "command line", sc.client_ca_file,
                          "--cert_file and --key_file as well (mTLS needs a server certificate)")
    host, _ = split_host_port(sc.http_bind, flag="--http_bind", default_host="")
    if not is_loopback(host) and not sc.client_ca_file:
        raise ConfigError("--http_bind", "command line", sc.http_bind,
                          "a loopback address such as 127.0.0.1:8443 (kube-scheduler in the same pod), or "
                          "--client-ca-file with --cert_file/--key_file so only kube-scheduler's certificate "
                          "may call /filter and /bind")
    if sc.webhook_bind_address:
        host, _ = split_host_port(sc.webhook_bind_address, flag="--webhook-bind-address", default_host="")
        if not is_loopback(host) and not tls:
            raise ConfigError("--webhook-bind-address", "command line", sc.webhook_bind_address,
                              "--cert_file and --key_file: the webhook is served over TLS only")
    if debug.debug_bind_address:
        host, _ = split_host_port(debug.debug_bind_address, flag="--debug-bind-address", default_host="127.0.0.1")
        if not is_loopback(host):
            raise ConfigError("--debug-bind-address", "command line", debug.debug_bind_address,
                              "a loopback address such as 127.0.0.1:6060 (profiling is never served off the pod; "
                              "use kubectl port-forward)")
